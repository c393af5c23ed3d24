"""Score pre-generated outputs of one CS3-Bench set: per-item records, a summary, a resumable CLI.

One implementation serves ``cs3-bench score`` and the lm-eval task filters (`score_batch`). The order of
work is chosen so that a killed run loses nothing: (1) the text channel goes to the judge in the
background while (2) all speech is transcribed in ONE `transcribe_batch` call (ASR results land in
asr.sqlite per item), then (3) the speech channel is judged in chunks and each finished record is
appended to ``<set>.records.jsonl`` and flushed. Judge verdicts land in judge.sqlite per request, so a
re-run recomputes nothing: finished records are skipped, and the rest hit the two caches.

ASR language hint: none (auto-detection). Responses to code-switched questions mix Mandarin and English,
and Whisper forced to "zh" tends to transliterate or translate English words into characters, which would
deflate PSR and English WER and bias the speech-channel language tag (LSA) towards "zh" — the very thing
LSA measures. Auto-detection picks "zh" for a mostly-Mandarin answer anyway, and "en" for an English one.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.audio import AudioSource
    from cs3_tasks.judge import JudgeConfig, Verdict

SETS = ("knowledge", "knowledge_en", "open_ended")
KNOWLEDGE_SETS = ("knowledge", "knowledge_en")
CHANNELS = ("text", "speech")


def _zh_en_pair():
    from cs3_tasks.languages import load_pair

    return load_pair("zh-en")


# Both from the zh-en language pair (cs3_tasks/languages/zh-en.yaml): the language a response is expected to
# be dominated by (LSA): {"knowledge": "zh", "knowledge_en": "en", "open_ended": "zh"}; and the ASR hint:
# None = Whisper auto-detection, for every set (see the module docstring for why not "zh").
EXPECTED_LANGUAGE = {name: _zh_en_pair().response_language_of(name) for name in SETS}
ASR_LANGUAGE_HINT: dict[str, str | None] = {name: _zh_en_pair().asr_language_of(name) for name in SETS}
OPEN_ENDED_ASPECTS = ("relevance", "semantic")
# Speech-channel judge requests are sent in chunks of this many records, so that finished records are
# written while the rest is still being judged (the judge bounds requests in flight inside each chunk).
JUDGE_CHUNK_RECORDS = 32

# "empty": the model answered with nothing (counted as not correct); "missing": no response on this
# channel at all (no output for the Qid, unreadable output, text-only model): excluded and counted.
STATUSES = ("keyword", "judge_correct", "judge_wrong", "judge_error", "unresolved", "empty", "missing")
IN_MEMORY_AUDIO = "<in-memory audio>"


@dataclass
class ModelOutput:
    """One model output for one Qid."""

    qid: str
    text: str | None  # text-channel response
    audio: AudioSource | None  # speech-channel response (path/bytes/array) or None (text-only model)
    problem: str | None = None  # input problem found while reading (missing wav, empty response, ...)


# ---------------------------------------------------------------------------------------------
# reading outputs


def read_outputs(
    outputs_dir: Path, set_name: str, *, known_sets: Sequence[str] = SETS
) -> dict[str, ModelOutput]:
    """Read one set's outputs from ``outputs_dir`` in the authors' layout or ours.

    ``known_sets``: the accepted set names (other tasks, e.g. the belle_eval_s2s conversation set, pass theirs).

    Authors' layout: ``json/<set>.json`` (JSON lines {Qid, Response}) + ``wav/<Qid>.wav``.
    Ours: ``<set>.jsonl`` (JSON lines {Qid, text, audio}; audio relative to ``outputs_dir`` or absolute),
    and/or the per-rank shards ``<set>.rank<k>.jsonl`` of a data-parallel run (``read_output_union``).
    Problems of single items (bad JSON line, empty response, missing wav) are recorded in
    ``ModelOutput.problem``; only a missing or ambiguous outputs directory raises.
    """
    if set_name not in known_sets:
        _check_set(set_name)
    outputs_dir = Path(outputs_dir)
    authors = outputs_dir / "json" / f"{set_name}.json"
    ours = output_files(outputs_dir, set_name)
    if authors.is_file() and ours:
        raise ValueError(
            f"{outputs_dir}: both {authors.name} (authors' layout) and {ours[0].name} exist; keep one"
        )
    if authors.is_file():
        return _read_lines(authors, outputs_dir, authors_layout=True)
    if ours:
        return read_output_union(ours, outputs_dir)
    raise FileNotFoundError(
        f"no outputs for set {set_name!r} in {outputs_dir}: expected json/{set_name}.json + wav/<Qid>.wav "
        f"(authors' layout) or {set_name}.jsonl"
    )


def output_files(outputs_dir: Path, set_name: str) -> list[Path]:
    """Our layout's files of one set, oldest first: ``<set>.jsonl`` and the shards ``<set>.rank<k>.jsonl``
    that rank k of a data-parallel run writes. Empty when there is none."""
    outputs_dir = Path(outputs_dir)
    files = [outputs_dir / f"{set_name}.jsonl"]
    files += [
        path
        for path in outputs_dir.glob(f"{glob.escape(set_name)}.rank*.jsonl")
        if re.fullmatch(r"rank\d+", path.suffixes[-2].lstrip(".") if len(path.suffixes) > 1 else "")
    ]
    return sorted(
        (path for path in files if path.is_file()), key=lambda path: (path.stat().st_mtime_ns, path.name)
    )


def read_output_union(files: Sequence[Path], outputs_dir: Path) -> dict[str, ModelOutput]:
    """The union of several files of one set (the shards of a data-parallel run), ``files`` oldest first.

    The ranks of one run answer disjoint Qids; a Qid in several files (shards of runs with different
    process counts in one folder) takes its row from the newest file, as a re-run's row replaces an older
    one within a file."""
    union: dict[str, ModelOutput] = {}
    for path in files:
        union.update(_read_lines(Path(path), Path(outputs_dir), authors_layout=False))
    return union


_QID_IN_BROKEN_LINE = re.compile(r'"Qid"\s*:\s*"([^"]+)"')


def _read_lines(path: Path, outputs_dir: Path, *, authors_layout: bool) -> dict[str, ModelOutput]:
    outputs: dict[str, ModelOutput] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            output = _parse_line(line, line_no, path, outputs_dir, authors_layout)
            if output.qid in outputs:  # keep the first answer, say so on it
                first = outputs[output.qid]
                first.problem = _join(first.problem, f"duplicate Qid: line {line_no} of {path.name} ignored")
                continue
            outputs[output.qid] = output
    return outputs


def _parse_line(line: str, line_no: int, path: Path, outputs_dir: Path, authors_layout: bool) -> ModelOutput:
    where = f"{path.name} line {line_no}"
    try:
        row = json.loads(line)
        if not isinstance(row, dict):
            raise TypeError(f"a JSON {type(row).__name__}, not an object")
    except (ValueError, TypeError) as exc:
        found = _QID_IN_BROKEN_LINE.search(line)
        qid = found.group(1) if found else f"<{where}>"
        audio, audio_problem = _authors_wav(outputs_dir, qid) if (authors_layout and found) else (None, None)
        return ModelOutput(qid, None, audio, _join(f"bad JSON in {where}: {exc}", audio_problem))
    qid = row.get("Qid")
    if not isinstance(qid, str) or not qid.strip():
        return ModelOutput(f"<{where}>", None, None, f"no Qid in {where}")
    qid = qid.strip()
    problem = None
    text = row.get("Response") if authors_layout else row.get("text")
    if text is not None and not isinstance(text, str):
        problem = _join(problem, f"text response is a {type(text).__name__}, not a string")
        text = None
    elif isinstance(text, str) and not text.strip():
        problem = _join(problem, "empty text response")  # kept: an empty answer is scored as not correct
    elif text is None:
        problem = _join(problem, "no text response")
    if authors_layout:
        audio, audio_problem = _authors_wav(outputs_dir, qid)
    else:
        audio, audio_problem = _our_audio(outputs_dir, row.get("audio"))
    return ModelOutput(qid, text, audio, _join(problem, audio_problem))


def _authors_wav(outputs_dir: Path, qid: str) -> tuple[str | None, str | None]:
    wav = outputs_dir / "wav" / f"{qid}.wav"
    if not wav.is_file():
        return None, f"missing wav: wav/{qid}.wav"
    return str(wav), None


def _our_audio(outputs_dir: Path, audio: Any) -> tuple[str | None, str | None]:
    if audio is None:
        return None, None  # text-only model: the speech channel is not applicable
    if not isinstance(audio, str) or not audio.strip():
        return None, f"audio field is not a path: {audio!r}"
    path = Path(audio) if Path(audio).is_absolute() else outputs_dir / audio
    if not path.is_file():
        return None, f"missing audio file: {audio}"
    return str(path), None


def _join(*problems: str | None) -> str | None:
    kept = [p for p in problems if p]
    return "; ".join(kept) if kept else None


# ---------------------------------------------------------------------------------------------
# scoring


def _check_set(set_name: str) -> None:
    if set_name not in SETS:
        raise ValueError(f"unknown set {set_name!r}; expected one of {', '.join(SETS)}")


def _audio_label(audio: Any) -> str | None:
    """What the record says about the audio: its path, or a placeholder for in-memory audio."""
    if audio is None:
        return None
    if isinstance(audio, (str, os.PathLike)):
        return str(audio)
    if isinstance(audio, Mapping) and isinstance(audio.get("path"), str) and audio.get("path"):
        return audio["path"]
    return IN_MEMORY_AUDIO


def _blank_record(set_name: str, qid: str, category: str | None, problem: str | None) -> dict:
    record: dict[str, Any] = {
        "qid": qid,
        "set": set_name,
        "category": category,
        "problem": problem,
        "text": None,
        "audio": None,
        "transcript": None,
        "asr_language": None,
        "asr_error": None,
    }
    for ch in CHANNELS:
        if set_name in KNOWLEDGE_SETS:
            record.update(
                {
                    f"{ch}_keyword_hit": None,
                    f"{ch}_judge": None,
                    f"{ch}_judge_raw": None,
                    f"{ch}_judge_error": None,
                    f"{ch}_status": "missing",
                    f"{ch}_correct": None,
                }
            )
        else:
            for aspect in OPEN_ENDED_ASPECTS:
                record.update(
                    {f"{ch}_{aspect}": None, f"{ch}_{aspect}_raw": None, f"{ch}_{aspect}_error": None}
                )
            record[f"{ch}_understood"] = None
    record.update(
        {
            "psr_recognised": None,
            "psr_total": None,
            "english_wer": None,
            "mixed_error_rate": None,
            "text_language": None,
            "speech_language": None,
            "text_lsa": None,
            "speech_lsa": None,
        }
    )
    return record


def _keyword_hit(set_name: str, doc: Mapping, response: str) -> bool:
    from cs3_tasks import metrics

    if set_name == "knowledge":
        return bool(
            metrics.knowledge_keyword_hit(response, doc.get("Answer_zh") or "", doc.get("Answer_en") or "")
        )
    return bool(metrics.english_keyword_hit(response, doc.get("Answer") or ""))


def _judge_item(set_name: str, doc: Mapping, response: str, aspect: str | None):
    """The judge module's item for one (doc, response): KnowledgeItem or OpenEndedItem."""
    from cs3_tasks import judge

    qid, question = str(doc["Qid"]), doc.get("Question") or ""
    if aspect is not None:
        return judge.OpenEndedItem(question=question, reference=doc.get("Answer"), response=response, qid=qid)
    if set_name == "knowledge":
        return judge.KnowledgeItem(
            question=question,
            reference=doc.get("Answer_zh") or "",
            response=response,
            reference_en=doc.get("Answer_en"),
            qid=qid,
        )
    return judge.KnowledgeItem(
        question=question, reference=doc.get("Answer") or "", response=response, qid=qid
    )


