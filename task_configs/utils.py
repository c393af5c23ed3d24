"""``!function`` targets of the cs3 lm-eval tasks. The logic lives in cs3_tasks; this file only adapts it.

Flow of one task (e.g. ``cs3_knowledge``):

1. ``load_<set>`` (``custom_dataset``) loads the set with ``cs3_tasks.core.data`` from ``--metadata
   '{"dataset": ...}'``, else $CS3_BENCH_DATASET, else the Hub; the query audio becomes a file path
   (``doc["audio"]``), so ``doc_to_audio`` hands the model a string that ``--use_cache`` can hash.
2. The model answers each request with a string: plain text, or ``cs3_tasks.harness.speech.encode_response``
   (text + path of the waveform it spoke).
3. The ``ScoreResponses`` filter sees ALL responses of the task at once and calls
   ``cs3_tasks.scoring.pipeline.score_batch`` (one batched ASR call, keyword stage, judge when configured).
   Each
   filtered response is the per-item record as JSON: text, audio path, transcript, verdicts.
4. ``process_results`` hands each metric a compact copy of the record; the ``agg_*`` aggregations call
   ``cs3_tasks.scoring.summary.summarize`` over the task's records, so lm-eval reports exactly the numbers of
   ``cs3-bench score``. A channel that does not apply (no speech from a text-only model) gives NaN.

Run settings (``--metadata`` keys, all optional): the run options of ``cs3-bench score``, declared once in
cs3_tasks/scoring/options.py (``protocol``, ``reference_scripts``, ``dataset``, ``asr_*``, ``judge``,
``judge_*``, ``no_judge``) and checked by the validator of ``cs3-bench score``: without ``judge`` the default
judge (over $CS3_JUDGE_*) runs, and a missing API key stops the run at task load with the CLI's message in
metadata words; ``"judge": "none"`` scores keyword-only lower bounds.
The loaders hand the settings to the run (``run.RUN``, which also keeps each task's records for the
cs-vs-en aggregations); the filters pass them on explicitly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cs3_tasks.task_configs.run import RUN
from lm_eval.api.filter import Filter

from cs3_tasks.core import data
from cs3_tasks.core.cache import atomic_write, cache_dir
from cs3_tasks.core.data import CATEGORIES, check_set
from cs3_tasks.harness.distributed import all_gather_list
from cs3_tasks.harness.lm_eval_hook import MarkedValue
from cs3_tasks.harness.speech import decode_payload
from cs3_tasks.scoring import pipeline as scoring
from cs3_tasks.scoring.cs_vs_en import gap_entry
from cs3_tasks.scoring.formatting import incomplete_entry, is_incomplete
from cs3_tasks.scoring.options import MetadataError, in_metadata_words
from cs3_tasks.scoring.outputs import ModelOutput, join_problems, repair_text
from cs3_tasks.scoring.records import CHANNELS
from cs3_tasks.scoring.settings import ScoringError, settings_from_options
from cs3_tasks.scoring.summary import add_comparability, compare_cs_en, summarize

# ---------------------------------------------------------------------------------------------------------
# dataset


def _load(set_name: str, dataset: str | None = None, **metadata: Any):
    """A DatasetDict {"test": ...} of one set, its audio as a file path (``doc["audio"]``)."""
    import datasets

    settings = RUN.load_task({"dataset": dataset, **metadata})
    RUN.describe(run_note(scoring_settings_of(settings)))  # a bad setting fails here, before generation
    ds = data.load_set(set_name, dataset)
    rows = [dict(row) for row in ds]
    for row in rows:
        row["audio"] = query_audio_path(row.get("audio"), row.get("Qid"))
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def scoring_settings_of(settings: Mapping[str, Any], *, reference_prompts: bool = True):
    """The run's ScoringSettings from its ``--metadata`` settings, by the one validator that ``cs3-bench
    score`` uses (`cs3_tasks.scoring.settings.settings_from_options`): without a judge named, the default
    judge, whose missing key stops the run here with the CLI's message in metadata words (or ``"judge":
    "none"``). MetadataError "cs3 --metadata: ..." naming the cause, before the model generates anything."""

    try:  # resolved once per run (`LmEvalRun.resolved`), however many hooks ask
        return RUN.resolved(settings, settings_from_options, reference_prompts=reference_prompts)
    except ScoringError as exc:  # the command line's refusal, in the words of --metadata
        raise MetadataError(f"cs3 --metadata: {in_metadata_words(str(exc))}") from None


def check_run_settings(settings: Mapping[str, Any]) -> None:
    """Check a conversation run's settings when its task loads (`scoring_settings_of`; the conversation
    scorer has its own judge prompt, so the authors' prompts are not read)."""
    scoring_settings_of(settings, reference_prompts=False)


