"""The reference protocol: CS3-Bench scored exactly as the authors' own scripts score it.

What it does, as their code does it (their prompts are read from their scripts at run time:
`reference_scripts`):

* keyword stage, raw substring tests: ``Answer_zh in response``, ``Answer_en.lower() in response.lower()``,
  or any ``·`` part of Answer_zh after ``.strip()`` (one character included); knowledge_en: only the
  case-folded Answer; an empty response is tested like any other;
* judge: one user message (no system message) to qwen-max-2025-01-25 at temperature 0, through the one judge
  engine with `reference_policy`: a knowledge reply counts when it *starts with* 正确/错误 (knowledge_en:
  True/False), an open-ended reply by its first ``[0-5]`` in brackets anywhere (0 allowed); otherwise it is
  asked again, 10 asks in all, then the item counts wrong (score 1 for open-ended): "judge_unparsed",
  counted wrong and counted in the summary;
* every item with a response stays in the denominator; Relevance Rate = share of relevance > 3.

One departure, where their code has no answer: when the judge cannot be reached after the client's retries
(their client returns None and their script crashes), the item gets a judge error and the headline is
marked incomplete with bounds; transport failures are missing verdicts, not wrong ones. The engine's bounds
hold here too: the key is redacted from replies, a reply is cut at MAX_REPLY_CHARS, a prompt over
MAX_MESSAGE_CHARS is cut (each cut said in the record's note).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs3_tasks.asr.config import hub_model_cached
from cs3_tasks.core.data import KNOWLEDGE_SETS
from cs3_tasks.judge.engine import AskPolicy, Verdict, ask_batch
from cs3_tasks.judge.parsing import UnparseableReply
from cs3_tasks.scoring.protocols.base import Protocol
from cs3_tasks.scoring.protocols.reference_scripts import (
    SCRIPTS_ENV,
    ReferenceScripts,
    ReferenceScriptsError,
    ReferenceTemplates,
    build_prompt,
    find_reference_scripts,
    load_templates,
)
from cs3_tasks.scoring.records import judge_ran

if TYPE_CHECKING:  # pragma: no cover
    from cs3_tasks.judge import JudgeConfig

REFERENCE_JUDGE_MODEL = "qwen-max-2025-01-25"
REFERENCE_TEMPERATURE = 0
REFERENCE_ASR_BACKEND = "transformers"
REFERENCE_ASR_MODEL = "openai/whisper-large-v3"
MAX_ASKS = 10  # asks per item before their fallback applies
OPEN_ENDED_FALLBACK = 1  # their score when no [0-5] was found in 10 replies
KNOWLEDGE_FALLBACK = False  # their verdict when no reply started with one in 10 replies
VERDICT_PREFIXES = {"zh": ("正确", "错误"), "en": ("True", "False")}
_SCORE_PATTERN = re.compile(r"\[([0-5])\]")
# The protocol's public names, with those of the scripts it reads (`reference_scripts`).
__all__ = [
    "CACHE_SCHEMA",
    "MAX_ASKS",
    "REFERENCE_ASR_BACKEND",
    "REFERENCE_ASR_MODEL",
    "REFERENCE_JUDGE_MODEL",
    "SCRIPTS_ENV",
    "ReferenceProtocol",
    "ReferenceScriptsError",
    "bounded_mean",
    "build_prompt",
    "find_reference_scripts",
    "is_reference_asr",
    "is_reference_judge",
    "keyword_hit",
    "load_templates",
    "parse_knowledge_reply",
    "parse_open_ended_reply",
    "protocol_settings",
    "reference_asr_available",
    "reference_judge_config",
    "reference_policy",
]
# v2: replies are redacted and bounded by the one engine (v1 entries of the former second engine were not)
CACHE_SCHEMA = "cs3-reference-judge/v2"


def reference_judge_config(config: JudgeConfig) -> JudgeConfig:
    """``config`` with their sampling: temperature 0 and no max_tokens (their request has neither more)."""
    return replace(config, temperature=REFERENCE_TEMPERATURE, max_tokens=None)


def is_reference_judge(config: JudgeConfig | None) -> bool:
    """True when the judge is theirs (qwen-max-2025-01-25), i.e. the numbers are comparable to the paper's."""
    return config is not None and config.model == REFERENCE_JUDGE_MODEL


