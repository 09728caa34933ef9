"""Grid Laplace and geometric mechanisms: calibration, exactness on the grid, laws and CIs."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from _mech_stats import P_FAIL, binomial_p, chi_square_p

import dpkit as dp
from dpkit.events import DiscreteLaplace
from dpkit.mechanisms.laplace import _plan_geometric, _plan_laplace
from dpkit.noise import grid


@pytest.mark.parametrize("sensitivity", [1.0, 0.37, 3.0, 1e-6, 250.0])
@pytest.mark.parametrize("epsilon", [0.01, 0.5, 1.0, 7.3])
@pytest.mark.parametrize("n", [1, 3, 100])
def test_laplace_calibration_is_exact(sensitivity: float, epsilon: float, n: int) -> None:
    plan = _plan_laplace(sensitivity, epsilon, n)
    D = Fraction(sensitivity) / Fraction(2) ** plan.k
    # integer L1 sensitivity after rounding: floor(D) + n (one unit per changed coordinate)
    assert plan.sensitivity >= math.floor(D) + n
    # the event's pure epsilon is at most the one asked for, exactly (not just in floats)
    assert Fraction(plan.sensitivity) / Fraction(plan.scale) <= Fraction(epsilon)
    # ... and not more than one ulp of noise above it
    assert Fraction(plan.sensitivity) / Fraction(math.nextafter(plan.scale, 0)) > Fraction(epsilon)
    # the sampler uses exactly this scale
    assert dp.noise.dlap_effective_scale(plan.scale) == Fraction(plan.scale)
    # the rounding overhead is small: the real noise scale is within 0.2% of sensitivity/epsilon
    real = math.ldexp(plan.scale, plan.k)
    assert sensitivity / epsilon <= real * (1 + 1e-12)
    assert real <= sensitivity / epsilon * 1.002


def test_laplace_release_fields() -> None:
    r = dp.mechanisms.laplace(41.3, sensitivity=1, epsilon=0.5, source=dp.noise.seeded(11))
    assert isinstance(r.value, float)
    assert r.insecure is True
    assert isinstance(r.event, DiscreteLaplace)
    assert r.ci[0] < r.value < r.ci[1]
    assert r.level == 0.95
    # the value is on the grid
    k = r.details["grid_exponent"]
    assert math.ldexp(r.value, -k) == round(math.ldexp(r.value, -k))
    secure = dp.mechanisms.laplace(41.3, sensitivity=1, epsilon=0.5)
    assert secure.insecure is False


def test_laplace_vector_is_calibrated_to_the_whole_vector() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0])
    r = dp.mechanisms.laplace(x, sensitivity=2.0, epsilon=1.0, source=dp.noise.seeded(1))
    assert r.value.shape == (4,)
    assert r.ci[0].shape == (4,) and np.all(r.ci[0] < r.value) and np.all(r.value < r.ci[1])
    ev = r.event
    k = r.details["grid_exponent"]
    assert ev.sensitivity == math.floor(math.ldexp(2.0, -k)) + 4
    assert ev.sensitivity / ev.scale <= 1.0


def test_public_function_uses_the_audited_sampler() -> None:
    # The audits sample through the plan; the public function must draw exactly the same way.
    x = np.array([0.3, -7.25])
    plan = _plan_laplace(1.5, 0.8, 2)
    a = plan.sample(x, 1, dp.noise.seeded(5))[0]
    b = dp.mechanisms.laplace(x, sensitivity=1.5, epsilon=0.8, source=dp.noise.seeded(5)).value
    np.testing.assert_array_equal(a, b)
    g = _plan_geometric(2, 0.7)
    a = g.sample(np.int64(9), 1, dp.noise.seeded(6))[0]
    b = dp.mechanisms.geometric(9, sensitivity=2, epsilon=0.7, source=dp.noise.seeded(6)).value
    assert a == b


def test_mironov_no_identifying_holes() -> None:
    """Mironov (2012): textbook float Laplace leaves holes in the output support that identify
    the input. On the grid, outputs for inputs 0 and 1 lie on the same lattice 2**k Z, every
    value seen for input 0 has positive probability under input 1 (the discrete Laplace has full
    support on the integers), and the low-order bits carry no trace of the input: a two-sample
    chi-square test on (output / 2**k) mod 64 passes (false failure 1e-6)."""
    plan = _plan_laplace(1.0, 1.0, 1)
    k = plan.k
    src = dp.noise.seeded(2024)
    out0 = plan.sample(np.float64(0.0), 400_000, src)
    out1 = plan.sample(np.float64(1.0), 400_000, src)
    for out in (out0, out1):
        units = np.ldexp(out, -k)
        assert np.all(units == np.round(units)), "an output off the grid"
    n1 = int(grid.to_grid(1.0, k))
    units0 = np.ldexp(out0, -k).astype(np.int64)
    # P1(y) = P(Z = y - n1) > 0 for every integer: check it is also not underflowing to 0
    log_p1 = -np.abs(units0 - n1) / plan.scale
    assert np.all(np.isfinite(log_p1)) and np.all(np.exp(log_p1) > 0)
    # low-order bits
    b0 = np.bincount(np.mod(units0, 64), minlength=64)
    b1 = np.bincount(np.mod(np.ldexp(out1, -k).astype(np.int64), 64), minlength=64)
    from scipy import stats

    p = stats.chi2_contingency(np.vstack([b0, b1]))[1]
    assert p > P_FAIL


def test_geometric_law_is_discrete_laplace() -> None:
    """Chi-square of 200k geometric outputs against the exact DLap(1/epsilon) pmf (1e-6)."""
    plan = _plan_geometric(1, 0.7)
    out = plan.sample(np.int64(5), 200_000, dp.noise.seeded(3)) - 5
    r = 60
    x = np.arange(-r, r + 1)
    q = math.exp(-1 / plan.scale)
    pmf = (1 - q) / (1 + q) * q ** np.abs(x)
    pmf[0] += 1 - pmf.sum()  # mass beyond +-r (< 1e-18) folded anywhere
    counts = np.array([(out == v).sum() for v in x])
    assert counts.sum() == out.size
    assert chi_square_p(counts, pmf) > P_FAIL


@pytest.mark.parametrize("mechanism", ["laplace", "geometric"])
def test_ci_coverage_matches_the_exact_coverage(mechanism: str) -> None:
    """Over N = 2000 releases the CI covers the truth with frequency consistent with the exact
    coverage ``details["coverage"]`` (>= level); two-sided exact binomial test at 1e-6. The
    truth 41.3 is not a half-grid point, so coverage is exactly P(|Z| <= m)."""
    src = dp.noise.seeded(77)
    truth = 41.3 if mechanism == "laplace" else 41
    fn = getattr(dp.mechanisms, mechanism)
    covered = 0
    N = 2000
    coverage = None
    for _ in range(N):
        r = fn(truth, sensitivity=1, epsilon=0.3, level=0.8, source=src)
        covered += r.ci[0] <= truth <= r.ci[1]
        coverage = r.details["coverage"]
    assert coverage is not None and coverage >= 0.8
    assert binomial_p(covered, N, coverage) > P_FAIL


def test_geometric_integers_in_and_out() -> None:
    r = dp.mechanisms.geometric([3, 4, 5], sensitivity=3, epsilon=1.0, source=dp.noise.seeded(0))
    assert r.value.dtype == np.int64
    assert r.event == DiscreteLaplace(3.0, 3)
    assert r.ci[0].dtype == np.int64
    assert isinstance(dp.mechanisms.geometric(3, sensitivity=1, epsilon=1.0).value, int)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sensitivity": 1, "epsilon": 0}, "epsilon must be > 0"),
        ({"sensitivity": 1, "epsilon": -1.0}, "epsilon must be > 0"),
        ({"sensitivity": 1, "epsilon": math.nan}, "epsilon"),
        ({"sensitivity": 1, "epsilon": math.inf}, "finite"),
        ({"sensitivity": 0, "epsilon": 1.0}, "sensitivity"),
        ({"sensitivity": -2, "epsilon": 1.0}, "sensitivity"),
        ({"sensitivity": math.inf, "epsilon": 1.0}, "sensitivity"),
        ({"sensitivity": 1, "epsilon": 1.0, "level": 1.0}, "level"),
    ],
)
def test_laplace_rejects_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dp.mechanisms.laplace(1.0, **kwargs)


def test_bad_values_and_keywords() -> None:
    with pytest.raises(ValueError, match="NaN"):
        dp.mechanisms.laplace([1.0, math.nan], sensitivity=1, epsilon=1)
    with pytest.raises(ValueError, match="empty"):
        dp.mechanisms.laplace([], sensitivity=1, epsilon=1)
    with pytest.raises(TypeError):
        dp.mechanisms.laplace(1.0, 1, 1)  # type: ignore[misc]  # privacy params keyword-only
    with pytest.raises(ValueError, match="integer"):
        dp.mechanisms.geometric(1.5, sensitivity=1, epsilon=1)
    with pytest.raises(ValueError, match="sensitivity=1"):
        dp.mechanisms.geometric(1, sensitivity=1.5, epsilon=1)
    with pytest.raises(TypeError, match="source"):
        dp.mechanisms.laplace(1.0, sensitivity=1, epsilon=1, source=42)  # type: ignore[arg-type]
