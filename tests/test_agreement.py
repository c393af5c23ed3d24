"""Cohen's kappa (cs3_tasks/core/agreement.py) against values computed by hand and against the
confusion-matrix formula over many random ratings."""

from __future__ import annotations

import numpy as np
import pytest

from cs3_tasks.core.agreement import cohen_kappa


def _ratings(pairs: list[tuple]) -> tuple[dict, dict]:
    return {f"q{i}": x for i, (x, _) in enumerate(pairs)}, {f"q{i}": y for i, (_, y) in enumerate(pairs)}


def test_kappa_by_hand():
    # 50 items: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no. p_o = 35/50 = 0.7; a says yes 25/50, b 30/50:
    # p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa = (0.7 - 0.5) / 0.5 = 0.4
    pairs = [(True, True)] * 20 + [(True, False)] * 5 + [(False, True)] * 10 + [(False, False)] * 15
    result = cohen_kappa(*_ratings(pairs))
    assert result["n"] == 50 and result["n_excluded"] == 0
    assert result["observed"] == pytest.approx(0.7) and result["expected"] == pytest.approx(0.5)
    assert result["kappa"] == pytest.approx(0.4)


def test_kappa_edges_and_missing_verdicts():
    a = {"q1": True, "q2": False, "q3": None, "q4": True}
    b = {"q1": True, "q2": False, "q3": True, "q5": False}
    result = cohen_kappa(a, b)  # rated: q1, q2 (q3 has no verdict in a; q4 only in a; q5 only in b)
    assert (result["n"], result["n_excluded"], result["kappa"]) == (2, 3, 1.0)
    # perfect disagreement on a balanced set: kappa -1
    assert cohen_kappa({"x": True, "y": False}, {"x": False, "y": True})["kappa"] == -1.0
    # one label everywhere in both: chance alone agrees fully, kappa is 0/0
    same = cohen_kappa({"x": True, "y": True}, {"x": True, "y": True})
    assert same["kappa"] is None and same["observed"] == 1.0 and same["expected"] == 1.0
    assert cohen_kappa({"x": None}, {"x": True}) == {
        "kappa": None,
        "observed": None,
        "expected": None,
        "n": 0,
        "n_excluded": 1,
    }


@pytest.mark.parametrize("seed", range(12))
def test_kappa_equals_the_confusion_matrix_formula(seed):
    rng = np.random.default_rng(seed)
    labels = [0, 1] if seed % 2 == 0 else ["a", "b", "c"]
    n = int(rng.integers(1, 60))
    a = {f"q{i}": labels[int(rng.integers(len(labels)))] for i in range(n)}
    b = {q: (v if rng.random() < 0.6 else labels[int(rng.integers(len(labels)))]) for q, v in a.items()}
    matrix = np.zeros((len(labels), len(labels)))
    for q in a:
        matrix[labels.index(a[q]), labels.index(b[q])] += 1
    p = matrix / n
    observed, expected = np.trace(p), float(p.sum(axis=1) @ p.sum(axis=0))
    result = cohen_kappa(a, b)
    if expected == pytest.approx(1.0):
        assert result["kappa"] is None
    else:
        assert result["kappa"] == pytest.approx((observed - expected) / (1 - expected), abs=1e-12)
        assert -1.0 <= result["kappa"] <= 1.0
    assert cohen_kappa(b, a)["kappa"] == result["kappa"]  # symmetric
