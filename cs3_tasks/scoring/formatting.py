"""Summary entries as text, the one way every table shows them (summary markdown, leaderboard, cs vs en, the
HTML report): a rate or mean with its 95% CI, or, when it lacks verdicts, its bounds marked "incomplete"."""

from __future__ import annotations

from collections.abc import Mapping


def format_entry(entry: Mapping | None, percent: bool = True) -> str:
    """``value [ci_low, ci_high]`` of a metric entry, in % or with 3 decimals; "n/a" without a value."""
    if entry and entry.get("complete") is False and entry.get("bounds"):
        return incomplete_entry(entry, percent)
    if not entry or entry.get("value") is None:
        return "n/a"
    value = entry["value"]
    ci = (entry["ci_low"], entry["ci_high"]) if entry.get("ci_low") is not None else None
    if percent:
        text = f"{100 * value:.1f}%"
        return text + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def incomplete_entry(entry: Mapping, percent: bool = True) -> str:
    """A rate that lacks verdicts, shown as its bounds (all missing wrong .. all missing right)."""
    low, high = entry["bounds"]
    if percent:
        span = f"{100 * low:.1f}-{100 * high:.1f}%"
    else:
        span = f"{low:.3f}-{high:.3f}"
    n = entry["n_missing_verdict"]
    return f"incomplete: {span} ({n} verdict{'' if n == 1 else 's'} missing)"
