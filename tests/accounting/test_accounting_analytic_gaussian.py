"""Analytic Gaussian (Balle-Wang 2018) and μ-GDP (Dong-Roth-Su 2019): vectors, an mpmath oracle,
extremes, and monotonicity."""

from __future__ import annotations

import math

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import events as ev
from dpkit.accounting import analytic_gaussian as ag
from dpkit.accounting import gdp


def _log_delta_mp(mu: float, eps: float) -> float:
    """log δ(ε) of μ-GDP at 60 digits, straight from the formula (the oracle)."""
    with mp.workdps(60):
        mu_, eps_ = mp.mpf(mu), mp.mpf(eps)
        a = mp.ncdf(mu_ / 2 - eps_ / mu_)
        b = mp.exp(eps_) * mp.ncdf(-mu_ / 2 - eps_ / mu_)
        return float(mp.log(a - b))


# -- published vectors (docs/REFERENCES.md) ---------------------------------------------------


def test_balle_wang_vectors() -> None:
    assert ag.delta_for(1.0, 1.0, 1.0) == pytest.approx(0.126936737507, abs=5e-13)
    assert ag.calibrate_sigma(1.0, 1e-5) == pytest.approx(3.7306316348, abs=5e-11)
    assert ag.epsilon_for(1.0, 1e-5) == pytest.approx(4.3771780957, abs=5e-11)
    # the textbook σ = sqrt(2 ln(1.25/δ))/ε is larger
    assert ag.calibrate_sigma(1.0, 1e-5) < math.sqrt(2 * math.log(1.25 / 1e-5))


def test_gaussian_composition_vectors() -> None:
    e = ev.SelfComposed(ev.Gaussian(2.0), 100)
    assert gdp.mu(e) == pytest.approx(5.0)
    assert gdp.epsilon(e, 1e-18) == pytest.approx(55.70932, abs=5e-6)
    assert gdp.epsilon(e, 1e-12) == pytest.approx(47.04923, abs=5e-6)


def test_sensitivity_scales() -> None:
    assert ag.calibrate_sigma(1.0, 1e-5, sensitivity=3.0) == pytest.approx(
        3.0 * ag.calibrate_sigma(1.0, 1e-5), rel=1e-12)
    assert ag.delta_for(6.0, 0.7, sensitivity=2.0) == pytest.approx(ag.delta_for(3.0, 0.7),
                                                                    rel=1e-12)


# -- against the high-precision oracle ---------------------------------------------------------


@pytest.mark.parametrize("mu", [1e-4, 0.05, 0.5, 1.0, 3.0, 10.0, 40.0])
@pytest.mark.parametrize("eps", [0.0, 1e-3, 0.3, 1.0, 5.0, 30.0, 200.0, 1000.0])
def test_log_delta_matches_mpmath(mu: float, eps: float) -> None:
    ours = ag.log_delta_for_mu(mu, eps)
    ref = _log_delta_mp(mu, eps)
    # log δ: relative 1e-9 (where δ is tiny, |log δ| is huge and this is very strict), or
    # absolute 1e-9 near log δ = 0.
    assert ours == pytest.approx(ref, rel=1e-9, abs=1e-9)


def test_delta_far_below_double_range() -> None:
    # δ = e^-700 .. e^-5e5: the log-space formula still gives the right exponent
    for mu, eps in [(1.0, 1000.0), (0.1, 50.0), (5.0, 300.0)]:
        assert ag.log_delta_for_mu(mu, eps) == pytest.approx(_log_delta_mp(mu, eps), rel=1e-9)


@pytest.mark.parametrize("delta", [0.5, 1e-5, 1e-18, 1e-100, 1e-300])
@pytest.mark.parametrize("sigma", [0.02, 0.3, 1.0, 7.0, 300.0])
def test_epsilon_for_is_the_smallest_valid(sigma: float, delta: float) -> None:
    eps = ag.epsilon_for(sigma, delta)
    assert math.isfinite(eps) and eps >= 0.0
    mu = 1.0 / sigma
    if eps > 0.0:
        # valid: δ(ε) <= δ; tight: a slightly smaller ε violates it
        assert ag.log_delta_for_mu(mu, eps) <= math.log(delta)
        assert _log_delta_mp(mu, eps * (1 - 1e-9)) > math.log(delta)
    else:
        assert ag.delta_for(sigma, 0.0) <= delta


