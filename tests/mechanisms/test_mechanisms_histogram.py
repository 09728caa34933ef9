"""Histogram over disjoint public bins: counts, noise law, CIs, argument checks."""

from __future__ import annotations

import numpy as np
import pytest
from _mech_stats import P_FAIL, binomial_p

import dpkit as dp
from dpkit.events import DiscreteLaplace
from dpkit.mechanisms.histogram import true_counts


def test_true_counts_follow_numpy_histogram() -> None:
    values = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 2.0, -1.0, 7.0])
    counts, _ = true_counts(values, bins=[0, 1, 2])
    np.testing.assert_array_equal(counts, np.histogram(values, bins=[0, 1, 2])[0])
    counts, labels = true_counts(["a", "b", "a", "zz"], categories=["a", "b", "c"])
    assert counts.tolist() == [2, 1, 0] and labels == ["a", "b", "c"]


def test_histogram_release() -> None:
    r = dp.mechanisms.histogram([1, 2, 2, 7], bins=[0, 5, 10], epsilon=0.5, max_contributions=3,
                                source=dp.noise.seeded(0))
    assert r.value.dtype == np.int64 and r.value.shape == (2,)
    assert r.event == DiscreteLaplace(6.0, 3)
    assert np.all(r.ci[0] <= r.value) and np.all(r.value <= r.ci[1])


def test_histogram_ci_coverage() -> None:
    """Per-bin coverage over 1000 releases x 5 bins matches the exact coverage (binomial, 1e-6)."""
    src = dp.noise.seeded(4)
    values = np.repeat(["a", "b", "c", "d", "e"], [5, 0, 30, 2, 9])
    truth, _ = true_counts(values, categories=list("abcde"))
    covered = 0
    coverage = 0.0
    for _ in range(1000):
        r = dp.mechanisms.histogram(values, categories=list("abcde"), epsilon=1.0, level=0.9,
                                    source=src)
        covered += int(np.sum((r.ci[0] <= truth) & (truth <= r.ci[1])))
        coverage = r.details["coverage"]
    assert coverage >= 0.9
    assert binomial_p(covered, 5000, coverage) > P_FAIL


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bins": 10, "epsilon": 1.0}, "public bin edges"),
        ({"bins": [0, 2, 1], "epsilon": 1.0}, "increasing"),
        ({"bins": [0, 1], "categories": ["a"], "epsilon": 1.0}, "exactly one"),
        ({"epsilon": 1.0}, "exactly one"),
        ({"bins": [0, 1], "epsilon": 1.0, "max_contributions": 0}, "max_contributions"),
        ({"bins": [0, 1], "epsilon": -1.0}, "epsilon"),
    ],
)
def test_histogram_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dp.mechanisms.histogram([0.5], **kwargs)