def is_reference_asr(backend: str | None, model: str | None) -> bool:
    """True when the speech channel's ASR is theirs: Whisper-large-v3 through transformers."""
    if backend != REFERENCE_ASR_BACKEND or not model:
        return False
    return model == REFERENCE_ASR_MODEL or Path(model).name == REFERENCE_ASR_MODEL.split("/")[1]


def reference_asr_available() -> bool:
    """True when openai/whisper-large-v3 is in the local Hugging Face cache (loadable without a download), so
    the reference protocol can default to it; otherwise the configured ASR is used and the summary says so."""
    return hub_model_cached(REFERENCE_ASR_MODEL)


def protocol_settings(
    scripts: ReferenceScripts | None,
    judge: JudgeConfig | None,
    asr_backend: str | None,
    asr_model: str | None,
) -> dict:
    """What settings.json / summary.json record about a reference-protocol run, with the comparability flags
    (judge qwen-max-2025-01-25, ASR Whisper-large-v3 through transformers, pinned scripts)."""
    judge_ok = is_reference_judge(judge)
    asr_ok = is_reference_asr(asr_backend, asr_model)
    # without a judge every keyword miss counts as wrong: a lower bound of the authors' judged number, not it
    judged_as_authors = judge_ok and (scripts is None or scripts.pinned)
    return {
        "protocol": "reference",
        "reference_scripts": scripts.settings() if scripts is not None else None,
        "judge_is_reference": judge_ok,
        "asr_is_reference": asr_ok,
        "comparable_to_paper": {"text": judged_as_authors, "speech": asr_ok and judged_as_authors},
    }


def part_hit(answer_zh: str, response: str) -> bool:
    """Any ``·`` part of Answer_zh, stripped, occurs in the response (an empty part always does)."""
    return any(part.strip() in response for part in answer_zh.split("·"))


def knowledge_keyword_hit(response: str, answer_zh: str, answer_en: str) -> bool:
    """The knowledge keyword rule, verbatim: raw substring tests, no normalisation."""
    return (
        answer_zh in response
        or answer_en.lower() in response.lower()
        or ("·" in answer_zh and part_hit(answer_zh, response))
    )


def knowledge_en_keyword_hit(response: str, answer: str) -> bool:
    """The knowledge_en keyword rule, verbatim: the lower-cased Answer in the lower-cased response."""
    return answer.lower() in response.lower()


def keyword_hit(set_name: str, doc: Mapping, response: str) -> bool:
    """The keyword rule of a knowledge set for one item."""
    if set_name == "knowledge":
        return knowledge_keyword_hit(response, doc["Answer_zh"], doc["Answer_en"])
    if set_name == "knowledge_en":
        return knowledge_en_keyword_hit(response, doc["Answer"])
    raise ValueError(f"no keyword stage for set {set_name!r}")


def parse_knowledge_reply(reply: str, language: str = "zh") -> bool | None:
    """True/False when the reply starts with the verdict (正确/错误, or True/False for "en");
    None = ask again."""
    yes, no = VERDICT_PREFIXES[language]
    if reply.startswith(yes):
        return True
    if reply.startswith(no):
        return False
    return None


def parse_open_ended_reply(reply: str) -> int | None:
    """The first ``[0-5]`` anywhere in the reply; None = ask again."""
    found = _SCORE_PATTERN.findall(reply)
    return int(found[0]) if found else None


def _read_with(parse) -> Any:
    def read(reply: str):
        value = parse(reply)
        if value is None:
            raise UnparseableReply("no verdict where their code looks for one: asked again")
        return value

    return read


