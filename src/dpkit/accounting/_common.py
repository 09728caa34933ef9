"""Shared pieces of the accountants: errors, argument checks, and the event walk.

Every accountant in :mod:`dpkit.accounting` reads events (``dpkit.events``) and answers with an
*upper* bound on the privacy parameter it is asked for. Events are stated for the
**add/remove-one** neighbouring relation (see ``dpkit.events``); :func:`normalize` rewrites an
event so that its add/remove guarantee implies the guarantee asked for (``"replace"``), and drops
constructions an accountant cannot credit, always towards *less* privacy, never more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Literal

from dpkit import events as ev

__all__ = [
    "NEIGHBORING",
    "Neighboring",
    "UnsupportedEvent",
    "check_delta",
    "check_epsilon",
    "check_neighboring",
    "fsum_up",
    "is_supported",
    "mul_up",
    "normalize",
    "replace_leaf",
]

Neighboring = Literal["add_remove", "replace"]
NEIGHBORING: tuple[str, ...] = ("add_remove", "replace")


class UnsupportedEvent(ValueError):  # noqa: N818 - the name the contract uses
    """An accountant cannot bound this event; the message names the event and a method that can."""

    def __init__(self, method: str, event: ev.Event, reason: str, suggestion: str = "") -> None:
        self.method = method
        self.event = event
        self.reason = reason
        text = f"method {method!r} cannot account for {_short(event)}: {reason}"
        if suggestion:
            text += f"; {suggestion}"
        super().__init__(text)


def _short(event: ev.Event) -> str:
    text = repr(event)
    return text if len(text) <= 160 else text[:157] + "..."


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_delta(delta: float, *, name: str = "delta", allow_zero: bool = True,
                allow_one: bool = False) -> float:
    """Return ``delta`` as a float after checking ``0 <= delta < 1`` (``0 < delta`` without
    ``allow_zero``; ``delta <= 1`` with ``allow_one``)."""
    interval = "[0, 1]" if allow_one else "[0, 1)"
    if not _is_number(delta):
        raise TypeError(f"{name} must be a number in {interval} (got {delta!r})")
    delta = float(delta)
    if math.isnan(delta) or not (0.0 <= delta < 1.0 or (allow_one and delta == 1.0)):
        raise ValueError(f"{name} must lie in {interval} (got {delta!r}); e.g. {name}=1e-6")
    if not allow_zero and delta == 0.0:
        raise ValueError(f"{name} must be > 0 here (got 0.0); pass e.g. {name}=1e-6")
    return delta


def check_epsilon(epsilon: float, *, name: str = "epsilon", allow_zero: bool = False,
                  allow_inf: bool = False) -> float:
    """Return ``epsilon`` as a float after checking it is > 0 (>= 0 with ``allow_zero``).

    Also the check for any other non-negative privacy parameter (``name="rho"``).
    """
    bound = ">= 0" if allow_zero else "> 0"
    if not _is_number(epsilon):
        raise TypeError(f"{name} must be a number {bound} (got {epsilon!r})")
    epsilon = float(epsilon)
    if math.isnan(epsilon):
        raise ValueError(f"{name} must be a number > 0 (got nan)")
    if math.isinf(epsilon) and not (allow_inf and epsilon > 0):
        raise ValueError(f"{name} must be finite (got {epsilon!r})")
    if epsilon < 0 or (epsilon == 0 and not allow_zero):
        raise ValueError(f"{name} must be {bound} (got {epsilon!r})")
    return epsilon


def is_supported(bound: Callable[[], object]) -> bool:
    """``supports(event)`` for an accountant: whether computing its bound raises
    :class:`UnsupportedEvent` (the accountant's answer is then "no", never a silent number)."""
    try:
        bound()
    except UnsupportedEvent:
        return False
    return True


def check_neighboring(neighboring: str) -> str:
    if neighboring not in NEIGHBORING:
        raise ValueError(
            f"neighboring must be 'add_remove' (the default: add or remove one privacy unit) or "
            f"'replace' (change one unit's data) (got {neighboring!r})"
        )
    return neighboring


def replace_leaf(event: ev.Event) -> ev.Event:
    """A leaf event whose add/remove guarantee implies ``event``'s replace-one guarantee.

    Replacing one unit is removing it and adding another, so a query whose value moves by at
    most Δ when one unit is added or removed moves by at most 2Δ under replacement (triangle
    inequality; cf. google/differential-privacy#378): noise multipliers halve, sensitivities
    and pure ε double, ρ quadruples (zCDP group privacy for k = 2, Bun-Steinke 2016 Prop. 27),
    (ε, δ) becomes (2ε, (1 + e^ε) δ) (group privacy). Randomized response is defined by
    changing one unit's value (the local model), so it is unchanged.
    """
    if isinstance(event, ev.Gaussian):
        return ev.Gaussian(event.noise_multiplier / 2.0)
    if isinstance(event, ev.Laplace):
        return ev.Laplace(event.noise_multiplier / 2.0)
    if isinstance(event, ev.DiscreteLaplace):
        return ev.DiscreteLaplace(event.scale, 2 * event.sensitivity)
    if isinstance(event, ev.DiscreteGaussian):
        return ev.DiscreteGaussian(event.sigma2, 2 * event.sensitivity)
    if isinstance(event, ev.PureDP):
        return ev.PureDP(2.0 * event.epsilon)
    if isinstance(event, ev.Exponential):
        return ev.Exponential(2.0 * event.epsilon)
    if isinstance(event, ev.ZCDP):
        return ev.ZCDP(4.0 * event.rho)
    if isinstance(event, ev.ApproxDP):
        d = (1.0 + math.exp(min(event.epsilon, 700.0))) * event.delta
        return ev.ApproxDP(2.0 * event.epsilon, min(d, 1.0))
    if isinstance(event, (ev.RandomizedResponse, ev.NoOp)):
        return event
    raise UnsupportedEvent("replace", event, "unknown event kind",
                           "file an issue naming the mechanism")


def normalize(event: ev.Event, neighboring: str = "add_remove") -> ev.Event:
    """Rewrite ``event`` into an add/remove event whose guarantee implies the one asked for.

    - ``"replace"``: every leaf goes through :func:`replace_leaf`; a ``PoissonSampled`` node is
      replaced by its (rewritten) inner event, i.e. amplification by sampling is not credited
      under replacement (valid: with the same coin for the replaced unit, the two sampled
      datasets are replace-neighbours or equal, and divergences are jointly convex).
    - ``"add_remove"``: ``SampledWithoutReplacement(N, n, e)`` becomes ``e`` under replacement
      (adding a unit to a fixed-size sample swaps one sampled unit), without amplification.

    The result contains only leaves, ``Composed``, ``SelfComposed`` and (add/remove)
    ``PoissonSampled``; each accountant reads that form.
    """
    check_neighboring(neighboring)
    return _normalize(event, neighboring == "replace")


def _normalize(event: ev.Event, replace: bool) -> ev.Event:
    if isinstance(event, ev.Composed):
        return ev.Composed(tuple(_normalize(e, replace) for e in event.events))
    if isinstance(event, ev.SelfComposed):
        return ev.SelfComposed(_normalize(event.event, replace), event.count)
    if isinstance(event, ev.PoissonSampled):
        inner = _normalize(event.event, replace)
        if replace:
            return inner
        return ev.PoissonSampled(event.sampling_probability, inner)
    if isinstance(event, ev.SampledWithoutReplacement):
        inner = _normalize(event.event, True)
        if event.sample_size == 0:
            return ev.NoOp()
        return inner
    return replace_leaf(event) if replace else event


def flatten(event: ev.Event) -> dict[ev.Event, int]:
    """Leaves (and ``PoissonSampled`` nodes, kept whole) with their total multiplicity."""
    out: dict[ev.Event, int] = {}
    _flatten(event, 1, out)
    return out


def _flatten(event: ev.Event, count: int, out: dict[ev.Event, int]) -> None:
    if count == 0:
        return
    if isinstance(event, ev.Composed):
        for e in event.events:
            _flatten(e, count, out)
    elif isinstance(event, ev.SelfComposed):
        _flatten(event.event, count * event.count, out)
    elif isinstance(event, ev.NoOp):
        return
    else:
        out[event] = out.get(event, 0) + count


def log_add(a: float, b: float) -> float:
    """log(e^a + e^b) without overflow."""
    if a < b:
        a, b = b, a
    if b == -math.inf:
        return a
    return a + math.log1p(math.exp(b - a))


def log_sub(a: float, b: float) -> float:
    """log(e^a - e^b) for a >= b (``-inf`` when equal)."""
    if b == -math.inf:
        return a
    if b >= a:
        return -math.inf
    return a + math.log1p(-math.exp(b - a))


def mul_up(count: int, value: float) -> float:
    """``count · value`` rounded up, not to nearest: a k-fold composition's cost is never a
    half-ulp below the exact product (a budget must never lose any part of a charge)."""
    out = count * value
    if math.isfinite(out) and out > 0.0 and Fraction(out) < count * Fraction(value):
        out = math.nextafter(out, math.inf)
    return out


def fsum_up(values: Iterable[float]) -> float:
    """The exact sum of finite ``values`` rounded up (``math.fsum`` rounds to nearest)."""
    items = list(values)
    out = math.fsum(items)
    if math.isfinite(out) and Fraction(out) < sum(map(Fraction, items), Fraction(0)):
        out = math.nextafter(out, math.inf)
    return out
