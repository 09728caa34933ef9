"""Noise calibration: the smallest noise multiplier that reaches a target ε.

``calibrate(family, target_epsilon=, delta=)`` takes a function m ↦ event (e.g.
``lambda m: SelfComposed(PoissonSampled(q, Gaussian(m)), T)``) and finds the smallest noise
multiplier m with ``epsilon(family(m), delta, method) <= target_epsilon``, by bracketing and
bisection in log m. It assumes ε decreases as m grows (true of every accountant here for the
usual families); whatever happens, the m returned has been *checked* to meet the target, so it
is never too small.

>>> from dpkit import events as ev
>>> m = calibrate(lambda m: ev.Gaussian(m), target_epsilon=1.0, delta=1e-5)
>>> 3.7306316348 <= m <= 3.7306316348 * (1 + 1e-6)  # the analytic Gaussian's σ
True
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dpkit import events as ev
from dpkit.accounting._common import check_delta, check_epsilon

__all__ = ["calibrate", "dpsgd_noise_multiplier", "smallest_passing"]


def calibrate(family: Callable[[float], ev.Event], *, target_epsilon: float, delta: float,
              method: str | None = None, neighboring: str = "add_remove",
              rtol: float = 1e-6, lower: float = 1e-6, upper: float = 1e6) -> float:
    """Smallest m in [``lower``, ``upper``] with ε(family(m)) <= ``target_epsilon``, to ``rtol``.

    Returns a value within a factor (1 + rtol) above the true threshold, verified to satisfy the
    target. Raises ValueError if even ``upper`` does not reach it; returns ``lower`` if it
    already does.
    """
    from dpkit.accounting import api

    target_epsilon = check_epsilon(target_epsilon, name="target_epsilon")
    delta = check_delta(delta)

    seen: dict[float, float] = {}

    def ok(m: float) -> bool:
        event = family(m)
        if not isinstance(event, ev.Event):
            raise TypeError(f"family(m) must return a dpkit.events.Event (got {event!r})")
        seen[m] = eps = float(api.epsilon(event, delta, method, neighboring=neighboring))
        return eps <= target_epsilon

    def guess(lo: float, hi: float) -> float | None:
        # ε falls smoothly with m: the secant of log ε over log m through the last two
        # points lands near the threshold (superlinearly), where bisection needs about
        # log2(log(hi/lo)/rtol) steps
        if len(seen) < 2:
            return None
        (m1, a), (m2, b) = list(seen.items())[-2:]
        if not (0 < a < math.inf and 0 < b < math.inf) or a == b or m1 == m2:
            return None
        x1, x2, t = math.log(m1), math.log(m2), math.log(target_epsilon)
        return math.exp(x1 + (x2 - x1) * (math.log(a) - t) / (math.log(a) - math.log(b)))

    found = smallest_passing(ok, lower=lower, upper=upper, rtol=rtol, guess=guess)
    if found is None:
        raise ValueError(
            f"no noise multiplier up to {upper:g} reaches epsilon <= {target_epsilon:g} at "
            f"delta = {delta:g}; raise `upper`, the target epsilon or delta")
    return found


def smallest_passing(ok: Callable[[float], bool], *, lower: float, upper: float,
                     rtol: float = 1e-6,
                     guess: Callable[[float, float], float | None] | None = None
                     ) -> float | None:
    """The smallest x in [``lower``, ``upper``] with ``ok(x)``, to a factor ``1 + rtol``, for a
    predicate that is monotone (false below a threshold, true above); None when ``ok(upper)``
    is false. Bracketing by factors of 4 from 1, then bisection in log x; the x returned was
    itself checked (``ok(x)`` holds), so it is never below the threshold.

    The one "smallest parameter that meets a target" search: noise multipliers here
    (:func:`calibrate`), and the curator's accuracy → epsilon. ``guess(lo, hi)`` (optional):
    an estimate of the threshold inside the bracket (``lo`` failed, ``hi`` passed; None: no
    estimate); each probe is then put just beside it, alternately above and below, so that a
    good estimate closes the bracket in two probes (a poor one still shrinks it, and a probe
    bisects whenever the two before it did not halve the bracket, so it never takes more than
    about three times bisection's steps).
    """
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must lie in (0, 1) (got {rtol!r})")
    if not 0 < lower < upper:
        raise ValueError(f"need 0 < lower < upper (got lower={lower!r}, upper={upper!r})")
    hi = min(max(1.0, lower), upper)
    if ok(hi):
        lo = hi
        while True:
            if lo <= lower:
                return lower
            lo = max(lo / 4.0, lower)
            if not ok(lo):
                break
            hi = lo
        if hi == lo:  # pragma: no cover
            return hi
    else:
        lo = hi
        while True:
            if hi >= upper:
                return None
            hi = min(hi * 4.0, upper)
            if ok(hi):
                break
            lo = hi
    log_lo, log_hi = math.log(lo), math.log(hi)
    tol, above, widths = math.log1p(rtol), True, [math.inf, math.inf]
    while log_hi - log_lo > tol:
        widths.append(log_hi - log_lo)
        mid = 0.5 * (log_lo + log_hi)
        slow = widths[-1] > 0.5 * widths[-3]  # two probes did not halve it: bisect
        g = guess(lo, hi) if guess and not slow else None
        if g is not None and g > 0 and math.isfinite(g):
            # just beside the estimate, on the side the last probe did not move
            edge = 0.05 * (log_hi - log_lo)
            mid = min(max(math.log(g) + (0.45 if above else -0.45) * tol, log_lo + edge),
                      log_hi - edge)
        x = math.exp(mid)
        if ok(x):
            log_hi, hi, above = mid, x, False
        else:
            log_lo, lo, above = mid, x, True
    return hi  # the very value ok() passed, not one recomputed from its log


def dpsgd_noise_multiplier(*, sampling_probability: float, steps: int, target_epsilon: float,
                           delta: float, method: str | None = None, rtol: float = 1e-4) -> float:
    """Noise multiplier for DP-SGD: ``steps`` × Poisson(q)-sampled Gaussian reaching (ε, δ).

    >>> m = dpsgd_noise_multiplier(sampling_probability=256 / 60000, steps=14062,
    ...                            target_epsilon=2.5966, delta=1e-5, method="rdp")
    >>> round(m, 2)
    1.1
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1 (got {steps!r})")
    q = float(sampling_probability)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sampling_probability must lie in (0, 1] (got {sampling_probability!r})")
    return calibrate(
        lambda m: ev.SelfComposed(ev.PoissonSampled(q, ev.Gaussian(m)), steps),
        target_epsilon=target_epsilon, delta=delta, method=method, rtol=rtol,
        lower=1e-2, upper=1e4,
    )
