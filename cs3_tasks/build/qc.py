"""QC of a build: the ASR round trip (CER of the Chinese, recall of the English words) and its report."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cs3_tasks import asr
from cs3_tasks.asr.fingerprint import model_identity
from cs3_tasks.build.config import SET_LANGUAGE, BuildConfig
from cs3_tasks.build.corrections import Correction
from cs3_tasks.core import metrics, text
from cs3_tasks.core.cache import atomic_write


@dataclass
class QcRecord:
    set_name: str
    qid: str
    text: str
    transcript: str
    cer: float | None  # over the Chinese characters; None when the text has none
    english_recall: float | None  # share of the English words heard; None when the text has none
    status: str  # "pass" | "flagged" | "accepted" | "asr_error"
    reasons: list[str] = field(default_factory=list)


def qc_scores(source_text: str, transcript: str) -> tuple[float | None, float | None]:
    """(CER over the Chinese characters, recall of the English words) of a transcript against its source.

    Both after normalisation (simplified script, case, punctuation); None when the source has no such content.
    """

    ref_zh = "".join(text.cjk_chars(source_text))
    cer = metrics.character_error_rate(ref_zh, "".join(text.cjk_chars(transcript))) if ref_zh else None
    heard, words = english_words_heard(source_text, transcript)
    return cer, (heard / words if words else None)


def english_words_heard(source_text: str, transcript: str) -> tuple[int, int]:
    """(English words of the source found in the transcript, counted with multiplicity; English words of the
    source), after normalisation."""

    expected, got = Counter(text.english_words(source_text)), Counter(text.english_words(transcript))
    return sum((expected & got).values()), sum(expected.values())


def qc_totals(records: Sequence[QcRecord], max_cer: float, min_english_recall: float) -> dict[str, dict]:
    """Per set: clips checked, over threshold, corpus CER over the Chinese characters, English words heard.

    A clip whose ASR failed has no transcript to score: it is counted (``asr_errors``), not scored as silence.
    """

    totals: dict[str, dict] = {}
    for set_name in dict.fromkeys(r.set_name for r in records):
        checked = [r for r in records if r.set_name == set_name]
        rows = [r for r in checked if r.status != "asr_error"]
        zh = [("".join(text.cjk_chars(r.text)), "".join(text.cjk_chars(r.transcript))) for r in rows]
        zh = [(ref, hyp) for ref, hyp in zh if ref]
        heard_and_words = [english_words_heard(r.text, r.transcript) for r in rows]
        totals[set_name] = {
            "checked": len(checked),
            "over_threshold": sum(bool(r.reasons) for r in rows),
            "cer_over_threshold": sum(r.cer is not None and r.cer > max_cer for r in rows),
            "recall_under_threshold": sum(
                r.english_recall is not None and r.english_recall < min_english_recall for r in rows
            ),
            "asr_errors": len(checked) - len(rows),
            "chinese_cer": metrics.corpus_character_error_rate(*zip(*zh)) if zh else None,
            "english_words": sum(words for _, words in heard_and_words),
            "english_words_heard": sum(heard for heard, _ in heard_and_words),
        }
    return totals


def qc_totals_line(totals: dict[str, dict]) -> str:
    """One sentence per set of ``qc_totals`` for the card and the report."""
    parts = []
    for set_name, t in totals.items():
        cer = "" if t["chinese_cer"] is None else f"Chinese CER {t['chinese_cer']:.3f}, "
        heard = (
            f"English words heard {t['english_words_heard']}/{t['english_words']}, "
            if t["english_words"]
            else ""
        )
        errors = f", {t['asr_errors']} ASR errors" if t["asr_errors"] else ""
        parts.append(f"{set_name}: {cer}{heard}{t['over_threshold']}/{t['checked']} over threshold{errors}")
    return "; ".join(parts)


def qc_selection(records: list[dict], mode: str, sample: int) -> list[dict]:
    """The items to check: all, none, or a deterministic sample (smallest sha256 of the Qid) of ``sample``."""
    if mode == "none":
        return []
    if mode == "all":
        return list(records)
    chosen = sorted(records, key=lambda r: hashlib.sha256(r["Qid"].encode("utf-8")).hexdigest())[:sample]
    ids = {r["Qid"] for r in chosen}
    return [r for r in records if r["Qid"] in ids]


def run_qc(
    config: BuildConfig,
    source: dict[str, list[dict]],
    audio_by_item: dict[tuple[str, str], bytes],
    corrections: dict[tuple[str, str], Correction],
) -> list[QcRecord]:
    results: list[QcRecord] = []
    for set_name, records in source.items():
        selected = [
            r
            for r in qc_selection(records, config.qc, config.qc_sample)
            if (set_name, r["Qid"]) in audio_by_item
        ]
        if not selected:
            continue
        transcripts = asr.transcribe_batch(
            [audio_by_item[(set_name, r["Qid"])] for r in selected],
            language=SET_LANGUAGE[set_name],
            asr=config.asr,
            progress=config.progress,
        )
        for record, heard in zip(selected, transcripts):
            results.append(
                _qc_record(config, set_name, record, heard, corrections.get((set_name, record["Qid"])))
            )
    return results


def _qc_record(
    config: BuildConfig, set_name: str, record: dict, heard, correction: Correction | None
) -> QcRecord:
    qid, source_text = record["Qid"], record["Question"]
    if heard.error is not None:
        return QcRecord(set_name, qid, source_text, "", None, None, "asr_error", [heard.error])
    cer, recall = qc_scores(source_text, heard.text)
    reasons = []
    if cer is not None and cer > config.max_cer:
        reasons.append(f"CER {cer:.2f} > {config.max_cer}")
    if recall is not None and recall < config.min_english_recall:
        reasons.append(f"English recall {recall:.2f} < {config.min_english_recall}")
    status = "pass"
    if reasons:
        status = "accepted" if correction is not None and correction.action == "accept" else "flagged"
    return QcRecord(set_name, qid, source_text, heard.text, cer, recall, status, reasons)


def write_qc_report(config: BuildConfig, records: list[QcRecord]) -> dict:
    """Write qc_report.json and qc_report.md; returns the report's summary."""
    out = Path(config.out)
    used = config.asr.resolved()
    summary = {
        "mode": config.qc,
        "sample_per_set": config.qc_sample if config.qc == "sample" else None,
        "asr_backend": used.backend,
        "asr_model": model_identity(used.model)["name"],  # by name, never a folder of this machine
        "thresholds": {"max_cer": config.max_cer, "min_english_recall": config.min_english_recall},
        "checked": len(records),
        "by_status": dict(sorted(Counter(r.status for r in records).items())),
        "by_set": qc_totals(records, config.max_cer, config.min_english_recall),
    }
    report = {"summary": summary, "items": [asdict(r) for r in records]}
    atomic_write(out / "qc_report.json", json.dumps(report, ensure_ascii=False, indent=2))
    atomic_write(out / "qc_report.md", _qc_markdown(summary, records))
    return summary


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def _qc_markdown(summary: dict, records: list[QcRecord]) -> str:
    lines = [
        "# ASR round-trip QC",
        "",
        f"Mode: {summary['mode']}"
        + (f" ({summary['sample_per_set']} per set)" if summary["sample_per_set"] else "")
        + f"; ASR: {summary['asr_backend']} `{summary['asr_model']}`; thresholds: "
        f"CER over Chinese characters <= {summary['thresholds']['max_cer']}, recall of English words >= "
        f"{summary['thresholds']['min_english_recall']}.",
        "",
        f"Checked {summary['checked']} item(s): "
        + (", ".join(f"{k} {v}" for k, v in summary["by_status"].items()) or "none"),
        "",
        f"Per set (corpus CER over the Chinese characters): {qc_totals_line(summary['by_set']) or 'none'}.",
        "",
    ]
    attention = [r for r in records if r.status in ("flagged", "asr_error", "accepted")]
    if attention:
        lines += [
            "## Items over threshold",
            "",
            (
                "Listen to each, then add it to a corrections file (`--corrections FILE`): "
                "`<Qid>: {action: resynthesize, seed: 1}` (or `speaker: NAME`), "
                "or `<Qid>: {action: accept}`. Use `<set>/<Qid>` to target one set only."
            ),
            "",
            "| set | Qid | status | CER | EN recall | reasons | source text | transcript |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in attention:
            lines.append(
                f"| {r.set_name} | {r.qid} | {r.status} | {_fmt(r.cer)} | {_fmt(r.english_recall)} | "
                f"{_cell('; '.join(r.reasons))} | {_cell(r.text)} | {_cell(r.transcript)} |"
            )
    else:
        lines.append("No item over threshold.")
    return "\n".join(lines) + "\n"
