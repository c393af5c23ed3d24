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

import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks.core.data import DOC_PROBLEM, KNOWLEDGE_SETS, check_set
from cs3_tasks.scoring.outputs import (
    ModelOutput,
    audio_label,
    join_problems,
)

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.asr import AsrConfig
    from cs3_tasks.judge import JudgeConfig, Verdict
from cs3_tasks import asr as asr_module
from cs3_tasks.asr import AsrConfig
from cs3_tasks.core import metrics, text
from cs3_tasks.scoring.protocols import Protocol, protocol_for
from cs3_tasks.scoring.records import (
    ASPECTS,
    ASR_LANGUAGE_HINT,
    DEFAULT_PROTOCOL,
    EXPECTED_LANGUAGE,
    blank_record,
)
from cs3_tasks.scoring.replay import RecordedTranscripts, RecordedVerdicts

# Speech-channel judge requests are sent in chunks of this many records, so that finished records are
# written while the rest is still being judged (the judge bounds requests in flight inside each chunk).
JUDGE_CHUNK_RECORDS = 32


def no_output_problem(noun: str = "Qid") -> str:
    """The problem of a doc without output."""
    return f"no output for this {noun}"


def unknown_id_problem(noun: str, qid: str, set_name: str) -> str:
    """The problem of an output whose id is not in the dataset (kept for the audit)."""
    return f"unknown {noun}: {qid} is not in the {set_name} dataset"


def asr_failed_problem(error: str) -> str:
    """The problem of an item whose speech could not be transcribed."""
    return f"ASR failed: {error}"


@dataclass
class _JudgeJob:
    index: int  # record index
    channel: str
    aspect: str | None  # None = knowledge correctness; "relevance" | "semantic" for open_ended
    pair: tuple[Mapping, str]  # (doc, the response the judge reads)


def _run_judge_jobs(
    set_name: str,
    jobs: Sequence[_JudgeJob],
    config: JudgeConfig | RecordedVerdicts,
    protocol: Protocol,
    context: Any,
    progress: bool = False,
) -> list[Verdict]:
    """Judge all jobs, one protocol judge call per aspect (the engine sends identical prompts once,
    concurrently); or, replaying a scored run, the verdicts its records hold (`RecordedVerdicts`)."""
    if isinstance(config, RecordedVerdicts):
        return [config.verdict(protocol, str(job.pair[0]["Qid"]), job.channel, job.aspect) for job in jobs]
    verdicts: list[Verdict | None] = [None] * len(jobs)
    by_aspect: dict[str | None, list[int]] = defaultdict(list)
    for i, job in enumerate(jobs):
        by_aspect[job.aspect].append(i)
    for aspect, indices in by_aspect.items():
        answers = protocol.judge(set_name, aspect, [jobs[i].pair for i in indices], config, context, progress)
        for i, verdict in zip(indices, answers):
            verdicts[i] = verdict
    return verdicts  # type: ignore[return-value]


def _channel_keyword(
    record: dict,
    set_name: str,
    doc: Mapping,
    ch: str,
    response: str | None,
    judge_enabled: bool,
    protocol: Protocol,
) -> bool:
    """Keyword stage of one channel; True when the judge is still needed."""
    if response is None:
        return False  # status stays "missing"
    if protocol.empty_response_is_wrong and not response.strip():
        # The model said nothing: a wrong answer, not an excluded item (else silence would raise accuracy).
        record[f"{ch}_keyword_hit"] = False
        record[f"{ch}_status"], record[f"{ch}_correct"] = "empty", False
        return False
    hit = protocol.keyword_hit(set_name, doc, response)
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


def pair_outputs(
    set_name: str,
    docs: Sequence[Mapping],
    outputs: Sequence[ModelOutput],
    *,
    doc_id: Callable[[Mapping], str],
    blank: Callable[[str, Mapping | None, str | None], dict],
    noun: str = "Qid",
    audio_root: Path | None = None,
) -> tuple[list[dict], list[tuple[Mapping | None, ModelOutput | None]]]:
    """One blank record per doc (in order), then one per output whose id is not among ``docs``.

    ``blank(qid, doc or None, problem)`` makes a record of the caller's schema. A doc without output gets
    the problem "no output for this <noun>"; an unknown id "unknown <noun>: ... is not in the <set>
    dataset" (kept for the audit, nothing to score it against). The first output of an id wins. Each
    record gets the output's ``text`` and ``audio`` label (relative to ``audio_root``, the outputs folder,
    when given); the pairs say what to score.
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
        problem = output.problem if output is not None else no_output_problem(noun)
        records.append(blank(qid, doc, join_problems(doc.get(DOC_PROBLEM), problem)))
        pairs.append((doc, output))
    for qid, output in by_id.items():
        if qid not in known:
            problem = join_problems(unknown_id_problem(noun, qid, set_name), output.problem)
            records.append(blank(qid, None, problem))
            pairs.append((None, output))
    for record, (_, output) in zip(records, pairs):
        if output is not None:
            record["text"] = output.text
            record["audio"] = audio_label(output.audio, audio_root)
    return records, pairs


def _named_by_label(error: str, source: Any, label: str | None) -> str:
    """An ASR error that names the file by the record's label (relative to the outputs folder), not by this
    machine's path: records name no local folder."""
    path = str(source) if isinstance(source, (str, Path)) else None
    return error.replace(path, label) if path and label and path != label else error


