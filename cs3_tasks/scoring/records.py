"""The per-item record schema: channels, statuses, protocols, the blank record; one home for each."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cs3_tasks.core.data import KNOWLEDGE_SETS, SETS
from cs3_tasks.core.languages import load_pair
from cs3_tasks.core.metrics import UNDERSTOOD_ABOVE

CHANNELS = ("text", "speech")


# "reference": the authors' scoring (cs3_tasks.scoring.protocols.reference: their prompts read from their
# scripts, raw keyword test, startswith / first-[0-5] parsing with 10 asks, every item in the denominator);
# "cs3": our stricter audit protocol (normalised keywords within punctuation-separated spans, strict
# parsing, judge errors excluded and counted). Both produce the record schema below; each is a
# `protocols.Protocol` object (`protocols.protocol_for`).
PROTOCOLS = ("reference", "cs3")


DEFAULT_PROTOCOL = "reference"
# what records and settings written before the protocol was recorded were scored by (ours: the only one then)
UNNAMED_PROTOCOL = "cs3"


def _zh_en_pair():
    return load_pair("zh-en")


# Both from the zh-en language pair (cs3_tasks/core/language_pairs/zh-en.yaml): the language a response is
# expected to
# be dominated by (LSA): {"knowledge": "zh", "knowledge_en": "en", "open_ended": "zh"}; and the ASR hint:
# None = Whisper auto-detection, for every set (see the module docstring for why not "zh").
EXPECTED_LANGUAGE = {name: _zh_en_pair().response_language_of(name) for name in SETS}


ASR_LANGUAGE_HINT: dict[str, str | None] = {name: _zh_en_pair().asr_language_of(name) for name in SETS}


# The two judge scores of an open-ended answer.
ASPECTS = ("relevance", "semantic")
OPEN_ENDED_ASPECTS = ASPECTS

# Open-ended: an item is "understood" when its relevance score is > UNDERSTOOD_ABOVE (defined with the
# metric, `metrics.understood`; imported here so every protocol reads the one threshold). The range of a
# relevance / semantic score: ours 1-5; the authors' pattern accepts [0] too.
UNDERSTOOD = UNDERSTOOD_ABOVE
SCORE_RANGE = {"cs3": (1, 5), "reference": (0, 5)}


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


def blank_record(set_name: str, qid: str, category: str | None, problem: str | None, protocol: str) -> dict:
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


def _verdicts(records: Iterable[Mapping], channels: Sequence[str] = CHANNELS):
    """(error, unparsed, asked) of every judge verdict slot of the records, on ``channels``."""
    for record in records:
        for ch in channels:
            for kind in ("judge", *ASPECTS):
                if f"{ch}_{kind}_error" not in record:
                    continue
                error = bool(record[f"{ch}_{kind}_error"])
                unparsed = (
                    record.get(f"{ch}_status") == "judge_unparsed"
                    if kind == "judge"
                    else bool(record.get(f"{ch}_{kind}_fallback"))
                )
                yield error, unparsed, error or unparsed or record.get(f"{ch}_{kind}") is not None


def judge_failures(records: Iterable[Mapping], channels: Sequence[str] = CHANNELS) -> tuple[int, int]:
    """(failed, asked): the judge verdicts of these records (on ``channels``) that failed, of all those the
    judge was asked."""
    counts = [(error, asked) for error, _, asked in _verdicts(records, channels)]
    return sum(error for error, _ in counts), sum(asked for _, asked in counts)


def judge_errors(record: Mapping, ch: str) -> list[str]:
    """The judge errors of one record's channel (a knowledge verdict, or an open-ended aspect's score)."""
    return [str(record[key]) for kind in ("judge", *ASPECTS) if record.get(key := f"{ch}_{kind}_error")]


def judge_unparsed(records: Iterable[Mapping], channels: Sequence[str] = CHANNELS) -> tuple[int, int]:
    """(unparsed, asked): the verdicts no reply had (reference protocol: counted wrong, as the authors' code
    does, after 10 asks), of all those the judge was asked (on ``channels``). Most of them unparsed is an
    incomplete run."""
    counts = [(unparsed, asked) for _, unparsed, asked in _verdicts(records, channels)]
    return sum(u for u, _ in counts), sum(a for _, a in counts)


def judge_answered_models(records: Iterable[Mapping]) -> dict[str, int]:
    """How many verdicts each model id the judge API answered with gave ("unknown": a reply that named none,
    or one cached before the id was kept); failed requests had no reply and are not counted. A score asked k
    times (`sample_spread`) counts each sample that has a value."""
    counts: dict[str, int] = {}
    for record in records:
        for ch in CHANNELS:
            for kind in ("judge", *ASPECTS):
                key = f"{ch}_{kind}_model"
                samples = record.get(f"{ch}_{kind}_samples")
                if isinstance(samples, Mapping):
                    answered = [m for m, v in zip(samples["models"], samples["values"]) if v is not None]
                elif key in record and not record.get(f"{ch}_{kind}_error"):  # an error had no reply
                    answered = [record[key]]
                else:
                    continue
                for model in answered:
                    counts[str(model or "unknown")] = counts.get(str(model or "unknown"), 0) + 1
    return dict(sorted(counts.items()))


def score_value(value: Any) -> int | float:
    """A judge score as records keep it: a whole number, or the x.5 median of an even number of samples."""
    number = float(value)
    return int(number) if number.is_integer() else number


def sample_spread(samples: Sequence[Any]) -> dict:
    """What a record keeps (``<ch>_<aspect>_samples``) of the k samples (`judge.Verdict`) of a score asked k
    times: each sample's value (None: it has none) and the model id it answered as, and the spread of the
    values, min and max (None when no sample has a value)."""
    values = [None if v.error or v.value is None else score_value(v.value) for v in samples]
    known = [v for v in values if v is not None]
    return {
        "values": values,
        "min": min(known) if known else None,
        "max": max(known) if known else None,
        "models": [v.model for v in samples],
    }


def sample_spreads(records: Iterable[Mapping], prefix: str) -> list[float]:
    """max - min of the samples of each record's ``<prefix>`` score asked k times (``prefix``
    "speech_relevance", ...), over the records whose every sample has a value."""
    spreads = []
    for record in records:
        kept = record.get(f"{prefix}_samples")
        if isinstance(kept, Mapping) and kept.get("values") and None not in kept["values"]:
            spreads.append(float(kept["max"] - kept["min"]))
    return spreads


def judge_ran(records: Sequence[Mapping], ch: str) -> bool:
    """Whether the open-ended judge was asked about any item of this channel (else there is no rate)."""
    return any(r[f"{ch}_relevance"] is not None or r[f"{ch}_relevance_error"] for r in records)
