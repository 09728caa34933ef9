"""zCDP: per-event ρ, the CKS conversion (vectors, brute force), its inverse, Laplace's tight ρ."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import events as ev
from dpkit.accounting import UnsupportedEvent, zcdp


def _cks_brute(rho: float, delta: float) -> float:
    """inf over a dense log grid of α of the CKS expression (any α is a valid bound)."""
    a = 1.0 + np.exp(np.linspace(-25.0, 40.0, 400001))
    vals = a * rho + (math.log(1 / delta) + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)
    return max(0.0, float(np.min(vals)))


@pytest.mark.parametrize(("rho", "expected"), [(0.5, 4.728387), (0.1, 1.914239),
                                               (0.025, 0.896613)])
def test_cks_vectors(rho: float, expected: float) -> None:
    assert zcdp.rho_to_epsilon(rho, 1e-5) == pytest.approx(expected, abs=5e-7)


def test_cks_beats_bun_steinke() -> None:
    rho, delta = 0.5, 1e-5
    assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) == pytest.approx(5.298526, abs=1e-6)
    assert zcdp.rho_to_epsilon(rho, delta) < 5.298526


@pytest.mark.parametrize("rho", [1e-8, 1e-4, 0.01, 1.0, 30.0, 1e3, 1e5])
@pytest.mark.parametrize("delta", [0.5, 1e-5, 1e-18, 1e-300])
def test_cks_minimisation_against_brute_force(rho: float, delta: float) -> None:
    ours = zcdp.rho_to_epsilon(rho, delta)
    ref = _cks_brute(rho, delta)
    assert math.isfinite(ours) and ours >= 0.0
    # never above the grid minimum (we minimise at least as well) and not far below it (the
    # grid is dense; anything lower than the true infimum would be a bug)
    assert ours <= ref + 1e-9 * max(1.0, ref)
    assert ours >= ref - 1e-6 * max(1.0, ref)


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 4.728387, 20.0, 1000.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-12, 1e-18])
def test_epsilon_to_rho_is_the_largest_valid(eps: float, delta: float) -> None:
    rho = zcdp.epsilon_to_rho(eps, delta)
    assert rho > 0.0
    assert zcdp.rho_to_epsilon(rho, delta) <= eps
    assert zcdp.rho_to_epsilon(rho * (1 + 1e-7), delta) > eps


def test_epsilon_to_rho_vector_and_edges() -> None:
    assert zcdp.epsilon_to_rho(4.728387, 1e-5) == pytest.approx(0.5, rel=1e-6)
    assert zcdp.epsilon_to_rho(1.0, 0.0) == 0.0
    assert zcdp.rho_to_epsilon(0.0, 1e-9) == 0.0
    assert zcdp.rho_to_epsilon(0.3, 0.0) == math.inf


def test_rho_to_delta_inverts_rho_to_epsilon() -> None:
    for rho in (0.01, 0.5, 10.0):
        for delta in (1e-3, 1e-8, 1e-15):
            eps = zcdp.rho_to_epsilon(rho, delta)
            assert zcdp.rho_to_delta(rho, eps) == pytest.approx(delta, rel=1e-6)


def _laplace_rdp(alpha: float, eps: float) -> float:
    a, e = mp.mpf(alpha), mp.mpf(eps)
    return float(mp.log(a / (2 * a - 1) * mp.exp((a - 1) * e)
                        + (a - 1) / (2 * a - 1) * mp.exp(-a * e)) / (a - 1))


@pytest.mark.parametrize("eps", [1e-3, 0.1, 0.5, 1.0, 2.0, 5.0, 20.0, 100.0])
def test_harrison_manurangsi_laplace_rho_is_sup_of_rdp_over_alpha(eps: float) -> None:
    """Before using ε + e^-ε − 1 for Laplace we check it against sup_α RDP(α)/α numerically."""
    with mp.workdps(40):
        alphas = [1 + 10.0**x for x in np.linspace(-7, 5, 600)]
        sup = max(_laplace_rdp(a, eps) / a for a in alphas)
    rho = zcdp.laplace_rho(eps)
    assert sup <= rho * (1 + 1e-12)  # a valid zCDP bound ...
    assert sup >= rho * (1 - 1e-5)  # ... and tight (approached as α → 1)
    assert rho <= eps * eps / 2  # never worse than the generic pure bound


def test_event_rho_table() -> None:
    assert zcdp.rho(ev.Gaussian(2.0)) == pytest.approx(1 / 8)
    assert zcdp.rho(ev.DiscreteGaussian(8.0, 2)) == pytest.approx(4 / 16)
    assert zcdp.rho(ev.PureDP(0.4)) == pytest.approx(0.08)
    assert zcdp.rho(ev.RandomizedResponse(0.4, 5)) == pytest.approx(0.08)
    assert zcdp.rho(ev.ApproxDP(0.4, 0.0)) == pytest.approx(0.08)
    assert zcdp.rho(ev.Exponential(0.4)) == pytest.approx(0.02)
    assert zcdp.rho(ev.Laplace(2.0)) == pytest.approx(0.5 + math.exp(-0.5) - 1)
    assert zcdp.rho(ev.DiscreteLaplace(4.0, 2)) == pytest.approx(0.125)
    assert zcdp.rho(ev.ZCDP(0.3)) == 0.3
    assert zcdp.rho(ev.NoOp()) == 0.0
    comp = ev.Composed((ev.SelfComposed(ev.Gaussian(2.0), 10), ev.ZCDP(0.1)))
    assert zcdp.rho(comp) == pytest.approx(1.25 + 0.1)
    # Poisson sampling of a pure event: the amplified pure ε gives a smaller ρ
    sampled = ev.PoissonSampled(0.01, ev.PureDP(1.0))
    amp = math.log1p(0.01 * math.expm1(1.0))
    assert zcdp.rho(sampled) == pytest.approx(amp**2 / 2)
    # ... of a Gaussian: no amplification credited (valid: sampling never hurts)
    assert zcdp.rho(ev.PoissonSampled(0.01, ev.Gaussian(1.0))) == pytest.approx(0.5)
    # replace-one: sensitivity doubles, ρ quadruples
    assert zcdp.rho(ev.Gaussian(2.0), neighboring="replace") == pytest.approx(0.5)
    assert zcdp.rho(ev.ZCDP(0.1), neighboring="replace") == pytest.approx(0.4)


def test_unsupported_event_names_event_and_fix() -> None:
    with pytest.raises(UnsupportedEvent, match=r"ApproxDP.*method='basic'"):
        zcdp.rho(ev.Composed((ev.Gaussian(1.0), ev.ApproxDP(1.0, 1e-6))))
    assert not zcdp.supports(ev.ApproxDP(1.0, 1e-6))
    assert zcdp.supports(ev.Gaussian(1.0))


@settings(max_examples=80, deadline=None)
@given(
    rho=st.floats(1e-10, 1e5),
    d1=st.floats(1e-18, 0.9),
    d2=st.floats(1e-18, 0.9),
)
def test_epsilon_monotone_in_delta_and_never_negative(rho: float, d1: float, d2: float) -> None:
    lo, hi = sorted((d1, d2))
    e_lo, e_hi = zcdp.rho_to_epsilon(rho, lo), zcdp.rho_to_epsilon(rho, hi)
    assert 0.0 <= e_hi <= e_lo * (1 + 1e-9) + 1e-12
    assert not math.isnan(e_lo)


@settings(max_examples=80, deadline=None)
@given(r1=st.floats(0.0, 1e5), r2=st.floats(0.0, 1e5), delta=st.floats(1e-18, 0.9))
def test_epsilon_monotone_in_rho(r1: float, r2: float, delta: float) -> None:
    lo, hi = sorted((r1, r2))
    assert zcdp.rho_to_epsilon(lo, delta) <= zcdp.rho_to_epsilon(hi, delta) * (1 + 1e-9) + 1e-12
