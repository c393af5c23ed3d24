"""Scoring one CS3-Bench set: the per-item record schema, `score_batch`, the resumable ``cs3-bench score``.

One implementation serves ``cs3-bench score`` and the lm-eval task filters (`score_batch`); reading model
outputs is `cs3_tasks.scoring.outputs`, summaries are `cs3_tasks.scoring.summary`. The pairing of outputs
with docs and the
batched ASR (`pair_outputs`, `transcribe_outputs`) and the records file (`RecordsFile`) also serve the
conversation scorer. The order of work is chosen so that a killed run loses nothing: (1) the text
channel goes to the judge in the background while (2) all speech is transcribed in ONE `transcribe_batch`
call (ASR results land in asr.sqlite per item), then (3) the speech channel is judged in chunks and each
finished record is appended to ``<set>.records.jsonl`` and flushed. Judge verdicts land in judge.sqlite
per request, so a re-run recomputes nothing: finished records are skipped, and the rest hit the two caches.

ASR language hint: none (auto-detection). Responses to code-switched questions mix Mandarin and English,
and Whisper forced to "zh" tends to transliterate or translate English words into characters, which would
deflate PSR and English WER and bias the speech-channel language tag (LSA) towards "zh" — the very thing
LSA measures. Auto-detection picks "zh" for a mostly-Mandarin answer anyway, and "en" for an English one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks.core.data import KNOWLEDGE_SETS, SETS, check_set
from cs3_tasks.scoring.outputs import (
    ModelOutput,
    audio_label,
    find_output_sets,
    join_problems,
    read_given_transcripts,
    read_outputs,
)

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.asr import AsrConfig
    from cs3_tasks.judge import JudgeConfig, Verdict

CHANNELS = ("text", "speech")
# "reference": the authors' scoring (cs3_tasks.scoring.reference: their prompts read from their scripts, raw
# keyword
# test, startswith / first-[0-5] parsing with 10 asks, every item in the denominator); "cs3": our stricter
# audit protocol (normalised keywords within punctuation-separated spans, strict parsing, judge errors
# excluded and counted). Both produce the record schema below.
PROTOCOLS = ("reference", "cs3")
DEFAULT_PROTOCOL = "reference"


def _zh_en_pair():
    from cs3_tasks.core.languages import load_pair

    return load_pair("zh-en")


# Both from the zh-en language pair (cs3_tasks/core/language_pairs/zh-en.yaml): the language a response is
# expected to
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
# "judge_unparsed" (reference protocol): no reply in 10 asks had a verdict; counted wrong, as their code does.
STATUSES = (
    "keyword",
    "judge_correct",
    "judge_wrong",
    "judge_unparsed",
    "judge_error",
    "unresolved",
    "empty",
    "missing",
)


# ---------------------------------------------------------------------------------------------
# scoring


def blank_record(
    set_name: str, qid: str, category: str | None, problem: str | None, protocol: str = "cs3"
) -> dict:
    record: dict[str, Any] = {
        "qid": qid,
        "set": set_name,
        "protocol": protocol,
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
    record.update(note_keys(set_name))
    return record


def note_keys(set_name: str) -> dict:
    """The record's notes, all None until set: what the ASR transcript does not cover (``asr_note``,
    Transcript.note) and what was cut to bound each judge exchange (Verdict.note)."""
    notes: dict[str, None] = {"asr_note": None}
    for ch in CHANNELS:
        if set_name in KNOWLEDGE_SETS:
            notes[f"{ch}_judge_note"] = None
        else:
            notes.update({f"{ch}_{aspect}_note": None for aspect in OPEN_ENDED_ASPECTS})
    return notes


def _keyword_hit(set_name: str, doc: Mapping, response: str, protocol: str = "cs3") -> bool:
    from cs3_tasks.core import metrics

    if protocol == "reference":
        from cs3_tasks.scoring import reference

        fields = ("Answer_zh", "Answer_en") if set_name == "knowledge" else ("Answer",)
        return reference.keyword_hit(set_name, {f: doc.get(f) or "" for f in fields}, response)

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
    set_name: str,
    jobs: Sequence[_JudgeJob],
    config: JudgeConfig,
    progress: bool = False,
    templates: Any = None,
) -> list[Verdict]:
    """Judge all jobs, one judge call per aspect (the judge sends identical prompts once, concurrently).
    ``templates`` (`reference.ReferenceTemplates`): judge as the authors' code does (reference protocol)."""
    from cs3_tasks import judge

    if templates is not None:
        return _run_reference_jobs(set_name, jobs, config, templates, progress)

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


