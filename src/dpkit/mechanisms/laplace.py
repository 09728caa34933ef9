"""The Laplace mechanism on a grid, and the geometric (discrete Laplace) mechanism on integers.

Both are pure ε-DP and use the exact discrete Laplace sampler ``P(z) ∝ exp(-|z| / s)``
(Canonne-Kamath-Steinke 2020; Ghosh-Roughgarden-Sundararajan 2009 for the geometric mechanism).
For integer noise and an integer query whose L1 sensitivity is ``S``, the privacy loss is at most
``S / s`` for every output, so ``s = S / ε`` gives ε-DP.

Real values are released on a grid of width ``2**k`` (Mironov 2012; DESIGN invariant 2): the
input is rounded to the grid, discrete Laplace noise is added in grid units and the result is
scaled back, so every output is a multiple of ``2**k`` whatever the input and no floating-point
artefact can single it out. Rounding can stretch a neighbour's difference by one grid unit per
coordinate (see :mod:`dpkit.mechanisms._calibrate`), so the integer sensitivity in grid units is
``S = floor(sensitivity / 2**k) + n`` for ``n`` coordinates, and the noise is calibrated to it:
the event ``DiscreteLaplace(S / ε, S)`` has pure ε exactly ``ε`` (up to one ulp more noise).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import DiscreteLaplace
from dpkit.mechanisms import validate as v
from dpkit.mechanisms._calibrate import dlap_scale_for, grid_l1, on_grid
from dpkit.mechanisms.accuracy import (
    dlap_halfwidth,
    interval_release,
)
from dpkit.mechanisms.release import Release
from dpkit.noise import Source

__all__ = ["geometric", "laplace"]


@dataclass(frozen=True)
class _GridLaplace:
    """The calibrated grid Laplace mechanism for a fixed shape (sensitivity, epsilon, n)."""

    k: int  # grid exponent: outputs are multiples of 2**k
    sensitivity: int  # integer L1 sensitivity in grid units
    scale: float  # discrete Laplace scale in grid units (used exactly)

    @functools.cached_property
    def event(self) -> DiscreteLaplace:
        return DiscreteLaplace(self.scale, self.sensitivity)

    def noisy_grid(self, x: np.ndarray, size: tuple[int, ...], src: Source) -> np.ndarray:
        """``round(x / 2**k) + Z`` (int64) with ``size + x.shape`` independent noises."""
        n = on_grid(x, self.k, saturate=True)
        return n + noise.discrete_laplace(self.scale, size + x.shape, source=src)

    def sample(self, x: np.ndarray, size: int, src: Source) -> np.ndarray:
        """``size`` independent releases of ``x`` (for audits and tests), shape (size, *x.shape)."""
        return noise.grid.from_grid(self.noisy_grid(x, (size,), src), self.k)


# Plans are pure functions of the (checked) privacy parameters and immutable, so they are cached:
# a curator releases many small vectors with the same parameters (errors are never cached).
@functools.lru_cache(maxsize=1024, typed=True)
def _plan_laplace(sensitivity: float, epsilon: float, n: int) -> _GridLaplace:
    k, S = grid_l1(sensitivity, n, 1.0 / epsilon)
    return _GridLaplace(k=k, sensitivity=S, scale=dlap_scale_for(S, epsilon))


def laplace(
    value: Any,
    *,
    sensitivity: float,
    epsilon: float,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[Any]:
    """ε-DP Laplace mechanism for a real number or vector, released exactly on a grid.

    **Guarantee**: ε-differential privacy (pure), for the neighbouring relation under which
    ``sensitivity`` was computed (add/remove one privacy unit unless the caller says otherwise):
    the caller promises ``||f(D) - f(D')||_1 <= sensitivity`` for neighbours ``D, D'`` (for a
    vector, the L1 norm of the whole vector). Values are not clamped to data bounds here,
    but answers beyond the grid's range (``|x| >= 2**(52+k)``, ±inf) saturate at its ends,
    ``±noise.grid.max_grid_value(k) 2**k``: clamping is 1-Lipschitz per coordinate, so the
    guarantee is unchanged and whether the call succeeds never depends on the value. NaN is
    refused (``ValueError``): it has no sensible value to release; impute or drop it first.

    **Calibration** (Mironov 2012, exact): ``k = noise.grid.choose_exponent(sensitivity / n, ...)``
    (grid step about ``sensitivity / (1024 n)``), ``S = floor(sensitivity / 2**k) + n`` (integer
    L1 sensitivity after rounding, ``n`` = number of coordinates), discrete Laplace noise with
    scale ``s = S / ε`` grid units, so the real noise scale is ``s 2**k ≈ sensitivity / ε``.
    Event: ``DiscreteLaplace(s, S)``.

    **Accuracy**: ``ci`` covers the *unrounded* input with probability at least ``level`` (per
    coordinate for vectors): ``m`` = smallest integer with ``P(|Z| <= m) >= level`` from the exact
    tail ``P(|Z| > m) = 2 q^(m+1) / (1 + q)``, ``q = exp(-1/s)``, and
    ``ci = ((Y - m) 2**k - 2**(k-1), (Y + m) 2**k + 2**(k-1))``. ``details["coverage"]`` is the
    exact coverage probability.

    >>> import dpkit as dp
    >>> r = dp.mechanisms.laplace(41.3, sensitivity=1, epsilon=0.5, source=dp.noise.seeded(1))
    >>> r.event
    DiscreteLaplace(scale=2050.0, sensitivity=1025)
    >>> r.ci[0] < r.value < r.ci[1] and r.insecure
    True
    """
    sens = v.check_sensitivity(sensitivity)
    eps = v.check_epsilon(epsilon)
    lvl = v.check_level(level)
    x = v.check_reals(value, allow_inf=True)
    src = v.resolve_source(source)
    plan = _plan_laplace(sens, eps, x.size)
    y = plan.noisy_grid(x, (), src)
    m, coverage = dlap_halfwidth(plan.scale, lvl)
    return interval_release(
        y,
        m,
        coverage,
        k=plan.k,
        shape=x.shape,
        event=plan.event,
        level=lvl,
        insecure=src.insecure,
        details={
            "mechanism": "laplace (discrete Laplace on a 2**k grid)",
            "neighbouring": "as for the stated L1 sensitivity (add/remove one unit by default)",
            "grid_exponent": plan.k,
            "grid_sensitivity": plan.sensitivity,
            "grid_scale": plan.scale,
            "scale": math.ldexp(plan.scale, plan.k),
        },
    )


@dataclass(frozen=True)
class _Geometric:
    sensitivity: int
    scale: float

    @functools.cached_property
    def event(self) -> DiscreteLaplace:
        return DiscreteLaplace(self.scale, self.sensitivity)

    def sample(self, x: np.ndarray, size: int, src: Source) -> np.ndarray:
        return x + noise.discrete_laplace(self.scale, (size, *x.shape), source=src)


@functools.lru_cache(maxsize=1024, typed=True)
def _plan_geometric(sensitivity: int, epsilon: float) -> _Geometric:
    return _Geometric(sensitivity=sensitivity, scale=dlap_scale_for(sensitivity, epsilon))


def geometric(
    value: Any,
    *,
    sensitivity: int,
    epsilon: float,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[Any]:
    """ε-DP geometric mechanism (discrete Laplace) for integer queries: integers in, out.

    **Guarantee**: ε-DP (pure) for the relation under which the integer L1 ``sensitivity``
    holds (add/remove one unit by default): ``||f(D) - f(D')||_1 <= sensitivity``. For a count,
    ``sensitivity=1``. Ghosh-Roughgarden-Sundararajan 2009; sampler CKS 2020. Answers beyond
    ``±(2**62 - 1)`` (±inf included) saturate there (1-Lipschitz: the guarantee is unchanged and
    the call never fails on the value); NaN is refused: there is no integer to release for it.

    **Calibration**: ``Z ~ DLap(s)`` with ``s = sensitivity / ε`` (rounded up by at most one ulp
    so that ``sensitivity / s <= ε`` exactly); event ``DiscreteLaplace(s, sensitivity)``.

    **Accuracy**: ``ci = (Y - m, Y + m)`` with ``m`` the smallest integer such that
    ``P(|Z| <= m) = 1 - 2 q^(m+1)/(1 + q) >= level``, ``q = exp(-1/s)``; exact coverage in
    ``details["coverage"]``.

    >>> import dpkit as dp
    >>> r = dp.mechanisms.geometric(41, sensitivity=1, epsilon=0.5, source=dp.noise.seeded(1))
    >>> r.event, r.ci[1] - r.ci[0]
    (DiscreteLaplace(scale=2.0, sensitivity=1), 12)
    >>> isinstance(r.value, int)
    True
    """
    sens = v.check_integer_sensitivity(sensitivity, "geometric")
    eps = v.check_epsilon(epsilon)
    lvl = v.check_level(level)
    x = v.check_integers(value, saturate=True)
    src = v.resolve_source(source)
    plan = _plan_geometric(sens, eps)
    y = x + noise.discrete_laplace(plan.scale, x.shape, source=src)
    m, coverage = dlap_halfwidth(plan.scale, lvl)
    return interval_release(
        y,
        m,
        coverage,
        k=None,
        shape=x.shape,
        event=plan.event,
        level=lvl,
        insecure=src.insecure,
        details={
            "mechanism": "geometric (discrete Laplace)",
            "neighbouring": "as for the stated L1 sensitivity (add/remove one unit by default)",
            "scale": plan.scale,
        },
    )