@dataclass
class _JudgeJob:
    index: int  # record index
    channel: str
    aspect: str | None  # None = knowledge correctness; "relevance" | "semantic" for open_ended
    item: Any


def _run_judge_jobs(
    set_name: str, jobs: Sequence[_JudgeJob], config: JudgeConfig, progress: bool = False
) -> list[Verdict]:
    """Judge all jobs, one judge call per aspect (the judge sends identical prompts once, concurrently)."""
    from cs3_tasks import judge

    verdicts: list[Verdict | None] = [None] * len(jobs)
    by_aspect: dict[str | None, list[int]] = defaultdict(list)
    for i, job in enumerate(jobs):
        by_aspect[job.aspect].append(i)
    for aspect, indices in by_aspect.items():
        items = [jobs[i].item for i in indices]
        if aspect is None:
            language = "en" if set_name == "knowledge_en" else "zh"
            answers = judge.judge_knowledge(items, config, language=language, progress=progress)
        else:
            answers = judge.judge_open_ended(items, config, aspect=aspect, progress=progress)
        for i, verdict in zip(indices, answers):
            verdicts[i] = verdict
    return verdicts  # type: ignore[return-value]


def _apply_verdict(record: dict, job: _JudgeJob, verdict: Verdict) -> None:
    ch = job.channel
    if job.aspect is None:
        record[f"{ch}_judge_raw"] = verdict.raw
        if verdict.error or verdict.value is None:
            record[f"{ch}_judge_error"] = verdict.error or "judge_error: no verdict"
            record[f"{ch}_status"], record[f"{ch}_correct"] = "judge_error", None
        else:
            record[f"{ch}_judge"] = bool(verdict.value)
            record[f"{ch}_status"] = "judge_correct" if verdict.value else "judge_wrong"
            record[f"{ch}_correct"] = bool(verdict.value)
        return
    aspect = job.aspect
    record[f"{ch}_{aspect}_raw"] = verdict.raw
    if verdict.error or verdict.value is None:
        record[f"{ch}_{aspect}_error"] = verdict.error or "judge_error: no score"
    else:
        record[f"{ch}_{aspect}"] = int(verdict.value)
    if aspect == "relevance":
        from cs3_tasks import metrics

        record[f"{ch}_understood"] = metrics.understood(record[f"{ch}_relevance"])  # relevance > 3