def _run_reference_jobs(
    set_name: str, jobs: Sequence[_JudgeJob], config: JudgeConfig, templates: Any, progress: bool
) -> list:
    """The reference protocol's judge (`reference.judge_knowledge` / `judge_open_ended`) for the jobs, whose
    items are (doc, response) pairs; verdicts are `reference.ReferenceVerdict` (value, raw, asks,
    fallback)."""
    from cs3_tasks.scoring import reference

    verdicts: list = [None] * len(jobs)
    by_aspect: dict[str | None, list[int]] = defaultdict(list)
    for i, job in enumerate(jobs):
        by_aspect[job.aspect].append(i)
    for aspect, indices in by_aspect.items():
        items = [jobs[i].item for i in indices]
        if aspect is None:
            answers = reference.judge_knowledge(set_name, items, templates, config, progress=progress)
        else:
            answers = reference.judge_open_ended(items, aspect, templates, config, progress=progress)
        for i, verdict in zip(indices, answers):
            verdicts[i] = verdict
    return verdicts


def _apply_verdict(record: dict, job: _JudgeJob, verdict: Verdict) -> None:
    ch = job.channel
    note = getattr(verdict, "note", None)  # what was cut to bound the judge exchange
    record[f"{ch}_judge_note" if job.aspect is None else f"{ch}_{job.aspect}_note"] = note
    asks = getattr(verdict, "asks", None)  # reference protocol: replies asked for, and the fallback flag
    if job.aspect is None:
        record[f"{ch}_judge_raw"] = verdict.raw
        if asks is not None:
            record[f"{ch}_judge_asks"] = asks
        if asks is not None and not verdict.error and verdict.fallback:
            # no verdict in 10 replies: their code counts the item wrong
            record[f"{ch}_status"], record[f"{ch}_correct"] = "judge_unparsed", False
        elif verdict.error or verdict.value is None:
            record[f"{ch}_judge_error"] = verdict.error or "judge_error: no verdict"
            record[f"{ch}_status"], record[f"{ch}_correct"] = "judge_error", None
        else:
            record[f"{ch}_judge"] = bool(verdict.value)
            record[f"{ch}_status"] = "judge_correct" if verdict.value else "judge_wrong"
            record[f"{ch}_correct"] = bool(verdict.value)
        return
    aspect = job.aspect
    record[f"{ch}_{aspect}_raw"] = verdict.raw
    if asks is not None:
        record[f"{ch}_{aspect}_asks"] = asks
        record[f"{ch}_{aspect}_fallback"] = bool(verdict.fallback and not verdict.error)
    if verdict.error or verdict.value is None:
        record[f"{ch}_{aspect}_error"] = verdict.error or "judge_error: no score"
    else:
        record[f"{ch}_{aspect}"] = int(verdict.value)
    if aspect == "relevance":
        from cs3_tasks.core import metrics

        relevance = record[f"{ch}_relevance"]
        if asks is not None:  # reference protocol: their scores run 0-5 ([0] is accepted)
            record[f"{ch}_understood"] = None if relevance is None else relevance > 3
        else:
            record[f"{ch}_understood"] = metrics.understood(relevance)  # relevance > 3


def _channel_keyword(
    record: dict,
    set_name: str,
    doc: Mapping,
    ch: str,
    response: str | None,
    judge_enabled: bool,
    protocol: str = "cs3",
) -> bool:
    """Keyword stage of one channel; True when the judge is still needed."""
    if response is None:
        return False  # status stays "missing"
    if protocol == "cs3" and not response.strip():
        # The model said nothing: a wrong answer, not an excluded item (else silence would raise accuracy).
        record[f"{ch}_keyword_hit"] = False
        record[f"{ch}_status"], record[f"{ch}_correct"] = "empty", False
        return False
    hit = _keyword_hit(set_name, doc, response, protocol)
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
    from cs3_tasks.core import metrics, text

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


# ---------------------------------------------------------------------------------------------
# the stage shared with conversation scoring: pairing outputs with docs, batched ASR


