"""Answers beyond the representable range saturate (never raise on the value); NaN is refused.

Each check compares two releases drawn with the same seed, so the noise is the same and the
values must agree exactly: no statistics, no false failures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.noise import grid

INT_LIMIT = 2**62 - 1


def _same_noise(mech: Callable[..., Any], a: Any, b: Any, **kw: Any) -> None:
    ra = mech(a, source=dp.noise.seeded(7), **kw)
    rb = mech(b, source=dp.noise.seeded(7), **kw)
    assert np.array_equal(np.asarray(ra.value), np.asarray(rb.value))
    assert np.array_equal(np.asarray(ra.ci), np.asarray(rb.ci))
    assert ra.event == rb.event


@pytest.mark.parametrize(
    ("mech", "kw"),
    [
        (dp.mechanisms.laplace, {"sensitivity": 1.0, "epsilon": 1.0}),
        (dp.mechanisms.gaussian, {"sensitivity": 1.0, "rho": 0.5}),
    ],
)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_grid_mechanisms_saturate_at_the_grid_end(mech: Callable[..., Any], kw: dict,
                                                  sign: float) -> None:
    for x in ([0.0], [3.25, 0.0]):  # one coordinate; two, the last one out of range
        k = mech(x, source=dp.noise.seeded(0), **kw).details["grid_exponent"]
        end = sign * math.ldexp(float(grid.max_grid_value(k)), k)
        for beyond in (sign * math.inf, sign * 1e300, sign * math.ldexp(1.0, 60 + k)):
            _same_noise(mech, [*x[:-1], beyond], [*x[:-1], end], **kw)


@pytest.mark.parametrize(
    ("mech", "kw"),
    [
        (dp.mechanisms.geometric, {"sensitivity": 1, "epsilon": 1.0}),
        (dp.mechanisms.discrete_gaussian, {"sensitivity": 1, "rho": 0.5}),
    ],
)
def test_integer_mechanisms_saturate_at_2_62(mech: Callable[..., Any], kw: dict) -> None:
    for beyond in (2**70, float(2**63), math.inf, np.uint64(2**64 - 1)):
        _same_noise(mech, beyond, INT_LIMIT, **kw)
    for beyond in (-(2**70), -math.inf, np.iinfo(np.int64).min):
        _same_noise(mech, beyond, -INT_LIMIT, **kw)
    _same_noise(mech, [5, 2**80], [5, INT_LIMIT], **kw)
    _same_noise(mech, [5.0, -math.inf], [5, -INT_LIMIT], **kw)


@pytest.mark.parametrize(
    ("mech", "kw"),
    [
        (dp.mechanisms.laplace, {"sensitivity": 1.0, "epsilon": 1.0}),
        (dp.mechanisms.gaussian, {"sensitivity": 1.0, "rho": 0.5}),
        (dp.mechanisms.geometric, {"sensitivity": 1, "epsilon": 1.0}),
        (dp.mechanisms.discrete_gaussian, {"sensitivity": 1, "rho": 0.5}),
    ],
)
def test_nan_is_refused(mech: Callable[..., Any], kw: dict) -> None:
    with pytest.raises(ValueError, match="NaN"):
        mech([1.0, math.nan], **kw)


def test_saturation_keeps_the_grid_sensitivity() -> None:
    """Neighbours straddling the grid end still differ by at most S grid units after rounding
    and clamping (clamping to [-C, C] is 1-Lipschitz)."""
    r = dp.mechanisms.laplace(0.0, sensitivity=1.0, epsilon=1.0, source=dp.noise.seeded(0))
    k, S = r.details["grid_exponent"], r.details["grid_sensitivity"]
    C = grid.max_grid_value(k)
    x = np.ldexp(np.arange(C - 3, C + 4, dtype=np.float64), k)
    for d in (1.0, -1.0, 0.5, math.inf):
        xp = x + d
        diff = np.abs(grid.to_grid(x, k, saturate=True) - grid.to_grid(xp, k, saturate=True))
        if math.isfinite(d):
            assert diff.max() <= S
        else:
            assert diff.max() <= 3  # x within 3 units of C: clamping only shrinks distances
