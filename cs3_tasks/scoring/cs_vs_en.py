"""The code-switched vs English comparison of one system's knowledge summaries (`compare_cs_en`): accuracy
on each set, the drop and the preserve rate, per channel and per category."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cs3_tasks.core import metrics
from cs3_tasks.scoring.records import CHANNELS


def _accuracy(summary: Mapping | None, ch: str, category: str | None = None) -> float | None:
    channel = (summary or {}).get(ch)
    if not channel or "accuracy" not in channel:
        return None
    entry = channel["accuracy"] if category is None else channel["by_category"].get(category, {})
    return entry.get("value")


def _gap(acc_cs: float | None, acc_en: float | None) -> dict:
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