def pair_outputs(
    set_name: str,
    docs: Sequence[Mapping],
    outputs: Sequence[ModelOutput],
    *,
    doc_id: Callable[[Mapping], str],
    blank: Callable[[str, Mapping | None, str | None], dict],
    noun: str = "Qid",
) -> tuple[list[dict], list[tuple[Mapping | None, ModelOutput | None]]]:
    """One blank record per doc (in order), then one per output whose id is not among ``docs``.

    ``blank(qid, doc or None, problem)`` makes a record of the caller's schema. A doc without output gets
    the problem "no output for this <noun>"; an unknown id "unknown <noun>: ... is not in the <set>
    dataset" (kept for the audit, nothing to score it against). The first output of an id wins. Each
    record gets the output's ``text`` and ``audio`` label; the pairs say what to score.
    """
    by_id: dict[str, ModelOutput] = {}
    for output in outputs:
        by_id.setdefault(str(output.qid), output)
    records: list[dict] = []
    pairs: list[tuple[Mapping | None, ModelOutput | None]] = []
    known = set()
    for doc in docs:
        qid = doc_id(doc)
        known.add(qid)
        output = by_id.get(qid)
        problem = output.problem if output is not None else f"no output for this {noun}"
        records.append(blank(qid, doc, problem))
        pairs.append((doc, output))
    for qid, output in by_id.items():
        if qid not in known:
            problem = join_problems(f"unknown {noun}: {qid} is not in the {set_name} dataset", output.problem)
            records.append(blank(qid, None, problem))
            pairs.append((None, output))
    for record, (_, output) in zip(records, pairs):
        if output is not None:
            record["text"] = output.text
            record["audio"] = audio_label(output.audio)
    return records, pairs


def transcribe_outputs(
    records: Sequence[dict],
    pairs: Sequence[tuple[Mapping | None, ModelOutput | None]],
    *,
    language: str | None,
    asr: AsrConfig | None = None,
    progress: bool = True,
) -> list[int]:
    """Transcribe the speech of every paired output in ONE `asr.transcribe_batch` call.

    Sets ``transcript`` / ``asr_language`` of each record, or ``asr_error`` and a problem ("ASR failed:
    ...") on that item only. Returns the indices of the records that had speech to transcribe.
    """
    from cs3_tasks import asr as asr_module

    indices = [
        i
        for i, (doc, output) in enumerate(pairs)
        if doc is not None
        and output is not None
        and (output.audio is not None or getattr(output, "transcript", None) is not None)
    ]
    given = [i for i in indices if getattr(pairs[i][1], "transcript", None) is not None]
    for i in given:  # --use-given-transcripts: the authors' json_asr transcript stands for the ASR
        records[i]["transcript"] = pairs[i][1].transcript
    to_transcribe = [i for i in indices if i not in set(given)]
    if not to_transcribe:
        return indices
    config = asr or asr_module.AsrConfig()
    transcripts = asr_module.transcribe_batch(
        [pairs[i][1].audio for i in to_transcribe],
        language=language,
        model=config.model,
        backend=config.backend,
        short_clips=config.short_clips,
        device=config.device,
        progress=progress,
    )
    for i, transcript in zip(to_transcribe, transcripts):
        record = records[i]
        if transcript.error:
            record["asr_error"] = transcript.error
            record["problem"] = join_problems(record["problem"], f"ASR failed: {transcript.error}")
        else:
            record["transcript"], record["asr_language"] = transcript.text, transcript.language
        record["asr_note"] = getattr(transcript, "note", None)
    return indices


def asr_config(asr: AsrConfig | None, model: str | None = None, backend: str | None = None) -> AsrConfig:
    """``asr`` (default: `asr.AsrConfig()`) with ``model`` / ``backend`` filled in when given."""
    from dataclasses import replace

    from cs3_tasks.asr import AsrConfig

    config = asr or AsrConfig()
    return replace(config, model=model or config.model, backend=backend or config.backend)


