"""Confidence intervals from the exact integer noise distributions.

A mechanism releases ``Y = n + Z`` where ``n`` is the (grid-rounded) true value in integer units
and ``Z`` is integer noise. If ``P(|Z| <= m) >= level`` then ``[Y - m, Y + m]`` covers ``n`` with
probability at least ``level``; on a grid of width ``2**k`` the real input ``x`` is within
``2**(k-1)`` of ``n * 2**k``, so ``[(Y - m) 2**k - 2**(k-1), (Y + m) 2**k + 2**(k-1)]`` covers ``x``
with the same probability. ``m`` is the smallest integer with that property, computed from the
exact law of ``Z`` (not a continuous approximation); the exact coverage ``1 - P(|Z| > m)`` is
returned alongside so that callers (and tests) can state it.

Discrete Laplace, ``P(x) = (1-q)/(1+q) q^|x|`` with ``q = exp(-1/s)``:

    P(|Z| > m) = 2 q^(m+1) / (1 + q)                       (geometric tail, closed form)

Discrete Gaussian, ``P(x) = exp(-x^2/(2 sigma2)) / N``:

    N = sqrt(2 pi sigma2) * sum_k exp(-2 pi^2 sigma2 k^2)   (Poisson summation, exact)
    P(|Z| > m) = 2 * sum_{x > m} exp(-x^2/(2 sigma2)) / N

The tail sum is added term by term while ``sigma <= 4096`` (terms beyond ``40 sigma`` are below
``exp(-800)``); above that the Euler-Maclaurin formula ``sum_{x >= a} f(x) = int_a^inf f + f(a)/2
- f'(a)/12 + R`` is used; R is of order f(a)/sigma^3, far below double precision there.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.mechanisms.release import Release

__all__ = [
    "dgauss_halfwidth",
    "dgauss_norm",
    "dgauss_tail",
    "dgauss_upper_sum",
    "dlap_halfwidth",
    "dlap_tail",
    "grid_interval",
    "integer_interval",
    "interval_release",
    "selected_count_lower",
]

# A tail is accepted as <= alpha only with this relative margin, so that float rounding in the
# tail formulas can never turn a coverage claim of ``level`` into slightly less.
_MARGIN = 1.0 - 1e-9


def dlap_tail(m: int, scale: float) -> float:
    """``P(|Z| > m)`` for ``Z ~ DLap(scale)``: ``2 q^(m+1) / (1 + q)``, ``q = exp(-1/scale)``."""
    if m < 0:
        return 1.0
    q = math.exp(-1.0 / scale)
    return math.exp(math.log(2.0) - (m + 1) / scale - math.log1p(q))


@functools.lru_cache(maxsize=4096)
def dlap_halfwidth(scale: float, level: float) -> tuple[int, float]:
    """Smallest ``m >= 0`` with ``P(|Z| <= m) >= level`` for ``Z ~ DLap(scale)``, and that
    probability (the exact coverage of ``[Y - m, Y + m]``)."""
    alpha = 1.0 - level
    q = math.exp(-1.0 / scale)
    # 2 q^(m+1)/(1+q) <= alpha  <=>  m + 1 >= scale * (ln(2/(1+q)) + ln(1/alpha))
    guess = math.ceil(scale * (math.log(2.0) - math.log1p(q) - math.log(alpha))) - 1
    m = max(0, guess - 2)
    while dlap_tail(m, scale) > alpha * _MARGIN:
        m += 1
    return m, 1.0 - dlap_tail(m, scale)


def dgauss_norm(sigma2: float) -> float:
    sigma = math.sqrt(sigma2)
    if sigma < 4.0:
        r = int(60 * sigma) + 10
        x = np.arange(-r, r + 1, dtype=np.float64)
        return float(np.sum(np.exp(-(x * x) / (2.0 * sigma2))))
    # Poisson summation: sum_x exp(-x^2/(2 s2)) = sqrt(2 pi s2) * sum_k exp(-2 pi^2 s2 k^2)
    corr = sum(math.exp(-2.0 * math.pi**2 * sigma2 * k * k) for k in (1, 2, 3))
    return math.sqrt(2.0 * math.pi * sigma2) * (1.0 + 2.0 * corr)


def dgauss_upper_sum(a: int, sigma2: float, *, upper: bool = True) -> float:
    """``sum_{x >= a} exp(-x^2/(2 sigma2))`` for ``a >= 0``: exact summation up to
    ``sigma = 4096``; beyond, a bound in the direction asked for (``upper=True``: never below
    the true sum; ``upper=False``: never above it)."""
    sigma = math.sqrt(sigma2)
    if sigma <= 4096.0:
        # terms beyond sqrt(a^2 + 90 sigma2) are below exp(-45) = 3e-20 times the first one
        top = math.ceil(math.sqrt(a * a + 90.0 * sigma2)) + 2
        x = np.arange(a, top + 1, dtype=np.float64)
        return float(np.sum(np.exp(-(x * x) / (2.0 * sigma2))))
    from scipy import special  # imported on first use: scipy costs ~0.5 s at import

    # Euler-Maclaurin with its remainder bound (p = 2): for f(x) = exp(-x²/(2σ²)),
    #   Σ_{x>=a} f(x) = ∫_a^∞ f + f(a)/2 - f'(a)/12 + R,   |R| <= (2ζ(2)/(2π)²) ∫_a^∞ |f''|
    # = (1/12) ∫_a^∞ |f''|. f'' changes sign once, at x = σ, so ∫_a^∞ |f''| = |f'(a)| for
    # a >= σ and 2|f'(σ)| - |f'(a)| below, with |f'(x)| = x f(x)/σ². |R| is about 0.1/σ, i.e.
    # relatively ~1e-2/σ² < 1e-9 of the sum: bounds as tight as the float arithmetic.
    integral = sigma * math.sqrt(math.pi / 2.0) * special.erfc(a / (sigma * math.sqrt(2.0)))
    fa = math.exp(-(a * a) / (2.0 * sigma2))
    slope_a = a * fa / sigma2  # |f'(a)|
    variation = slope_a if a >= sigma else 2.0 * math.exp(-0.5) / sigma - slope_a
    remainder = variation / 12.0
    estimate = integral + fa / 2.0 + slope_a / 12.0
    bound = estimate + remainder if upper else estimate - remainder
    # the float evaluation's own error (a few ulps of each term) is covered by 1e-12
    return float(bound * (1.0 + 1e-12) if upper else bound * (1.0 - 1e-12))


def dgauss_tail(m: int, sigma2: float) -> float:
    """``P(|Z| > m)`` for ``Z ~ N_Z(0, sigma2)`` (discrete Gaussian), from exact sums."""
    if m < 0:
        return 1.0
    return min(1.0, 2.0 * dgauss_upper_sum(m + 1, sigma2) / dgauss_norm(sigma2))


@functools.lru_cache(maxsize=4096)
def dgauss_halfwidth(sigma2: float, level: float) -> tuple[int, float]:
    """Smallest ``m >= 0`` with ``P(|Z| <= m) >= level`` for the discrete Gaussian, and that
    probability."""
    alpha = 1.0 - level
    sigma = math.sqrt(sigma2)
    norm = dgauss_norm(sigma2)
    from scipy import special

    # The continuous answer is within a couple of units of the discrete one: start below it.
    cont = sigma * math.sqrt(2.0) * float(special.erfcinv(alpha))
    m = max(0, math.floor(cont) - 3)
    if sigma <= 4096.0:
        # all tails P(|Z| > j), j >= m, from one reversed cumulative sum
        top = math.ceil(math.sqrt((m + 1) ** 2 + 90.0 * sigma2)) + 2
        x = np.arange(m + 1, top + 1, dtype=np.float64)
        upper = np.cumsum(np.exp(-(x * x) / (2.0 * sigma2))[::-1])[::-1]  # upper[i]: x >= m+1+i
        tails = np.minimum(1.0, 2.0 * upper / norm)
        ok = np.flatnonzero(tails <= alpha * _MARGIN)
        if ok.size and ok[0] > 0:
            m += int(ok[0])
            return m, 1.0 - float(tails[ok[0]])
        if ok.size == 0:  # pragma: no cover - the window always reaches the tail
            m = top
    while dgauss_tail(m, sigma2) > alpha * _MARGIN:
        m += 1
    while m > 0 and dgauss_tail(m - 1, sigma2) <= alpha * _MARGIN:
        m -= 1
    return m, 1.0 - dgauss_tail(m, sigma2)


def integer_interval(noisy: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``(Y - m, Y + m)`` as int64 arrays (integer mechanisms, no grid)."""
    return noisy - m, noisy + m


