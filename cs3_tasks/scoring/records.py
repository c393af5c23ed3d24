"""The per-item record schema: channels, statuses, protocols, the blank record; one home for each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from cs3_tasks.core.data import KNOWLEDGE_SETS, SETS

if TYPE_CHECKING:  # pragma: no cover
    pass


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


def check_protocol(protocol: str) -> None:
    """ValueError naming the choices when ``protocol`` is not one of PROTOCOLS."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")


# failures worth retrying on a re-run (ASR and judge errors); any other record is final
RETRYABLE_ERRORS = (
    "asr_error",
    *(f"{ch}_{kind}" for ch in CHANNELS for kind in ("judge_error", "relevance_error", "semantic_error")),
)


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
