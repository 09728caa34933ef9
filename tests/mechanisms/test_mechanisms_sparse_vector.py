"""Sparse vector: AboveThreshold's exact law, NumericSparse answers and CIs, argument checks."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from _mech_stats import P_FAIL, binomial_p, chi_square_p

import dpkit as dp
from dpkit.events import PureDP
from dpkit.mechanisms.sparse_vector import _plan_svt


def _dlap_cdf(t: np.ndarray, scale: float) -> np.ndarray:
    q = math.exp(-1 / scale)
    t = np.asarray(t, dtype=np.float64)
    return np.where(t >= 0, 1 - q ** (t + 1) / (1 + q), q ** (-t) / (1 + q))


@pytest.mark.parametrize("monotonic", [False, True])
def test_allocation_and_scales(monotonic: bool) -> None:
    plan = _plan_svt(1.0, 1.0, 3, monotonic)
    S = Fraction(plan.sensitivity)
    # threshold: S / scale <= eps/2 ; queries: (2) c S / scale <= eps/2 (exactly)
    assert S / Fraction(plan.threshold_scale) <= Fraction(1, 2)
    factor = 3 if monotonic else 6
    assert factor * S / Fraction(plan.query_scale) <= Fraction(1, 2)


def test_above_threshold_law() -> None:
    """200k AboveThreshold runs vs the exact law (chi-square at 1e-6):
    P(i) = sum_rho P(rho) prod_{j<i} P(nu <= T + rho - q_j - 1) P(nu >= T + rho - q_i)."""
    queries = np.array([0.0, 2.0, 1.0, 3.5, 2.0])
    T = 2.5
    eps = 2.0
    plan = _plan_svt(1.0, eps, 1, False)
    out = plan.first_index(queries, T, 200_000, dp.noise.seeded(8))
    qn = dp.noise.grid.to_grid(queries, plan.k)
    tn = int(dp.noise.grid.to_grid(T, plan.k))
    s_r, s_n = plan.threshold_scale, plan.query_scale
    r = int(45 * s_r)
    rho = np.arange(-r, r + 1)
    qr = math.exp(-1 / s_r)
    p_rho = (1 - qr) / (1 + qr) * qr ** np.abs(rho)
    exact = np.zeros(queries.size + 1)  # last cell: no query above (output -1)
    below = np.ones_like(p_rho)
    for i, qi in enumerate(qn):
        above_i = 1 - _dlap_cdf(tn + rho - qi - 1, s_n)
        exact[i] = np.sum(p_rho * below * above_i)
        below = below * (1 - above_i)
    exact[-1] = np.sum(p_rho * below)
    assert abs(exact.sum() - 1) < 1e-9
    counts = np.bincount(np.where(out < 0, queries.size, out), minlength=queries.size + 1)
    assert chi_square_p(counts, exact / exact.sum()) > P_FAIL


def test_above_threshold_release() -> None:
    r = dp.mechanisms.above_threshold([1, 2, 500, 3], 250, sensitivity=1, epsilon=1.0,
                                      source=dp.noise.seeded(0))
    assert r.event == PureDP(1.0) and r.ci is None and r.insecure
    assert r.value == 2  # 250 above the threshold with noise of scale ~4: overwhelming
    r = dp.mechanisms.above_threshold([1, 2, 3], 500, sensitivity=1, epsilon=1.0)
    assert r.value is None


def test_numeric_sparse_answers() -> None:
    queries = np.array([1.0, 900.0, 2.0, 800.0, 700.0, 600.0])
    r = dp.mechanisms.numeric_sparse(queries, 400, sensitivity=1, epsilon=2.0, max_answers=2,
                                     source=dp.noise.seeded(1))
    idx, ans = r.value
    assert idx.tolist() == [1, 3]  # stops after max_answers; noise scale ~8 vs gaps ~400
    assert ans.shape == (2,) and r.ci[0].shape == (2,)
    assert np.all(r.ci[0] <= ans) and np.all(ans <= r.ci[1])
    assert r.event == PureDP(2.0)
    alloc = r.details["allocation"]
    assert sum(alloc.values()) <= 2.0


def test_numeric_sparse_ci_coverage() -> None:
    """Each released answer's CI covers the truth with the exact coverage (binomial, 1e-6)."""
    src = dp.noise.seeded(12)
    truth = np.array([100.3, 0.0, 100.3])
    covered = total = 0
    coverage = 0.0
    for _ in range(800):
        r = dp.mechanisms.numeric_sparse(truth, 50, sensitivity=1, epsilon=1.0, max_answers=2,
                                         level=0.8, source=src)
        idx, _ = r.value
        covered += int(np.sum((r.ci[0] <= truth[idx]) & (truth[idx] <= r.ci[1])))
        total += idx.size
        coverage = r.details["coverage"]
    assert total > 1000
    assert binomial_p(covered, total, coverage) > P_FAIL


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: dp.mechanisms.above_threshold([], 1, sensitivity=1, epsilon=1), "empty"),
        (lambda: dp.mechanisms.above_threshold([1], math.nan, sensitivity=1, epsilon=1), "finite"),
        (lambda: dp.mechanisms.above_threshold([1], 1, sensitivity=1, epsilon=-1), "epsilon"),
        (lambda: dp.mechanisms.numeric_sparse([1], 1, sensitivity=1, epsilon=1, max_answers=0),
         "max_answers"),
        (lambda: dp.mechanisms.numeric_sparse([1], 1, sensitivity=1, epsilon=1, max_answers=1,
                                              answer_share=1.0), "answer_share"),
    ],
)
def test_sparse_vector_rejects_bad_arguments(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        call()
