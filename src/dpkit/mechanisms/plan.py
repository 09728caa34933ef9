"""Noise planning without noise: the parameters, the event and the interval of a mechanism.

Higher layers (the query engine, preview and accuracy-first budgeting) must know *before any data
is read* which noise a measurement will get, what it costs and how wide its interval will be.
This module is the public face of that calibration; it draws no random numbers and reads no data.

* :func:`discrete_laplace_plan` — integer noise ``P(z) ∝ exp(-|z|/scale)`` on an integer query
  of L1 ``sensitivity`` under add/remove of one privacy unit. The scale is the smallest float with
  ``sensitivity / scale <= epsilon`` exactly (as rationals) that the sampler uses unchanged, so
  the event ``DiscreteLaplace(scale, sensitivity)`` is pure ``sensitivity/scale``-DP, at most
  ``epsilon`` (Ghosh-Roughgarden-Sundararajan 2012; Canonne-Kamath-Steinke 2020).
* :func:`discrete_gaussian_plan` — integer noise ``P(z) ∝ exp(-z²/(2 sigma2))`` on a query of L2
  ``sensitivity``: ``sensitivity²/(2 sigma2)``-zCDP <= ``rho`` (CKS 2020, Thm 14); the event is
  ``DiscreteGaussian(sigma2, sensitivity)``.

Each plan's :meth:`NoisePlan.halfwidth` gives the smallest integer ``m`` with
``P(|Z| <= m) >= level`` from the exact noise law, so ``[y - m, y + m]`` covers the exact answer
with probability at least ``level``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpkit import events as ev
from dpkit.mechanisms import _calibrate
from dpkit.mechanisms import accuracy as _accuracy

__all__ = [
    "NoisePlan",
    "discrete_gaussian_halfwidth",
    "discrete_gaussian_plan",
    "discrete_laplace_halfwidth",
    "discrete_laplace_plan",
    "selected_count_lower",
]


@dataclass(frozen=True)
class NoisePlan:
    """The noise one integer measurement will get: mechanism, parameter, event."""

    mechanism: str  # "discrete_laplace" | "discrete_gaussian"
    sensitivity: float
    scale: float = 0.0  # discrete Laplace scale
    sigma2: float = 0.0  # discrete Gaussian variance parameter
    event: ev.Event = field(default_factory=ev.NoOp)

    def halfwidth(self, level: float = 0.95) -> int:
        """Smallest ``m >= 0`` with ``P(|Z| <= m) >= level`` for this plan's noise ``Z``."""
        return self.interval(level)[0]

    def interval(self, level: float = 0.95) -> tuple[int, float]:
        """``(m, coverage)``: the half-width and the exact probability ``P(|Z| <= m)``."""
        if self.mechanism == "discrete_laplace":
            return discrete_laplace_halfwidth(self.scale, level)
        return discrete_gaussian_halfwidth(self.sigma2, level)


def _check_level(level: object) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1) (got {level!r}); e.g. level=0.95")
    return float(level)


def discrete_laplace_halfwidth(scale: float, level: float = 0.95) -> tuple[int, float]:
    """``(m, coverage)``: smallest ``m`` with ``P(|Z| <= m) >= level`` for ``Z ~ DLap(scale)``
    (``P(|Z| > m) = 2 q^(m+1)/(1+q)``, ``q = e^(-1/scale)``), and that exact probability."""
    return _accuracy.dlap_halfwidth(_check_positive("scale", scale), _check_level(level))


def discrete_gaussian_halfwidth(sigma2: float, level: float = 0.95) -> tuple[int, float]:
    """``(m, coverage)``: smallest ``m`` with ``P(|Z| <= m) >= level`` for the discrete Gaussian
    of variance parameter ``sigma2``, and that probability (from the exact law)."""
    return _accuracy.dgauss_halfwidth(_check_positive("sigma2", sigma2), _check_level(level))


def selected_count_lower(values: object, threshold: int, level: float = 0.95, *,
                         scale: float | None = None, sigma2: float | None = None) -> np.ndarray:
    """Lower interval ends, valid *given that* ``y >= threshold``, for noisy counts that also
    decided whether they are shown (partition selection reusing its noisy count): see
    :func:`dpkit.mechanisms.accuracy.selected_count_lower`. The upper end stays ``y + m``."""
    return _accuracy.selected_count_lower(values, threshold, _check_level(level), scale=scale,
                                          sigma2=sigma2)


def _check_positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number > 0 (got {value!r})")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")
    return v


def discrete_laplace_plan(*, sensitivity: int, epsilon: float) -> NoisePlan:
    """Plan discrete Laplace noise for an integer query of L1 ``sensitivity`` at ``epsilon``.

    Guarantee: adding ``DLap(scale)`` noise is ``sensitivity/scale``-DP <= ``epsilon`` under
    add/remove of one unit (the caller's sensitivity is for that relation). Raises ValueError when
    the scale would exceed the sampler's limit (2**40).
    """
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
        raise ValueError(f"sensitivity must be an integer >= 1 (got {sensitivity!r}); round the "
                         f"query onto an integer grid first")
    eps = _check_positive("epsilon", epsilon)
    scale = float(_calibrate.dlap_scale_for(sensitivity, eps))
    return NoisePlan("discrete_laplace", sensitivity, scale=scale,
                     event=ev.DiscreteLaplace(scale, sensitivity))


def discrete_gaussian_plan(*, sensitivity: float, rho: float) -> NoisePlan:
    """Plan discrete Gaussian noise for an integer query of L2 ``sensitivity`` at ``rho``-zCDP.

    ``sigma2`` is the smallest float with ``sensitivity²/(2 sigma2) <= rho`` exactly, so the
    event ``DiscreteGaussian(sigma2, sensitivity)`` is at most ``rho``-zCDP (CKS 2020).
    """
    sens = _check_positive("sensitivity", sensitivity)
    r = _check_positive("rho", rho)
    sigma2 = float(_calibrate.dgausssigma2_for_rho(sens, r))
    if sigma2 > _calibrate.MAX_SIGMA2:
        raise ValueError(f"the noise variance {sigma2:.4g} exceeds the sampler's limit "
                         f"{_calibrate.MAX_SIGMA2:.4g}: raise rho or lower the sensitivity")
    return NoisePlan("discrete_gaussian", sens, sigma2=sigma2,
                     event=ev.DiscreteGaussian(sigma2, sens))