def _channel_keyword(
    record: dict, set_name: str, doc: Mapping, ch: str, response: str | None, judge_enabled: bool
) -> bool:
    """Keyword stage of one channel; True when the judge is still needed."""
    if response is None:
        return False  # status stays "missing"
    if not response.strip():
        # The model said nothing: a wrong answer, not an excluded item (else silence would raise accuracy).
        record[f"{ch}_keyword_hit"] = False
        record[f"{ch}_status"], record[f"{ch}_correct"] = "empty", False
        return False
    hit = _keyword_hit(set_name, doc, response)
    record[f"{ch}_keyword_hit"] = hit
    if hit:
        record[f"{ch}_status"], record[f"{ch}_correct"] = "keyword", True
        return False
    if not judge_enabled:
        # keyword-only accuracy: an item the keyword stage does not accept counts as not correct
        record[f"{ch}_status"], record[f"{ch}_correct"] = "unresolved", False
        return False
    return True


def _text_metrics(record: dict, set_name: str) -> None:
    from cs3_tasks import metrics, text

    expected = EXPECTED_LANGUAGE[set_name]
    if record["text"] is not None:
        record["text_language"] = text.dominant_language(record["text"])
        record["text_lsa"] = metrics.language_selected(record["text"], expected)
    if record["transcript"] is not None:
        record["speech_language"] = text.dominant_language(record["transcript"])
        record["speech_lsa"] = metrics.language_selected(record["transcript"], expected)
    if record["text"] is not None and record["transcript"] is not None:
        recognised, total = metrics.pronunciation_counts(record["text"], record["transcript"])
        record["psr_recognised"], record["psr_total"] = int(recognised), int(total)
        record["english_wer"] = metrics.english_wer(record["text"], record["transcript"])
        record["mixed_error_rate"] = metrics.mixed_error_rate(record["text"], record["transcript"])