def reference_policy(set_name: str, aspect: str | None = None) -> AskPolicy:
    """Their re-ask rule for one set (and aspect) as a policy of the one judge engine."""
    if aspect is None:
        language = "en" if set_name == "knowledge_en" else "zh"
        parse = _read_with(lambda reply: parse_knowledge_reply(reply, language))
        fallback: Any = KNOWLEDGE_FALLBACK
    else:
        parse, fallback = _read_with(parse_open_ended_reply), OPEN_ENDED_FALLBACK
    return AskPolicy(
        parse=parse, max_asks=MAX_ASKS, fallback=fallback, unparsed_is_error=False, cache_schema=CACHE_SCHEMA
    )


def bounded_mean(values: Sequence[float | None], low: float, high: float) -> dict:
    """Mean over the known values; with missing ones, the bounds (all missing at ``low`` / at ``high``)."""
    known = [float(v) for v in values if v is not None]
    missing = len(values) - len(known)
    n = len(values)
    if n == 0:
        return {"value": None, "n": 0, "judge_errors": 0, "complete": True, "low": None, "high": None}
    total = sum(known)
    return {
        "value": total / len(known) if known else None,
        "n": n,
        "judge_errors": missing,
        "complete": missing == 0,
        "low": (total + missing * low) / n,
        "high": (total + missing * high) / n,
    }


