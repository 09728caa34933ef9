"""Approximate DP: basic, advanced (DRV), optimal (KOV) composition; pure DP, group privacy."""

from __future__ import annotations

import math

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import events as ev
from dpkit.accounting import UnsupportedEvent, analytic_gaussian, approx, pure, zcdp


def _kov_delta_mp(eps: float, k: int, eps_g: float, step_delta: float = 0.0) -> float:
    """The Murtagh-Vadhan exact sum at 50 digits (the oracle)."""
    with mp.workdps(50):
        e, g = mp.mpf(eps), mp.mpf(eps_g)
        s = mp.fsum(mp.binomial(k, i) * max(mp.mpf(0), mp.exp((k - i) * e) - mp.exp(g + i * e))
                    for i in range(k + 1)) / (1 + mp.exp(e)) ** k
        return float(1 - (1 - mp.mpf(step_delta)) ** k * (1 - s))


# -- vectors ------------------------------------------------------------------------------------


def test_kov_and_drv_vectors() -> None:
    assert approx.kov_epsilon(0.1, count=100, delta=1e-5) == pytest.approx(4.306791, abs=5e-7)
    eps, d = approx.advanced_composition(0.1, count=100, delta_prime=1e-5)
    assert eps == pytest.approx(5.850235, abs=5e-7)
    assert d == 1e-5
    e = ev.SelfComposed(ev.PureDP(0.1), 100)
    assert approx.epsilon(e, 1e-5, method="kov") == pytest.approx(4.306791, abs=5e-7)
    assert approx.epsilon(e, 1e-5, method="advanced") == pytest.approx(5.850235, abs=5e-7)
    assert approx.epsilon(e, 1e-5, method="basic") == pytest.approx(10.0)


# -- KOV against the exact sum --------------------------------------------------------------------


@pytest.mark.parametrize(("eps", "k"), [(0.1, 10), (0.5, 25), (1.0, 7), (0.05, 60), (3.0, 12)])
@pytest.mark.parametrize("step_delta", [0.0, 1e-7])
def test_kov_delta_matches_exact_sum(eps: float, k: int, step_delta: float) -> None:
    for frac in (0.0, 0.1, 0.3, 0.6, 0.95):
        eps_g = frac * k * eps
        ours = approx.kov_delta(eps, count=k, epsilon_total=eps_g, delta=step_delta)
        assert ours == pytest.approx(_kov_delta_mp(eps, k, eps_g, step_delta), rel=1e-9,
                                     abs=1e-300)


@pytest.mark.parametrize(("eps", "k", "delta"), [(0.1, 40, 1e-5), (0.5, 25, 1e-8), (2.0, 10, 1e-3)])
def test_kov_epsilon_is_the_smallest_valid(eps: float, k: int, delta: float) -> None:
    g = approx.kov_epsilon(eps, count=k, delta=delta)
    assert _kov_delta_mp(eps, k, g) <= delta * (1 + 1e-9)
    assert _kov_delta_mp(eps, k, g * (1 - 1e-6)) > delta


def test_kov_single_step_is_randomized_response() -> None:
    eps, delta = 1.0, 0.01
    # δ(ε_g) = (e^ε − e^{ε_g})/(1 + e^ε) for one ε-DP step
    expected = math.log(math.exp(eps) - delta * (1 + math.exp(eps)))
    assert approx.kov_epsilon(eps, count=1, delta=delta) == pytest.approx(expected, rel=1e-12)


def test_kov_with_step_delta() -> None:
    # with δ₀ > 0 the total δ must exceed 1 − (1 − δ₀)^k, else no finite ε
    assert approx.kov_epsilon(0.1, count=100, delta=1e-7, step_delta=1e-8) == math.inf
    g = approx.kov_epsilon(0.1, count=100, delta=1e-5, step_delta=1e-8)
    assert approx.kov_delta(0.1, count=100, epsilon_total=g, delta=1e-8) <= 1e-5
    assert g > approx.kov_epsilon(0.1, count=100, delta=1e-5)
    # exactly δ = δ₀ for one step: ε itself
    assert approx.kov_epsilon(0.5, count=1, delta=3e-7, step_delta=3e-7) == 0.5