def run_note(scoring) -> dict:
    """What every result of the run says about how it was scored: the protocol, the ASR's fingerprint
    (engine, versions, model identity), the judge and whether the numbers are comparable to the paper (with
    the reasons), as ``cs3-bench score``'s settings and summaries say it."""

    settings = scoring.record_settings("knowledge")
    described = add_comparability({}, settings)
    return {
        "protocol": scoring.protocol.name,
        "asr": settings.get("asr"),
        "judge": settings.get("judge"),
        "machine": settings.get("machine"),
        "comparable_to_paper": described.get("comparable_to_paper"),
        "notes": described.get("notes") or [],
    }


def load_knowledge(**metadata: Any):
    return _load("knowledge", **metadata)


def load_knowledge_en(**metadata: Any):
    return _load("knowledge_en", **metadata)


def load_open_ended(**metadata: Any):
    return _load("open_ended", **metadata)


def query_audio_path(audio: Any, qid: Any = None) -> str | None:
    """A file path for the query audio of one item: its own file, or its bytes written once into the
    cache, named by content hash (stable across runs, so lm-eval's request cache keys are too)."""
    import hashlib

    if audio is None:
        return None
    if isinstance(audio, str):
        return audio
    if not isinstance(audio, Mapping):
        raise TypeError(f"Qid {qid}: unsupported audio value of type {type(audio).__name__}")
    blob, path = audio.get("bytes"), audio.get("path")
    if not blob:
        if path and Path(path).is_file():
            return str(Path(path).resolve())
        raise ValueError(f"Qid {qid}: the audio column has neither bytes nor an existing file ({path!r})")
    digest = hashlib.sha256(blob).hexdigest()
    suffix = Path(path).suffix if path and Path(path).suffix else _sniff_suffix(blob)
    target = cache_dir() / "query_audio" / f"{digest}{suffix}"
    if not target.is_file():
        atomic_write(target, blob)  # parallel runs never see half a file
    return str(target)


def _sniff_suffix(blob: bytes) -> str:
    if blob[:4] == b"RIFF":
        return ".wav"
    if blob[:4] == b"fLaC":
        return ".flac"
    if blob[:4] == b"OggS":
        return ".ogg"
    return ".audio"


# ---------------------------------------------------------------------------------------------------------
# prompts


def doc_to_audio(doc: Mapping) -> list[str]:
    """The query audio as a list with one file path (lm-eval's multimodal convention: a list)."""
    if not doc.get("audio"):
        raise ValueError(f"Qid {doc.get('Qid')}: this item has no query audio")
    return [doc["audio"]]


def doc_to_target(doc: Mapping) -> str:
    """The reference answer (for the logs; scoring reads the doc itself)."""
    if "Answer_zh" in doc:
        return f"{doc['Answer_zh']} / {doc.get('Answer_en') or ''}".strip(" /")
    return str(doc.get("Answer") or "")


# ---------------------------------------------------------------------------------------------------------
# the filter: one batched scoring pass over all responses of a task