class ReferenceProtocol(Protocol):
    name = "reference"
    empty_response_is_wrong = False  # their code tests an empty response like any other

    def keyword_hit(self, set_name: str, doc: Mapping, response: str) -> bool:
        fields = ("Answer_zh", "Answer_en") if set_name == "knowledge" else ("Answer",)
        return keyword_hit(set_name, {f: doc.get(f) or "" for f in fields}, response)

    def preferred_asr(self) -> tuple[str, str] | None:
        """Whisper-large-v3 through transformers, their ASR, when it is in the local Hugging Face cache."""
        return (REFERENCE_ASR_BACKEND, REFERENCE_ASR_MODEL) if reference_asr_available() else None

    def protocol_settings(
        self, scripts: Any, judge: JudgeConfig | None, asr_backend: str | None, asr_model: str | None
    ) -> dict:
        return protocol_settings(scripts, judge, asr_backend, asr_model)

    def judge_context(self, judge: JudgeConfig | None, reference_scripts: Any = None, templates: Any = None):
        if judge is not None and templates is None:
            templates = load_templates(reference_scripts)  # fail fast, before ASR and judge work
        return templates

    def judge(
        self,
        set_name: str,
        aspect: str | None,
        pairs: Sequence[tuple[Mapping, str]],
        config: JudgeConfig,
        context: ReferenceTemplates,
        progress: bool = False,
    ) -> list[Verdict]:
        prompts = [build_prompt(context, set_name, doc, response, aspect) for doc, response in pairs]
        return ask_batch(
            prompts,
            reference_policy(set_name, aspect),
            reference_judge_config(config),
            progress=progress,
            desc=f"reference judge {aspect or set_name}",
            samples=1 if aspect is None else config.samples,  # open-ended scores: the median of k
        )

    def record_asks(self, record: dict, prefix: str, verdict: Verdict, *, with_fallback: bool) -> None:
        record[f"{prefix}_asks"] = verdict.asks
        if with_fallback:
            record[f"{prefix}_fallback"] = bool(verdict.fallback and not verdict.error)

    def fill_correctness(self, record: dict, ch: str, verdict: Verdict) -> None:
        if not verdict.error and verdict.fallback:
            # no verdict in 10 replies: their code counts the item wrong
            record[f"{ch}_status"], record[f"{ch}_correct"] = "judge_unparsed", False
            return
        super().fill_correctness(record, ch, verdict)

    def finish_channel(self, set_name: str, records: Sequence[dict], ch: str, channel: dict | None) -> None:
        """The authors' aggregation on top of a channel summary: ``value`` is over the items with a verdict
        (unparsed verdicts count wrong, as in their code). A judge transport failure and an item without a
        response on the channel are missing verdicts: ``low`` / ``high`` bound the number over every item,
        ``complete`` says whether there is any. Keys added to the headline entries: low, high, complete,
        n_all (every item); to the channel: complete, n_judge_unparsed, n_judge_verdicts."""
        if channel is None:
            return
        low, high = self.score_range
        if set_name in KNOWLEDGE_SETS:
            # an item without a response has no verdict (correct None): unknown, as a transport failure
            heads = {"accuracy": bounded_mean([r[f"{ch}_correct"] for r in records], 0, 1)}
            for category, entry in channel.get("by_category", {}).items():
                bounds = bounded_mean(
                    [r[f"{ch}_correct"] for r in records if r["category"] == category], 0, 1
                )
                entry.update(low=bounds["low"], high=bounds["high"], complete=bounds["complete"])
            statuses = [r[f"{ch}_status"] for r in records]
            unparsed = statuses.count("judge_unparsed")
            verdicts = sum(s.startswith("judge_") for s in statuses)
        else:
            judged = list(records) if judge_ran(records, ch) else []
            relevance = [r[f"{ch}_relevance"] for r in judged]
            heads = {
                "mean_relevance": bounded_mean(relevance, low, high),
                "understanding_rate": bounded_mean(
                    [None if v is None else float(self.understood(v)) for v in relevance], 0, 1
                ),
                "mean_semantic": bounded_mean([r[f"{ch}_semantic"] for r in judged], low, high),
            }
            slots = [(r, a) for r in records for a in ("relevance", "semantic")]
            unparsed = sum(bool(r.get(f"{ch}_{a}_fallback")) for r, a in slots)
            verdicts = sum(r[f"{ch}_{a}"] is not None or bool(r[f"{ch}_{a}_error"]) for r, a in slots)
        complete = True
        for key, bounds in heads.items():
            entry = channel[key]
            entry.update(
                low=bounds["low"], high=bounds["high"], complete=bounds["complete"], n_all=bounds["n"]
            )
            complete = complete and bounds["complete"]
        channel["complete"] = complete
        channel["n_judge_unparsed"], channel["n_judge_verdicts"] = unparsed, verdicts

    def summary_fields(self, channels: Mapping[str, dict | None]) -> dict:
        present = [c for c in channels.values() if c is not None]
        return {
            "complete": all(c["complete"] for c in present),
            # verdicts no reply held in 10 asks: counted wrong (their rule), but said, never hidden
            "n_judge_unparsed": sum(c["n_judge_unparsed"] for c in present),
            "n_judge_verdicts": sum(c["n_judge_verdicts"] for c in present),
        }

    def add_comparability(self, summary: dict, settings: Mapping) -> dict:
        summary["comparable_to_paper"] = dict(settings.get("comparable_to_paper") or {})
        notes = []
        if not settings.get("asr_is_reference"):
            asr = settings.get("asr") or {}
            used = asr.get("source") or f"{asr.get('backend')} {(asr.get('model') or {}).get('name')}"
            notes.append(
                f"speech channel ASR is {used}, not Whisper-large-v3 through transformers: its numbers are "
                "not comparable to the paper"
            )
        if settings.get("judge") is None:
            notes.append(
                "no judge ran: a keyword miss counts as wrong, so every accuracy is a lower bound of the "
                "authors' judged number, and open-ended has none: not comparable to the paper"
            )
        elif not settings.get("judge_is_reference"):
            notes.append(
                f"judge is {settings['judge'].get('model')}, not qwen-max-2025-01-25: not comparable to the "
                "paper"
            )
        scripts = settings.get("reference_scripts")
        if scripts and not scripts.get("pinned"):
            notes.append("the authors' scripts are not those of the pinned commit")
        summary["notes"] = notes
        return summary
