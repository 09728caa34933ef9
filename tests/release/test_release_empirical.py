"""The empirical error of the mechanism matches the exact expected error, and the intervals cover.

Each repetition runs the whole mechanism (exact integer noise, least squares) and records the
total squared error ``S = ‖C z‖²`` over the workload, ``C = W (MᵀM)⁻¹Mᵀ``. For i.i.d. noise
with variance ``v`` and fourth moment ``μ₄``

    E S = v ‖C‖_F²,     Var S = 2 v² ‖CᵀC‖_F² + (μ₄ − 3v²) Σ_k ‖c_k‖⁴

(c_k the columns of C). The mean of R independent repetitions is compared with E S at
6 standard deviations: false-failure probability ≈ 2e-9 under the normal approximation of a
mean of R >= 150 i.i.d. terms (each S is itself a sum of many weakly dependent terms).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import dpkit as dp
from dpkit.release import answer_workload, expected_error, resolve_strategy
from dpkit.release import workloads as wl
from dpkit.release.noise_plan import dgauss_variance, dlap_variance


def dlap_fourth_moment(scale: float) -> float:
    """E z⁴ for P(z) = (1-q)/(1+q) q^|z|: 2 q (1 + 11q + 11q² + q³) / ((1+q)(1-q)⁴)."""
    q = math.exp(-1.0 / scale)
    return 2 * q * (1 + 11 * q + 11 * q * q + q**3) / ((1 + q) * (1 - q) ** 4)


def dgauss_fourth_moment(sigma2: float) -> float:
    if sigma2 > 100:
        return 3 * sigma2 * sigma2  # exact to double precision (Poisson summation)
    r = int(60 * math.sqrt(sigma2)) + 10
    x = np.arange(-r, r + 1, dtype=np.float64)
    w = np.exp(-x * x / (2 * sigma2))
    return float(np.sum(x**4 * w) / np.sum(w))


def test_moment_formulas_against_direct_sums() -> None:
    x = np.arange(-400, 401, dtype=np.float64)
    w = np.exp(-np.abs(x) / 3.0)
    w /= w.sum()
    assert dlap_fourth_moment(3.0) == pytest.approx(float(np.sum(x**4 * w)), rel=1e-10)
    assert dlap_variance(3.0) == pytest.approx(float(np.sum(x * x * w)), rel=1e-12)
    assert dlap_variance(3.0) == pytest.approx(17.8342, abs=1e-4)  # REFERENCES.md vector
    assert dgauss_variance(10.0) == pytest.approx(10.0, abs=1e-4)


CASES = [
    (256, "identity", {"epsilon": 1.0}),
    (256, "tree:2", {"epsilon": 1.0}),
    (256, "sqrt_toeplitz", {"epsilon": 1.0}),
    (256, "optimized", {"epsilon": 1.0}),
    (256, "identity", {"rho": 0.5}),
    (256, "tree:2", {"rho": 0.5}),
    (256, "sqrt_toeplitz", {"rho": 0.5}),
    (256, "optimized", {"rho": 0.5}),
    (1024, "tree:16", {"epsilon": 1.0}),
]
PARAMS = [pytest.param(*c, id=f"{c[0]}-{c[1]}-{next(iter(c[2]))}") for c in CASES] + [
    pytest.param(1024, "optimized", {"rho": 0.5}, id="1024-optimized-rho", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("n", "name", "kwargs"), PARAMS)
def test_empirical_rmse_matches_the_exact_expected_error(n, name, kwargs) -> None:
    W = wl.prefix(n)
    kind = "laplace" if "epsilon" in kwargs else "gaussian"
    S = resolve_strategy(name, W, kind)
    report = expected_error(W, S, **kwargs)
    plan = report.noise
    C = np.cumsum(S.reconstruction_matrix(), axis=0)  # W R for prefix sums
    v = plan.variance
    mu4 = (
        dlap_fourth_moment(plan.parameter)
        if kind == "laplace"
        else dgauss_fourth_moment(plan.parameter)
    )
    mean = v * float(np.sum(C * C))
    assert mean == pytest.approx(report.total_squared_error, rel=1e-9)
    col = np.sum(C * C, axis=0)
    var = 2 * v * v * float(np.sum((C.T @ C) ** 2)) + (mu4 - 3 * v * v) * float(np.sum(col**2))
    reps = 150
    src = dp.noise.seeded(20240 + n)
    x = (np.arange(n) * 37) % 11
    truth = np.cumsum(x)
    totals = np.empty(reps)
    misses = np.zeros(n, dtype=np.int64)
    for r in range(reps):
        rel = answer_workload(x, W, S, source=src, **kwargs)
        err = rel.value - truth
        totals[r] = float(err @ err)
        misses += (truth < rel.ci[0]) | (truth > rel.ci[1])
    z = (totals.mean() - mean) / math.sqrt(var / reps)
    assert abs(z) < 6.0, f"empirical mean {totals.mean():.4g} vs exact {mean:.4g} (z = {z:.2f})"
    empirical_rmse = math.sqrt(totals.mean() / n)
    assert empirical_rmse == pytest.approx(report.rmse, rel=0.1)
    # per-query coverage: misses of query j ~ Binomial(reps, <= 0.05); union over n queries
    limit = stats.binom.isf(1e-7 / n, reps, 0.05)
    assert misses.max() <= limit
    # and the intervals are no wider than Chebyshev's valid bound sqrt(var/alpha) = 4.47 sd
    half = (rel.ci[1] - rel.ci[0]) / 2
    assert np.all(half <= math.sqrt(1 / 0.05) * rel.details["query_std"] * (1 + 1e-9))
