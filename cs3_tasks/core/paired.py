"""Paired statistics: is the difference between two systems (or two sets) on the same items beyond noise?

Pure functions (no I/O, no models). Each input maps an item id (Qid) to whether it was answered correctly:
True / False, or None when the item is excluded (judge error, channel missing). Only ids present and decided
in both inputs are paired; the others are counted, never silently mixed in.

- `paired_difference(a, b)`: acc(a) - acc(b) over the paired items, a paired percentile bootstrap 95% CI
  (resampling items, so both systems move together; numpy default_rng(seed): deterministic), and the exact
  McNemar test over the discordant items.
- `mcnemar_exact(b, c)`: two-sided exact McNemar p-value, b = items only the first got right, c = items only
  the second got right; equals ``scipy.stats.binomtest(b, b + c, 0.5).pvalue``.
- `cs_en_drop(cs, en)`: one system's drop from the English twin to the code-switched set, acc(en) - acc(cs),
  over the shared Qids (the leaderboard's "drop" sign).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from cs3_tasks.core.metrics import bootstrap_ci

Correctness = Mapping[str, bool | None]


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for b and c discordant items (1.0 when there are none).

    Under the null each discordant item is equally likely to favour either system: b ~ Binomial(b + c, 1/2).
    The two-sided p-value sums the probabilities of outcomes at most as likely as the observed one, which
    for p = 1/2 is twice the smaller tail, capped at 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    # exact integer tail, one division at the end: no rounding until the ratio
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


def correctness_by_qid(records: Iterable[Mapping], channel: str) -> dict[str, bool | None]:
    """``{qid: record[f"{channel}_correct"]}`` of scored knowledge records (first record of a Qid wins)."""
    found: dict[str, bool | None] = {}
    for record in records:
        qid = record.get("qid")
        if qid is not None and qid not in found:
            value = record.get(f"{channel}_correct")
            found[str(qid)] = None if value is None else bool(value)
    return found


def paired_difference(
    a: Correctness, b: Correctness, *, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> dict:
    """acc(a) - acc(b) over the items decided in both, with its paired bootstrap CI and exact McNemar test.

    Returns ``{"difference", "ci_low", "ci_high", "n", "acc_a", "acc_b", "a_only", "b_only",
    "n_discordant", "mcnemar_p", "n_only_a", "n_only_b", "n_excluded"}``; difference, CI, accuracies and p
    are None when no item is paired. ``a_only``: items a got right and b wrong; ``n_only_a``: ids only in a;
    ``n_excluded``: shared ids where either side is None.
    """
    shared = [qid for qid in a if qid in b]
    decided = [qid for qid in shared if a[qid] is not None and b[qid] is not None]
    result = {
        "n": len(decided),
        "n_only_a": sum(1 for qid in a if qid not in b),
        "n_only_b": sum(1 for qid in b if qid not in a),
        "n_excluded": len(shared) - len(decided),
    }
    if not decided:
        empty = ("difference", "ci_low", "ci_high", "acc_a", "acc_b", "mcnemar_p")
        return {**result, **dict.fromkeys(empty), "a_only": 0, "b_only": 0, "n_discordant": 0}
    a_only = sum(1 for qid in decided if a[qid] and not b[qid])
    b_only = sum(1 for qid in decided if b[qid] and not a[qid])
    deltas = [int(bool(a[qid])) - int(bool(b[qid])) for qid in decided]
    low, high = bootstrap_ci(deltas, n_resamples=n_resamples, confidence=confidence, seed=seed)
    return {
        **result,
        "difference": sum(deltas) / len(deltas),
        "ci_low": low,
        "ci_high": high,
        "acc_a": sum(1 for qid in decided if a[qid]) / len(decided),
        "acc_b": sum(1 for qid in decided if b[qid]) / len(decided),
        "a_only": a_only,
        "b_only": b_only,
        "n_discordant": a_only + b_only,
        "mcnemar_p": mcnemar_exact(a_only, b_only),
    }


def cs_en_drop(cs: Correctness, en: Correctness, **options) -> dict:
    """acc(en) - acc(cs) over the Qids decided in both sets (positive: the code-switched set is harder),
    with the paired CI and McNemar test of `paired_difference` (a = en, b = cs)."""
    return paired_difference(en, cs, **options)
