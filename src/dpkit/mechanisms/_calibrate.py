"""Calibration shared by the mechanisms: grids, integer sensitivities, exact noise parameters.

Real-valued releases go through a grid of width ``2**k`` (DESIGN invariant 2, Mironov 2012):
``n = round(x / 2**k)``, integer noise, ``(n + Z) * 2**k``. Round-to-nearest moves each
coordinate by at most half a unit, so for neighbours whose real values differ by ``d`` (in grid
units) the rounded values differ by at most ``|d| + 1`` on every coordinate that changes, and not
at all on the others. Hence, with ``D = sensitivity / 2**k`` and a vector of ``n`` coordinates:

* L1: ``sum_i |r_i| <= sum_{i changed} (|d_i| + 1) <= D + n``, an integer, so
  ``<= floor(D) + n = sensitivity_on_grid(sensitivity, k) + (n - 1)``;
* L2: ``||r||_2 <= ||d||_2 + ||1_changed||_2 <= D + sqrt(n)`` (triangle inequality); for a
  scalar the integer bound ``floor(D) + 1`` is used.

To keep that rounding overhead below about 0.1% of the sensitivity, the grid is chosen for the
per-coordinate share ``sensitivity / n`` (L1) or ``sensitivity / sqrt(n)`` (L2):
``k = noise.grid.choose_exponent(share, scale)``, coarsened if the noise scale in grid units
would exceed what the samplers accept.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from dpkit import noise
from dpkit.noise import grid

__all__ = [
    "dgausssigma2_for_rho",
    "dlap_scale_for",
    "grid_l1",
    "grid_l2_exponent",
    "l2_sensitivity_on_grid",
    "on_grid",
]

_MAX_SCALE = float(noise.MAX_DLAP_SCALE)
_MAX_SIGMA2 = float(noise.MAX_DGAUSS_SIGMA2)


_CACHEABLE = (int, float, Fraction, np.float64, np.int64)


def dlap_scale_for(sensitivity: int | Fraction, epsilon: float) -> float:
    """Smallest float ``s`` with ``sensitivity / s <= epsilon`` *exactly* (as rationals), such
    that the discrete Laplace sampler uses ``s`` itself (``noise.dlap_effective_scale(s) == s``).

    The event ``DiscreteLaplace(s, sensitivity)`` then describes the noise exactly and its pure
    ε, ``sensitivity / s``, is at most the ``epsilon`` asked for.

    A pure function of the two exact values, cached for plain numbers (the exact rational search
    is most of the fixed cost of a small release; errors are not cached)."""
    if type(sensitivity) in _CACHEABLE and type(epsilon) in _CACHEABLE:
        return _dlap_scale_for_cached(sensitivity, epsilon)
    return _dlap_scale_for(sensitivity, epsilon)


def _dlap_scale_for(sensitivity: int | Fraction, epsilon: float) -> float:
    sens = Fraction(sensitivity)
    eps = Fraction(epsilon)
    s = float(sens / eps)
    while Fraction(s) * eps < sens:  # sens / s > eps: one ulp more noise
        s = math.nextafter(s, math.inf)
    if s > _MAX_SCALE:
        raise ValueError(
            f"the noise scale {s:.4g} (sensitivity {float(sens):g} / epsilon {epsilon:g}) exceeds "
            f"the sampler's limit 2**40: raise epsilon or lower the sensitivity"
        )
    eff = noise.dlap_effective_scale(s)
    while eff != Fraction(s):  # only for scales far below 1 with long mantissas
        s = math.nextafter(float(eff), math.inf)
        eff = noise.dlap_effective_scale(s)
    return s


_dlap_scale_for_cached = functools.lru_cache(maxsize=4096, typed=True)(_dlap_scale_for)


def dgausssigma2_for_rho(sensitivity: float, rho: float) -> float:
    """Smallest float ``sigma2`` with ``sensitivity**2 / (2 sigma2) <= rho`` exactly."""
    sens = Fraction(sensitivity)
    r = Fraction(rho)
    s2 = float(sens * sens / (2 * r))
    while sens * sens > 2 * r * Fraction(s2):
        s2 = math.nextafter(s2, math.inf)
    return s2


MAX_SIGMA2 = _MAX_SIGMA2


def grid_l1(sensitivity: float, n: int, ratio: float) -> tuple[int, int]:
    """Grid ``k`` and integer L1 sensitivity ``S`` in grid units for ``n`` coordinates, when the
    largest discrete Laplace scale used will be ``ratio * S`` (``ratio`` = scale/sensitivity,
    e.g. ``1/epsilon``); ``k`` is coarsened until that scale is within the sampler's limit."""
    if ratio * n > _MAX_SCALE * (1 - 1e-9):  # S >= n on every grid
        raise ValueError(
            f"epsilon is too small for {n} coordinate(s): the discrete Laplace scale would be at "
            f"least {ratio * n:.4g} grid units on any grid, above the samplers' limit 2**40; "
            "raise epsilon (or release fewer coordinates)"
        )
    k = exponent_for(sensitivity / n, ratio * sensitivity)
    while True:
        S = grid.sensitivity_on_grid(sensitivity, k) + (n - 1)
        if ratio * S <= _MAX_SCALE * (1 - 1e-9):
            return k, S
        k += 1


