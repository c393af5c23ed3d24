"""Summary entries as text, the one way every table shows them (summary markdown, leaderboard, cs vs en, the
HTML report): a rate or mean with its 95% CI, or, when it lacks verdicts, its bounds marked "incomplete"."""

from __future__ import annotations

from collections.abc import Mapping


def is_incomplete(entry: Mapping | None) -> bool:
    """True for an entry that lacks verdicts (``complete`` False): its value alone would hide that."""
    return bool(entry) and entry.get("complete") is False


def format_entry(entry: Mapping | None, percent: bool = True) -> str:
    """``value [ci_low, ci_high]`` of a metric entry, in % or with 3 decimals; "n/a" without a value; an
    incomplete entry as `incomplete_entry`."""
    if is_incomplete(entry):
        return incomplete_entry(entry, percent)
    if not entry or entry.get("value") is None:
        return "n/a"
    value = entry["value"]
    ci = (entry["ci_low"], entry["ci_high"]) if entry.get("ci_low") is not None else None
    if percent:
        text = f"{100 * value:.1f}%"
        return text + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def format_points(entry: Mapping | None) -> str:
    """A difference of two rates in percentage points (``12.5 points``), or its bounds when incomplete."""
    if is_incomplete(entry):
        return incomplete_entry(entry, percent=True, unit=" points")
    if not entry or entry.get("value") is None:
        return "n/a"
    return f"{100 * entry['value']:.1f} points"


def incomplete_entry(entry: Mapping, percent: bool = True, unit: str = "%") -> str:
    """A value that lacks verdicts, shown as its bounds (all missing wrong .. all missing right):
    ``incomplete: 66.7-100.0% (2 verdicts missing)``; ``-5.0 to 20.0`` when the low bound is negative;
    without bounds (a ratio whose denominator may be 0), the count alone. Bounds past 100% (a ratio's) carry
    the entry's ``bounds_note``, which says why, so that they do not read as a bug."""
    n = entry.get("n_missing_verdict") or 0
    missing = f"({n} verdict{'' if n == 1 else 's'} missing)"
    if not entry.get("bounds"):
        return f"incomplete {missing}"
    low, high = entry["bounds"]
    if entry.get("bounds_note") and percent and max(abs(low), abs(high)) > 1:
        missing = f"{missing[:-1]}; {entry['bounds_note']})"
    if percent:
        low, high = 100 * low, 100 * high
        digits = 1
    else:
        digits, unit = 3, ""
    separator = " to " if low < 0 else "-"
    return f"incomplete: {low:.{digits}f}{separator}{high:.{digits}f}{unit} {missing}"
