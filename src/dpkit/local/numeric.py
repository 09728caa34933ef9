"""Local Laplace for bounded numeric values, exact on a grid (Mironov-safe).

Each user clamps ``x`` to ``[lower, upper]``, writes it in units of ``2^k`` and rounds it
*randomly* to a neighbouring grid point (up with probability equal to the fractional part,
sampled exactly from :mod:`dpkit.noise`, so the rounding is unbiased), then adds discrete
Laplace noise of scale ``Δ/ε`` grid units, where ``Δ = ceil(upper/2^k) - floor(lower/2^k)``
bounds the distance between any two users' grid values. The report is an integer: no float
artefact can leak the input (Mironov 2012). Privacy: ε-LDP (replace-one on the user's value),
exactly — the discrete Laplace ratio for a shift of at most Δ is ``e^{Δ/scale}``; when the noise
layer rounds the scale it rounds it *up* (:func:`dpkit.noise.dlap_effective_scale`).

The server's mean ``2^k Σ y_i / n`` is unbiased for the mean of the clamped values, with exact
variance ``4^k [Σ_i r_i (1 - r_i) + n σ²] / n²``: r_i the fractional parts, and
``σ² = 2 e^{-1/s} / (1 - e^{-1/s})²`` the discrete Laplace variance at scale s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import Event, PureDP
from dpkit.noise import Source

from ._exact import check_epsilon
from .base import Reports, Tally, is_insecure

__all__ = ["LocalLaplace", "MeanEstimate"]


@dataclass(frozen=True)
class MeanEstimate:
    """A mean estimated from local reports, with its (plug-in) variance."""

    value: float
    variance: float
    n: int
    event: Event

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)


class LocalLaplace:
    """ε-LDP reports of numbers in ``[lower, upper]`` (grid + discrete Laplace).

    >>> import dpkit.noise as noise
    >>> lap = LocalLaplace(lower=0.0, upper=100.0, epsilon=1.0)
    >>> est = lap.estimate_mean(lap.randomize([10.0, 20.0, 30.0], source=noise.seeded(1)))
    >>> est.n
    3
    """

    kind = "laplace"

    def __init__(self, *, lower: float, upper: float, epsilon: float | Fraction,
                 grid_exponent: int | None = None) -> None:
        lo, hi = float(lower), float(upper)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"need finite lower < upper (got lower={lower}, upper={upper})")
        eps = check_epsilon(epsilon)
        if grid_exponent is None:
            grid_exponent = math.floor(math.log2((hi - lo) / 1024))
        self.k = int(grid_exponent)
        self.lower, self.upper = lo, hi
        self.L = math.floor(math.ldexp(lo, -self.k))
        self.U = math.ceil(math.ldexp(hi, -self.k))
        self.sensitivity = self.U - self.L
        if self.sensitivity > 1 << 30:
            raise ValueError(f"grid 2^{self.k} is too fine for [{lo}, {hi}]: choose a larger "
                             "grid_exponent")
        self.scale = noise.dlap_effective_scale(Fraction(self.sensitivity) / eps)
        self.epsilon = float(eps)
        self.requested_epsilon = float(eps)
        noise.as_rational(self.epsilon, "epsilon")

    @property
    def event(self) -> Event:
        return PureDP(self.epsilon)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "lower": self.lower, "upper": self.upper,
                "epsilon": self.requested_epsilon, "grid_exponent": self.k}

    @property
    def noise_variance(self) -> float:
        """Variance of the discrete Laplace noise, in grid units²."""
        a = math.exp(-1 / float(self.scale))
        return 2 * a / (1 - a) ** 2

    def _grid(self, values: Any) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray(values, dtype=np.float64)
        if x.ndim != 1 or not np.all(np.isfinite(x)):
            raise ValueError("values must be a 1-d array of finite numbers")
        z = np.ldexp(np.clip(x, self.lower, self.upper), -self.k)
        fl = np.floor(z)
        return fl, z - fl  # exact: z - floor(z) is representable

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        fl, frac = self._grid(values)
        up = noise.bernoulli_lanes(frac, source=source)
        g = fl.astype(np.int64) + up
        y = g + noise.discrete_laplace(self.scale, g.size, source=source)
        return Reports(self.kind, {"y": y}, is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        if not isinstance(reports, Reports) or reports.kind != self.kind:
            raise TypeError("LocalLaplace.aggregate needs reports of kind 'laplace'")
        y = np.asarray(reports["y"], dtype=np.int64)
        return Tally(self.kind, np.array([int(y.sum())], dtype=object), int(y.size),
                     reports.insecure)

    def estimate_mean(self, data: Reports | Tally) -> MeanEstimate:
        t = self.aggregate(data) if isinstance(data, Reports) else data
        n = max(t.n, 1)
        mean = math.ldexp(float(Fraction(int(t.stats[0]), n)), self.k)
        # rounding variance r(1 - r) <= 1/4 per user: an upper bound (values are not seen)
        var = math.ldexp(1.0, 2 * self.k) * (n * self.noise_variance + n / 4) / n**2
        return MeanEstimate(mean, var, t.n, self.event)

    def mean_variance(self, values: Any) -> float:
        """Exact variance of :meth:`estimate_mean` for these true values."""
        _, frac = self._grid(values)
        n = frac.size
        return math.ldexp(1.0, 2 * self.k) * (float(np.sum(frac * (1 - frac)))
                                             + n * self.noise_variance) / n**2