class ScoreResponses(Filter):
    """Decodes every response (speech protocol), scores the whole task with ``score_batch`` and returns
    each item's record as a JSON string (what ``--log_samples`` shows as the filtered response)."""

    def __init__(self, set_name: str, variant: str = "audio", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        try:
            check_set(set_name)
        except ValueError as exc:
            raise ValueError(f"ScoreResponses: {exc}") from None
        self.set_name = set_name
        self.variant = variant

    def apply(self, resps: Sequence, docs: Sequence[Mapping]) -> list[str]:

        run = scoring_settings_of(RUN.settings)
        outputs = [model_output(doc, responses) for doc, responses in zip(docs, resps)]
        records = scoring.score_batch(
            self.set_name,
            list(docs),
            outputs,
            asr=run.asr,
            judge=run.judge,
            progress=True,
            protocol=run.protocol,
            templates=run.templates,
        )
        by_qid = {r["qid"]: r for r in records}
        ordered = [by_qid[str(doc["Qid"])] for doc in docs]
        for record in ordered:
            record["variant"] = self.variant
        # under data parallelism this rank scored its share only: the cs-vs-en comparison reads every rank's
        RUN.put_records(self.variant, self.set_name, gathered_records([compact(r) for r in ordered]))
        return [json.dumps(r, ensure_ascii=False) for r in ordered]


def gathered_records(records: Sequence[Mapping]) -> list[dict]:
    """The records of every rank of a data-parallel run (this process's alone otherwise), one per Qid.

    lm-eval runs the filters on each rank's share of the docs and gathers only the per-item metric
    values to rank 0 for the aggregations; records read across tasks must be gathered here, by every
    rank (a collective), in the same task order. A launch whose ranks all saw every doc (no sharding)
    gives each Qid once all the same."""

    return list({str(r["qid"]): dict(r) for r in all_gather_list(list(records))}.values())


def model_output(doc: Mapping, responses: Any):
    """The scoring module's ModelOutput for one lm-eval response (the first of ``resps``)."""

    qid = str(doc["Qid"])
    response = responses[0] if isinstance(responses, (list, tuple)) and responses else responses
    if not isinstance(response, str):
        return ModelOutput(qid, None, None, problem=f"model returned {type(response).__name__}, not a string")
    payload = decode_payload(response)
    problem = payload.problem
    if problem and payload.text is None and payload.audio is None:
        return ModelOutput(qid, None, None, problem=problem)  # no output at all: channels "missing"
    text, repair = repair_text(payload.text) if isinstance(payload.text, str) else (payload.text, None)
    # a speech file that is not there is still the item's speech: the ASR fails it naming the file, and the
    # channel counts it as missing (`scoring.outputs`)
    return ModelOutput(qid, text, payload.audio, problem=join_problems(problem, repair))


def judge_config(settings: Mapping[str, Any]):
    """The judge of a run with these settings, or None (``"judge": "none"``)."""
    return scoring_settings_of(settings, reference_prompts=False).judge


def protocol(settings: Mapping[str, Any]) -> str:
    """The scoring protocol of a run (``protocol``, default reference)."""
    return scoring_settings_of(settings).protocol.name


def scoring_settings(settings: Mapping[str, Any], set_name: str) -> dict:
    """What ``cs3-bench score`` would record in ``<set>.settings.json`` for a run with these settings
    (protocol, ASR, judge, the authors' scripts), so that a summary says whether it is comparable to the
    paper (`summary.add_comparability`)."""
    return scoring_settings_of(settings).record_settings(set_name)


def asr_config(settings: Mapping[str, Any]):
    """The ASR of a run with these settings (``asr_backend``, ``asr_model``, ``asr_short_clips``,
    ``asr_device``); under the reference protocol with none chosen, Whisper-large-v3 through transformers
    where it can be loaded."""
    return scoring_settings_of(settings, reference_prompts=False).asr


# ---------------------------------------------------------------------------------------------------------
# per-item results and aggregations

# keys the summaries need; long texts (responses, judge explanations) stay in the filtered response only
_LONG_TEXT_KEYS = ("text", "transcript")


def compact(record: Mapping) -> dict:
    """The record without its long texts (kept as "" so that "is there a response" still reads right)."""
    out = {k: v for k, v in record.items() if not k.endswith("_raw")}
    for key in _LONG_TEXT_KEYS:
        if out.get(key) is not None:
            out[key] = ""
    return out


KNOWLEDGE_METRICS = (
    ["acc_text", "acc_speech"]
    + [f"acc_{ch}_{c.lower()}" for ch in CHANNELS for c in CATEGORIES]
    + ["psr", "english_wer", "lsa_text", "lsa_speech", "judge_errors", "asr_errors"]
)
CS_VS_EN_METRICS = ["drop_text", "drop_speech", "preserve_text", "preserve_speech"]
OPEN_ENDED_METRICS = [
    "understanding_text",
    "understanding_speech",
    "relevance_text",
    "relevance_speech",
    "semantic_text",
    "semantic_speech",
    "psr",
    "english_wer",
    "lsa_text",
    "lsa_speech",
    "judge_errors",
    "asr_errors",
]
# complete: 1 when no verdict is missing (judge failures, items without a response: see the summary's bounds);
# items_with_problems: items with a recorded input problem (broken line, missing audio, ...)
RELIABILITY_METRICS = ["complete", "items_with_problems"]
_TEXT_ONLY_EXCLUDED = ("speech", "psr", "english_wer", "asr_errors")


def metric_names(set_name: str, variant: str = "audio") -> list[str]:
    """The metrics of a task; the text-input variant has no speech-channel metrics."""
    names = list(OPEN_ENDED_METRICS if set_name == "open_ended" else KNOWLEDGE_METRICS)
    if set_name == "knowledge_en":
        names += CS_VS_EN_METRICS
    if variant == "text":
        names = [n for n in names if not any(part in n for part in _TEXT_ONLY_EXCLUDED)]
    return names + RELIABILITY_METRICS


def process_results(doc: Mapping, results: Sequence[str]) -> dict[str, dict]:
    """Every metric of the task gets the item's compact record; the aggregations do the arithmetic."""
    record = json.loads(results[0])
    item = compact(record)
    return {name: item for name in metric_names(record["set"], record.get("variant", "audio"))}


def _summary(records: Sequence[Mapping]) -> dict:

    # in Qid order: a summary must not depend on how the records were sharded and gathered
    return RUN.summary("cs3", records, lambda rs: summarize(rs[0]["set"], sorted(rs, key=_qid_order)))


def _qid_order(record: Mapping) -> str:
    return str(record.get("qid"))


def _number(value: Any) -> float:
    """lm-eval wants a float: None (not applicable / no data) becomes NaN, never 0."""
    return math.nan if value is None else float(value)


def _path(summary: Mapping | None, *keys: str) -> Any:
    node: Any = summary
    for key in keys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _marked(value: float, entry: Mapping | None, *, percent: bool = True, unit: str = "%") -> float:
    """``value``, or, when its summary entry lacks verdicts, the same number marked with its bounds as the
    summary shows them (lm-eval's table prints the mark: `harness.lm_eval_hook.MarkedValue`)."""
    if not is_incomplete(entry):
        return value
    return MarkedValue(value, incomplete_entry(entry, percent, unit))


def _summary_metric(*keys: str) -> Callable[[Sequence[Mapping]], float]:
    # means of 0-5 scores are shown with 3 decimals, rates in %
    percent = not any(key.startswith("mean_") for key in keys)

    def aggregate(records: Sequence[Mapping]) -> float:
        if not records:
            return math.nan
        summary = _summary(records)
        entry = _path(summary, *keys[:-1])
        return _marked(_number(_path(summary, *keys)), entry, percent=percent)

    aggregate.__name__ = "agg_" + "_".join(keys)
    return aggregate


def _count(*paths: tuple[str, ...]) -> Callable[[Sequence[Mapping]], float]:
    def aggregate(records: Sequence[Mapping]) -> float:
        if not records:
            return math.nan
        summary = _summary(records)
        return float(sum(_path(summary, *p) or 0 for p in paths))

    return aggregate


def _cs_vs_en(channel: str, key: str) -> Callable[[Sequence[Mapping]], float]:
    """Drop / preserve rate of the code-switched set vs this English set, when both ran in this run."""

    def aggregate(records: Sequence[Mapping]) -> float:

        if not records:
            return math.nan
        cs_records = RUN.records_of(records[0].get("variant", "audio"), "knowledge")
        if not cs_records:
            return math.nan
        comparison = compare_cs_en(_summary(cs_records), _summary(records))
        entry = gap_entry(comparison[channel], key)
        return _marked(_number(_path(comparison, channel, key)), entry, unit="" if key == "drop_abs" else "%")

    return aggregate


agg_acc_text = _summary_metric("text", "accuracy", "value")
agg_acc_speech = _summary_metric("speech", "accuracy", "value")
agg_acc_text_acoustic = _summary_metric("text", "by_category", "Acoustic", "value")
agg_acc_text_semantic = _summary_metric("text", "by_category", "Semantic", "value")
agg_acc_text_integrated = _summary_metric("text", "by_category", "Integrated", "value")
agg_acc_speech_acoustic = _summary_metric("speech", "by_category", "Acoustic", "value")
agg_acc_speech_semantic = _summary_metric("speech", "by_category", "Semantic", "value")
agg_acc_speech_integrated = _summary_metric("speech", "by_category", "Integrated", "value")
agg_psr = _summary_metric("psr", "value")
agg_english_wer = _summary_metric("english_wer", "value")
agg_lsa_text = _summary_metric("text", "lsa", "value")
agg_lsa_speech = _summary_metric("speech", "lsa", "value")
agg_understanding_text = _summary_metric("text", "understanding_rate", "value")
agg_understanding_speech = _summary_metric("speech", "understanding_rate", "value")
agg_relevance_text = _summary_metric("text", "mean_relevance", "value")
agg_relevance_speech = _summary_metric("speech", "mean_relevance", "value")
agg_semantic_text = _summary_metric("text", "mean_semantic", "value")
agg_semantic_speech = _summary_metric("speech", "mean_semantic", "value")
agg_judge_errors = _count(
    ("text", "n_judge_error"),
    ("speech", "n_judge_error"),
    ("text", "n_relevance_error"),
    ("speech", "n_relevance_error"),
    ("text", "n_semantic_error"),
    ("speech", "n_semantic_error"),
)
agg_asr_errors = _count(("n_asr_error",))
agg_items_with_problems = _count(("n_problems",))


def agg_complete(records: Sequence[Mapping]) -> float:
    """1.0 when every rate of the task has all its verdicts, 0.0 when one lacks some (its bounds are in
    the summary), NaN without records."""
    if not records:
        return math.nan
    return float(all(entry["complete"] for entry in _entries_with_completeness(_summary(records))))


def _entries_with_completeness(node: Any) -> list[Mapping]:
    if isinstance(node, Mapping):
        found = [node] if "complete" in node else []
        for value in node.values():
            found += _entries_with_completeness(value)
        return found
    if isinstance(node, list):
        return [e for value in node for e in _entries_with_completeness(value)]
    return []


agg_drop_text = _cs_vs_en("text", "drop_abs")
agg_drop_speech = _cs_vs_en("speech", "drop_abs")
agg_preserve_text = _cs_vs_en("text", "preserve")
agg_preserve_speech = _cs_vs_en("speech", "preserve")

LOWER_IS_BETTER = {"english_wer", "judge_errors", "asr_errors", "drop_text", "drop_speech"}
LOWER_IS_BETTER |= {"items_with_problems"}