@pytest.mark.parametrize("k", [1, 1000, 100_000, 1_000_000])
@pytest.mark.parametrize("eps", [1e-3, 0.1, 1.0, 30.0, 1000.0])
def test_kov_extremes_finite_and_bounded(k: int, eps: float) -> None:
    for delta in (1e-5, 1e-18):
        g = approx.kov_epsilon(eps, count=k, delta=delta)
        assert 0.0 <= g <= k * eps
        assert approx.kov_delta(eps, count=k, epsilon_total=g) <= delta * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(1e-3, 5.0), k=st.integers(1, 3000), delta=st.floats(1e-15, 0.1))
def test_kov_below_advanced_below_basic(eps: float, k: int, delta: float) -> None:
    kov = approx.kov_epsilon(eps, count=k, delta=delta)
    adv, _ = approx.advanced_composition(eps, count=k, delta_prime=delta)
    assert kov <= adv * (1 + 1e-9) + 1e-12
    assert adv <= k * eps * (1 + 1e-12)
    # KOV is optimal for ε-DP steps, so it also beats zCDP (ε²/2 per step) + CKS
    assert kov <= zcdp.rho_to_epsilon(k * eps * eps / 2, delta) * (1 + 1e-9) + 1e-12


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(1e-3, 3.0), k=st.integers(1, 2000), d1=st.floats(1e-15, 0.5),
       d2=st.floats(1e-15, 0.5))
def test_kov_monotone_in_delta_and_count(eps: float, k: int, d1: float, d2: float) -> None:
    lo, hi = sorted((d1, d2))
    assert approx.kov_epsilon(eps, count=k, delta=hi) <= approx.kov_epsilon(eps, count=k, delta=lo)
    assert approx.kov_epsilon(eps, count=k, delta=lo) <= approx.kov_epsilon(
        eps, count=k + 1, delta=lo) + 1e-12


# -- advanced -----------------------------------------------------------------------------------


def test_advanced_heterogeneous_and_with_step_deltas() -> None:
    e = ev.Composed((ev.SelfComposed(ev.PureDP(0.1), 50), ev.SelfComposed(ev.ApproxDP(0.2, 1e-8),
                                                                          20)))
    delta = 1e-5
    dprime = delta - 20 * 1e-8
    sq = 50 * 0.01 + 20 * 0.04
    drift = 50 * 0.1 * math.expm1(0.1) + 20 * 0.2 * math.expm1(0.2)
    expected = min(50 * 0.1 + 20 * 0.2, math.sqrt(2 * math.log(1 / dprime) * sq) + drift)
    assert approx.epsilon(e, delta, method="advanced") == pytest.approx(expected, rel=1e-12)
    # δ below Σδ_i: no finite bound
    assert approx.epsilon(e, 1e-7, method="advanced") == math.inf
    # inverse
    eps = approx.epsilon(e, delta, method="advanced")
    assert approx.delta(e, eps, method="advanced") == pytest.approx(delta, rel=1e-9)


def test_advanced_large_epsilon_no_overflow() -> None:
    eps, _ = approx.advanced_composition(1000.0, count=10, delta_prime=1e-10)
    assert eps == 10_000.0


def test_advanced_and_kov_refuse_gaussian_steps() -> None:
    with pytest.raises(UnsupportedEvent, match=r"Gaussian.*method='basic'"):
        approx.epsilon(ev.Gaussian(1.0), 1e-5, method="kov")
    assert not approx.supports(ev.Gaussian(1.0), method="advanced")
    assert approx.supports(ev.Gaussian(1.0), method="basic")


# -- basic --------------------------------------------------------------------------------------