def grid_interval(noisy: np.ndarray, m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Interval on the real line for a grid release ``Y * 2**k`` covering the *unrounded* input.

    ``[(Y - m) 2^k - 2^(k-1), (Y + m) 2^k + 2^(k-1)]``, each end rounded outwards by one ulp so
    that float rounding never shrinks it.
    """
    y = noisy.astype(np.float64)
    step = math.ldexp(1.0, k)
    half = math.ldexp(1.0, k - 1)
    low = np.nextafter((y - m) * step - half, -np.inf)
    high = np.nextafter((y + m) * step + half, np.inf)
    return low, high


def interval_release(
    noisy: np.ndarray,
    halfwidth: int,
    coverage: float,
    *,
    k: int | None,
    shape: tuple[int, ...],
    event: Any,
    level: float,
    insecure: bool,
    details: dict[str, Any],
) -> Any:
    """The Release of noisy integers ``Y`` (``noisy``) with the interval of half-width ``m``.

    ``k=None``: integer release, ``Y`` and ``(Y - m, Y + m)`` (:func:`integer_interval`);
    otherwise ``Y 2**k`` and :func:`grid_interval`. Values take ``shape``, as Python scalars for
    ``shape == ()``. ``details`` gains the half-width (``"halfwidth"``, or
    ``"halfwidth_grid_units"`` on a grid) and the exact ``"coverage"``.
    """
    if k is None:
        value = noisy
        low, high = integer_interval(noisy, halfwidth)
        key = "halfwidth"
    else:
        value = noise.grid.from_grid(noisy, k)
        low, high = grid_interval(noisy, halfwidth, k)
        key = "halfwidth_grid_units"

    def out(a: np.ndarray) -> Any:
        a = np.asarray(a).reshape(shape)
        return a.item() if a.ndim == 0 else a

    return Release(
        value=out(value),
        event=event,
        ci=(out(low), out(high)),
        level=level,
        insecure=insecure,
        details={**details, key: halfwidth, "coverage": coverage},
    )


def _log_survival_dlap(t: np.ndarray, scale: float) -> np.ndarray:
    """``log P(Z >= t)`` for ``Z ~ DLap(scale)`` (integers ``t``): ``q^t/(1+q)`` for ``t >= 1``,
    ``1 - q^(1-t)/(1+q)`` for ``t <= 0``, ``q = exp(-1/scale)``."""
    t = np.asarray(t, dtype=np.float64)
    log_q = -1.0 / scale
    log_norm = math.log1p(math.exp(log_q))
    pos = t * log_q - log_norm
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        neg = np.log1p(-np.exp(np.minimum((1.0 - t) * log_q - log_norm, 0.0)))
    return np.where(t >= 1, pos, neg)


def _log_survival_dgauss(t: np.ndarray, sigma2: float, top: int) -> np.ndarray:
    """``log P(Z >= t)`` for the discrete Gaussian, from the exact terms on ``[0, top]``
    accumulated in log space (no underflow far in the tail; ``-inf`` beyond ``top``;
    ``P(Z >= t) = 1 - P(Z >= 1 - t)`` for ``t <= 0``)."""
    x = np.arange(top + 1, dtype=np.float64)
    log_w = -(x * x) / (2.0 * sigma2)
    log_upper = np.logaddexp.accumulate(log_w[::-1])[::-1] - math.log(dgauss_norm(sigma2))
    log_upper = np.minimum(np.append(log_upper, -np.inf), 0.0)  # [a] = log P(Z >= a)
    t = np.asarray(t, dtype=np.int64)
    pos = log_upper[np.clip(t, 0, top + 1)]
    other = log_upper[np.clip(1 - t, 0, top + 1)]
    with np.errstate(divide="ignore"):
        neg = np.log1p(-np.exp(other))
    return np.where(t >= 0, pos, neg)


def selected_count_lower(values: Any, threshold: int, level: float, *,
                         scale: float | None = None, sigma2: float | None = None) -> np.ndarray:
    """Lower interval ends for counts that were shown *because* ``Y = c + Z >= threshold``.

    When the noisy count that decided partition selection is also the released count, a
    shown group's noise is conditioned on ``Z >= T - c`` and ``Y - m`` (the unconditional
    end) misses small groups that got through. This returns, per observed ``y >= T``,
    ``c_lo(y) = min{c >= 1 : P(Y >= y | c, Y >= T) > (1 - level)/2}`` (``Z`` discrete Laplace
    of ``scale`` or discrete Gaussian of ``sigma2``; counts of shown groups are >= 1). For
    the true ``c``, ``P(c < c_lo(Y) | Y >= T) <= (1 - level)/2`` (the conditional p-value
    ``P(Y >= y | c, Y >= T)`` is super-uniform), and the upper end ``Y + m`` of the
    unconditional level-``level`` interval keeps ``P(c > Y + m | Y >= T) <= P(Z < -m) <=
    (1 - level)/2`` (conditioning on ``Z >= T - c`` only moves ``Z`` up). So ``[c_lo(Y), Y +
    m]`` covers ``c`` with probability ``>= level`` given that the group is shown. Both noise
    laws are log-concave, so ``P(Y >= y | c, Y >= T) = S(y - c) / S(T - c)`` is
    non-decreasing in ``c`` and ``c_lo`` is found by bisection. For ``sigma > 4096`` (no
    exact table) the end is 1, which is always valid.
    """
    y = np.asarray(values, dtype=np.int64).reshape(-1)
    out = np.ones(y.shape, dtype=np.int64)
    if y.size == 0:
        return out
    cut = (1.0 - level) / 2.0 * (1.0 - 1e-9)  # accept borderline c: the end can only drop
    log_cut = math.log(cut)
    T = int(threshold)
    if scale is not None:
        def log_surv(t: np.ndarray) -> np.ndarray:
            return _log_survival_dlap(t, scale)
    elif sigma2 is not None:
        sigma = math.sqrt(sigma2)
        if sigma > 4096.0:
            return out
        # beyond T + 12 sigma the ratio S(y - c)/S(T - c) is below exp(-72): treat as 0
        top = max(T, 0) + math.ceil(12.0 * sigma) + 2

        def log_surv(t: np.ndarray) -> np.ndarray:
            return _log_survival_dgauss(t, sigma2, top)
    else:
        raise ValueError("give scale= (discrete Laplace) or sigma2= (discrete Gaussian)")

    def ok(c: np.ndarray) -> np.ndarray:
        # NaN (both tails beyond reach) counts as accepted: the end can only move down
        with np.errstate(invalid="ignore"):
            return ~((log_surv(y - c) - log_surv(T - c)) < log_cut)

    lo = np.ones_like(y)          # ok(lo) may be true: then the end is 1
    hi = np.maximum(y, 1)         # ok(y) holds: S(0) >= 1/2 and S(T - y) <= 1
    done = ok(lo) | (y <= 1)
    lo_b, hi_b = lo[~done], hi[~done]
    y_b = y[~done]
    while lo_b.size and np.any(hi_b - lo_b > 1):
        mid = (lo_b + hi_b) // 2
        with np.errstate(invalid="ignore"):
            good = ~((log_surv(y_b - mid) - log_surv(T - mid)) < log_cut)
        hi_b = np.where(good, mid, hi_b)
        lo_b = np.where(good, lo_b, mid)
    out[~done] = hi_b
    return out
