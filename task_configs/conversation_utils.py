"""``!function`` targets of the spoken-conversation tasks (``belle_s2s_zh2en`` and any new language pair).

A conversation task YAML names its dataset config and language pair in ``dataset_kwargs``::

    custom_dataset: !function conversation_utils.load_conversation
    dataset_kwargs: {config: belle_eval_s2s, pair: zh2en}

A YAML outside this folder (a new pair) refers to the same functions by module path:
``!function cs3_tasks.task_configs.conversation_utils.load_conversation`` (lm-eval 0.4.13 imports a
``!function`` module that is not next to the YAML). ``pair`` is a pair name
(``cs3_tasks/core/language_pairs`` or
``$CS3_LANGUAGE_PAIRS``) or a YAML path.

Flow: the loader tags each doc with its set and pair (``cs3_set``, ``cs3_pair``; ``Qid`` = ``id`` for the cs3
model wrappers) and turns the query audio into a file path; the ``ScoreConversation`` filter scores all
responses at once with ``cs3_tasks.scoring.conversation.score_conversation`` (one batched ASR call, the judge
when
configured); the ``agg_*`` aggregations read ``cs3_tasks.scoring.conversation.summarize_conversation``.
Run settings (``--metadata``): ``dataset``, ``asr_model``, ``asr_backend``, ``asr_short_clips``, ``judge``,
``judge_model``, ``judge_base_url``, as for the cs3 tasks (``utils.py``), held by the same run (``run.RUN``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cs3_tasks.task_configs import utils as cs3_utils
from cs3_tasks.task_configs.run import RUN
from lm_eval.api.filter import Filter

from cs3_tasks.build.conversation_data import load_conversation_set
from cs3_tasks.core.languages import load_pair
from cs3_tasks.scoring.conversation import doc_id, score_conversation, summarize_conversation
from cs3_tasks.scoring.records import CHANNELS

DOC_SET, DOC_PAIR = "cs3_set", "cs3_pair"

METRICS = (
    "gpt_score_text",
    "gpt_score_speech",
    "asr_error_rate",
    "off_target_text",
    "off_target_speech",
    "judge_errors",
    "asr_errors",
)
_TEXT_ONLY_EXCLUDED = ("speech", "asr_")


# ---------------------------------------------------------------------------------------------------------
# dataset and prompts


def load_conversation(
    config: str | None = None, pair: str | None = None, dataset: str | None = None, **metadata: Any
):
    """A DatasetDict {"test": ...} of one conversation config; docs carry ``cs3_set``/``cs3_pair``/``Qid``."""
    import datasets

    if not config:
        raise ValueError(
            "conversation task: dataset_kwargs must name the dataset `config` (e.g. belle_eval_s2s)"
        )
    resolved = load_pair(pair)  # fail now, naming the pair, rather than at scoring time
    cs3_utils.check_run_settings(RUN.load_task(metadata))
    ds = load_conversation_set(
        config, dataset
    )  # None: $CS3_BENCH_DATASET, else the Hub (cs3_tasks.core.data)
    rows = []
    for row in ds:
        row = dict(row)
        row["audio"] = cs3_utils.query_audio_path(row.get("audio"), row.get("id"))
        row["Qid"] = str(row["id"])
        row[DOC_SET] = config
        row[DOC_PAIR] = str(resolved.source) if resolved.source else resolved.name
        rows.append(row)
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def doc_to_audio(doc: Mapping) -> list[str]:
    return cs3_utils.doc_to_audio(doc)


def doc_to_target(doc: Mapping) -> str:
    """The reference answer when the set has one (for the logs; the judge reads the doc itself)."""
    return str(doc.get("reference") or "")


# ---------------------------------------------------------------------------------------------------------
# the filter


class ScoreConversation(Filter):
    """Scores every response of the task at once; each filtered response is the item's record as JSON."""

    def __init__(self, variant: str = "audio", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variant = variant

    def apply(self, resps: Sequence, docs: Sequence[Mapping]) -> list[str]:

        if not docs:
            return []
        settings = RUN.settings
        outputs = [cs3_utils.model_output(doc, responses) for doc, responses in zip(docs, resps)]
        records = score_conversation(
            docs[0][DOC_SET],
            list(docs),
            outputs,
            docs[0][DOC_PAIR],
            asr=cs3_utils.asr_config(settings),
            judge=cs3_utils.judge_config(settings),
            progress=True,
        )
        by_id = {r["qid"]: r for r in records}
        ordered = [by_id[doc_id(doc)] for doc in docs]
        for record in ordered:
            record["variant"] = self.variant
        return [json.dumps(r, ensure_ascii=False) for r in ordered]


# ---------------------------------------------------------------------------------------------------------
# per-item results and aggregations


def metric_names(variant: str = "audio") -> list[str]:
    if variant == "text":
        return [m for m in METRICS if not any(part in m for part in _TEXT_ONLY_EXCLUDED)]
    return list(METRICS)


def process_results(doc: Mapping, results: Sequence[str]) -> dict[str, dict]:
    """Every metric gets the item's record without judge explanations (the texts stay: the corpus ASR
    error rate needs them); the aggregations do the arithmetic."""
    record = json.loads(results[0])
    item = {k: v for k, v in record.items() if not k.endswith("_raw")}
    return {name: item for name in metric_names(record.get("variant", "audio"))}


def _summary(records: Sequence[Mapping]) -> dict:

    return RUN.summary("conversation", records, summarize_conversation)


def _metric(*keys: str) -> Callable[[Sequence[Mapping]], float]:
    def aggregate(records: Sequence[Mapping]) -> float:
        if not records:
            return math.nan
        node: Any = _summary(records)
        for key in keys:
            node = node.get(key) if isinstance(node, Mapping) else None
        return math.nan if node is None else float(node)  # not applicable / no data: NaN, never 0

    aggregate.__name__ = "agg_" + "_".join(keys)
    return aggregate


agg_gpt_score_text = _metric("text", "gpt_score", "value")
agg_gpt_score_speech = _metric("speech", "gpt_score", "value")
agg_off_target_text = _metric("text", "off_target", "value")
agg_off_target_speech = _metric("speech", "off_target", "value")
agg_asr_error_rate = _metric("asr_error_rate", "value")


def agg_judge_errors(records: Sequence[Mapping]) -> float:
    if not records:
        return math.nan
    summary = _summary(records)
    return float(sum((summary.get(ch) or {}).get("n_judge_error", 0) for ch in CHANNELS))


def agg_asr_errors(records: Sequence[Mapping]) -> float:
    return float(_summary(records)["n_asr_error"]) if records else math.nan
