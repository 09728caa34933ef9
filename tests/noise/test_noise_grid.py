"""Grid helpers: exact rounding and scaling, the sensitivity bound, and the Mironov property."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpkit.noise as noise
from dpkit.noise import grid


def test_grid_is_an_attribute_of_noise() -> None:
    assert noise.grid is grid


@pytest.mark.parametrize(
    ("sens", "scale", "k"), [(1.0, 2.0, -10), (1024.0, 1.0, 0), (0.75, 10.0, -11)]
)
def test_choose_exponent_rule(sens: float, scale: float, k: int) -> None:
    assert grid.choose_exponent(sens, scale) == k
    assert 2.0**k <= sens / 2**10


def test_choose_exponent_keeps_scale_int64_safe() -> None:
    for sens, scale in [(1.0, 1e15), (1e-9, 1e6), (3.0, 2.0**39), (1.0, 2.0**39 + 1)]:
        k = grid.choose_exponent(sens, scale)
        assert scale / 2.0**k <= 2.0**39
        # either the resolution rule holds, or the scale cap forced a coarser grid
        assert 2.0**k <= sens / 2**10 or scale / 2.0 ** (k - 1) > 2.0**39


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_choose_exponent_errors(bad: float) -> None:
    with pytest.raises(ValueError, match="sensitivity must be a finite number > 0"):
        grid.choose_exponent(bad, 1.0)
    with pytest.raises(ValueError, match="scale must be a finite number > 0"):
        grid.choose_exponent(1.0, bad)


def test_to_grid_rounds_exactly() -> None:
    k = -3  # grid step 1/8
    x = np.array([0.0, 0.0625, 0.1875, 0.3, -0.0625, 1e10, -2.5 / 8])
    n = grid.to_grid(x, k)
    assert n.dtype == np.int64
    # exact: round(x * 8) half-to-even, computed with Fractions
    want = [round(Fraction(v) * 8) for v in x]  # Python round is half-to-even
    assert n.tolist() == want


def test_round_trip_is_exact() -> None:
    src = noise.seeded(5)
    for k in (-30, -10, 0, 7):
        n = noise.uniform_int(2**52, 1000, source=src) - 2**51
        assert np.array_equal(grid.to_grid(grid.from_grid(n, k), k), n)
        x = grid.from_grid(n, k)
        for v, m in zip(x, n, strict=True):
            assert Fraction(float(v)) == Fraction(int(m)) * Fraction(2) ** k


def test_to_grid_errors() -> None:
    with pytest.raises(ValueError, match="must be finite"):
        grid.to_grid([1.0, float("nan")], 0)
    with pytest.raises(ValueError, match="must be < 2\\*\\*52"):
        grid.to_grid(2.0**60, 0)
    with pytest.raises(ValueError, match="must be <= 2\\*\\*53"):
        grid.to_grid(np.array([2**60 + 1]), 9)
    with pytest.raises(ValueError, match="\\|n\\| must be <= 2\\*\\*53"):
        grid.from_grid(np.array([2**60]), 0)
    with pytest.raises(TypeError, match="integer array"):
        grid.from_grid(np.array([1.5]), 0)


def test_sensitivity_on_grid_bound_is_valid_and_tight() -> None:
    rng = np.random.default_rng(0)
    for k in (-10, -3, 0, 2):
        h = 2.0**k
        for sens in (1.0, 0.3, 2.5, 3.0, 7.0 * h, 1e-6):
            bound = grid.sensitivity_on_grid(sens, k)
            assert bound == math.floor(sens / h) + 1
            x = rng.uniform(-100, 100, 20_000)
            d = rng.uniform(-sens, sens, 20_000)
            ties = np.round(x / h) * h + h / 2  # exact ties are the worst case
            for a in (x, ties):
                b = a + np.clip(d, -sens, sens)
                diff = np.abs(grid.to_grid(a, k) - grid.to_grid(b, k))
                assert diff.max() <= bound
    # tightness for odd integer D: 0.5 -> 0 and 1.5 -> 2 (half to even), D = 1, bound 2
    assert grid.to_grid(1.5, 0) - grid.to_grid(0.5, 0) == 2 == grid.sensitivity_on_grid(1.0, 0)


def test_sensitivity_on_grid_errors() -> None:
    with pytest.raises(ValueError, match="sensitivity must be a finite number >= 0"):
        grid.sensitivity_on_grid(-1.0, 0)
    with pytest.raises(TypeError, match="k must be an int"):
        grid.sensitivity_on_grid(1.0, 0.5)  # type: ignore[arg-type]


def test_mironov_outputs_share_one_grid() -> None:
    """Releases for inputs 0 and 1 (and an awkward float) all lie on the same 2**k grid, so the
    support of the output cannot reveal the input (Mironov 2012)."""
    sens, eps = 1.0, 0.5
    k = grid.choose_exponent(sens, sens / eps)
    step = 2.0**k
    scale = Fraction(grid.sensitivity_on_grid(sens, k)) / Fraction(eps)
    src = noise.seeded(7)
    supports = []
    for x in (0.0, 1.0, 0.1 + 0.2):
        noisy = grid.to_grid(x, k) + noise.discrete_laplace(scale, 5000, source=src)
        out = grid.from_grid(noisy, k)
        assert np.all(out / step == np.round(out / step))  # every output is a multiple of 2**k
        supports.append(set(np.unique(np.mod(out, step))))
    assert supports[0] == supports[1] == supports[2] == {0.0}


def test_to_grid_saturates_beyond_the_grid_range() -> None:
    C = 2**52 - 1
    assert grid.max_grid_value(-10) == C == grid.max_grid_value(948)
    assert grid.max_grid_value(960) == 2**40  # n * 2**k stays <= 2**1000, far from overflow
    x = np.array([np.inf, -np.inf, 1e300, -1e300, 2.0**60, 2.0**52 - 1, 0.4, -2.5])
    out = grid.to_grid(x, 0, saturate=True)
    assert out.tolist() == [C, -C, C, -C, C, C, 0, -2]
    assert grid.to_grid(np.array([np.inf]), 960, saturate=True).tolist() == [2**40]
    with pytest.raises(ValueError, match="must be finite"):
        grid.to_grid([1.0, float("nan")], 0, saturate=True)


def test_saturation_is_one_lipschitz() -> None:
    """|c(a) - c(b)| <= |rint(a) - rint(b)| for clamping c to [-C, C], on pairs around the ends."""
    C = grid.max_grid_value(0)
    a = np.arange(C - 40, C + 41, dtype=np.float64)
    a = np.concatenate([a, -a, [np.inf, -np.inf]])
    A, B = np.meshgrid(a, a)
    ca, cb = grid.to_grid(A, 0, saturate=True), grid.to_grid(B, 0, saturate=True)
    ra, rb = np.rint(A), np.rint(B)
    with np.errstate(invalid="ignore"):
        bound = np.abs(ra - rb)  # inf - inf = nan: both saturate to the same end, distance 0
    assert np.all((np.abs(ca - cb) <= bound) | np.isnan(bound))
