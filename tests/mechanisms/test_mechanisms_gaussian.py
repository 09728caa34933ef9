"""Gaussian and discrete Gaussian mechanisms: exact calibration, CKS curve, CIs, errors."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from _mech_stats import P_FAIL, binomial_p, chi_square_p

import dpkit as dp
from dpkit.events import ZCDP, DiscreteGaussian
from dpkit.mechanisms.gaussian import (
    _calibrate_scalar,
    _plan_discrete_gaussian,
    _plan_gaussian,
    dgauss_delta,
)


def _brute_delta(sigma2: float, sens: int, epsilon: float) -> float:
    r = int(60 * math.sqrt(sigma2)) + 10 * sens + 10
    y = np.arange(-r, r + 1, dtype=np.float64)
    p0 = np.exp(-(y**2) / (2 * sigma2))
    p0 /= p0.sum()
    p1 = np.exp(-((y - sens) ** 2) / (2 * sigma2))
    p1 /= p1.sum()
    return float(np.sum(np.maximum(0.0, p0 - math.exp(epsilon) * p1)))


@pytest.mark.parametrize(
    ("sigma2", "sens", "epsilon"),
    [(1.0, 1, 1.0), (10.0, 1, 0.5), (50.0, 3, 0.2), (1e4, 7, 0.05), (2.5e7, 5000, 0.3)],
)
def test_cks_delta_matches_brute_force(sigma2: float, sens: int, epsilon: float) -> None:
    got, brute = dgauss_delta(sigma2, sens, epsilon), _brute_delta(sigma2, sens, epsilon)
    if sigma2 <= 4096.0**2:  # exact summation
        assert got == pytest.approx(brute, rel=1e-9, abs=1e-16)
    else:
        # Euler-Maclaurin bounds, each tail off by at most 2e^{-1/2}/(12 sigma) over the
        # normaliser (>= sigma sqrt(2 pi)); delta = first - e^eps second can only be overstated
        sigma = math.sqrt(sigma2)
        slack = (1 + math.exp(epsilon)) * 2 * math.exp(-0.5) / (12 * sigma) / (
            sigma * math.sqrt(2 * math.pi))
        assert brute - 1e-12 <= got <= brute + slack + 1e-12


@pytest.mark.parametrize("rho", [0.01, 0.125, 2.0])
@pytest.mark.parametrize("n", [1, 5])
def test_rho_calibration_is_exact(rho: float, n: int) -> None:
    plan = _plan_gaussian(1.0, n, rho, None, None)
    S, s2 = Fraction(plan.sensitivity), Fraction(plan.sigma2)
    assert S * S / (2 * s2) <= Fraction(rho)
    if n > 1:
        assert plan.event == ZCDP(plan.event.rho) and plan.event.rho <= rho
    D = Fraction(1.0) / Fraction(2) ** plan.k
    if n == 1:
        assert plan.sensitivity >= math.floor(D) + 1
    else:  # L2 after rounding: D + sqrt(n)
        assert Fraction(plan.sensitivity) >= D + Fraction(math.sqrt(n)) - Fraction(1, 10**12)
        assert plan.sensitivity**2 >= (float(D) + math.sqrt(n)) ** 2 * (1 - 1e-15)
    # the real sigma is close to the textbook sensitivity / sqrt(2 rho)
    real = math.ldexp(math.sqrt(plan.sigma2), plan.k)
    assert 1.0 / math.sqrt(2 * rho) <= real <= 1.0 / math.sqrt(2 * rho) * 1.002


@pytest.mark.parametrize(
    ("sens", "epsilon", "delta"),
    [
        (1, 1.0, 1e-5),
        (3, 0.3, 1e-9),
        (2, 4.0, 1e-3),
        pytest.param(None, 1.0, 1e-5, marks=pytest.mark.slow),  # grid: PLD on sigma ~ 4000
    ],
)
def test_epsilon_delta_calibration_meets_the_exact_curve(
    sens: int | None, epsilon: float, delta: float
) -> None:
    if sens is None:
        plan = _plan_gaussian(1.0, 1, None, epsilon, delta)
    else:
        plan = _plan_discrete_gaussian(float(sens), 1, None, epsilon, delta, None)
    S = int(plan.sensitivity)
    assert dgauss_delta(plan.sigma2, S, epsilon) <= delta
    # the accountant agrees (it is what a budget will charge) ...
    charged = dp.accounting.delta(plan.event, epsilon=epsilon)
    assert charged <= delta * (1 + 1e-6)
    # ... and the noise is no larger than the exact curve or the accountant needs (0.1% less
    # variance breaks one of them)
    less = plan.sigma2 * 0.999
    assert (
        dgauss_delta(less, S, epsilon) > delta
        or dp.accounting.delta(DiscreteGaussian(less, plan.sensitivity), epsilon=epsilon) > delta
    )
    # the exact calibration alone is tight
    exact = _calibrate_scalar(S, epsilon, delta)
    assert dgauss_delta(exact, S, epsilon) <= delta < dgauss_delta(exact * 0.999, S, epsilon)


def test_vector_epsilon_delta_goes_through_zcdp() -> None:
    plan = _plan_gaussian(2.0, 4, None, 1.0, 1e-6)
    ev = plan.event
    assert isinstance(ev, ZCDP)
    assert Fraction(ev.rho) >= Fraction(plan.sensitivity) ** 2 / (2 * Fraction(plan.sigma2))
    assert dp.accounting.zcdp.rho_to_epsilon(ev.rho, 1e-6) <= 1.0 + 1e-9


def test_vector_events_are_zcdp_because_the_scalar_curve_is_not_an_upper_bound() -> None:
    """A vector release must not be charged as DiscreteGaussian(σ², Δ): accountants read that
    as a scalar shift by Δ, and a 4-coordinate shift (1, 1, 1, 1) (L2 norm 2) has a larger δ(ε)
    than the scalar shift 2 (σ² = 1, ε = 2), computed exactly here by convolution."""
    s2, r = 1.0, 60
    y = np.arange(-r, r + 1)
    p = np.exp(-(y**2) / (2 * s2))
    p /= p.sum()
    scalar_loss = ((y - 2) ** 2 - y**2) / (2 * s2)
    total = p
    for _ in range(3):
        total = np.convolve(total, p)
    t = np.arange(total.size) - 4 * r
    vector_loss = (4 - 2 * t) / (2 * s2)

    def delta(loss: np.ndarray, prob: np.ndarray, eps: float) -> float:
        return float(np.sum(prob * np.maximum(0.0, -np.expm1(eps - loss))))

    assert delta(vector_loss, total, 2.0) > delta(scalar_loss, p, 2.0) + 0.04
    assert isinstance(dp.mechanisms.discrete_gaussian([1, 2], sensitivity=2, rho=0.3).event, ZCDP)
    assert isinstance(dp.mechanisms.discrete_gaussian(1, sensitivity=2, rho=0.3).event,
                      DiscreteGaussian)
    # L2 sensitivity below sqrt(2) on integers: one coordinate moves by 1, a scalar shift
    assert dp.mechanisms.discrete_gaussian([1, 2], sensitivity=1.4, sigma2=4.0).event == (
        DiscreteGaussian(4.0, 1.0)
    )


def test_discrete_gaussian_integer_release() -> None:
    r = dp.mechanisms.discrete_gaussian(41, sensitivity=1, rho=0.5, source=dp.noise.seeded(1))
    assert isinstance(r.value, int)
    assert r.event == DiscreteGaussian(1.0, 1.0)
    r = dp.mechanisms.discrete_gaussian([1, 2], sensitivity=1, sigma2=4.0)
    assert r.event == DiscreteGaussian(4.0, 1.0) and r.value.dtype == np.int64
    # a scalar integer query moving by at most 1.7 moves by at most 1
    r = dp.mechanisms.discrete_gaussian(3, sensitivity=1.7, rho=0.5)
    assert r.event.sensitivity == 1.0


def test_discrete_gaussian_law() -> None:
    """Chi-square of 200k outputs against the exact N_Z(0, sigma2) pmf (false failure 1e-6)."""
    plan = _plan_discrete_gaussian(1.0, 1, 0.05, None, None, None)
    out = plan.sample(np.int64(0), 200_000, dp.noise.seeded(9))
    r = int(12 * math.sqrt(plan.sigma2))
    x = np.arange(-r, r + 1)
    w = np.exp(-(x.astype(float) ** 2) / (2 * plan.sigma2))
    pmf = w / w.sum()
    counts = np.bincount(out + r, minlength=2 * r + 1)
    assert counts.sum() == out.size
    assert chi_square_p(counts, pmf) > P_FAIL


@pytest.mark.parametrize("mechanism", ["gaussian", "discrete_gaussian"])
def test_ci_coverage(mechanism: str) -> None:
    """Coverage over N = 2000 releases matches the exact coverage (binomial test, 1e-6)."""
    src = dp.noise.seeded(123)
    fn = getattr(dp.mechanisms, mechanism)
    truth = 10.3 if mechanism == "gaussian" else 10
    N, covered, coverage = 2000, 0, 0.0
    for _ in range(N):
        r = fn(truth, sensitivity=1, rho=0.2, level=0.8, source=src)
        covered += r.ci[0] <= truth <= r.ci[1]
        coverage = r.details["coverage"]
    assert coverage >= 0.8
    assert binomial_p(covered, N, coverage) > P_FAIL


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sensitivity": 1, "rho": 0.1, "epsilon": 1.0}, "not both"),
        ({"sensitivity": 1}, "pass rho="),
        ({"sensitivity": 1, "epsilon": 1.0}, "delta"),
        ({"sensitivity": 1, "delta": 1e-6}, "epsilon"),
        ({"sensitivity": 1, "epsilon": 1.0, "delta": 0.0}, "delta must lie"),
        ({"sensitivity": 1, "epsilon": 1.0, "delta": 1.0}, "delta must lie"),
        ({"sensitivity": 1, "rho": -0.1}, "rho"),
        ({"sensitivity": 1, "rho": math.nan}, "rho"),
        ({"sensitivity": 0, "rho": 0.1}, "sensitivity"),
    ],
)
def test_gaussian_rejects_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dp.mechanisms.gaussian(1.0, **kwargs)


def test_discrete_gaussian_rejects_mixed_parameters() -> None:
    with pytest.raises(ValueError, match="one of sigma2"):
        dp.mechanisms.discrete_gaussian(1, sensitivity=1, sigma2=2.0, rho=0.1)
    with pytest.raises(ValueError, match="integers"):
        dp.mechanisms.discrete_gaussian(1.5, sensitivity=1, rho=0.1)