def exponent_for(share: float, scale: float) -> int:
    """``noise.grid.choose_exponent(share, scale)``, with an error that names the parameters when
    the grid would leave the supported range ``-1000 <= k <= 1000``."""
    k = grid.choose_exponent(share, scale)
    if not -1000 <= k <= 1000:
        raise ValueError(
            f"sensitivity {share:.3g} (per coordinate) with noise scale {scale:.3g} needs a grid "
            f"2**{k} outside the supported 2**-1000 .. 2**1000: rescale the query (e.g. change "
            "units) so that its sensitivity lies between about 1e-290 and 1e290"
        )
    return k


def grid_l2_exponent(sensitivity: float, sigma_hint: float, n: int) -> int:
    """Grid ``k`` for ``n`` coordinates of L2 ``sensitivity`` and noise of standard deviation
    about ``sigma_hint`` (real units); callers coarsen it further if the variance in grid units
    exceeds the sampler's limit."""
    return exponent_for(sensitivity / math.sqrt(n), sigma_hint)


def l2_sensitivity_on_grid(sensitivity: float, k: int, n: int) -> float:
    """Upper bound on the L2 norm of the difference of two rounded vectors (grid units)."""
    if n == 1:
        return float(grid.sensitivity_on_grid(sensitivity, k))
    D = math.ldexp(sensitivity, -k)  # exact
    root = math.sqrt(n)
    while Fraction(root) ** 2 < n:  # the float must not be below sqrt(n) (checked exactly)
        root = math.nextafter(root, math.inf)
    total = D + root
    if Fraction(total) < Fraction(D) + Fraction(root):
        total = math.nextafter(total, math.inf)
    return total


def on_grid(x: np.ndarray, k: int, name: str = "value", *, saturate: bool = False) -> np.ndarray:
    """``round(x / 2**k)`` (int64), with an error that says what to do if ``x`` is too large.

    ``saturate=True``: clamped to ``±noise.grid.max_grid_value(k)`` instead (±inf included), which
    keeps the sensitivity (clamping is 1-Lipschitz) and never fails on the value.
    """
    try:
        return grid.to_grid(x, k, saturate=saturate)
    except ValueError:
        raise ValueError(
            f"{name} is too large for the release grid 2**{k} chosen from the sensitivity "
            f"(|{name}| / 2**{k} must stay below 2**52, i.e. "
            f"|{name}| < {math.ldexp(1.0, 52 + k):.3g}): "
            "clamp or re-centre it, or state a larger sensitivity"
        ) from None