def score_batch(
    set_name: str,
    docs: Sequence[Mapping],
    outputs: Sequence[ModelOutput],
    *,
    asr: AsrConfig | None = None,
    asr_model: str | None = None,
    asr_backend: str | None = None,
    judge: JudgeConfig | None = None,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
    protocol: str = DEFAULT_PROTOCOL,
    templates: Any = None,
    reference_scripts: str | Path | None = None,
) -> list[dict]:
    """Per-item records (keys: docs/architecture.md) for ``outputs`` against ``docs``.

    ``protocol``: "reference" (the authors' scoring; its judge prompts are ``templates``, else read from
    ``reference_scripts`` / $CS3_REFERENCE_SCRIPTS / the pinned download before any work when a judge is
    set) or "cs3" (see PROTOCOLS).

    One record per doc (a doc without output: problem "no output", channels "missing") and one per
    output whose Qid is not among ``docs`` (problem "unknown Qid"), docs first, in order. ``judge=None``
    leaves keyword misses "unresolved" and open-ended scores None. ``on_record`` is called with each
    record as soon as it is final (used by the CLI to append it to the records file). ``asr``: which ASR
    transcribes the speech (``asr_model`` / ``asr_backend`` fill in its fields when given).
    """
    check_set(set_name)
    check_protocol(protocol)
    if protocol == "reference" and judge is not None and templates is None:
        from cs3_tasks.scoring import reference

        templates = reference.load_templates(reference_scripts)  # fail fast, before ASR and judge work
    reference_templates = templates if protocol == "reference" else None

    def blank(qid: str, doc: Mapping | None, problem: str | None) -> dict:
        category = doc.get("Category") if doc is not None and set_name in KNOWLEDGE_SETS else None
        return blank_record(set_name, qid, category, problem, protocol)

    def item(doc: Mapping, response: str, aspect: str | None):
        if reference_templates is not None:
            return (doc, response)
        return _judge_item(set_name, doc, response, aspect)

    records, pairs = pair_outputs(set_name, docs, outputs, doc_id=lambda doc: str(doc["Qid"]), blank=blank)

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
                text_jobs += [_JudgeJob(i, "text", a, item(doc, output.text, a)) for a in OPEN_ENDED_ASPECTS]
        elif _channel_keyword(records[i], set_name, doc, "text", output.text, judge_enabled, protocol):
            text_jobs.append(_JudgeJob(i, "text", None, item(doc, output.text, None)))
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cs3-text-judge")
    text_future: Future | None = (
        pool.submit(_run_judge_jobs, set_name, text_jobs, judge, False, reference_templates)
        if text_jobs
        else None
    )

    try:
        # (2) speech channel: one batched ASR call over every speech output
        speech_indices = transcribe_outputs(
            records,
            pairs,
            language=ASR_LANGUAGE_HINT[set_name],
            asr=asr_config(asr, asr_model, asr_backend),
            progress=progress,
        )
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
                        _JudgeJob(i, "speech", a, item(doc, transcript, a)) for a in OPEN_ENDED_ASPECTS
                    ]
            elif _channel_keyword(records[i], set_name, doc, "speech", transcript, judge_enabled, protocol):
                speech_jobs.append(_JudgeJob(i, "speech", None, item(doc, transcript, None)))

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
            for job, verdict in zip(jobs, _run_judge_jobs(set_name, jobs, judge, False, reference_templates)):
                _apply_verdict(records[job.index], job, verdict)
            for i in chunk:
                emit(i)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # an interrupted run must not wait for the judge
    for i in range(len(records)):
        emit(i)
    return records


def check_protocol(protocol: str) -> None:
    """ValueError naming the choices when ``protocol`` is not one of PROTOCOLS."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")


def _maybe_progress(items: list, progress: bool, desc: str) -> Iterable:
    if not progress or len(items) <= 1:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="chunk", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# records file (resumable)

# failures worth retrying on a re-run (ASR and judge errors); any other record is final
RETRYABLE_ERRORS = (
    "asr_error",
    *(f"{ch}_{kind}" for ch in CHANNELS for kind in ("judge_error", "relevance_error", "semantic_error")),
)


class SettingsMismatchError(ValueError):
    """The records in a result dir were made with other settings than this run's."""


class ResultDirBusy(RuntimeError):
    """Another run holds the result dir's lock."""


LOCK_FILE = ".cs3-bench.lock"
# what identifies the scored system in <set>.settings.json: one result dir holds one system
IDENTITY_KEYS = ("model", "outputs")


@contextmanager
def result_dir_lock(out: Path, *, wait: bool = False) -> Iterator[None]:
    """Hold the exclusive lock of result dir ``out`` (``fcntl.flock`` on ``<out>/.cs3-bench.lock``, released
    when the holder ends, even killed). Busy: ResultDirBusy naming the holder, or wait for it (``wait``)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this platform: runs are not serialised
        yield
        return
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK_FILE, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise ResultDirBusy(
                    f"{out} is in use by another cs3-bench run ({holder}); wait for it, pass --wait to "
                    "queue behind it, or use another --out"
                ) from None
            fcntl.flock(handle, fcntl.LOCK_EX)
        import os

        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_same_system(out: Path, settings: Mapping) -> None:
    """SettingsMismatchError when another set of result dir ``out`` holds results of another system
    (``IDENTITY_KEYS`` of its settings differ): one result dir holds one model's results."""
    mine = {k: settings.get(k) for k in IDENTITY_KEYS}
    for path in sorted(Path(out).glob("*.settings.json")):
        try:
            theirs = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        theirs = {k: theirs.get(k) for k in IDENTITY_KEYS} if isinstance(theirs, dict) else {}
        if theirs != mine:
            raise SettingsMismatchError(
                f"{out} holds results of another system ({path.name}: model {theirs.get('model')!r}, "
                f"outputs {theirs.get('outputs')!r}); this run scores model {mine['model']!r} from "
                f"{mine['outputs']!r}. "
                "Use another --out, or --restart to score this model here."
            )


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