def transcribe_outputs(
    records: Sequence[dict],
    pairs: Sequence[tuple[Mapping | None, ModelOutput | None]],
    *,
    language: str | None,
    asr: AsrConfig | RecordedTranscripts | None = None,
    progress: bool = True,
) -> list[int]:
    """Transcribe the speech of every paired output in ONE `asr.transcribe_batch` call (or, replaying a
    scored run, take each item's transcript from its record: `RecordedTranscripts`).

    Sets ``transcript`` / ``asr_language`` of each record, or ``asr_error`` and a problem ("ASR failed:
    ...") on that item only. Returns the indices of the records that had speech to transcribe.
    """

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
    if isinstance(asr, RecordedTranscripts):
        transcripts = [asr.transcript(records[i]["qid"]) for i in to_transcribe]
    else:
        config = asr or asr_module.AsrConfig()
        transcripts = asr_module.transcribe_batch(
            [pairs[i][1].audio for i in to_transcribe],
            language=language,
            asr=config,
            progress=progress,
        )
    for i, transcript in zip(to_transcribe, transcripts):
        record = records[i]
        if transcript.error:
            error = _named_by_label(transcript.error, pairs[i][1].audio, record.get("audio"))
            record["asr_error"] = error
            record["problem"] = join_problems(record["problem"], asr_failed_problem(error))
        else:
            record["transcript"], record["asr_language"] = transcript.text, transcript.language
        record["asr_note"] = getattr(transcript, "note", None)
    return indices


def score_batch(
    set_name: str,
    docs: Sequence[Mapping],
    outputs: Sequence[ModelOutput],
    *,
    asr: AsrConfig | RecordedTranscripts | None = None,
    judge: JudgeConfig | RecordedVerdicts | None = None,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
    protocol: str | Protocol = DEFAULT_PROTOCOL,
    templates: Any = None,
    reference_scripts: str | Path | None = None,
    audio_root: Path | None = None,
) -> list[dict]:
    """Per-item records (keys: docs/architecture.md) for ``outputs`` against ``docs``.

    ``protocol``: "reference" (the authors' scoring; its judge prompts are ``templates``, else read from
    ``reference_scripts`` / $CS3_REFERENCE_SCRIPTS / the pinned download before any work when a judge is
    set) or "cs3" (see PROTOCOLS), or its `protocols.Protocol` object.

    One record per doc (a doc without output: problem "no output", channels "missing") and one per
    output whose Qid is not among ``docs`` (problem "unknown Qid"), docs first, in order. ``judge=None``
    leaves keyword misses "unresolved" and open-ended scores None. ``on_record`` is called with each
    record as soon as it is final (used by the CLI to append it to the records file). ``asr``: which ASR
    transcribes the speech, whole (default `asr.AsrConfig()`). ``audio_root``:
    the outputs folder, that records name audio files relative to. A scored run is replayed (``cs3-bench
    score --from-results``) with ``asr`` a `RecordedTranscripts` and ``judge`` a `RecordedVerdicts`: the one
    pipeline, its ASR and judge answered from the records.
    """
    check_set(set_name)
    scoring = protocol_for(protocol)
    replaying = isinstance(judge, RecordedVerdicts)  # nothing is asked: the prompts are not needed
    # a setup error comes first
    context = None if replaying else scoring.judge_context(judge, reference_scripts, templates)

    def blank(qid: str, doc: Mapping | None, problem: str | None) -> dict:
        category = doc.get("Category") if doc is not None and set_name in KNOWLEDGE_SETS else None
        return blank_record(set_name, qid, category, problem, scoring.name)

    records, pairs = pair_outputs(
        set_name, docs, outputs, doc_id=lambda doc: str(doc["Qid"]), blank=blank, audio_root=audio_root
    )

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
                text_jobs += [_JudgeJob(i, "text", a, (doc, output.text)) for a in ASPECTS]
        elif _channel_keyword(records[i], set_name, doc, "text", output.text, judge_enabled, scoring):
            text_jobs.append(_JudgeJob(i, "text", None, (doc, output.text)))
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cs3-text-judge")
    text_future: Future | None = (
        pool.submit(_run_judge_jobs, set_name, text_jobs, judge, scoring, context) if text_jobs else None
    )

    try:
        # (2) speech channel: one batched ASR call over every speech output
        speech_indices = transcribe_outputs(
            records,
            pairs,
            language=ASR_LANGUAGE_HINT[set_name],
            asr=asr,
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
                    speech_jobs += [_JudgeJob(i, "speech", a, (doc, transcript)) for a in ASPECTS]
            elif _channel_keyword(records[i], set_name, doc, "speech", transcript, judge_enabled, scoring):
                speech_jobs.append(_JudgeJob(i, "speech", None, (doc, transcript)))

        # text verdicts (judged while the ASR ran); waiting here keeps the judge's bound on requests in flight
        if text_future is not None:
            for job, verdict in zip(text_jobs, text_future.result()):
                scoring.fill_verdict(records[job.index], job.channel, job.aspect, verdict)
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
            for job, verdict in zip(jobs, _run_judge_jobs(set_name, jobs, judge, scoring, context)):
                scoring.fill_verdict(records[job.index], job.channel, job.aspect, verdict)
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
