"""Agreement between two ratings of the same items: Cohen's kappa (pure; no I/O, no models).

Used where one system's outputs are scored twice (another ASR, another judge): how far the two runs' verdicts
agree beyond what their rates alone would give by chance. Inputs are as in `core.paired`: an item id mapped to
its label (True / False, or any hashable category), None when the item has no verdict; only ids with a label
in both are rated, the others are counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping


def cohen_kappa(a: Mapping[str, Hashable | None], b: Mapping[str, Hashable | None]) -> dict:
    """Cohen's kappa of two ratings over the ids labelled in both: (p_o - p_e) / (1 - p_e), p_o the share of
    items with the same label, p_e the agreement expected from each rating's own label shares.

    Returns ``{"kappa", "observed", "expected", "n", "n_excluded"}``: ``kappa`` None when no item is rated in
    both, or when chance alone gives full agreement (p_e = 1: both ratings gave every item one and the same
    label, so kappa is 0/0); ``n_excluded``: ids of either input not labelled in both.
    """
    rated = [qid for qid in a if qid in b and a[qid] is not None and b[qid] is not None]
    n_excluded = len(set(a) | set(b)) - len(rated)
    n = len(rated)
    if n == 0:
        return {"kappa": None, "observed": None, "expected": None, "n": 0, "n_excluded": n_excluded}
    observed = sum(1 for qid in rated if a[qid] == b[qid]) / n
    shares_a, shares_b = Counter(a[qid] for qid in rated), Counter(b[qid] for qid in rated)
    expected = sum(shares_a[label] * shares_b[label] for label in shares_a) / (n * n)
    kappa = None if expected == 1 else (observed - expected) / (1 - expected)
    return {"kappa": kappa, "observed": observed, "expected": expected, "n": n, "n_excluded": n_excluded}
