"""Randomized response (Warner 1965) and k-ary randomized response, with unbiased estimates.

Each unit's value is reported truthfully with probability ``p = e^ε / (e^ε + k - 1)`` and
otherwise replaced by one of the other ``k - 1`` categories uniformly: for any report ``y`` and
any two true values ``x, x'``, ``P(y | x) / P(y | x') <= p / q = e^ε`` with
``q = (1 - p)/(k - 1)``. That is ε-**local** DP: each report is ε-DP with respect to its own
unit's value, and the vector of reports is ε-DP under replace-one (change one unit's value);
under add/remove the number of reports is itself public.

Exactness: ``p`` is irrational, so the sampler uses the largest double ``p_r <= p`` whose
privacy ratio ``p_r (k-1) / (1 - p_r)`` is at most ``e^ε`` (checked exactly against a correctly
rounded 60-digit ``exp``), and whose reverse ratio ``(1 - p_r)/((k-1) p_r)`` is too (for
``epsilon`` below ~1e-15 no double satisfies both and ``ValueError`` is raised); the coin
``Bernoulli(p_r)`` and the uniform lie are exact
(dpkit.noise). RR with ``p_r`` is a post-processing of RR with ``p`` (compose with another
symmetric channel), so the event ``RandomizedResponse(ε, k)`` describes it soundly, and the
estimator below uses ``p_r`` itself, so it stays exactly unbiased.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import RandomizedResponse
from dpkit.mechanisms import validate as v
from dpkit.mechanisms.release import Release
from dpkit.noise import Source

__all__ = ["RREstimate", "keep_probability", "randomized_response", "rr_estimate", "rr_variance"]


def keep_probability(epsilon: float, k: int) -> float:
    """The probability ``p_r`` of a truthful report used for ε and ``k`` categories: the largest
    double ``<= e^ε/(e^ε + k - 1)`` (up to a few ulps) with ``p_r (k-1)/(1-p_r) <= e^ε`` exactly.

    >>> round(keep_probability(math.log(3), 2), 12)
    0.75
    """
    p = 1.0 / (1.0 + (k - 1) * math.exp(-epsilon))
    with localcontext() as ctx:
        ctx.prec = 60
        e_low = Decimal(epsilon).exp().next_minus()  # correctly rounded, so <= e^epsilon
    bound = Fraction(e_low)
    while Fraction(p) * (k - 1) > bound * (1 - Fraction(p)):
        p = math.nextafter(p, 0.0)
    # The privacy loss is max(ln(p/q), ln(q/p)): q/p <= e^eps must hold too. Lowering p only
    # raises q/p, so if it fails here no float keep probability realises epsilon.
    if 1 - Fraction(p) > bound * (k - 1) * Fraction(p):
        raise ValueError(
            f"epsilon={epsilon!r} is too small for randomized response with {k} categories: "
            "no float64 keep probability has both privacy ratios within e^epsilon; "
            "use epsilon >= 1e-14 (the report is then almost pure noise anyway)"
        )
    return p


def _codes(values: Any, categories: list[Any] | None) -> tuple[np.ndarray, list[Any], Any]:
    """Integer codes of the values, the category list, and the output kind."""
    arr = np.asarray(values)
    if arr.size == 0:
        raise ValueError("no values: pass one value per unit")
    if categories is None:
        if arr.dtype == bool:
            return arr.astype(np.int64), [False, True], bool
        if arr.dtype.kind in "iuf" and np.all((arr == 0) | (arr == 1)):
            return arr.astype(np.int64), [0, 1], int
        raise ValueError(
            "without categories=, values must be bits (booleans or 0/1); for other values pass "
            "the public list of categories, e.g. categories=['a', 'b', 'c']"
        )
    cats = v.check_categories(categories)
    index = {c: i for i, c in enumerate(cats)}
    flat = arr.ravel().tolist()
    try:
        codes = np.fromiter((index[x] for x in flat), dtype=np.int64, count=len(flat))
    except KeyError as exc:
        raise ValueError(
            f"value {exc.args[0]!r} is not one of the categories: every unit must hold one of "
            "the public categories (map unknown values to an 'other' category first)"
        ) from None
    return codes.reshape(arr.shape), cats, object


@dataclass(frozen=True)
class _RR:
    k: int
    p: float  # probability of the true report

    def sample(self, codes: np.ndarray, size: int, src: Source) -> np.ndarray:
        """Report codes, shape (size, *codes.shape)."""
        shape = (size, *codes.shape)
        keep = noise.bernoulli(self.p, shape, source=src)
        other = noise.uniform_int(self.k - 1, shape, source=src)
        lie = other + (other >= codes)  # uniform over the k - 1 other categories
        return np.where(keep, codes, lie)


def randomized_response(
    values: Any,
    *,
    epsilon: float,
    categories: Any = None,
    source: Source | None = None,
) -> Release[Any]:
    """ε-local-DP randomized response: one private report per unit.

    ``values``: bits (booleans or 0/1; binary RR) or, with ``categories`` (the public list of
    ``k`` labels), one label per unit (k-RR, Warner 1965; Kairouz-Oh-Viswanath 2014).

    **Guarantee**: each report is ε-DP with respect to its unit's value (any two values), so
    the released vector is ε-DP under replace-one; under add/remove, the number of reports is
    public. Event: ``RandomizedResponse(ε, k)``.

    **Law**: truthful with ``p = e^ε/(e^ε + k - 1)`` (exactly: ``details["keep_probability"]``,
    at most a few ulps below), otherwise uniform over the other ``k - 1`` categories. Estimate
    frequencies with :func:`rr_estimate` (post-processing, free).

    >>> import dpkit as dp
    >>> r = dp.mechanisms.randomized_response([True, False, True], epsilon=1.0,
    ...                                       source=dp.noise.seeded(0))
    >>> r.value.dtype, r.event
    (dtype('bool'), RandomizedResponse(epsilon=1.0, categories=2))
    """
    eps = v.check_epsilon(epsilon)
    codes, cats, kind = _codes(values, categories)
    src = v.resolve_source(source)
    k = len(cats)
    plan = _RR(k=k, p=keep_probability(eps, k))
    reports = plan.sample(codes, 1, src)[0]
    if kind is bool:
        out: Any = reports.astype(bool)
    elif kind is int:
        out = reports.astype(np.int64)
    else:
        labels = np.empty(k, dtype=object)
        labels[:] = cats
        out = labels[reports]
    return Release(
        value=out,
        event=RandomizedResponse(eps, k),
        ci=None,
        insecure=src.insecure,
        details={
            "mechanism": "randomized response" if k == 2 else f"{k}-ary randomized response",
            "neighbouring": "local: each report is epsilon-DP w.r.t. its own unit's value "
            "(replace-one for the vector of reports)",
            "keep_probability": plan.p,
            "categories": cats,
        },
    )


def rr_variance(frequency: Any, n: int, *, epsilon: float, k: int = 2) -> np.ndarray:
    """Exact variance of the unbiased k-RR frequency estimate for true frequency ``f``:

        Var(f_hat) = (f p (1 - p) + (1 - f) q (1 - q)) / (n (p - q)^2),   q = (1 - p)/(k - 1).

    At ``f = 0`` and per user (``n = 1``) this is ``(k - 2 + e^ε)/(e^ε - 1)^2`` (Wang et al. 2017).
    """
    p = keep_probability(v.check_epsilon(epsilon), v.check_positive_int(k, "k", 2))
    q = (1.0 - p) / (k - 1)
    f = np.asarray(frequency, dtype=np.float64)
    return (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)


@dataclass(frozen=True)
class RREstimate:
    """Unbiased frequency estimates from randomized-response reports.

    ``frequencies[j]`` estimates the fraction of units in ``categories[j]``;
    ``variance[j]`` is the exact variance formula (:func:`rr_variance`) at the estimate clipped
    to [0, 1]; ``std_error`` its square root; ``counts`` the raw report counts; ``n`` the number
    of reports.
    """

    categories: list[Any]
    frequencies: np.ndarray
    variance: np.ndarray
    counts: np.ndarray
    n: int
    keep_probability: float

    @property
    def std_error(self) -> np.ndarray:
        return np.sqrt(self.variance)


def rr_estimate(reports: Any, *, epsilon: float, categories: Any = None) -> RREstimate:
    """Unbiased frequency estimates (and their variances) from randomized-response reports.

    With ``p`` the truthful probability and ``q = (1 - p)/(k - 1)``, a category with true
    frequency ``f`` is reported with probability ``f p + (1 - f) q``, so
    ``f_hat = (c/n - q)/(p - q)`` is unbiased (``c`` = its report count). Post-processing: no
    privacy cost. ``epsilon`` and ``categories`` must be those used for the reports.

    >>> import dpkit as dp
    >>> est = rr_estimate([1, 1, 0, 1], epsilon=math.log(3))   # p = 3/4, q = 1/4
    >>> est.frequencies.tolist()
    [0.0, 1.0]
    """
    eps = v.check_epsilon(epsilon)
    codes, cats, _ = _codes(reports, categories)
    k = len(cats)
    p = keep_probability(eps, k)
    q = (1.0 - p) / (k - 1)
    n = int(codes.size)
    counts = np.bincount(codes.ravel(), minlength=k)
    freq = (counts / n - q) / (p - q)
    var = rr_variance(np.clip(freq, 0.0, 1.0), n, epsilon=eps, k=k)
    return RREstimate(
        categories=cats, frequencies=freq, variance=var, counts=counts, n=n, keep_probability=p
    )