@pytest.mark.parametrize("delta", [0.3, 1e-5, 1e-18, 1e-300])
@pytest.mark.parametrize("eps", [1e-3, 0.1, 1.0, 10.0, 1000.0])
def test_calibrate_sigma_is_the_smallest_valid(eps: float, delta: float) -> None:
    sigma = ag.calibrate_sigma(eps, delta)
    assert math.isfinite(sigma) and sigma > 0.0
    assert ag.log_delta_for_mu(1.0 / sigma, eps) <= math.log(delta)
    assert _log_delta_mp(1.0 / (sigma * (1 - 1e-9)), eps) > math.log(delta)


def test_delta_zero_and_trivial_cases() -> None:
    assert ag.epsilon_for(1.0, 0.0) == math.inf
    assert ag.delta_for(1.0, math.inf) == 0.0
    # δ above the total variation distance needs no ε at all
    tv = ag.delta_for(1.0, 0.0)
    assert tv == pytest.approx(math.erf(1 / (2 * math.sqrt(2))), rel=1e-12)
    assert ag.epsilon_for(1.0, min(0.99, tv * 1.01)) == 0.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ag.calibrate_sigma(0.0, 1e-5), "epsilon"),
        (lambda: ag.calibrate_sigma(-1.0, 1e-5), "epsilon"),
        (lambda: ag.calibrate_sigma(float("nan"), 1e-5), "epsilon"),
        (lambda: ag.calibrate_sigma(1.0, 0.0), "delta"),
        (lambda: ag.calibrate_sigma(1.0, 1.0), "delta"),
        (lambda: ag.epsilon_for(0.0, 1e-5), "sigma"),
        (lambda: ag.epsilon_for(1.0, -1e-5), "delta"),
        (lambda: ag.delta_for(1.0, -0.5), "epsilon"),
        (lambda: ag.delta_for(1.0, 1.0, sensitivity=0.0), "sensitivity"),
    ],
)
def test_errors_name_the_parameter(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        call()


@settings(max_examples=60, deadline=None)
@given(
    mu=st.floats(1e-3, 50.0),
    e1=st.floats(0.0, 500.0),
    e2=st.floats(0.0, 500.0),
)
def test_delta_decreases_in_epsilon(mu: float, e1: float, e2: float) -> None:
    lo, hi = sorted((e1, e2))
    assert ag.log_delta_for_mu(mu, hi) <= ag.log_delta_for_mu(mu, lo) + 1e-12


@settings(max_examples=60, deadline=None)
@given(
    m1=st.floats(1e-3, 50.0),
    m2=st.floats(1e-3, 50.0),
    eps=st.floats(0.0, 500.0),
)
def test_delta_increases_in_mu(m1: float, m2: float, eps: float) -> None:
    lo, hi = sorted((m1, m2))
    assert ag.log_delta_for_mu(lo, eps) <= ag.log_delta_for_mu(hi, eps) + 1e-12


def test_gdp_composition_is_exact_and_replace_doubles_sensitivity() -> None:
    e = ev.Composed((ev.Gaussian(3.0), ev.SelfComposed(ev.Gaussian(4.0), 2), ev.NoOp()))
    assert gdp.mu(e) == pytest.approx(math.sqrt(1 / 9 + 2 / 16), rel=1e-15)
    assert gdp.mu(e, neighboring="replace") == pytest.approx(2 * gdp.mu(e), rel=1e-15)
    assert gdp.compose([3.0, 4.0]) == 5.0
    assert gdp.delta(e, 1.0) == pytest.approx(ag.delta_for_mu(gdp.mu(e), 1.0), rel=1e-15)
