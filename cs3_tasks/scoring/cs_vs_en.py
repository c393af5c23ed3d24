"""The code-switched vs English comparison of one system's knowledge summaries (`compare_cs_en`): accuracy
on each set, the drop and the preserve rate, per channel and per category."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cs3_tasks.core import metrics
from cs3_tasks.scoring.formatting import format_entry, format_points
from cs3_tasks.scoring.records import CHANNELS

# the values of a comparison, each shown with its bounds when an accuracy it is made of lacks verdicts
GAP_KEYS = ("acc_cs", "acc_en", "drop_abs", "drop_rel", "preserve")
# comparison key -> `metrics.accuracy_drop` key
DROP_KEYS = {"drop_abs": "absolute", "drop_rel": "relative", "preserve": "preserve_rate"}
# drop (rel) and preserve divide by acc en: where acc cs may exceed it, their bounds pass 100%; said there
RATIO_KEYS = ("drop_rel", "preserve")
RATIO_BOUNDS_NOTE = "a ratio: past 100% where acc cs may exceed acc en"


def _accuracy(summary: Mapping | None, ch: str, category: str | None = None) -> Mapping | None:
    channel = (summary or {}).get(ch)
    if not channel or "accuracy" not in channel:
        return None
    return channel["accuracy"] if category is None else channel["by_category"].get(category, {})


def _span(values: list[float | None]) -> list[float] | None:
    return None if any(v is None for v in values) else [min(values), max(values)]


def _gap(cs: Mapping | None, en: Mapping | None) -> dict:
    """acc_cs, acc_en, drop_abs, drop_rel, preserve; and, when an accuracy lacks verdicts, ``incomplete``:
    key -> {bounds, n_missing_verdict} (each value over the box of the two accuracies' bounds)."""
    acc_cs, acc_en = (entry.get("value") if entry else None for entry in (cs, en))
    drop = metrics.accuracy_drop(acc_cs, acc_en)
    gap: dict[str, Any] = {"acc_cs": acc_cs, "acc_en": acc_en, **{k: drop[n] for k, n in DROP_KEYS.items()}}
    missing = [(entry or {}).get("n_missing_verdict") or 0 for entry in (cs, en)]
    if not any(missing) or acc_cs is None or acc_en is None:
        return gap
    box = [(entry.get("bounds") or [entry["value"]] * 2) for entry in (cs, en)]
    corners = [metrics.accuracy_drop(c, e) for c in box[0] for e in box[1]]
    gap["incomplete"] = {
        "acc_cs": {"bounds": box[0], "n_missing_verdict": missing[0]},
        "acc_en": {"bounds": box[1], "n_missing_verdict": missing[1]},
        **{
            key: {"bounds": _span([c[name] for c in corners]), "n_missing_verdict": sum(missing)}
            for key, name in DROP_KEYS.items()
        },
    }
    return gap


def gap_entry(gap: Mapping, key: str) -> dict:
    """One value of a comparison as a summary entry (`formatting.format_entry`): its value and, when
    incomplete, ``complete`` False with its bounds."""
    entry = {"value": gap.get(key)}
    incomplete = (gap.get("incomplete") or {}).get(key)
    if incomplete and incomplete["n_missing_verdict"]:
        entry.update(complete=False, **incomplete)
        if key in RATIO_KEYS:
            entry["bounds_note"] = RATIO_BOUNDS_NOTE
    return entry


def compare_cs_en(cs_summary: Mapping, en_summary: Mapping) -> dict:
    """Code-switched vs English knowledge accuracy, per channel and per category.

    drop_abs = acc_en - acc_cs; drop_rel = drop_abs / acc_en; preserve = acc_cs / acc_en (None when
    acc_en is 0 or a channel is not applicable). When an accuracy lacks verdicts, ``incomplete`` holds the
    bounds of each value (`gap_entry` gives it as an entry to show).
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


def cs_vs_en_markdown(per_model: Mapping[str, Mapping[str, dict]]) -> str:
    """One row per model and channel: accuracy on the code-switched vs the English questions, drop (points),
    drop (rel) and preserve rate; a value that lacks verdicts shows its bounds, marked "incomplete"."""
    lines = [
        # drop (abs) = acc en - acc cs is a difference of two percentages: points, not a percentage
        "| model | channel | acc cs | acc en | drop (points) | drop (rel) | preserve |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for model, summaries in per_model.items():
        comparison = (summaries.get("knowledge") or {}).get("cs_vs_en")
        if not comparison:
            continue
        for channel in CHANNELS:
            gap = comparison.get(channel) or {}
            cells = [format_entry(gap_entry(gap, k)) for k in ("acc_cs", "acc_en")]
            cells.append(format_points(gap_entry(gap, "drop_abs")))
            cells += [format_entry(gap_entry(gap, k)) for k in ("drop_rel", "preserve")]
            lines.append(f"| {model} | {channel} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
