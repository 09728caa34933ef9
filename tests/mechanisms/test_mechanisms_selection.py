"""Exponential mechanism and report-noisy-max: exact laws (chi-square at 1e-6), utility bounds,
events and argument checks."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from _mech_stats import P_FAIL, binomial_p, chi_square_p

import dpkit as dp
from dpkit.events import Exponential, PureDP
from dpkit.mechanisms.exponential import _plan_exponential
from dpkit.mechanisms.noisy_max import _plan_noisy_max

SCORES = np.array([0.0, 1.0, 2.5, -3.0, 2.4, 0.75])


def _softmax(scores: np.ndarray, factor: float) -> np.ndarray:
    w = np.exp(factor * (scores - scores.max()))
    return w / w.sum()


def _pf_exact(scores: np.ndarray, factor: float) -> np.ndarray:
    """Permute-and-flip law by enumerating all orders (McKenna-Sheldon 2020, Alg. 1)."""
    p = np.exp(factor * (scores - scores.max()))
    n = scores.size
    out = np.zeros(n)
    perms = list(itertools.permutations(range(n)))
    for perm in perms:
        survive = 1.0
        for j in perm:
            out[j] += survive * p[j]
            survive *= 1 - p[j]
    return out / len(perms)


def _dlap_cdf(t: np.ndarray, scale: float) -> np.ndarray:
    """P(Z <= t) for Z ~ DLap(scale), integer t."""
    q = math.exp(-1 / scale)
    t = np.asarray(t, dtype=np.float64)
    return np.where(t >= 0, 1 - q ** (t + 1) / (1 + q), q ** (-t) / (1 + q))


@pytest.mark.parametrize("monotonic", [False, True])
def test_exponential_mechanism_law(monotonic: bool) -> None:
    """200k exact EM draws vs P(r) ∝ exp(ε q_r / (2Δ)) (or /Δ): chi-square, false failure 1e-6."""
    eps, sens = 1.3, 0.7
    w = _plan_exponential(SCORES, sens, eps, monotonic)
    draws = dp.mechanisms._sampling.exponential_sample(w, 200_000, dp.noise.seeded(1))
    factor = eps / sens if monotonic else eps / (2 * sens)
    counts = np.bincount(draws, minlength=SCORES.size)
    assert chi_square_p(counts, _softmax(SCORES, factor)) > P_FAIL


def test_exponential_sampler_with_one_dominant_candidate() -> None:
    """One candidate far above 2000 others: the rejection sampler still has the exact law."""
    scores = np.zeros(2001)
    scores[7] = 12.0
    w = _plan_exponential(scores, 1.0, 1.0, False)
    draws = dp.mechanisms._sampling.exponential_sample(w, 20_000, dp.noise.seeded(2))
    p7 = _softmax(scores, 0.5)[7]
    assert binomial_p(int((draws == 7).sum()), draws.size, p7) > P_FAIL


def test_permute_and_flip_law() -> None:
    """200k permute-and-flip draws vs the law by enumeration of all 720 orders (1e-6)."""
    eps, sens = 1.1, 1.0
    plan = _plan_noisy_max(SCORES, sens, eps, "exponential", False)
    draws = plan.sample(SCORES, 200_000, dp.noise.seeded(3))
    counts = np.bincount(draws, minlength=SCORES.size)
    assert chi_square_p(counts, _pf_exact(SCORES, eps / (2 * sens))) > P_FAIL


def test_gumbel_noise_is_the_exponential_mechanism() -> None:
    plan = _plan_noisy_max(SCORES, 1.0, 0.9, "gumbel", False)
    assert plan.event == Exponential(0.9)
    draws = plan.sample(SCORES, 200_000, dp.noise.seeded(4))
    counts = np.bincount(draws, minlength=SCORES.size)
    assert chi_square_p(counts, _softmax(SCORES, 0.45)) > P_FAIL


def test_laplace_noisy_max_law() -> None:
    """Discrete Laplace RNM on the grid vs its exact law (ties to the lowest index):
    P(i) = sum_z P(Z_i = z) prod_{j<i} P(n_j + Z_j < n_i + z) prod_{j>i} P(n_j + Z_j <= n_i + z)."""
    scores = np.array([0.0, 1.0, 1.5])
    plan = _plan_noisy_max(scores, 1.0, 2.0, "laplace", False)
    lap = plan.laplace
    assert lap is not None and plan.event == PureDP(2.0)
    draws = plan.sample(scores, 200_000, dp.noise.seeded(5))
    n = dp.noise.grid.to_grid(scores, lap.k)
    s = lap.scale
    r = int(50 * s)
    z = np.arange(-r, r + 1)
    q = math.exp(-1 / s)
    pmf = (1 - q) / (1 + q) * q ** np.abs(z)
    exact = np.zeros(3)
    for i in range(3):
        prod = np.ones_like(pmf)
        for j in range(3):
            if j == i:
                continue
            bound = n[i] + z - n[j] - (1 if j < i else 0)
            prod *= _dlap_cdf(bound, s)
        exact[i] = np.sum(pmf * prod)
    assert abs(exact.sum() - 1) < 1e-9
    counts = np.bincount(draws, minlength=3)
    assert chi_square_p(counts, exact / exact.sum()) > P_FAIL


@pytest.mark.parametrize("noise", ["exponential", "gumbel", "laplace"])
def test_utility_bound_holds(noise: str) -> None:
    """P[q(output) < max q - u] <= 1 - level: over 2000 runs the shortfall count is not
    significantly above 5% (one-sided binomial tail at 1e-6)."""
    scores = np.concatenate([[10.0], np.full(50, 9.0), np.zeros(100)])
    src = dp.noise.seeded(6)
    r = dp.mechanisms.report_noisy_max(scores, sensitivity=1, epsilon=1.0, noise=noise,
                                       level=0.95, source=src)
    u = r.details["utility_bound"]
    plan = _plan_noisy_max(scores, 1.0, 1.0, noise, False)
    draws = plan.sample(scores, 2000, src)
    bad = int(np.sum(scores[draws] < scores.max() - u))
    from scipy import stats

    assert stats.binom.sf(bad - 1, 2000, 0.05) > P_FAIL


def test_exponential_release() -> None:
    r = dp.mechanisms.exponential(["a", "b", "c"], [1.0, 5.0, 2.0], sensitivity=1, epsilon=1.0,
                                  source=dp.noise.seeded(0))
    assert r.value in ("a", "b", "c") and r.ci is None and r.insecure
    assert r.event == Exponential(1.0)
    assert ["a", "b", "c"][r.details["index"]] == r.value
    assert r.details["utility_bound"] == pytest.approx(2 * (math.log(3) + math.log(20)))


def test_noisy_max_events() -> None:
    for noise, event in [("exponential", PureDP(1.0)), ("gumbel", Exponential(1.0)),
                         ("laplace", PureDP(1.0))]:
        r = dp.mechanisms.report_noisy_max([1, 2, 3], sensitivity=1, epsilon=1.0, noise=noise)
        assert r.event == event and r.value in (0, 1, 2) and not r.insecure


def test_permute_and_flip_is_not_bounded_range() -> None:
    """Why PF charges PureDP(ε) and not Exponential(ε): for scores (0, 1) vs (1, 0) (Δ = 1)
    the privacy losses of its two outputs span more than ε."""
    eps = 1.0
    a = _pf_exact(np.array([0.0, 1.0]), eps / 2)
    b = _pf_exact(np.array([1.0, 0.0]), eps / 2)
    loss = np.log(a / b)
    assert loss.max() - loss.min() > 1.6 * eps
    assert np.abs(loss).max() <= eps  # still ε-DP


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: dp.mechanisms.exponential([], [], sensitivity=1, epsilon=1), "empty"),
        (lambda: dp.mechanisms.exponential(["a"], [1, 2], sensitivity=1, epsilon=1), "same length"),
        (lambda: dp.mechanisms.exponential(["a", "b"], [1, math.inf], sensitivity=1, epsilon=1),
         "finite"),
        (lambda: dp.mechanisms.exponential(["a"], [1], sensitivity=0, epsilon=1), "sensitivity"),
        (lambda: dp.mechanisms.exponential(["a"], [1], sensitivity=1, epsilon=0), "epsilon"),
        (lambda: dp.mechanisms.report_noisy_max([], sensitivity=1, epsilon=1), "empty"),
        (lambda: dp.mechanisms.report_noisy_max([1, 2], sensitivity=1, epsilon=1, noise="x"),
         "noise must be one of"),
        (lambda: dp.mechanisms.report_noisy_max([1, math.nan], sensitivity=1, epsilon=1),
         "finite"),
    ],
)
def test_selection_rejects_bad_arguments(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        call()