def needs_rescore(
    record: Mapping, output: ModelOutput | None, retryable: Sequence[str] = RETRYABLE_ERRORS
) -> bool:
    """A record is reused unless it carries a retryable failure or the output changed since."""
    if any(record.get(key) for key in retryable):
        return True
    if output is None:
        return record.get("text") is not None or record.get("audio") is not None
    return record.get("text") != output.text or record.get("audio") != audio_label(output.audio)


def _write_records(path: Path, records: Iterable[dict]) -> None:
    from cs3_tasks.core.cache import atomic_write

    atomic_write(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))


class RecordsFile:
    """The resumable records of one set in a result dir: ``<set>.records.jsonl`` (one JSON record per
    line, appended and flushed as each record is final) and ``<set>.settings.json`` (what the records
    depend on: a resumed run must use the same settings).

    Lifetime: `open` (checks the settings, reads what is done), `pending`, `appender` while scoring,
    `finish` (compacts the file to one record per id, in order).
    """

    def __init__(self, out: Path, set_name: str):
        self.out = Path(out)
        self.path = self.out / f"{set_name}.records.jsonl"
        self.settings_path = self.out / f"{set_name}.settings.json"
        self.done: dict[str, dict] = {}

    def open(self, settings: Mapping, *, restart: bool = False) -> dict[str, dict]:
        """The finished records (none with ``restart``); SettingsMismatchError if made otherwise."""
        from cs3_tasks.core.cache import atomic_write

        self.out.mkdir(parents=True, exist_ok=True)
        if not restart and any(k in settings for k in IDENTITY_KEYS):
            check_same_system(self.out, settings)
        if restart:
            self.path.unlink(missing_ok=True)
        if self.path.is_file() and self.settings_path.is_file():
            previous = json.loads(self.settings_path.read_text(encoding="utf-8"))
            if previous != settings:
                raise SettingsMismatchError(
                    f"{self.path} was made with other settings ({previous}); now {dict(settings)}. "
                    "Use --restart (ASR and judge caches keep it cheap) or another --out."
                )
        atomic_write(self.settings_path, json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
        self.done = read_records(self.path)
        return self.done

    def pending(
        self,
        order: Sequence[str],
        outputs: Mapping[str, ModelOutput],
        retryable: Sequence[str] = RETRYABLE_ERRORS,
    ) -> set[str]:
        """The ids still to score: not done, or done with a retryable failure, or whose output changed."""
        return {
            q for q in order if q not in self.done or needs_rescore(self.done[q], outputs.get(q), retryable)
        }

    @contextmanager
    def appender(self) -> Iterator[Callable[[dict], None]]:
        """A function that appends one final record to the file (flushed) and marks it done."""
        if self.path.is_file():  # a torn last line (killed mid-write) must not swallow the next record
            _write_records(self.path, self.done.values())
        with open(self.path, "a", encoding="utf-8") as handle:

            def append(record: dict) -> None:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
                self.done[record["qid"]] = record

            yield append

    def score_pending(
        self,
        docs: Sequence[Mapping],
        outputs: Mapping[str, ModelOutput],
        score: Callable[[list[Mapping], list[ModelOutput], Callable[[dict], None]], object],
        *,
        doc_id: Callable[[Mapping], str],
        retryable: Sequence[str] = RETRYABLE_ERRORS,
        label: str = "",
    ) -> list[dict]:
        """Score what is pending with ``score(docs, outputs, on_record)``, appending each final record;
        returns every record, one per id: docs in order, then unknown ids (after `open`)."""
        doc_ids = [doc_id(d) for d in docs]
        known = set(doc_ids)
        order = doc_ids + [q for q in outputs if q not in known]
        pending = self.pending(order, outputs, retryable)
        print(
            f"{label}: {len(order)} items, {len(order) - len(pending)} already scored, "
            f"{len(pending)} to score",
            file=sys.stderr,
        )
        with self.appender() as append:
            if pending:
                score(
                    [d for d in docs if doc_id(d) in pending],
                    [o for q, o in outputs.items() if q in pending],
                    append,
                )
        return self.finish(order)

    def finish(self, order: Sequence[str]) -> list[dict]:
        """Compact the file: one record per id, in ``order``; returns those records."""
        final = [self.done[q] for q in order if q in self.done]
        _write_records(self.path, final)
        return final


# ---------------------------------------------------------------------------------------------
# CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cs3_tasks import asr, judge

    inputs = parser.add_mutually_exclusive_group(required=True)
    inputs.add_argument(
        "--outputs",
        type=Path,
        help="outputs dir: json/<set>.json + wav/<Qid>.wav (authors) or <set>.jsonl (ours)",
    )
    inputs.add_argument(
        "--outputs-root",
        type=Path,
        help="a folder of outputs dirs, one per model (named by its folder): each is scored into "
        "OUT/<model> as --outputs would be, then OUT gets the leaderboard and models.json; resumable per "
        "model. Exit code: 0 every model scored, 1 some failed or are incomplete, 3 most did, 2 bad input "
        "(no model folder, OUT busy)",
    )
    parser.add_argument(
        "--set",
        choices=(*SETS, "all"),
        dest="set_name",
        help="the set to score (required with --outputs); all: every set found in the outputs dir (one "
        "summary each + cs-vs-en); the default with --outputs-root",
    )
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default=DEFAULT_PROTOCOL,
        help="reference (default): the authors' scoring, comparable with the paper; cs3: our stricter audit "
        "protocol (normalised keywords, strict parsing, judge errors excluded and counted)",
    )
    parser.add_argument(
        "--reference-scripts",
        default=None,
        help="the authors' VocalBench-zh checkout (or its utils/) for the reference judge prompts "
        "(default: $CS3_REFERENCE_SCRIPTS, else the pinned download, cached)",
    )
    parser.add_argument(
        "--use-given-transcripts",
        action="store_true",
        help="score the speech channel on json_asr/cs_<set>.json's Response_hyp instead of running ASR",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="result dir (records, summary); with --outputs-root: one result dir per model + the leaderboard",
    )
    parser.add_argument(
        "--dataset",
        default=None,
        help="dataset: Hub id, local build dir, 'demo', or a source JSON file of the set",
    )
    parser.add_argument(
        "--model-name",
        default=None,
        help="name of the scored model (default: outputs dir name; not with --outputs-root)",
    )
    parser.add_argument(
        "--restart", action="store_true", help="discard existing records (caches still make the re-run cheap)"
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--wait", action="store_true", help="wait for another run on the same --out (default: refuse)"
    )
    asr.add_asr_arguments(parser)
    judge.add_judge_arguments(parser)


