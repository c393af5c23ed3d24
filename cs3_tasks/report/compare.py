"""``cs3-bench compare A B``: is system A's accuracy different from B's beyond noise?

Per knowledge set and channel: acc(A) - acc(B) over the Qids decided for both, its paired bootstrap 95% CI,
the exact McNemar p-value and the number of discordant items (`core.paired`). The same comparisons mark the
differences to a chosen baseline in the leaderboard (`baseline_notes`) and the HTML report.
"""

from __future__ import annotations

from collections.abc import Mapping

from cs3_tasks.core.data import KNOWLEDGE_SETS
from cs3_tasks.core.paired import correctness_by_qid, cs_en_drop, paired_difference
from cs3_tasks.report.comparable import check_comparable
from cs3_tasks.report.results import ModelResults
from cs3_tasks.scoring.records import CHANNELS

SIGNIFICANCE = 0.05  # the level at which a difference is marked (*)


def compare_systems(a: ModelResults, b: ModelResults) -> list[dict]:
    """One row per knowledge set both scored and channel: ``{"set", "channel", **paired_difference}``."""
    rows = []
    for set_name in KNOWLEDGE_SETS:
        if set_name not in a.records or set_name not in b.records:
            continue
        for channel in CHANNELS:
            row = paired_difference(
                correctness_by_qid(a.records[set_name], channel),
                correctness_by_qid(b.records[set_name], channel),
            )
            rows.append({"set": set_name, "channel": channel, **row})
    return rows


def cs_en_drops(results: ModelResults) -> dict[str, dict]:
    """channel -> the paired cs-vs-en drop of one system (empty when a knowledge set is missing)."""
    if not all(s in results.records for s in KNOWLEDGE_SETS):
        return {}
    cs, en = (results.records[s] for s in KNOWLEDGE_SETS)
    return {ch: cs_en_drop(correctness_by_qid(cs, ch), correctness_by_qid(en, ch)) for ch in CHANNELS}


def points(value: float | None, signed: bool = True) -> str:
    """A rate difference in percentage points ("n/a" when there is none)."""
    if value is None:
        return "n/a"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def difference_text(row: Mapping) -> str:
    """``+5.0 [-2.1, +12.0] p=0.21 (7 discordant of 24)``; ``*`` after p when below `SIGNIFICANCE`."""
    if row.get("difference") is None:
        return "n/a (no item decided in both)"
    star = "*" if row["mcnemar_p"] < SIGNIFICANCE else ""
    return (
        f"{points(row['difference'])} [{points(row['ci_low'])}, {points(row['ci_high'])}] "
        f"p={row['mcnemar_p']:.3g}{star} ({row['n_discordant']} discordant of {row['n']})"
    )


def comparison_markdown(name_a: str, name_b: str, rows: list[dict]) -> str:
    lines = [
        f"{name_a} - {name_b}: accuracy difference in points, paired bootstrap 95% CI, exact McNemar p",
        "",
        "| set | channel | acc A | acc B | difference | 95% CI | McNemar p | discordant (A / B only) | n |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for row in rows:
        p = "n/a" if row["mcnemar_p"] is None else f"{row['mcnemar_p']:.3g}"
        lines.append(
            f"| {row['set']} | {row['channel']} | {points(row['acc_a'], False)} | "
            f"{points(row['acc_b'], False)} | {points(row['difference'])} | "
            f"[{points(row['ci_low'])}, {points(row['ci_high'])}] | {p} | "
            f"{row['n_discordant']} ({row['a_only']} / {row['b_only']}) | {row['n']} |"
        )
    skipped = [r for r in rows if r["n_excluded"] or r["n_only_a"] or r["n_only_b"]]
    for row in skipped:
        lines.append(
            f"\n{row['set']} {row['channel']}: not paired: {row['n_excluded']} without a verdict on "
            f"either side, {row['n_only_a']} only in A, {row['n_only_b']} only in B"
        )
    return "\n".join(lines) + "\n"


def baseline_comparisons(results: Mapping[str, ModelResults], baseline: str) -> dict[str, list[dict]]:
    """model -> `compare_systems(model, baseline)` for every model but the baseline; NotComparable (a
    ValueError) when a model was scored otherwise than the baseline (`comparable.check_comparable`)."""
    if baseline not in results:
        raise ValueError(f"--baseline {baseline!r} is not among the models: {', '.join(sorted(results))}")
    others = {name: entry for name, entry in results.items() if name != baseline}
    for entry in others.values():
        check_comparable(results[baseline], entry)
    return {name: compare_systems(entry, results[baseline]) for name, entry in others.items()}


def baseline_notes(results: Mapping[str, ModelResults], baseline: str) -> list[str]:
    """The leaderboard's lines under the table: each model's difference to the baseline."""
    notes = [
        f"Differences to the baseline {baseline} (points; paired bootstrap 95% CI; exact McNemar p, "
        f"* below {SIGNIFICANCE}):"
    ]
    for name, rows in baseline_comparisons(results, baseline).items():
        cells = [f"{r['set']} {r['channel']} {difference_text(r)}" for r in rows]
        notes.append(f"- {name}: " + "; ".join(cells))
    return notes
