"""The dispatcher: ``epsilon(event, delta)``, ``delta(event, epsilon)``, ``report(event, delta)``.

Methods (each returns an **upper** bound: possibly loose, never below the true value):

============  ===============================================================  ================
method        what it does                                                     supports
============  ===============================================================  ================
``pure``      basic composition of pure ε; amplification by Poisson sampling   pure steps
``basic``     (Σε, Σδ); Gaussian/zCDP steps share the leftover δ equally       all kinds
``advanced``  Dwork-Rothblum-Vadhan, min with basic                            pure/(ε,δ) steps
``kov``       optimal k-fold composition (Kairouz-Oh-Viswanath)                pure/(ε,δ) steps
``zcdp``      ρ adds up; Canonne-Kamath-Steinke conversion; the δ of           no other δ > 0
              ``ApproxDP(0, δ)`` steps paid first (approximate zCDP)           steps
``rdp``       RDP curves add up; Balle et al. 2020 conversion; the same        no other δ > 0
              for ``ApproxDP(0, δ)`` steps (approximate RDP)                   steps
``pld``       privacy-loss distributions (``dpkit.accounting.pld``), upper     pld.supports
``gdp``       μ-GDP, exact for compositions of Gaussians (Dong-Roth-Su)        Gaussians only
============  ===============================================================  ================

``method=None`` picks the tightest valid answer:

1. δ = 0: the pure bound (``math.inf`` if the event has none);
2. compositions of Gaussians: ``gdp`` (exact);
3. homogeneous compositions of generic ``PureDP`` / ``ApproxDP`` / binary
   ``RandomizedResponse`` steps: ``kov`` (exact optimum for such steps);
4. otherwise the minimum over every method that supports the event, ``pld`` included when
   ``pld.supports(event)`` (its upper bound). Every candidate is a valid upper bound, so the
   minimum is one too.

Soundness guards (issue 12): a method whose arithmetic fails (``MemoryError``, overflow, a
count beyond its exact range) is *unsupported* for that input, never an error or a number; and an
answer below :func:`dpkit.accounting.sanity.floor` (the exact ε of the event's strongest single
component at the same δ: composing more cannot lower the loss) is a numerical failure, so the
default discards it and an explicit ``method=`` raises :class:`UnsupportedEvent`. A leaf whose
own floor is infinite (e.g. ``Laplace(5e-324)``) gives ``math.inf``.

Answers are remembered (a bounded memo keyed by the event's JSON, δ, method and neighbouring
relation), so a curator's budget check and its charge compute each cost once.

``neighboring="add_remove"`` (default) or ``"replace"``: events are stated per add/remove unit;
under replacement a query's sensitivity doubles (remove one unit, add another), so Gaussian and
Laplace noise multipliers halve, pure ε doubles, ρ quadruples, and Poisson-sampling amplification
is not credited (see :func:`dpkit.accounting._common.normalize`). This is the opposite of
dp_accounting's convention, where the noise multiplier is relative to the replace-one
sensitivity (google/differential-privacy#378).

>>> from dpkit import events as ev
>>> round(epsilon(ev.SelfComposed(ev.PureDP(0.1), 100), 1e-5), 6)
4.306791
>>> epsilon(ev.SelfComposed(ev.Laplace(2.0), 30), 0.0)
15.0
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

from dpkit import events as ev
from dpkit.accounting import approx as _approx
from dpkit.accounting import gdp as _gdp
from dpkit.accounting import pure as _pure
from dpkit.accounting import rdp as _rdp
from dpkit.accounting import sanity as _sanity
from dpkit.accounting import zcdp as _zcdp
from dpkit.accounting._common import (
    UnsupportedEvent,
    check_delta,
    check_epsilon,
    flatten,
    normalize,
)

__all__ = ["METHODS", "MethodResult", "best", "clear_memo", "delta", "epsilon", "report"]

METHODS: tuple[str, ...] = ("pure", "basic", "advanced", "kov", "zcdp", "rdp", "pld", "gdp")
# Order in which the default tries methods (cheap and tight first; ties keep the first).
_DEFAULT_ORDER: tuple[str, ...] = ("gdp", "kov", "pld", "rdp", "zcdp", "advanced", "basic",
                                   "pure")


class MethodResult(NamedTuple):
    """One row of :func:`report`: the method, its ε (None if unsupported), seconds, a note."""

    method: str
    epsilon: float | None
    seconds: float
    note: str


def _check_event(event: Any) -> ev.Event:
    if not isinstance(event, ev.Event):
        raise TypeError(
            f"event must be a dpkit.events.Event (got {type(event).__name__}); build one with "
            "dpkit.events, e.g. SelfComposed(Gaussian(1.1), 10), or dpkit.events.from_json(text)"
        )
    return event


def _check_method(method: str | None) -> str | None:
    if method is not None and method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)} "
                         "or None for the tightest available")
    return method


def _pld() -> Any:
    """The PLD module, or None if it is not available (it is written separately)."""
    try:
        from dpkit.accounting import pld
    except ImportError:
        return None
    return pld


def _pld_supports(norm: ev.Event) -> bool:
    pld = _pld()
    if pld is None:
        return False
    try:
        return bool(pld.supports(norm))
    except Exception:  # a PLD failure must not take the other accountants down
        return False


def _pld_value(norm: ev.Event, x: float, which: str) -> tuple[float, float]:
    pld = _pld()
    if pld is None:
        raise UnsupportedEvent("pld", norm, "dpkit.accounting.pld is not available",
                               "use method='rdp'")
    if not pld.supports(norm):
        raise UnsupportedEvent("pld", norm, "pld.supports(event) is False",
                               "use method='rdp' or 'zcdp'")
    biggest = max(flatten(norm).values(), default=0)
    if biggest > _PLD_MAX_COUNT:
        raise UnsupportedEvent(
            "pld", norm, f"a step composed {biggest} times is beyond its exact range (more than "
            f"{_PLD_MAX_COUNT:.0e}: float masses lose δ, (1 − 2^-53)^k)",
            "use method='rdp', 'zcdp' or 'advanced'")
    if which == "delta" and x < _PLD_MIN_EPSILON:
        raise UnsupportedEvent("pld", norm, f"ε = {x!r} is below its resolution",
                               "use method='rdp', 'zcdp' or 'kov'")
    lower, upper = pld.epsilon(norm, x) if which == "epsilon" else pld.delta(norm, x)
    lower, upper = float(lower), float(upper)
    if math.isnan(upper) or upper < 0.0:
        raise ArithmeticError(f"pld returned an invalid upper bound {upper!r}")
    if which == "epsilon" and upper < _PLD_MIN_EPSILON:
        raise UnsupportedEvent(
            "pld", norm, f"its answer {upper!r} is below its resolution (the grid's δ rounding "
            f"moves answers under {_PLD_MIN_EPSILON} by more than their size; measured 2e-4 "
            "relative below the exact KOV value)", "use method='rdp', 'zcdp' or 'kov'")
    return lower, upper


# Where the PLD is not trusted (issue 12): counts whose float masses lose δ, and answers so
# small that the grid's rounding of δ is not negligible against them.
_PLD_MAX_COUNT = 10**9
_PLD_MIN_EPSILON = 1e-3


def _kov_note(norm: ev.Event) -> str:
    pairs = _approx.fixed_pairs(norm, method="kov", _normalized=True)
    if len(pairs) > 1:
        return "Kairouz-Oh-Viswanath applied with the largest ε and δ of the steps (heterogeneous)"
    return "optimal for k-fold (ε, δ)-DP (Kairouz-Oh-Viswanath, exact sum)"


def _raw_epsilon(method: str, norm: ev.Event, delta: float) -> tuple[float, str]:
    """ε by one method on a normalised event, with a note; raises UnsupportedEvent."""
    if method == "pure":
        return _pure.epsilon(norm, delta), "basic composition of pure ε (valid at any δ)"
    if method in ("basic", "advanced", "kov"):
        value = _approx.epsilon(norm, delta, method=method)
        note = {
            "basic": "Σε, Σδ; Gaussian/zCDP steps share the leftover δ equally",
            "advanced": "Dwork-Rothblum-Vadhan (or basic where smaller)",
        }.get(method) or _kov_note(norm)
        return value, note
    if method == "zcdp":
        rho, d_a = _zcdp.rho_delta(norm)
        note = f"ρ = {rho:.6g}; Canonne-Kamath-Steinke"
        if d_a:
            note += f" at δ − {d_a:.3g} (the δ of its approximate-zCDP steps)"
        return _zcdp.epsilon(norm, delta), note
    if method == "rdp":
        curve, d_a = _rdp.rdp_delta(norm)
        left = math.nextafter(delta - d_a, 0.0) if d_a else delta
        if not left > 0.0:
            return math.inf, f"nothing left of δ after its ApproxDP(0, δ) steps ({d_a:.3g})"
        value, order = _rdp.epsilon_from_rdp(_rdp.ORDERS, curve, left)
        note = f"best order α = {order:g}; Balle et al. 2020 conversion"
        return value, note + (f" at δ − {d_a:.3g} (approximate RDP)" if d_a else "")
    if method == "gdp":
        mu = _gdp.mu(norm)
        return _gdp.mu_to_epsilon(mu, delta), f"μ = {mu:.6g}; exact"
    if method == "pld":
        lower, upper = _pld_value(norm, delta, "epsilon")
        return upper, f"upper bound (lower bound {lower:.6g})"
    raise ValueError(f"unknown method {method!r}")  # pragma: no cover


def _raw_delta(method: str, norm: ev.Event, epsilon: float) -> float:
    if method == "pure":
        return _pure.delta(norm, epsilon)
    if method in ("basic", "advanced", "kov"):
        return _approx.delta(norm, epsilon, method=method)
    if method == "zcdp":
        return _zcdp.delta(norm, epsilon)
    if method == "rdp":
        return _rdp.delta(norm, epsilon)
    if method == "gdp":
        return _gdp.delta(norm, epsilon)
    if method == "pld":
        return _pld_value(norm, epsilon, "delta")[1]
    raise ValueError(f"unknown method {method!r}")  # pragma: no cover


# A method's arithmetic failing on an input is that method being unable to bound it: the
# dispatcher moves on, an explicit method= gets a clean UnsupportedEvent (never MemoryError).
_NUMERIC_FAILURES = (ArithmeticError, MemoryError, ValueError, RecursionError)


def _numeric_failure(method: str, norm: ev.Event, exc: BaseException) -> UnsupportedEvent:
    return UnsupportedEvent(
        method, norm, f"its arithmetic fails on this input ({type(exc).__name__}: {exc})",
        "use method=None (the tightest method that works) or method='advanced' or 'basic'")


def _run_epsilon(method: str, norm: ev.Event, delta: float) -> tuple[float, str]:
    """:func:`_raw_epsilon`, remembered, with failures and answers below the floor refused."""
    key = _memo_key("epsilon", method, norm, delta)
    hit = _memo_get(key)
    if hit is not None:
        return hit
    value, note = _guarded(method, norm, "ε", lambda: _raw_epsilon(method, norm, delta))
    low = _sanity.floor(norm, delta)
    if value < low:
        raise UnsupportedEvent(
            method, norm, f"its answer {value!r} is below the exact ε {low!r} of a single "
            "component at the same δ (numerical degeneracy: underflow or lost δ)",
            "use method=None, which keeps only sound methods")
    _memo_put(key, (value, note))
    return value, note


def _run_delta(method: str, norm: ev.Event, epsilon: float) -> float:
    """:func:`_raw_delta` with arithmetic failures turned into :class:`UnsupportedEvent`."""
    value, _ = _guarded(method, norm, "δ", lambda: (_raw_delta(method, norm, epsilon), ""))
    return value


def _guarded(method: str, norm: ev.Event, what: str,
             run: Callable[[], tuple[float, str]]) -> tuple[float, str]:
    """``run()``, with arithmetic failures (overflow, memory, precision) and invalid answers
    (NaN, negative) turned into :class:`UnsupportedEvent`: never a crash, never a wrong
    number passed on."""
    try:
        value, note = run()
    except UnsupportedEvent:
        raise
    except _NUMERIC_FAILURES as exc:
        raise _numeric_failure(method, norm, exc) from None
    if math.isnan(value) or value < 0.0:
        raise UnsupportedEvent(method, norm, f"it returned an invalid {what} {value!r}",
                               "use method=None")
    return value, note


# ---------------------------------------------------------------------------------- memo
# Keyed by the event's JSON (not the dataclass: 1 == 1.0 and -0.0 == 0.0 there, and the memo
# must not answer for an event it did not compute), the parameter as its exact hex, the method
# and the (already normalised) neighbouring relation. Bounded, least recently used first out.
_MEMO_SIZE = 512
_memo: OrderedDict[tuple[str, str, str, str], Any] = OrderedDict()
_memo_lock = threading.Lock()


def _memo_key(which: str, method: str, norm: ev.Event, x: float) -> tuple[str, str, str, str]:
    return which, method, norm.to_json(), float(x).hex()


def _memo_get(key: tuple[str, str, str, str]) -> Any:
    with _memo_lock:
        hit = _memo.get(key)
        if hit is not None:
            _memo.move_to_end(key)
        return hit


def _memo_put(key: tuple[str, str, str, str], value: Any) -> None:
    with _memo_lock:
        _memo[key] = value
        _memo.move_to_end(key)
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)


def clear_memo() -> None:
    """Forget remembered answers (tests and benchmarks that time a cold computation)."""
    with _memo_lock:
        _memo.clear()


def _supported(method: str, norm: ev.Event) -> bool:
    try:
        return _supported_raw(method, norm)
    except _NUMERIC_FAILURES:  # it cannot even decide: it cannot bound the event either
        return False


def _supported_raw(method: str, norm: ev.Event) -> bool:
    if method == "pure":
        return _pure.supports(norm)
    if method in ("basic", "advanced", "kov"):
        return _approx.supports(norm, method=method)
    if method == "zcdp":
        return _zcdp.supports(norm)
    if method == "rdp":
        return _rdp.supports(norm)
    if method == "gdp":
        return _gdp.supports(norm)
    if method == "pld":
        return _pld_supports(norm)
    return False  # pragma: no cover


_GENERIC = (ev.PureDP, ev.ApproxDP)


def _generic_homogeneous(norm: ev.Event) -> bool:
    """Homogeneous composition of steps whose worst case *is* randomized response."""
    units = flatten(norm)
    if not units:
        return False
    for u in units:
        generic = isinstance(u, _GENERIC) or (
            isinstance(u, ev.RandomizedResponse) and u.categories == 2)
        if not generic:
            return False
    return len(_approx.fixed_pairs(norm, method="kov", _normalized=True)) == 1


def _candidates(norm: ev.Event, zero: bool) -> list[str]:
    if zero:
        return ["pure"]
    if _gdp.supports(norm):
        return ["gdp"]
    if _generic_homogeneous(norm):
        # KOV is exact; the others only guard rounding edges (and take over where KOV refuses)
        return ["kov", "basic", "pure"]
    return [m for m in _DEFAULT_ORDER if _supported(m, norm)]


def _best(norm: ev.Event, x: float, which: str) -> tuple[str, float]:
    key = _memo_key("best-" + which, "", norm, x)
    hit = _memo_get(key)
    if hit is None:
        hit = _best_uncached(norm, x, which)
        _memo_put(key, hit)
    return hit  # type: ignore[no-any-return]


def _best_uncached(norm: ev.Event, x: float, which: str) -> tuple[str, float]:
    zero = which == "epsilon" and x == 0.0
    if which == "epsilon" and not zero and _sanity.floor(norm, x) == math.inf:
        return "floor", math.inf  # a step with no finite guarantee: no method can do better
    names = _candidates(norm, zero)
    run: Callable[[str], float]
    if which == "epsilon":
        def run(m: str) -> float:
            return _run_epsilon(m, norm, x)[0]
    else:
        def run(m: str) -> float:
            return _run_delta(m, norm, x)
    best_name, best_value = "none", math.inf if which == "epsilon" else 1.0
    if names[0] == "kov" and not zero:
        try:
            run("kov")
        except UnsupportedEvent:  # beyond KOV's exact range: every sound method competes
            names = [m for m in _DEFAULT_ORDER if m != "kov" and _supported(m, norm)]
    for m in names:
        try:
            value = run(m)
        except UnsupportedEvent:
            continue
        except Exception as exc:
            if m != "pld":
                raise
            warnings.warn(f"dpkit.accounting.pld failed ({exc!r}); using the other accountants",
                          RuntimeWarning, stacklevel=3)
            continue
        if math.isnan(value) or value < 0.0:  # pragma: no cover - guarded in each method
            continue
        if value < best_value or best_name == "none":
            best_name, best_value = m, value
    if zero and best_name == "none":
        return "pure", math.inf
    return best_name, best_value


def epsilon(event: ev.Event, delta: float, method: str | None = None, *,
            neighboring: str = "add_remove") -> float:
    """Upper bound on ε such that ``event`` is (ε, ``delta``)-DP.

    ``delta`` in [0, 1): 0 asks for a pure bound (``math.inf`` where there is none).
    ``method``: one of :data:`METHODS`, or None for the tightest available (module docstring).
    An explicit method that cannot handle the event raises :class:`UnsupportedEvent` naming the
    event and a method that can.

    >>> from dpkit import events as ev
    >>> round(epsilon(ev.SelfComposed(ev.Gaussian(2.0), 100), delta=1e-18), 5)
    55.70932
    """
    _check_event(event)
    delta = check_delta(delta)
    method = _check_method(method)
    norm = normalize(event, neighboring)
    if method is not None:
        return _run_epsilon(method, norm, delta)[0]
    return _best(norm, delta, "epsilon")[1]


def delta(event: ev.Event, epsilon: float, method: str | None = None, *,
          neighboring: str = "add_remove") -> float:
    """Upper bound on δ such that ``event`` is (``epsilon``, δ)-DP (``epsilon`` > 0)."""
    _check_event(event)
    epsilon = check_epsilon(epsilon, allow_inf=True)
    method = _check_method(method)
    norm = normalize(event, neighboring)
    if method is not None:
        return _run_delta(method, norm, epsilon)
    return _best(norm, epsilon, "delta")[1]


def best(event: ev.Event, delta: float, *, neighboring: str = "add_remove") -> tuple[str, float]:
    """(method, ε) chosen by ``epsilon(event, delta)`` with ``method=None``."""
    _check_event(event)
    delta = check_delta(delta)
    return _best(normalize(event, neighboring), delta, "epsilon")


def report(event: ev.Event, delta: float, *, neighboring: str = "add_remove",
           methods: tuple[str, ...] = METHODS) -> list[MethodResult]:
    """Every method's ε at ``delta`` with its run time and a note (for ``dpkit account``).

    Unsupported methods give ``epsilon=None`` and the reason in the note; nothing raises for a
    valid event.

    >>> from dpkit import events as ev
    >>> rows = report(ev.SelfComposed(ev.Gaussian(2.0), 100), 1e-12)
    >>> [(r.method, None if r.epsilon is None else round(r.epsilon, 5)) for r in rows][-1]
    ('gdp', 47.04923)
    """
    _check_event(event)
    delta = check_delta(delta)
    norm = normalize(event, neighboring)
    rows: list[MethodResult] = []
    for m in methods:
        _check_method(m)
        start = time.perf_counter()
        try:
            value, note = _run_epsilon(m, norm, delta)
            eps: float | None = value
        except UnsupportedEvent as exc:
            eps, note = None, exc.reason
        except Exception as exc:  # report, never crash the calculator
            eps, note = None, f"failed: {exc!r}"
        rows.append(MethodResult(m, eps, time.perf_counter() - start, note))
    return rows