def run_settings(
    asr: AsrConfig,
    asr_language: str | None,
    judge_config: JudgeConfig | None,
    protocol: str = "cs3",
    reference_scripts: Any = None,
    given_transcripts: bool = False,
) -> dict:
    """What the records of a run depend on (protocol, ASR, its language hint and decoding, the judge); a
    reference run adds `reference.protocol_settings` (scripts, comparability with the paper)."""
    from dataclasses import asdict

    from cs3_tasks import asr as asr_module

    resolved = asr.resolved()
    settings: dict[str, Any] = {"protocol": protocol}
    settings.update(
        {
            "asr_model": "given transcripts (json_asr Response_hyp)" if given_transcripts else resolved.model,
            "asr_backend": None if given_transcripts else resolved.backend,
            "asr_language": asr_language,
            "asr_decoding": None
            if given_transcripts
            else asdict(asr_module.decoding_options(resolved.short_clips)),
            "judge": None
            if judge_config is None
            else {
                "base_url": judge_config.public_base_url,
                "model": judge_config.model,
                "temperature": judge_config.temperature,
            },
        }
    )
    if protocol == "reference":
        from cs3_tasks.scoring import reference

        settings.update(
            reference.protocol_settings(
                reference_scripts, judge_config, settings["asr_backend"], resolved.model
            )
        )
    return settings


def protocol_asr(asr: AsrConfig, protocol: str, chosen: bool = False) -> AsrConfig:
    """The reference protocol's default ASR (transformers + openai/whisper-large-v3) where that model can be
    loaded and no ASR was chosen (options or environment); otherwise ``asr`` (the summary then says the speech
    channel is not comparable to the paper)."""
    import os
    from dataclasses import replace

    from cs3_tasks import asr as asr_module
    from cs3_tasks.scoring import reference

    chosen = (
        chosen
        or bool(asr.model)
        or bool(os.environ.get(asr_module.MODEL_ENV) or os.environ.get(asr_module.BACKEND_ENV))
        or (asr.backend is not None and asr.backend != asr_module.default_backend())
    )
    if protocol != "reference" or chosen:
        return asr
    if not reference.reference_asr_available():
        return asr
    return replace(asr, backend=reference.REFERENCE_ASR_BACKEND, model=reference.REFERENCE_ASR_MODEL)


