"""Argument checks shared by the mechanisms: fail early, name the parameter, say the fix.

Every check returns the value in the form the mechanism uses (a Python float, an int, a float64
or int64 array) so that mechanisms never work on unchecked input.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from dpkit.noise import Source, default_source

__all__ = [
    "check_categories",
    "check_delta",
    "check_epsilon",
    "check_integer_sensitivity",
    "check_integers",
    "check_level",
    "check_positive_int",
    "check_reals",
    "check_rho",
    "check_sensitivity",
    "check_source",
    "resolve_source",
]


def _number(value: Any, name: str, hint: str) -> float:
    if type(value) is float or type(value) is int:  # the common case, without the ABC checks
        out = float(value)
        if out != out:
            raise ValueError(f"{name} must be a number {hint} (got nan)")
        return out
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number {hint} (got {value!r})")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"{name} must be a number {hint} (got nan)")
    return out


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """A finite epsilon > 0."""
    eps = _number(epsilon, name, "> 0, e.g. 1.0")
    if not math.isfinite(eps):
        raise ValueError(f"{name} must be finite (got {eps!r}); pass e.g. {name}=1.0")
    if eps <= 0:
        raise ValueError(f"{name} must be > 0 (got {eps!r}); pass e.g. {name}=1.0")
    return eps


def check_rho(rho: Any) -> float:
    """A finite zCDP rho > 0."""
    r = _number(rho, "rho", "> 0, e.g. 0.1")
    if not math.isfinite(r) or r <= 0:
        raise ValueError(f"rho must be a finite number > 0 (got {r!r}); pass e.g. rho=0.1")
    return r


def check_delta(delta: Any) -> float:
    """A delta strictly inside (0, 1)."""
    d = _number(delta, "delta", "in (0, 1), e.g. 1e-6")
    if not 0.0 < d < 1.0:
        raise ValueError(
            f"delta must lie strictly between 0 and 1 (got {d!r}); pass e.g. delta=1e-6, "
            "or use rho= for zCDP"
        )
    return d


def check_level(level: Any) -> float:
    """A confidence level strictly inside (0, 1)."""
    lv = _number(level, "level", "in (0, 1), e.g. 0.95")
    if not 0.0 < lv < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1 (got {lv!r}); e.g. level=0.95")
    return lv


def check_sensitivity(sensitivity: Any, name: str = "sensitivity") -> float:
    """A finite sensitivity > 0 (the caller's bound on |f(D) - f(D')| for neighbours)."""
    s = _number(sensitivity, name, "> 0")
    if not math.isfinite(s) or s <= 0:
        raise ValueError(
            f"{name} must be a finite number > 0 (got {s!r}): it bounds how much one privacy "
            "unit can change the query, e.g. 1 for a count"
        )
    return s


def check_integer_sensitivity(sensitivity: Any, mechanism: str) -> int:
    """An integer sensitivity >= 1 for mechanisms on integer-valued queries."""
    s = check_sensitivity(sensitivity)
    if s != math.floor(s):
        raise ValueError(
            f"{mechanism} works on integer-valued queries, so its sensitivity must be an integer "
            f"(got {s!r}): an integer query that moves by at most {s!r} moves by at most "
            f"{math.floor(s)}; pass sensitivity={max(1, math.floor(s))}, or use "
            "laplace()/gaussian() for real values"
        )
    if s >= 2**53:
        raise ValueError(f"sensitivity must be < 2**53 (got {s!r})")
    return int(s)


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum} (got {value!r})")
    v = int(value)
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum} (got {v})")
    return v


def check_reals(value: Any, name: str = "value", *, allow_inf: bool = False) -> np.ndarray:
    """A scalar or array of finite reals, as float64 (shape kept; 0-d for a scalar).

    ``allow_inf=True`` (private query answers, which the mechanism saturates) lets ±inf through;
    NaN is refused either way: there is no sensible value to release for it, so the caller must
    impute or drop it (with a public rule) before the mechanism.
    """
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a number or an array of numbers (got a bool)")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be a number or an array of numbers (got {type(value).__name__})"
        ) from None
    if arr.size == 0:
        raise ValueError(f"{name} is empty: pass at least one number")
    if allow_inf and np.any(np.isnan(arr)):
        bad = np.flatnonzero(np.isnan(arr.ravel()))[0]
        raise ValueError(
            f"{name} holds NaN (entry {bad}), which has no value to release: impute or drop it "
            "before the mechanism"
        )
    if not allow_inf and not np.all(np.isfinite(arr)):
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))[0]
        raise ValueError(
            f"{name} must be finite (entry {bad} is {arr.ravel()[bad]!r}): clamp or drop "
            "non-finite values before the mechanism"
        )
    return arr


def check_integers(value: Any, name: str = "value", *, saturate: bool = False) -> np.ndarray:
    """A scalar or array of integers (ints, or floats that are whole numbers), as int64.

    Magnitudes must be below 2**62. With ``saturate=True`` (private query answers) larger ones,
    ±inf included, are clamped to ``±(2**62 - 1)`` instead of refused, so the call cannot fail
    because of how large the value is; NaN and non-integers are still refused (NaN has no
    sensible value: impute it before the mechanism).
    """
    if type(value) is np.ndarray and value.dtype == np.int64 and value.size:
        # fast path for the common case (a non-empty int64 array): the same checks and result
        # as below, a fresh int64 array, without the dtype dispatch and the copy before clipping
        if saturate:
            return np.minimum(np.maximum(value, -_INT_LIMIT), _INT_LIMIT)
        if np.any(np.abs(value) >= 2**62):
            raise ValueError(f"{name} must be below 2**62 in absolute value")
        return value.copy()
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be an integer or an array of integers (got a bool)")
    arr = np.asarray(value)
    if arr.size == 0:
        raise ValueError(f"{name} is empty: pass at least one integer")
    too_large = f"{name} must be below 2**62 in absolute value"
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= 2**62:
            if not saturate:
                raise ValueError(too_large)
            arr = np.minimum(arr, np.uint64(_INT_LIMIT))
        out = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        if np.any(np.isnan(arr)):
            raise ValueError(f"{name} holds NaN, which has no integer to release: impute or drop "
                             "it before the mechanism")
        if not (saturate or np.all(np.isfinite(arr))):
            raise ValueError(f"{name} must be finite integers (got inf)")
        if not np.all(arr == np.floor(arr)):
            raise ValueError(
                f"{name} must hold integers (got non-integer values such as "
                f"{arr[arr != np.floor(arr)].ravel()[0]!r}); use laplace()/gaussian() for reals"
            )
        if not saturate and np.any(np.abs(arr) >= 2.0**62):
            raise ValueError(too_large)
        out = np.clip(arr, -(2.0**62), 2.0**62).astype(np.int64)  # clamped to the limit below
    elif arr.dtype == object:
        flat = arr.ravel()
        try:
            ints = [_inf_to_limit(v) if saturate else int(v) for v in flat]
        except (TypeError, ValueError, OverflowError):
            raise TypeError(f"{name} must hold integers") from None
        if any(i != v for i, v in zip(ints, flat, strict=True) if abs(i) < _INT_LIMIT):
            raise ValueError(f"{name} must hold integers")
        if not saturate and any(abs(i) >= 2**62 for i in ints):
            raise ValueError(too_large)
        out = np.array([max(-_INT_LIMIT, min(_INT_LIMIT, i)) for i in ints],
                       dtype=np.int64).reshape(arr.shape)
    else:
        raise TypeError(f"{name} must be an integer or an array of integers (dtype {arr.dtype})")
    if saturate:
        return np.clip(out, -_INT_LIMIT, _INT_LIMIT)
    if np.any(np.abs(out) >= 2**62):
        raise ValueError(too_large)
    return out


_INT_LIMIT = 2**62 - 1  # integer answers are clamped to this magnitude when saturating


def _inf_to_limit(v: Any) -> int:
    if isinstance(v, float | np.floating) and math.isinf(v):
        return _INT_LIMIT if v > 0 else -_INT_LIMIT
    return int(v)


def check_categories(categories: Any, name: str = "categories") -> list[Any]:
    """A public list of at least two distinct, hashable labels."""
    if isinstance(categories, str | bytes) or not hasattr(categories, "__iter__"):
        raise TypeError(
            f"{name} must be a list of public labels, e.g. ['a', 'b', 'c'] (got {categories!r})"
        )
    labels = list(categories)
    try:
        distinct = len(set(labels))
    except TypeError:
        raise TypeError(f"{name} must hold hashable labels (strings, numbers, tuples)") from None
    if distinct != len(labels):
        raise ValueError(f"{name} must be distinct (got duplicates in {labels[:10]!r}...)")
    if len(labels) < 2:
        raise ValueError(f"{name} needs at least two labels (got {len(labels)})")
    return labels


def check_source(source: Any) -> Source | None:
    """None (use the secure default) or a dpkit.noise Source."""
    if source is not None and not isinstance(source, Source):
        raise TypeError(
            "source must be None (secure default) or a dpkit.noise source such as "
            f"dp.noise.seeded(42) (got {type(source).__name__})"
        )
    return source


def resolve_source(source: Any) -> Source:
    """The source to draw from: the given one, or the secure default for ``None``."""
    check_source(source)
    return default_source() if source is None else source
