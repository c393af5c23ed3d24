"""Paired statistics (cs3_tasks/core/paired.py) against known values: scipy's exact binomial test for
McNemar, and small cases computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from cs3_tasks.core.paired import correctness_by_qid, cs_en_drop, mcnemar_exact, paired_difference


@pytest.mark.parametrize(
    "b,c",
    [(0, 0), (0, 1), (1, 0), (2, 0), (1, 4), (3, 3), (5, 12), (0, 25), (40, 61), (100, 130), (7, 300)],
)
def test_mcnemar_equals_scipy_binomtest(b, c):
    expected = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12, abs=1e-300)


def test_mcnemar_by_hand():
    # b=1, c=4: n=5, P(X<=1) = (1 + 5) / 32, two-sided = 12/32
    assert mcnemar_exact(1, 4) == 0.375
    assert mcnemar_exact(4, 1) == 0.375
    # b=2, c=0: P(X<=0) = 1/4, two-sided 1/2
    assert mcnemar_exact(2, 0) == 0.5
    assert mcnemar_exact(3, 3) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_paired_difference_by_hand():
    a = {"q1": True, "q2": True, "q3": False, "q4": True, "q5": None, "q6": True}
    b = {"q1": True, "q2": False, "q3": False, "q4": False, "q5": True, "q7": False}
    result = paired_difference(a, b)
    # paired: q1..q4 (q5 excluded: a has no verdict; q6 only in a; q7 only in b)
    assert result["n"] == 4
    assert (result["n_excluded"], result["n_only_a"], result["n_only_b"]) == (1, 1, 1)
    assert result["acc_a"] == 0.75 and result["acc_b"] == 0.25
    assert result["difference"] == 0.5
    assert (result["a_only"], result["b_only"], result["n_discordant"]) == (2, 0, 2)
    assert result["mcnemar_p"] == 0.5
    # the paired bootstrap resamples items: the same draws as numpy on the per-item differences
    deltas = np.array([0, 1, 0, 1], dtype=float)
    rng = np.random.default_rng(0)
    means = deltas[rng.integers(0, 4, size=(1000, 4))].mean(axis=1)
    assert (result["ci_low"], result["ci_high"]) == tuple(np.quantile(means, [0.025, 0.975]))
    assert paired_difference(a, b) == result  # fixed seed: the same CI every time


def test_identical_systems_and_no_overlap():
    same = {f"q{i}": i % 3 == 0 for i in range(30)}
    result = paired_difference(same, same)
    assert (result["difference"], result["ci_low"], result["ci_high"]) == (0.0, 0.0, 0.0)
    assert result["mcnemar_p"] == 1.0 and result["n_discordant"] == 0
    apart = paired_difference({"a": True}, {"b": False})
    assert apart["n"] == 0 and apart["difference"] is None and apart["mcnemar_p"] is None


def test_cs_en_drop_is_en_minus_cs_over_shared_qids():
    cs = {"q1": False, "q2": False, "q3": True, "q4": True}
    en = {"q1": True, "q2": True, "q3": True, "q4": True, "q9": True}
    drop = cs_en_drop(cs, en)
    assert drop["n"] == 4 and drop["difference"] == 0.5 and drop["n_only_a"] == 1
    assert drop["mcnemar_p"] == mcnemar_exact(2, 0)
    assert 0 <= drop["ci_low"] <= 0.5 <= drop["ci_high"] <= 1


def test_correctness_by_qid_reads_records():
    records = [
        {"qid": "a", "speech_correct": True, "text_correct": False},
        {"qid": "b", "speech_correct": None, "text_correct": True},
        {"qid": "a", "speech_correct": False},
    ]
    assert correctness_by_qid(records, "speech") == {"a": True, "b": None}
    assert correctness_by_qid(records, "text") == {"a": False, "b": True}