def system_identity(args: argparse.Namespace) -> dict:
    """The scored system as <set>.settings.json records it (`IDENTITY_KEYS`)."""
    return {
        "model": args.model_name or Path(args.outputs).resolve().name,
        "outputs": str(Path(args.outputs).resolve()),
    }


class ScoringError(Exception):
    """A scoring run that cannot start or cannot go on (bad input, busy or foreign result dir, judge
    credentials refused): the message names the cause; ``exit_code`` is the CLI's (2). What was scored
    before it is kept."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ScoringSetup:
    """What every scored item of a run depends on besides its output: resolved once per run, so that
    every set (and every model of ``--outputs-root``) is scored with the same settings."""

    protocol: str
    asr: AsrConfig
    judge: JudgeConfig | None
    templates: Any  # reference.ReferenceTemplates when the reference protocol has a judge, else None


@dataclass(frozen=True)
class ScoreOutcome:
    """How `score_outputs` ended: exit code 0 (scored) or 3 (most judge verdicts failed, or most items of a
    set have no response on a channel: the summaries are written but incomplete, ``message`` says so), and
    the sets scored."""

    exit_code: int
    sets: tuple[str, ...]
    message: str | None = None


def scoring_setup(args: argparse.Namespace) -> ScoringSetup:
    """The run's protocol, ASR, judge and (reference protocol with a judge) the authors' prompts, checked
    before any work starts: ScoringError when they cannot be used."""
    from cs3_tasks import asr, judge
    from cs3_tasks.scoring import reference

    protocol = getattr(args, "protocol", "cs3")
    try:
        judge_config = judge.judge_config_from_args(args)  # fails before any work starts
        chosen = bool(getattr(args, "asr_backend", None) or getattr(args, "asr_model", None))
        asr_config = protocol_asr(asr.asr_config_from_args(args), protocol, chosen)
    except (judge.JudgeConfigError, ValueError) as exc:
        raise ScoringError(str(exc)) from exc
    templates = None
    if protocol == "reference" and judge_config is not None:
        try:  # the judge prompts are read now: a missing copy fails before any ASR or judge work
            templates = reference.load_templates(getattr(args, "reference_scripts", None))
        except reference.ReferenceScriptsError as exc:
            raise ScoringError(str(exc)) from exc
    return ScoringSetup(protocol, asr_config, judge_config, templates)


def run(args: argparse.Namespace) -> int:
    """``cs3-bench score``: one outputs dir (holding its result dir's lock until every file of the run is
    written), or with ``--outputs-root`` every model folder under it (`cs3_tasks.scoring.many`)."""
    from contextlib import ExitStack

    if getattr(args, "outputs_root", None) is not None:
        from cs3_tasks.scoring import many as score_many

        return score_many.run(args)
    if getattr(args, "set_name", None) is None:
        print("error: --set is required with --outputs", file=sys.stderr)
        return 2
    with ExitStack() as held:
        return score_run(args, held)


def score_run(args: argparse.Namespace, held) -> int:
    """`score_outputs` as the CLI reports it: errors on stderr, the exit code returned."""
    try:
        outcome = score_outputs(args, held)
    except ScoringError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if outcome.message:
        print(f"error: {outcome.message}", file=sys.stderr)
    return outcome.exit_code


def score_outputs(
    args: argparse.Namespace, held, setup: ScoringSetup | None = None, *, echo: bool = True
) -> ScoreOutcome:
    """Score ``args.outputs`` into ``args.out`` (``args.set_name``: one set or "all"); ScoringError on bad
    input. ``held`` (an ExitStack) keeps the result dir's lock; ``setup`` defaults to `scoring_setup`;
    ``echo`` prints each summary (markdown) to stdout."""
    from cs3_tasks.scoring import summary

    setup = setup or scoring_setup(args)
    if args.set_name == "all":
        set_names = find_output_sets(args.outputs)
        if not set_names:
            raise ScoringError(
                f"no outputs of any set ({', '.join(SETS)}) in {args.outputs}: expected "
                "json/cs_<set>.json (authors' layout) or <set>.jsonl"
            )
    else:
        set_names = [args.set_name]
    out = Path(args.out)
    locked: list[bool] = []

    def lock() -> None:
        """One run at a time per result dir (a second waits with --wait, or is refused): taken once, when
        the first set's inputs are read, so a run that cannot start leaves no result dir behind."""
        if not locked:
            held.enter_context(result_dir_lock(out, wait=getattr(args, "wait", False)))
            locked.append(True)

    summaries: dict[str, dict] = {}
    records: list[dict] = []
    for set_name in set_names:
        summaries[set_name], final = _run_set(args, set_name, setup, lock)
        records += final
    model = system_identity(args)["model"]
    for other in summary.CS_EN_PAIR:  # the other knowledge set, when this result dir has it
        if other not in summaries and any(s in summary.CS_EN_PAIR for s in summaries):
            found = summary.read_summary(out, other)
            if found is not None and found.get("model") == model:  # never another system's (--restart)
                summaries[other] = found
    summary.attach_cs_vs_en(summaries)
    for set_name, result in summaries.items():
        markdown = summary.write_summary(out, result)
        if echo and set_name in set_names:
            print(markdown)
    failed, asked = judge_failures(records)
    if 2 * failed > asked:
        message = (
            f"{failed} of {asked} judge verdicts of this run failed (see the *_error fields of the "
            f"records in {out}); the summary is incomplete. Re-run to retry them."
        )
        return ScoreOutcome(3, tuple(set_names), message)
    for set_name in set_names:
        missing, items = summary.missing_responses(summaries[set_name])
        if 2 * missing > items:
            message = (
                f"{set_name}: {missing} of {items} items have no response on a channel (generation, TTS or "
                f"ASR failed: see the problem field of the records in {out}); the summary is incomplete."
            )
            return ScoreOutcome(3, tuple(set_names), message)
    return ScoreOutcome(0, tuple(set_names))


