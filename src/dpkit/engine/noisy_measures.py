"""One measurement's noise: exact integers in, noisy integers (or grid values) with intervals out.

Every noisy value comes from :mod:`dpkit.mechanisms` (geometric / discrete Gaussian); nothing
here draws randomness. Each mechanism's event is checked against the event the plan charged: a
mechanism that would spend more than was charged stops the query (the charge stays; nothing is
shown). Split from :mod:`dpkit.engine.noisy` (the release step), which drives it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit import mechanisms
from dpkit.engine.plan import GAUSSIAN, GAUSSIAN_THRESHOLD, LAPLACE, Measure
from dpkit.mechanisms.plan import discrete_gaussian_halfwidth as dgauss_halfwidth
from dpkit.mechanisms.plan import discrete_laplace_halfwidth as dlap_halfwidth
from dpkit.noise import Source

__all__ = ["MechanismMismatchError", "NoisyMeasure", "as_int", "centred_sums", "check_event",
           "halfwidth", "noisy_integer"]



@dataclass
class NoisyMeasure:
    value: np.ndarray  # native units (float) or integers for counts
    low: np.ndarray
    high: np.ndarray
    scale_kind: str
    details: dict[str, Any]


class MechanismMismatchError(RuntimeError):
    """A mechanism reported a different event than the one charged (an internal error)."""


def halfwidth(mm: Measure, level: float) -> float:
    """CI half-width in native units of a Laplace/Gaussian measurement at ``level``."""
    if mm.noise in (LAPLACE, "threshold"):
        m, _ = dlap_halfwidth(mm.scale, level)
    elif mm.noise in (GAUSSIAN, GAUSSIAN_THRESHOLD):
        m, _ = dgauss_halfwidth(mm.sigma2, level)
    else:
        return math.nan
    return math.ldexp(float(m), -mm.f)


def check_event(charged: ev.Event, got: ev.Event) -> None:
    if charged == got:
        return
    if (isinstance(charged, ev.Composed) and len(charged.events) == 2
            and isinstance(charged.events[1], ev.ApproxDP) and charged.events[1].epsilon == 0):
        # Gaussian partition selection: the noise part is checked; the threshold's delta is
        # a property of the threshold the plan computed
        check_event(charged.events[0], got)
        return
    ok = (
        (isinstance(charged, ev.DiscreteLaplace) and isinstance(got, ev.DiscreteLaplace)
         and got.sensitivity == charged.sensitivity and got.scale >= charged.scale)
        or (isinstance(charged, ev.DiscreteGaussian) and isinstance(got, ev.DiscreteGaussian)
            and got.sigma2 >= charged.sigma2 and got.sensitivity <= charged.sensitivity)
        or (isinstance(charged, ev.ZCDP) and isinstance(got, ev.ZCDP)
            and got.rho <= charged.rho)
        or (isinstance(charged, ev.ZCDP) and isinstance(got, ev.DiscreteGaussian)
            and got.sensitivity**2 / (2 * got.sigma2) <= charged.rho * (1 + 1e-12))
        or (isinstance(charged, ev.ApproxDP) and isinstance(got, ev.DiscreteLaplace)
            and got.sensitivity / got.scale <= charged.epsilon * (1 + 1e-12))
        or (isinstance(charged, ev.Exponential) and isinstance(got, ev.Exponential)
            and got.epsilon <= charged.epsilon)
        or (isinstance(charged, ev.SelfComposed) and isinstance(got, ev.Exponential)
            and isinstance(charged.event, ev.Exponential)
            and got.epsilon <= charged.event.epsilon)
    )
    if ok:
        return
    raise MechanismMismatchError(
        f"internal error: a mechanism released under {got!r} but {charged!r} was charged; the "
        f"answer is withheld (the charge stands). Please report this."
    )


_INT_LIMIT = 2**62


def as_int(values: Any) -> np.ndarray:
    """Exact integers as int64, NULL (None) as 0, clipped to ``±2^62``.

    Clipping the exact total is 1-Lipschitz: it can only lower the sensitivity.
    """
    lim = _INT_LIMIT
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return np.clip(values, -lim, lim)
    vals = [0 if v is None else v for v in values]
    if all(type(v) is int for v in vals):
        try:
            return np.clip(np.array(vals, dtype=np.int64).reshape(len(vals)), -lim, lim)
        except OverflowError:  # a total beyond int64: clip in Python integers
            pass
    out = np.empty(len(vals), dtype=np.int64)
    for i, v in enumerate(vals):
        out[i] = min(max(int(v), -lim), lim)
    return out


def centred_sums(sums: Any, counts: Any, center: int) -> np.ndarray:
    """``Σ(v - center) = Σv - n·center`` per group, exactly in integers, then :func:`as_int`."""
    if (isinstance(sums, np.ndarray) and isinstance(counts, np.ndarray)
            and sums.dtype == np.int64 and counts.dtype == np.int64):
        big = (abs(int(sums.min(initial=0))) + abs(int(sums.max(initial=0)))
               + max(abs(int(counts.min(initial=0))), abs(int(counts.max(initial=0))))
               * abs(int(center)))
        if big < 2**63 - 1:  # every term and result fits in int64: same integers
            return as_int(sums - counts * np.int64(center))
    s_list = sums.tolist() if isinstance(sums, np.ndarray) else sums
    n_list = counts.tolist() if isinstance(counts, np.ndarray) else counts
    return as_int([(s or 0) - (n or 0) * center for s, n in zip(s_list, n_list, strict=True)])


def noisy_integer(mm: Measure, exact: np.ndarray, level: float,
                   source: Source | None) -> NoisyMeasure:
    if exact.size == 0:
        # no group in the data (or none selected): the same mechanism on one dummy lane,
        # sliced away, so an empty answer is built exactly as a non-empty one
        one = noisy_integer(mm, np.zeros(1, dtype=np.int64), level, source)
        return NoisyMeasure(one.value[:0], one.low[:0], one.high[:0], one.scale_kind,
                            one.details)
    if mm.noise in (LAPLACE, "threshold"):
        rel = mechanisms.geometric(exact, sensitivity=mm.l1, epsilon=mm.epsilon, level=level,
                                   source=source)
    else:
        rel = mechanisms.discrete_gaussian(exact, sensitivity=mm.l2, sigma2=mm.sigma2,
                                           level=level, source=source)
    check_event(mm.event, rel.event)
    value = np.asarray(rel.value, dtype=np.int64)
    low, high = (np.asarray(x, dtype=np.int64) for x in rel.ci)
    if mm.f == 0:
        return NoisyMeasure(value, low, high, "int", dict(rel.details))
    unit = math.ldexp(1.0, -mm.f)
    return NoisyMeasure(value.astype(np.float64) * unit, low.astype(np.float64) * unit,
                        high.astype(np.float64) * unit, "float",
                        {**rel.details, "insecure": rel.insecure})
