"""Red-team review: sensitivities in grid units must be true upper bounds, exactly.

``l2_sensitivity_on_grid`` must return a float ``>= D + sqrt(n)`` (D = sensitivity / 2**k):
the proof bounds the rounded difference by ``||d||_2 + ||1_changed||_2``. It guarded the float
``sqrt(n)`` with ``root * root < n`` in floating point, which misses roundings *down* whose
square rounds back to n (n = 11, 14, 21, ...); for 11274 of n < 20000 over four grids the
returned bound was below ``D + sqrt(n)`` (by less than an ulp: a ρ understated in the 16th digit).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpkit.mechanisms._calibrate import grid_l1, l2_sensitivity_on_grid
from dpkit.noise import grid


@pytest.mark.parametrize("k", [-10, -9, 0, 5])
def test_l2_grid_sensitivity_is_at_least_d_plus_sqrt_n(k: int) -> None:
    D = Fraction(1) / Fraction(2) ** k
    for n in range(2, 3000):
        total = Fraction(l2_sensitivity_on_grid(1.0, k, n))
        assert total >= D and (total - D) ** 2 >= n, n


@pytest.mark.parametrize("sens", [1.0, 0.1, 3.7, 2.0**-30, 1e6, 123456.789])
@pytest.mark.parametrize("n", [1, 2, 7, 1000])
def test_l1_grid_sensitivity_bounds_worst_rounding(sens: float, n: int) -> None:
    """Worst case per coordinate: two values D_i + 1/2 apart in grid units rounding apart."""
    k, S = grid_l1(sens, n, 1.0)
    D = Fraction(sens) / Fraction(2) ** k
    # the rounded L1 difference of any pair within L1 distance D is at most floor(D) + n
    assert int(D) + n <= S
    # a concrete worst pair: all the shift on one coordinate, starting at a tie
    a = (Fraction(1, 2)) * Fraction(2) ** k
    b = a + Fraction(sens)
    xa, xb = float(a), float(b)
    if Fraction(xb) - Fraction(xa) <= Fraction(sens):
        diff = abs(int(grid.to_grid(xb, k)) - int(grid.to_grid(xa, k)))
        assert diff <= S


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: grid_l1(1.0, 10, 1e12), "epsilon is too small for 10"),
        (lambda: grid_l1(1e-300, 1, 1.0), "rescale the query"),
    ],
)
def test_out_of_range_parameters_name_the_fix(call, match: str) -> None:  # type: ignore[no-untyped-def]
    """Parameter-only failures (no data involved) say what to change, instead of the grid's
    internal 'k must be in [-1000, 1000]' after ~1000 silent coarsening steps."""
    with pytest.raises(ValueError, match=match):
        call()
