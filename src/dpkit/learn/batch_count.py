"""``batch_size="auto"``: DP-SGD's divisor from a noisy count, paid out of the fit's own ε.

DP-SGD divides the noisy sum of clipped gradients by the expected batch, ``q N`` examples
(``q`` the Poisson rate, ``N`` the examples the loader samples from). Every DP-SGD library reads
``N`` off the dataset, treating it as public; through the curator it is not (a WHERE, the label
filter and the bounding decide it), so a hand-set ``batch_size`` was the only way, and a wrong
one silently rescaled the gradient. Here ``N`` is released once, privately:

* **What is counted.** The *examples* the loader samples from (the bounded rows), not the units:
  at user level whole units are sampled at rate ``q`` and bring all their kept rows, so the
  expected batch is ``q × rows``, and that is the divisor under which a mean loss keeps its
  scale (:mod:`dpkit.learn.torch.optimizer`). Add/remove of one privacy unit moves the count
  by at most the rows a unit may keep: ``sensitivity = 1`` at record level,
  ``max_rows_per_unit`` (``max_examples_per_unit``) at user level. (Counting units would have
  sensitivity 1 but estimate ``q × units``, the divisor of a per-*unit* mean, a different scale.)
* **Mechanism.** The geometric mechanism (discrete Laplace, exact sampler): ``N̂ = N + Z``,
  ``Z ~ DLap(s)``, ``s = sensitivity / ε_c`` with ``ε_c = count_fraction × ε``; pure
  ε_c-DP for add/remove-one-unit neighbours; event ``DiscreteLaplace(s, sensitivity)``.
* **The split.** The fit's event is ``Composed([count, SelfComposed(PoissonSampled(q,
  Gaussian(σ)), T)])`` and ``σ`` is the smallest noise multiplier whose PLD ε *of that
  composition* at δ is at most ε (:func:`calibrate_with_count`): the count's share is accounted
  for, and PLD composes at least as tightly as giving DP-SGD ``(1 - count_fraction) ε``.
* **The divisor** ``max(1, q N̂)``: post-processing of N̂. ``|divisor - max(1, q N)| <= q t``
  whenever ``|Z| <= t`` (``max(1, ·)`` is 1-Lipschitz), and ``P(|Z| > t_β) <= β`` for
  ``t_β`` the exact discrete Laplace half-width at level ``1 - β``
  (:meth:`BatchCount.error`).

>>> from dpkit import noise
>>> bc = noisy_divisor(6000, sample_rate=0.01, sensitivity=1, epsilon=0.06,
...                    source=noise.seeded(0))
>>> abs(bc.divisor - 60.0) <= bc.error(beta=1e-6)
True
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from dpkit import accounting, events, mechanisms, noise
from dpkit.mechanisms.plan import NoisePlan, discrete_laplace_halfwidth, discrete_laplace_plan

__all__ = ["BatchCount", "calibrate_with_count", "check_batch_size", "check_count_fraction",
           "count_plan", "noisy_divisor"]


def check_batch_size(batch_size: Any) -> int | str | None:
    """``None``, ``"auto"`` or an int >= 1 (the fixed divisor); a clear error otherwise."""
    if batch_size is None or batch_size == "auto":
        return batch_size  # type: ignore[no-any-return]
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) \
            or batch_size < 1:
        raise ValueError(f"batch_size must be 'auto', None or an int >= 1 (got {batch_size!r}); "
                         "'auto' estimates the expected batch from a noisy row count")
    return int(batch_size)


def check_count_fraction(fraction: Any) -> float:
    """The share of ε spent on the row count: a number in the open interval (0, 1)."""
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not (
            math.isfinite(float(fraction)) and 0.0 < float(fraction) < 1.0):
        raise ValueError(f"count_fraction must lie in (0, 1) (got {fraction!r}): the share of "
                         "epsilon spent on the noisy row count behind batch_size='auto', "
                         "e.g. 0.02")
    return float(fraction)


def count_plan(*, sensitivity: int, epsilon: float) -> NoisePlan:
    """The count's noise, fixed before any row is read: ``DLap(sensitivity / epsilon)``."""
    return discrete_laplace_plan(sensitivity=int(sensitivity), epsilon=float(epsilon))


def calibrate_with_count(count: events.Event, *, sampling_probability: float, steps: int,
                         target_epsilon: float, delta: float) -> float:
    """Smallest σ with PLD ε(``Composed([count, DP-SGD(σ)])``, δ) <= ``target_epsilon``."""

    def family(m: float) -> events.Event:
        return events.Composed((count, events.SelfComposed(
            events.PoissonSampled(sampling_probability, events.Gaussian(m)), steps)))

    return accounting.calibrate.calibrate(family, target_epsilon=target_epsilon, delta=delta,
                                          method="pld", rtol=1e-4, lower=1e-2, upper=1e4)


@dataclass(frozen=True)
class BatchCount:
    """The released row count and the divisor made from it (module docstring).

    ``rows``: the geometric mechanism's :class:`~dpkit.mechanisms.Release` (``value`` N̂,
    ``ci`` at 95%, ``event``); ``divisor``: ``max(1, sample_rate × N̂)``.
    """

    rows: mechanisms.Release[Any]
    sample_rate: float
    scale: float
    divisor: float
    epsilon: float

    def error(self, beta: float = 0.05) -> float:
        """``q t_β``: with probability >= 1 - β, ``|divisor - max(1, q N)| <= q t_β``."""
        if not 0.0 < beta < 1.0:
            raise ValueError(f"beta must lie in (0, 1) (got {beta!r})")
        return self.sample_rate * discrete_laplace_halfwidth(self.scale, 1.0 - beta)[0]

    def note(self) -> str:
        lo, hi = self.rows.ci
        return (f"batch_size='auto': noisy row count {int(self.rows.value)} (95% CI "
                f"[{int(lo)}, {int(hi)}], epsilon {self.epsilon:.3g}), divisor sample_rate x "
                f"count = {self.divisor:.4g} (within {self.error(0.05):.3g} of the true one "
                f"with probability >= 0.95)")


def noisy_divisor(n_examples: int, *, sample_rate: float, sensitivity: int, epsilon: float,
                  source: noise.Source | None) -> BatchCount:
    """Release ``n_examples`` by the geometric mechanism (ε-DP for add/remove of one unit that
    moves it by at most ``sensitivity``; event ``count_plan(sensitivity, epsilon).event``) and
    make the divisor ``max(1, sample_rate × N̂)`` from it."""
    plan = count_plan(sensitivity=sensitivity, epsilon=epsilon)
    rel = mechanisms.geometric(int(n_examples), sensitivity=int(sensitivity),
                               epsilon=float(epsilon), source=source)
    if rel.event != plan.event:  # pragma: no cover - the same calibration on both sides
        raise RuntimeError(f"the count drew {rel.event}, not the planned {plan.event}")
    divisor = max(1.0, float(sample_rate) * float(rel.value))
    return BatchCount(rel, float(sample_rate), plan.scale, divisor, float(epsilon))
