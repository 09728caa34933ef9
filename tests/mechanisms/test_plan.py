"""dpkit.mechanisms.plan: calibration, events and intervals, checked against the exact laws."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpkit as dp
from dpkit import events as ev
from dpkit.mechanisms.plan import (
    discrete_gaussian_halfwidth,
    discrete_gaussian_plan,
    discrete_laplace_halfwidth,
    discrete_laplace_plan,
)


def _dlap_tail(m: int, scale: float) -> float:
    """P(|Z| > m) for P(z) ∝ q^|z|: 2 q^(m+1) / (1+q), q = e^(-1/scale)."""
    q = math.exp(-1.0 / scale)
    return 2.0 * q ** (m + 1) / (1.0 + q)


def _dgauss_tail(m: int, sigma2: float) -> float:
    r = int(m + 40 * math.sqrt(sigma2) + 50)
    x = np.arange(-r, r + 1, dtype=np.float64)
    w = np.exp(-(x * x) / (2.0 * sigma2))
    return float(w[np.abs(x) > m].sum() / w.sum())


@pytest.mark.parametrize(("sens", "eps"), [(1, 1.0), (3, 0.1), (1000, 0.37), (7, 5.0)])
def test_laplace_plan_is_calibrated_exactly(sens: int, eps: float) -> None:
    p = discrete_laplace_plan(sensitivity=sens, epsilon=eps)
    assert Fraction(sens) / Fraction(p.scale) <= Fraction(eps)
    assert Fraction(sens) / Fraction(math.nextafter(p.scale, 0.0)) > Fraction(eps) or \
        p.scale > sens / eps * (1 + 1e-12)
    assert p.event == ev.DiscreteLaplace(p.scale, sens)
    assert dp.accounting.epsilon(p.event, 0.0, method="pure") <= eps * (1 + 1e-12)


@pytest.mark.parametrize(("sens", "rho"), [(1.0, 0.5), (math.sqrt(3), 0.01), (100.0, 2.0)])
def test_gaussian_plan_is_calibrated_exactly(sens: float, rho: float) -> None:
    p = discrete_gaussian_plan(sensitivity=sens, rho=rho)
    assert Fraction(sens) ** 2 / (2 * Fraction(p.sigma2)) <= Fraction(rho)
    assert p.sigma2 == pytest.approx(sens * sens / (2 * rho), rel=1e-12)
    assert p.event == ev.DiscreteGaussian(p.sigma2, sens)


@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5, 250.0])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.999])
def test_laplace_halfwidth_is_the_smallest_covering_integer(scale: float, level: float) -> None:
    m, cov = discrete_laplace_halfwidth(scale, level)
    assert 1.0 - _dlap_tail(m, scale) >= level - 1e-12
    assert m == 0 or 1.0 - _dlap_tail(m - 1, scale) < level + 1e-9
    assert cov == pytest.approx(1.0 - _dlap_tail(m, scale), abs=1e-12)
    assert discrete_laplace_plan(sensitivity=1, epsilon=1 / scale).halfwidth(level) >= m - 1


@pytest.mark.parametrize("sigma2", [0.5, 4.0, 100.0, 2500.0])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_gaussian_halfwidth_is_the_smallest_covering_integer(sigma2: float, level: float) -> None:
    m, cov = discrete_gaussian_halfwidth(sigma2, level)
    assert 1.0 - _dgauss_tail(m, sigma2) >= level - 1e-9
    assert m == 0 or 1.0 - _dgauss_tail(m - 1, sigma2) < level + 1e-9
    assert cov == pytest.approx(1.0 - _dgauss_tail(m, sigma2), abs=1e-9)


def test_intervals_cover_the_sampled_noise() -> None:
    # n = 40000 draws, coverage p >= 0.95: the observed rate falls below p - 5.3 sd with
    # probability < 1e-7 (normal approximation to the binomial; sd = sqrt(p(1-p)/n) ~ 0.0011)
    n, level = 40_000, 0.95
    src = dp.noise.seeded(20261122)
    lp = discrete_laplace_plan(sensitivity=3, epsilon=0.5)
    z = dp.noise.discrete_laplace(lp.scale, n, source=src)
    sd = math.sqrt(level * (1 - level) / n)
    assert np.mean(np.abs(z) <= lp.halfwidth(level)) >= level - 5.3 * sd
    gp = discrete_gaussian_plan(sensitivity=2.0, rho=0.05)
    z = dp.noise.discrete_gaussian(gp.sigma2, n, source=src)
    assert np.mean(np.abs(z) <= gp.halfwidth(level)) >= level - 5.3 * sd


def test_bad_parameters_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="integer >= 1"):
        discrete_laplace_plan(sensitivity=0, epsilon=1.0)
    with pytest.raises(ValueError, match="integer >= 1"):
        discrete_laplace_plan(sensitivity=1.5, epsilon=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epsilon"):
        discrete_laplace_plan(sensitivity=1, epsilon=-1.0)
    with pytest.raises(ValueError, match="epsilon"):
        discrete_laplace_plan(sensitivity=1, epsilon=float("nan"))
    with pytest.raises(ValueError, match="rho"):
        discrete_gaussian_plan(sensitivity=1.0, rho=0.0)
    with pytest.raises(ValueError, match="limit"):
        discrete_laplace_plan(sensitivity=2**30, epsilon=1e-9)
    with pytest.raises(ValueError, match="level"):
        discrete_laplace_plan(sensitivity=1, epsilon=1.0).halfwidth(1.0)
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace_halfwidth(0.0, 0.95)


def test_engine_measurements_use_the_public_plan(tmp_path: object) -> None:
    from dpkit.engine import Curator

    cur = Curator.create(tmp_path / "p.dpkit", epsilon=10.0,  # type: ignore[operator]
                         source=dp.noise.seeded(1))
    cur.add_table("t", {"x": np.arange(10.0)}, bounds={"x": (0, 9)})
    plan = cur._plan("SELECT COUNT(*), SUM(x) FROM t", epsilon=1.0, rho=None, delta=None,
                     noise="laplace", level=0.95, bounds=None)
    for mm in plan.measures:
        want = discrete_laplace_plan(sensitivity=mm.l1, epsilon=mm.epsilon)
        assert mm.event == want.event
    cur.close()