def judge_failures(records: Iterable[Mapping]) -> tuple[int, int]:
    """(failed, asked): the judge verdicts of these records that failed, of all those the judge was asked."""
    failed = asked = 0
    for record in records:
        for ch in CHANNELS:
            for kind in ("judge", "relevance", "semantic"):
                if f"{ch}_{kind}_error" not in record:
                    continue
                error = bool(record[f"{ch}_{kind}_error"])
                value = record.get(f"{ch}_{kind}")
                asked += error or value is not None
                failed += error
    return failed, asked


def _run_set(
    args: argparse.Namespace, set_name: str, setup: ScoringSetup, lock: Callable[[], None]
) -> tuple[dict, list[dict]]:
    """Score one set of ``args.outputs`` into ``args.out``: its summary and records; ScoringError on a
    setup error."""
    from cs3_tasks import judge
    from cs3_tasks.core import data
    from cs3_tasks.scoring import summary

    out = Path(args.out)
    protocol, asr_config, judge_config, templates = setup.protocol, setup.asr, setup.judge, setup.templates
    given = bool(getattr(args, "use_given_transcripts", False))
    try:
        docs = data.load_docs(set_name, args.dataset)
        outputs = read_outputs(args.outputs, set_name)
        if given:
            transcripts = read_given_transcripts(args.outputs, set_name)
            for qid, output in outputs.items():
                output.transcript = transcripts.get(qid)
                if output.transcript is None:
                    output.problem = join_problems(output.problem, "no given transcript (json_asr)")
    except (OSError, ValueError, RuntimeError) as exc:  # no dataset / no outputs: nothing to score
        raise ScoringError(str(exc)) from exc
    scripts = templates.scripts if templates is not None else None
    settings = run_settings(
        asr_config, ASR_LANGUAGE_HINT[set_name], judge_config, protocol, scripts, given_transcripts=given
    )
    settings.update(system_identity(args))
    store = RecordsFile(out, set_name)
    try:
        lock()
        store.open(settings, restart=args.restart)
    except (SettingsMismatchError, ResultDirBusy) as exc:
        raise ScoringError(str(exc)) from exc

    def score(pending_docs: list[Mapping], pending_outputs: list[ModelOutput], append) -> None:
        score_batch(
            set_name,
            pending_docs,
            pending_outputs,
            asr=asr_config,
            judge=judge_config,
            progress=not args.no_progress,
            on_record=append,
            protocol=protocol,
            templates=templates,
        )

    try:
        final = store.score_pending(docs, outputs, score, doc_id=lambda doc: str(doc["Qid"]), label=set_name)
    except judge.JudgeAuthError as exc:  # every request would fail the same way: stop, keep what is done
        raise ScoringError(str(exc)) from exc
    result = summary.summarize(set_name, final, protocol=protocol)
    result["model"] = args.model_name or Path(args.outputs).resolve().name
    result["settings"] = settings
    summary.add_comparability(result, settings)
    return result, final