def test_basic_splits_delta_between_gaussian_steps() -> None:
    e = ev.Composed((ev.Gaussian(2.0), ev.Gaussian(3.0), ev.Laplace(4.0), ev.ApproxDP(0.3, 1e-7)))
    delta = 1e-5
    share = (delta - 1e-7) / 2
    expected = (analytic_gaussian.epsilon_for(2.0, share)
                + analytic_gaussian.epsilon_for(3.0, share) + 0.25 + 0.3)
    assert approx.epsilon(e, delta, method="basic") == pytest.approx(expected, rel=1e-12)
    assert approx.epsilon(e, 5e-8, method="basic") == math.inf  # below the fixed δ
    eps = approx.epsilon(e, delta, method="basic")
    d = approx.delta(e, eps, method="basic")
    assert d == pytest.approx(delta, rel=1e-6)
    assert approx.epsilon(e, d, method="basic") <= eps


def test_basic_amplifies_poisson_sampling() -> None:
    e = ev.SelfComposed(ev.PoissonSampled(0.01, ev.PureDP(1.0)), 10)
    assert approx.epsilon(e, 0.0, method="basic") == pytest.approx(10 * math.log1p(
        0.01 * math.expm1(1.0)), rel=1e-12)
    g = ev.PoissonSampled(0.1, ev.Gaussian(1.0))
    # inner δ is δ/q, then (log(1 + q(e^ε − 1)), δ)
    inner = analytic_gaussian.epsilon_for(1.0, 1e-5 / 0.1)
    assert approx.epsilon(g, 1e-5, method="basic") == pytest.approx(
        math.log1p(0.1 * math.expm1(inner)), rel=1e-12)
    # δ >= q: every sampled mechanism is (0, q)-DP
    assert approx.epsilon(g, 0.2, method="basic") == 0.0


def test_basic_composition_function() -> None:
    assert approx.basic_composition([(0.5, 1e-6), (0.25, 0.0)]) == (0.75, 1e-6)
    with pytest.raises(ValueError, match="epsilon"):
        approx.basic_composition([(-1.0, 0.0)])


# -- pure and group privacy -----------------------------------------------------------------------


def test_pure_basic_composition_and_amplification() -> None:
    e = ev.Composed((ev.SelfComposed(ev.Laplace(2.0), 30), ev.DiscreteLaplace(4.0, 2),
                     ev.Exponential(0.3), ev.RandomizedResponse(1.0, 4), ev.NoOp()))
    assert pure.epsilon(e) == pytest.approx(15.0 + 0.5 + 0.3 + 1.0)
    assert pure.epsilon(e, neighboring="replace") == pytest.approx(2 * (15.0 + 0.5 + 0.3) + 1.0)
    assert pure.amplify_by_sampling(1000.0, 1e-3) == pytest.approx(1000.0 + math.log(1e-3),
                                                                   rel=1e-12)
    with pytest.raises(UnsupportedEvent, match="delta > 0"):
        pure.epsilon(ev.Gaussian(1.0))


def test_pure_delta_is_randomized_response() -> None:
    e = ev.PureDP(2.0)
    assert pure.delta(e, 1.0) == pytest.approx((math.exp(2) - math.exp(1)) / (1 + math.exp(2)))
    assert pure.delta(e, 2.0) == 0.0
    assert approx.kov_delta(2.0, count=1, epsilon_total=1.0) == pytest.approx(pure.delta(e, 1.0))


def test_group_privacy() -> None:
    assert pure.group_privacy(0.5, group_size=4) == (2.0, 0.0)
    eps, d = pure.group_privacy(0.5, 1e-6, group_size=3)
    assert eps == 1.5
    assert d == pytest.approx(3 * math.exp(1.0) * 1e-6)
    assert pure.group_privacy(10.0, 1e-3, group_size=100)[1] == 1.0
    with pytest.raises(ValueError, match="group_size"):
        pure.group_privacy(1.0, group_size=0)