def score_batch(
    set_name: str,
    docs: Sequence[Mapping],
    outputs: Sequence[ModelOutput],
    *,
    asr_model: str | None = None,
    asr_backend: str = "faster-whisper",
    asr_device: str | None = None,
    judge: JudgeConfig | None = None,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Per-item records (keys: docs/architecture.md) for ``outputs`` against ``docs``.

    One record per doc (a doc without output: problem "no output", channels "missing") and one per
    output whose Qid is not among ``docs`` (problem "unknown Qid"), docs first, in order. ``judge=None``
    leaves keyword misses "unresolved" and open-ended scores None. ``on_record`` is called with each
    record as soon as it is final (used by the CLI to append it to the records file).
    """
    _check_set(set_name)
    by_qid = {}
    for output in outputs:
        by_qid.setdefault(output.qid, output)
    doc_qids = set()
    records: list[dict] = []
    pairs: list[tuple[Mapping | None, ModelOutput | None]] = []
    for doc in docs:
        qid = str(doc["Qid"])
        doc_qids.add(qid)
        output = by_qid.get(qid)
        category = doc.get("Category") if set_name in KNOWLEDGE_SETS else None
        problem = output.problem if output is not None else "no output for this Qid"
        records.append(_blank_record(set_name, qid, category, problem))
        pairs.append((doc, output))
    for output in outputs:
        if output.qid not in doc_qids and by_qid[output.qid] is output:
            problem = _join(f"unknown Qid: {output.qid} is not in the {set_name} dataset", output.problem)
            records.append(_blank_record(set_name, output.qid, None, problem))
            pairs.append((None, output))  # kept for the audit, but nothing to score against
    for record, (doc, output) in zip(records, pairs):
        if output is not None:
            record["text"] = output.text
            record["audio"] = _audio_label(output.audio)

    emitted = [False] * len(records)

    def emit(i: int) -> None:
        if not emitted[i]:
            emitted[i] = True
            if on_record is not None:
                on_record(records[i])

    open_ended = set_name == "open_ended"
    judge_enabled = judge is not None

    # (1) text channel: keyword stage now, judge in the background while the ASR runs
    text_jobs: list[_JudgeJob] = []
    for i, (doc, output) in enumerate(pairs):
        if doc is None or output is None or output.text is None:
            continue
        if open_ended:
            if judge_enabled:
                text_jobs += [
                    _JudgeJob(i, "text", a, _judge_item(set_name, doc, output.text, a))
                    for a in OPEN_ENDED_ASPECTS
                ]
        elif _channel_keyword(records[i], set_name, doc, "text", output.text, judge_enabled):
            text_jobs.append(_JudgeJob(i, "text", None, _judge_item(set_name, doc, output.text, None)))
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cs3-text-judge")
    text_future: Future | None = (
        pool.submit(_run_judge_jobs, set_name, text_jobs, judge) if text_jobs else None
    )

    try:
        # (2) speech channel: one batched ASR call over every speech output
        speech_indices = [
            i
            for i, (doc, output) in enumerate(pairs)
            if doc is not None and output is not None and output.audio is not None
        ]
        if speech_indices:
            from cs3_tasks.asr import transcribe_batch

            transcripts = transcribe_batch(
                [pairs[i][1].audio for i in speech_indices],
                language=ASR_LANGUAGE_HINT[set_name],
                model=asr_model,
                device=asr_device,
                backend=asr_backend,
                progress=progress,
            )
            for i, transcript in zip(speech_indices, transcripts):
                record = records[i]
                if transcript.error:
                    record["asr_error"] = transcript.error
                    record["problem"] = _join(record["problem"], f"ASR failed: {transcript.error}")
                else:
                    record["transcript"], record["asr_language"] = transcript.text, transcript.language
        for record, (doc, _) in zip(records, pairs):
            if doc is not None:
                _text_metrics(record, set_name)

        speech_jobs: list[_JudgeJob] = []
        for i in speech_indices:
            doc, transcript = pairs[i][0], records[i]["transcript"]
            if transcript is None:
                continue
            if open_ended:
                if judge_enabled:
                    speech_jobs += [
                        _JudgeJob(i, "speech", a, _judge_item(set_name, doc, transcript, a))
                        for a in OPEN_ENDED_ASPECTS
                    ]
            elif _channel_keyword(records[i], set_name, doc, "speech", transcript, judge_enabled):
                speech_jobs.append(_JudgeJob(i, "speech", None, _judge_item(set_name, doc, transcript, None)))

        # text verdicts (judged while the ASR ran); waiting here keeps the judge's bound on requests in flight
        if text_future is not None:
            for job, verdict in zip(text_jobs, text_future.result()):
                _apply_verdict(records[job.index], job, verdict)
        speech_waiting = sorted({job.index for job in speech_jobs})
        for i in set(range(len(records))) - set(speech_waiting):
            emit(i)

        # (3) speech channel judged in chunks; each chunk's records are final when it returns
        chunks = [
            speech_waiting[k : k + JUDGE_CHUNK_RECORDS]
            for k in range(0, len(speech_waiting), JUDGE_CHUNK_RECORDS)
        ]
        for chunk in _maybe_progress(chunks, progress, "judge (speech)"):
            members = set(chunk)
            jobs = [job for job in speech_jobs if job.index in members]
            for job, verdict in zip(jobs, _run_judge_jobs(set_name, jobs, judge)):
                _apply_verdict(records[job.index], job, verdict)
            for i in chunk:
                emit(i)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # an interrupted run must not wait for the judge
    for i in range(len(records)):
        emit(i)
    return records


def _maybe_progress(items: list, progress: bool, desc: str) -> Iterable:
    if not progress or len(items) <= 1:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="chunk", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# summaries


def _psr(records: Sequence[dict]) -> dict:
    """PSR: headline = micro (sum recognised / sum total) over items with English words in the text response.

    `metrics.pronunciation_success_rate` gives the counts and the macro mean; the micro CI comes from an
    item-level bootstrap of the ratio of sums (the words of one answer are not independent).
    """
    import numpy as np

    from cs3_tasks import metrics

    counts = [(r["psr_recognised"], r["psr_total"]) for r in records if r.get("psr_total") is not None]
    entry = metrics.pronunciation_success_rate(counts)
    kept = [c for c in counts if c[1] > 0]
    entry["macro"] = entry["value"]
    entry["macro_ci"] = [entry["ci_low"], entry["ci_high"]]
    entry["value"], entry["ci_low"], entry["ci_high"] = entry["micro"], None, None
    entry["n_excluded_no_english"] = len(counts) - len(kept)
    if kept:
        recognised = np.array([c[0] for c in kept], dtype=float)
        total = np.array([c[1] for c in kept], dtype=float)
        picks = np.random.default_rng(0).integers(0, len(kept), size=(1000, len(kept)))
        ratios = recognised[picks].sum(axis=1) / total[picks].sum(axis=1)
        entry["ci_low"], entry["ci_high"] = (float(q) for q in np.quantile(ratios, [0.025, 0.975]))
    return entry


def _channel_summary(set_name: str, records: Sequence[dict], ch: str) -> dict | None:
    from cs3_tasks import metrics

    applicable = [r for r in records if (r["text"] if ch == "text" else r["audio"]) is not None]
    if not applicable:
        return None  # text-only model (speech) or no text at all: not applicable, never 0
    summary: dict[str, Any] = {}
    if set_name in KNOWLEDGE_SETS:
        # None = excluded (judge_error, missing channel); unresolved items are False (keyword-only accuracy)
        summary["accuracy"] = metrics.rate([r[f"{ch}_correct"] for r in records])
        statuses = Counter(r[f"{ch}_status"] for r in records)
        summary["status_counts"] = {s: statuses.get(s, 0) for s in STATUSES}
        summary["n_judge_error"] = statuses.get("judge_error", 0)  # excluded from the rate
        summary["n_unresolved"] = statuses.get("unresolved", 0)  # counted as not correct
        summary["n_missing"] = statuses.get("missing", 0)  # excluded: no response on this channel
        summary["n_empty"] = statuses.get("empty", 0)  # counted as not correct: the model said nothing
        categories = sorted({r["category"] for r in records if r["category"] is not None})
        summary["by_category"] = {}
        for category in categories:
            in_cat = [r for r in records if r["category"] == category]
            entry = metrics.rate([r[f"{ch}_correct"] for r in in_cat])
            entry["n_judge_error"] = sum(1 for r in in_cat if r[f"{ch}_status"] == "judge_error")
            entry["n_unresolved"] = sum(1 for r in in_cat if r[f"{ch}_status"] == "unresolved")
            summary["by_category"][category] = entry
    else:
        summary["understanding_rate"] = metrics.understanding_rate([r[f"{ch}_relevance"] for r in applicable])
        summary["mean_relevance"] = metrics.mean_score([r[f"{ch}_relevance"] for r in applicable])
        summary["mean_semantic"] = metrics.mean_score([r[f"{ch}_semantic"] for r in applicable])
        summary["n_relevance_error"] = sum(1 for r in records if r[f"{ch}_relevance_error"])
        summary["n_semantic_error"] = sum(1 for r in records if r[f"{ch}_semantic_error"])
        summary["n_unscored"] = sum(
            1 for r in applicable if r[f"{ch}_relevance"] is None and not r[f"{ch}_relevance_error"]
        )
    summary["lsa"] = metrics.rate([r[f"{ch}_lsa"] for r in applicable])
    summary["language_counts"] = dict(
        Counter(r[f"{ch}_language"] for r in records if r[f"{ch}_language"] is not None)
    )
    return summary


def summarize(set_name: str, records: Sequence[dict]) -> dict:
    """Headline rates with 95% CIs, per Category, and every count needed to audit them."""
    from cs3_tasks import metrics

    _check_set(set_name)
    scorable = [r for r in records if not (r["problem"] or "").startswith("unknown Qid")]
    return {
        "set": set_name,
        "n_records": len(records),
        "n_items": len(scorable),
        "n_unknown_qid": len(records) - len(scorable),
        "n_no_output": sum(1 for r in scorable if r["text"] is None and r["audio"] is None),
        "n_problems": sum(1 for r in records if r["problem"]),
        "n_asr_error": sum(1 for r in records if r["asr_error"]),
        "text": _channel_summary(set_name, scorable, "text"),
        "speech": _channel_summary(set_name, scorable, "speech"),
        "psr": _psr(scorable),
        # mean of per-item rates over items that have one (English WER: text response has English words)
        "english_wer": metrics.mean_score(
            [r["english_wer"] for r in scorable if r["english_wer"] is not None]
        ),
        "mixed_error_rate": metrics.mean_score(
            [r["mixed_error_rate"] for r in scorable if r["mixed_error_rate"] is not None]
        ),
    }


def _accuracy(summary: Mapping | None, ch: str, category: str | None = None) -> float | None:
    channel = (summary or {}).get(ch)
    if not channel or "accuracy" not in channel:
        return None
    entry = channel["accuracy"] if category is None else channel["by_category"].get(category, {})
    return entry.get("value")


def _gap(acc_cs: float | None, acc_en: float | None) -> dict:
    from cs3_tasks import metrics

    drop = metrics.accuracy_drop(acc_cs, acc_en)
    return {
        "acc_cs": acc_cs,
        "acc_en": acc_en,
        "drop_abs": drop["absolute"],
        "drop_rel": drop["relative"],
        "preserve": drop["preserve_rate"],
    }


def compare_cs_en(cs_summary: Mapping, en_summary: Mapping) -> dict:
    """Code-switched vs English knowledge accuracy, per channel and per category.

    drop_abs = acc_en - acc_cs; drop_rel = drop_abs / acc_en; preserve = acc_cs / acc_en (None when
    acc_en is 0 or a channel is not applicable).
    """
    comparison: dict[str, Any] = {}
    for ch in CHANNELS:
        entry = _gap(_accuracy(cs_summary, ch), _accuracy(en_summary, ch))
        categories = sorted(
            set((cs_summary.get(ch) or {}).get("by_category", {}))
            | set((en_summary.get(ch) or {}).get("by_category", {}))
        )
        entry["by_category"] = {
            c: _gap(_accuracy(cs_summary, ch, c), _accuracy(en_summary, ch, c)) for c in categories
        }
        comparison[ch] = entry
    return comparison


# ---------------------------------------------------------------------------------------------
# markdown


def _fmt(entry: Mapping | None, percent: bool = True) -> str:
    if not entry or entry.get("value") is None:
        return "n/a"
    value = entry["value"]
    ci = (entry["ci_low"], entry["ci_high"]) if entry.get("ci_low") is not None else None
    if percent:
        text = f"{100 * value:.1f}%"
        return text + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def summary_markdown(summary: Mapping) -> str:
    """A markdown rendering of `summarize` output (95% CIs in brackets)."""
    set_name = summary["set"]
    lines = [
        f"# {summary.get('model') or 'model'}: {set_name}",
        "",
        (
            f"items: {summary['n_items']}, no output: {summary['n_no_output']}, unknown Qids: "
            f"{summary['n_unknown_qid']}, items with problems: {summary['n_problems']}, "
            f"ASR errors: {summary['n_asr_error']}"
        ),
        "",
    ]
    if set_name in KNOWLEDGE_SETS:
        lines += [
            (
                "| channel | accuracy [95% CI] | n | judge_error (excluded) | unresolved | empty (wrong) "
                "| missing (excluded) | LSA |"
            ),
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for ch in CHANNELS:
            s = summary.get(ch)
            if s is None:
                lines.append(f"| {ch} | n/a | 0 | | | | | n/a |")
                continue
            lines.append(
                f"| {ch} | {_fmt(s['accuracy'])} | {s['accuracy']['n']} | {s['n_judge_error']} | "
                f"{s['n_unresolved']} | {s['n_empty']} | {s['n_missing']} | {_fmt(s['lsa'])} |"
            )
        categories = sorted(
            {c for ch in CHANNELS for c in ((summary.get(ch) or {}).get("by_category") or {})}
        )
        if categories:
            lines += ["", "| category | text accuracy | speech accuracy |", "| --- | --- | --- |"]
            for c in categories:
                cells = [_fmt(((summary.get(ch) or {}).get("by_category") or {}).get(c)) for ch in CHANNELS]
                lines.append(f"| {c} | {cells[0]} | {cells[1]} |")
    else:
        lines += [
            "| channel | understanding rate | mean relevance | mean semantic | judge errors | LSA |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for ch in CHANNELS:
            s = summary.get(ch)
            if s is None:
                lines.append(f"| {ch} | n/a | n/a | n/a | | n/a |")
                continue
            lines.append(
                f"| {ch} | {_fmt(s['understanding_rate'])} | {_fmt(s['mean_relevance'], False)} | "
                f"{_fmt(s['mean_semantic'], False)} | {s['n_relevance_error'] + s['n_semantic_error']} "
                f"| {_fmt(s['lsa'])} |"
            )
    psr = summary["psr"]
    lines += [
        "",
        "| PSR | English WER | mixed error rate |",
        "| --- | --- | --- |",
        (
            f"| {_fmt(psr)} ({psr['recognised']}/{psr['words']} words; {psr['n_excluded_no_english']} items "
            f"without English words excluded) | {_fmt(summary['english_wer'], False)} | "
            f"{_fmt(summary['mixed_error_rate'], False)} |"
        ),
    ]
    comparison = summary.get("cs_vs_en")
    if comparison:
        lines += [
            "",
            "| channel | acc cs | acc en | drop (abs) | drop (rel) | preserve |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for ch in CHANNELS:
            c = comparison[ch]
            cells = [_fmt({"value": c[k]}) for k in ("acc_cs", "acc_en", "drop_abs", "drop_rel", "preserve")]
            lines.append(f"| {ch} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# records file (resumable)


def read_records(path: Path) -> dict[str, dict]:
    """The latest record per Qid in a records file; a torn last line (killed mid-write) is ignored."""
    records: dict[str, dict] = {}
    if not Path(path).is_file():
        return records
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "qid" in record:
                records[record["qid"]] = record
    return records


def _needs_rescore(record: Mapping, output: ModelOutput | None) -> bool:
    """A record is reused unless it carries a retryable failure or the output changed since."""
    if record.get("asr_error"):
        return True
    if any(
        record.get(f"{ch}_{suffix}")
        for ch in CHANNELS
        for suffix in ("judge_error", "relevance_error", "semantic_error")
    ):
        return True
    if output is None:
        return record.get("text") is not None or record.get("audio") is not None
    return record.get("text") != output.text or record.get("audio") != _audio_label(output.audio)


def _rewrite_records(path: Path, records: Sequence[dict]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    os.replace(tmp, path)


def load_docs(set_name: str, location: str | None = None) -> list[dict]:
    """Dataset items of one set: a built dataset (Hub id / local build / "demo"), the authors' source
    directory (``cs_knowledge.json`` ...; validated by data.load_source) or one source JSON file."""
    from cs3_tasks import data

    if location and Path(location).is_file():  # one source JSON file (a list of items)
        with open(location, encoding="utf-8") as handle:
            items = json.load(handle)
        if not isinstance(items, list) or not all(isinstance(i, dict) and "Qid" in i for i in items):
            raise ValueError(f"{location}: expected a JSON list of items with a Qid each")
        return [dict(item) for item in items]
    if location and (Path(location) / data.SOURCE_FILES[set_name]).is_file():
        return data.load_source(Path(location), sets=(set_name,))[set_name]
    dataset = data.load_set(set_name, data.dataset_location(location))
    return [{k: v for k, v in row.items() if k != data.AUDIO_COLUMN} for row in dataset]


# ---------------------------------------------------------------------------------------------
# CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--outputs",
        required=True,
        type=Path,
        help="outputs dir: json/<set>.json + wav/<Qid>.wav (authors) or <set>.jsonl (ours)",
    )
    parser.add_argument("--set", required=True, choices=SETS, dest="set_name")
    parser.add_argument("--out", required=True, type=Path, help="result dir (records, summary)")
    parser.add_argument(
        "--dataset",
        default=None,
        help="dataset: Hub id, local build dir, 'demo', or a source JSON file of the set",
    )
    parser.add_argument(
        "--asr-model", default=None, help="ASR model name or path (default: asr.default_model())"
    )
    parser.add_argument(
        "--asr-backend", default="faster-whisper", choices=("faster-whisper", "openai-whisper")
    )
    parser.add_argument(
        "--asr-device",
        default=None,
        help="cpu, cuda or cuda:N (default: $CS3_ASR_DEVICE, else cuda when available, else cpu)",
    )
    parser.add_argument(
        "--model-name", default=None, help="name of the scored model (default: outputs dir name)"
    )
    parser.add_argument(
        "--restart", action="store_true", help="discard existing records (caches still make the re-run cheap)"
    )
    parser.add_argument("--no-progress", action="store_true")
    from cs3_tasks import judge

    judge.add_judge_arguments(parser)


def _settings(args: argparse.Namespace, judge_config: JudgeConfig | None) -> dict:
    """What the records depend on: a resumed run must use the same settings."""
    from cs3_tasks import asr

    return {
        "asr_model": args.asr_model or asr.default_model(args.asr_backend),
        "asr_backend": args.asr_backend,
        "asr_language": ASR_LANGUAGE_HINT[args.set_name],
        "asr_decoding": asr.runner_options(),
        "judge": None
        if judge_config is None
        else {
            "base_url": judge_config.base_url,
            "model": judge_config.model,
            "temperature": judge_config.temperature,
        },
    }


def run(args: argparse.Namespace) -> int:
    from cs3_tasks import judge

    set_name = args.set_name
    out = Path(args.out)
    try:
        judge_config = judge.judge_config_from_args(args)  # fails before any work starts
    except judge.JudgeConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        docs = load_docs(set_name, args.dataset)
        outputs = read_outputs(args.outputs, set_name)
    except (OSError, ValueError, RuntimeError) as exc:  # no dataset / no outputs: nothing to score
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(args, judge_config)
    records_path = out / f"{set_name}.records.jsonl"
    settings_path = out / f"{set_name}.settings.json"
    if args.restart:
        records_path.unlink(missing_ok=True)
    if records_path.is_file() and settings_path.is_file():
        previous = json.loads(settings_path.read_text(encoding="utf-8"))
        if previous != settings:
            print(
                f"error: {records_path} was made with other settings ({previous}); now {settings}. "
                "Use --restart (ASR and judge caches keep it cheap) or another --out.",
                file=sys.stderr,
            )
            return 2
    settings_path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    done = read_records(records_path)
    doc_qids = [str(d["Qid"]) for d in docs]
    known = set(doc_qids)
    order = doc_qids + [q for q in outputs if q not in known]
    pending = {q for q in order if q not in done or _needs_rescore(done[q], outputs.get(q))}
    pending_docs = [d for d in docs if str(d["Qid"]) in pending]
    pending_outputs = [o for q, o in outputs.items() if q in pending]
    print(
        f"{set_name}: {len(order)} items, {len(order) - len(pending)} already scored, {len(pending)} to score",
        file=sys.stderr,
    )
    if records_path.is_file():  # a torn last line (killed mid-write) must not swallow the next record
        _rewrite_records(records_path, list(done.values()))

    with open(records_path, "a", encoding="utf-8") as handle:

        def append(record: dict) -> None:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            done[record["qid"]] = record

        if pending:
            score_batch(
                set_name,
                pending_docs,
                pending_outputs,
                asr_model=args.asr_model,
                asr_backend=args.asr_backend,
                asr_device=args.asr_device,
                judge=judge_config,
                progress=not args.no_progress,
                on_record=append,
            )

    final = [done[q] for q in order if q in done]
    _rewrite_records(records_path, final)  # compact: one record per Qid, dataset order
    summary = summarize(set_name, final)
    summary["model"] = args.model_name or Path(args.outputs).resolve().name
    summary["settings"] = settings
    other = {"knowledge": "knowledge_en", "knowledge_en": "knowledge"}.get(set_name)
    if other and (out / f"{other}.summary.json").is_file():
        other_summary = json.loads((out / f"{other}.summary.json").read_text(encoding="utf-8"))
        cs, en = (summary, other_summary) if set_name == "knowledge" else (other_summary, summary)
        summary["cs_vs_en"] = compare_cs_en(cs, en)
    (out / f"{set_name}.summary.json").write_text(
        json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    markdown = summary_markdown(summary)
    (out / f"{set_name}.summary.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0
