"""Red-team review: the analytic-Gaussian / μ-GDP curve must be an upper bound for tiny μ.

For μ = Δ/σ below ~1e-8 both closed forms cancel catastrophically (Φ(x1) − e^ε Φ(x2) with both
terms ≈ 1/2; erfcx(z1) − erfcx(z2) with z2 − z1 = μ/√2): δ(0) of μ = 1e-17 came out as 0
(truth 3.99e-18), so ``epsilon(Gaussian(1e17), delta=1e-18)`` printed ε = 0 for a mechanism
that is not (0, 1e-18)-DP; at μ = 1e-12 δ was off by 2e-4 relative (either sign).
Reference: mpmath at 60 digits.
"""

from __future__ import annotations

import math

import mpmath as mp
import pytest

import dpkit.events as ev
from dpkit import accounting
from dpkit.accounting import analytic_gaussian as ag


def _delta_mp(mu: float, eps: float) -> mp.mpf:
    with mp.workdps(60):
        m, e = mp.mpf(mu), mp.mpf(eps)
        return mp.ncdf(m / 2 - e / m) - mp.exp(e) * mp.ncdf(-m / 2 - e / m)


@pytest.mark.parametrize("mu", [1e-17, 1e-12, 1e-9, 3e-7, 9.9e-7])
@pytest.mark.parametrize("ratio", [0.0, 1e-6, 0.3, 1.0, 3.0, 30.0, 300.0])
def test_tiny_mu_delta_is_an_upper_bound_and_tight(mu: float, ratio: float) -> None:
    eps = ratio * mu  # ε on the scale of μ, where δ(ε) is not negligible
    got = ag.log_delta_for_mu(mu, eps)
    ref = float(mp.log(_delta_mp(mu, eps)))
    assert got >= ref  # an upper bound (the small-μ branch is a proven bound + 1e-9 cushion)
    assert got <= ref + 1e-5  # and tight: slack about 0.63 μ relative


@pytest.mark.parametrize("mu", [1e-6, 1e-5, 1e-4])
@pytest.mark.parametrize("ratio", [0.0, 0.3, 3.0])
def test_closed_form_above_the_cutoff_is_float_accurate(mu: float, ratio: float) -> None:
    got = ag.delta_for_mu(mu, ratio * mu)
    assert got == pytest.approx(float(_delta_mp(mu, ratio * mu)), rel=1e-9)


def test_tiny_mu_epsilon_is_not_zero() -> None:
    e = ev.Gaussian(1e17)  # μ = 1e-17: δ(0) = TV = 3.99e-18 > 1e-18
    eps = accounting.epsilon(e, 1e-18)
    assert eps > 0.0
    assert _delta_mp(1e-17, eps) <= 1e-18 * (1 + 1e-12)
    assert math.isfinite(eps)
