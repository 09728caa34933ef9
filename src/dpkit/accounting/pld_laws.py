"""Exact privacy-loss laws: the distribution of L = ln(P(o)/Q(o)) for o ~ P, and for o ~ Q.

A *loss law* describes a dominating pair (P, Q) of a mechanism through the law of its privacy
loss. Everything the PLD accountant needs from a mechanism is four functions of a threshold t
(vectorised over numpy arrays, t may be ±inf):

=================  ==========================================================================
``log_cdf(t, q)``  log P[L <= t] (``q=False``) or log Q[L <= t] (``q=True``, includes the
                   Q-mass at L = -inf, where P vanishes)
``log_sf(t, q)``   log P[t < L < +inf] (finite part only; the P-mass at L = +inf, where Q
                   vanishes, is ``p_inf``)
=================  ==========================================================================

plus ``p_inf`` (P[L = +inf]), ``q_neg_inf`` (Q[L = -inf]) and the finite support hull
``[lo, hi]``. The hockey-stick divergence of the pair is
``delta(eps) = p_inf + E_P[(1 - e^(eps - L))_+]`` (Balle et al. 2018; Sommer, Meiser, Mohammadi
2019), and the pair of a composition is the product pair, whose loss is the sum of independent
losses. Every pair here is *symmetric* (the law of L under Q is the law of -L under P), so one law
serves both orders of the neighbouring datasets; Poisson subsampling breaks the symmetry and is
handled by :class:`SubsampledLaw` with an explicit direction, as in dp_accounting.

References: Koskela, Jälkö, Honkela 2020 (PLD + FFT); Doroshenko, Ghazi, Kamath, Kumar,
Manurangsi 2022 (connect-the-dots); Zhu, Dong, Wang 2022 (dominating pairs, subsampling);
Canonne, Kamath, Steinke 2020 (discrete Gaussian).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy import special

__all__ = [
    "AtomicLaw",
    "DiscreteGaussianLaw",
    "DiscreteLaplaceLaw",
    "GaussianLaw",
    "LaplaceLaw",
    "LossLaw",
    "MixInfLaw",
    "SubsampledLaw",
    "approx_dp_law",
    "decay_cumsum",
    "identity_law",
    "pure_dp_law",
    "randomized_response_law",
    "safe_exp",
]

_LN2 = math.log(2.0)


def _arr(t: object) -> np.ndarray:
    return np.asarray(t, dtype=np.float64)


def log1mexp(x: np.ndarray) -> np.ndarray:
    """log(1 - e^x) for x <= 0, accurate at both ends (Mächler 2012); -inf at x = 0."""
    x = np.minimum(_arr(x), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > -_LN2, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def safe_exp(x: np.ndarray) -> np.ndarray:
    """e^x with results below e^-700 flushed to 0: subnormal floats make numpy 100x slower and
    such masses are far below anything this accountant reports (δ >= 1e-290)."""
    x = _arr(x)
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        return np.exp(np.where(x < -700.0, -np.inf, x))


def decay_cumsum(x: np.ndarray, r: float) -> np.ndarray:
    """y[i] = x[i] + r y[i-1] (y[-1] = 0) for 0 < r <= 1: scipy.signal.lfilter([1], [1, -r], x)
    without importing scipy.signal (about 1 s of import time).

    Blockwise: inside a block starting at c, y_i = r^(i-c) (r y_(c-1) + Σ_(c<=j<=i) x_j r^(c-j)),
    with blocks short enough that max|x| r^(c-j) <= e^600 (no overflow, no loss for x >= 0).

    >>> decay_cumsum(np.array([1.0, 1.0, 1.0]), 0.5).tolist()
    [1.0, 1.5, 1.75]
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    out = np.empty(n)
    if n == 0:
        return out
    if r <= 0.0:  # e^-h underflowed: nothing carries over
        out[:] = x
        return out
    lr = math.log(r)  # <= 0
    xmax = float(np.max(np.abs(x)))
    room = 600.0 - min(max(math.log(xmax), 0.0), 300.0) if xmax > 0 else 600.0
    block = n if lr == 0.0 else max(1, min(n, int(room / -lr)))
    steps = np.arange(block, dtype=np.float64) * lr  # log r^(i-c)
    grow = np.exp(-steps)  # r^(c-j) <= e^600
    shrink = np.exp(steps)
    carry = 0.0
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for c in range(0, n, block):
            m = min(block, n - c)
            acc = np.cumsum(x[c:c + m] * grow[:m])
            acc += r * carry
            y = acc * shrink[:m]
            out[c:c + m] = y
            carry = float(y[-1])
    return out


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


class LossLaw:
    """Base class: the law of the privacy loss of a symmetric dominating pair (P, Q)."""

    p_inf: float = 0.0
    q_neg_inf: float = 0.0
    lo: float = -math.inf
    hi: float = math.inf

    def log_cdf(self, t: np.ndarray, q: bool) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def log_sf(self, t: np.ndarray, q: bool) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def sup_loss(self) -> float:
        """Essential supremum of the loss under P (+inf if P[L = +inf] > 0)."""
        return math.inf if self.p_inf > 0 else self.hi

    @property
    def is_identity(self) -> bool:
        return False


@dataclass(frozen=True)
class GaussianLaw(LossLaw):
    """Gaussian mechanism, eta = sensitivity / sigma: L ~ N(eta²/2, eta²) under P, N(-eta²/2, eta²)
    under Q (Dong, Roth, Su 2019: a mu-GDP pair with mu = eta)."""

    eta: float

    def _z(self, t: np.ndarray, q: bool) -> np.ndarray:
        mean = -0.5 * self.eta**2 if q else 0.5 * self.eta**2
        with np.errstate(invalid="ignore"):
            return (_arr(t) - mean) / self.eta

    def log_cdf(self, t: np.ndarray, q: bool) -> np.ndarray:
        return special.log_ndtr(self._z(t, q))

    def log_sf(self, t: np.ndarray, q: bool) -> np.ndarray:
        return special.log_ndtr(-self._z(t, q))


@dataclass(frozen=True)
class LaplaceLaw(LossLaw):
    """Laplace mechanism with eps0 = sensitivity / scale.

    With P = Lap(0, b), Q = Lap(Δ, b): L(x) = (|x - Δ| - |x|)/b, so under P
    L = eps0 with mass 1/2 (x <= 0), L = -eps0 with mass e^-eps0 / 2 (x >= Δ), and in between
    P[L <= t] = e^((t - eps0)/2) / 2. Under Q: Q[L <= t] = 1 - e^(-(t + eps0)/2) / 2 on
    [-eps0, eps0).
    """

    eps0: float

    @property
    def lo(self) -> float:  # type: ignore[override]
        return -self.eps0

    @property
    def hi(self) -> float:  # type: ignore[override]
        return self.eps0

    def log_cdf(self, t: np.ndarray, q: bool) -> np.ndarray:
        t = _arr(t)
        e = self.eps0
        mid = (t >= -e) & (t < e)
        tm = np.where(mid, t, 0.0)
        inner = log1mexp(-(tm + e) / 2 - _LN2) if q else (tm - e) / 2 - _LN2
        return np.where(t < -e, -np.inf, np.where(t >= e, 0.0, inner))

    def log_sf(self, t: np.ndarray, q: bool) -> np.ndarray:
        t = _arr(t)
        e = self.eps0
        mid = (t >= -e) & (t < e)
        tm = np.where(mid, t, 0.0)
        inner = -(tm + e) / 2 - _LN2 if q else log1mexp((tm - e) / 2 - _LN2)
        return np.where(t < -e, 0.0, np.where(t >= e, -np.inf, inner))


def _ceil_tol(v: np.ndarray) -> np.ndarray:
    """ceil(v) that treats v within 1e-9 (relative) above an integer as that integer."""
    with np.errstate(invalid="ignore"):
        return np.ceil(v - 1e-9 * np.maximum(1.0, np.abs(v)))


class _IntegerShiftLaw(LossLaw):
    """A symmetric integer noise law shifted by an integer sensitivity Δ: the loss is decreasing
    in the sample x, so ``L <= t`` iff ``x >= k(t)`` for an integer threshold; subclasses give
    ``_k(t)`` and ``_log_ge(k) = log P[X >= k]``. By symmetry the shifted law (``q``) has
    ``P[X + Δ >= k] = P[X >= k - Δ]`` and ``P[X + Δ < k] = P[X >= 1 - k + Δ]``."""

    sensitivity: int

    def _k(self, t: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _log_ge(self, k: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def log_cdf(self, t: np.ndarray, q: bool) -> np.ndarray:
        k = self._k(t)
        return self._log_ge(k - self.sensitivity if q else k)

    def log_sf(self, t: np.ndarray, q: bool) -> np.ndarray:
        k = self._k(t)
        return self._log_ge(1.0 - k + self.sensitivity if q else 1.0 - k)


@dataclass(frozen=True)
class DiscreteLaplaceLaw(_IntegerShiftLaw):
    """Discrete Laplace P(x) ∝ e^(-|x|/scale) on integers, integer sensitivity Δ.

    L(x) = (|x - Δ| - |x|)/scale takes the values Δ/s (x <= 0), (Δ - 2x)/s (0 < x < Δ) and
    -Δ/s (x >= Δ); tails use P[X >= k] = α^k / (1 + α) for k >= 0, α = e^(-1/scale).
    """

    scale: float
    sensitivity: int

    @property
    def lo(self) -> float:  # type: ignore[override]
        return -self.sensitivity / self.scale

    @property
    def hi(self) -> float:  # type: ignore[override]
        return self.sensitivity / self.scale

    def _log_ge(self, k: np.ndarray) -> np.ndarray:
        """log P[X >= k] for integer-valued float k (±inf allowed)."""
        s = self.scale
        l1pa = math.log1p(math.exp(-1.0 / s))
        pos = k >= 0
        kp = np.where(pos, k, 0.0)
        kn = np.where(pos, 0.0, k)
        with np.errstate(invalid="ignore", over="ignore"):
            right = -kp / s - l1pa
            left = log1mexp(-(1.0 - kn) / s - l1pa)
        return np.where(pos, right, left)

    def _k(self, t: np.ndarray) -> np.ndarray:
        """Smallest integer x with L(x) <= t (+inf if none, -inf if all)."""
        t = _arr(t)
        d, s = float(self.sensitivity), self.scale
        with np.errstate(invalid="ignore"):
            k = _ceil_tol((d - s * t) / 2.0)
        k = np.clip(k, 1.0, d)
        return np.where(t >= d / s, -np.inf, np.where(t < -d / s, np.inf, k))



def _log_theta(sigma2: float) -> float:
    """log Σ_(x in Z) e^(-x²/(2 sigma2)) by Poisson summation (exact identity):
    sqrt(2π sigma2) (1 + 2 Σ_(m>=1) e^(-2π² sigma2 m²)); for sigma2 >= 4 the m >= 4 terms are
    below e^-1100 (below any float relative to 1)."""
    corr = sum(math.exp(-2.0 * math.pi**2 * sigma2 * m * m) for m in (1, 2, 3))
    return 0.5 * math.log(2.0 * math.pi * sigma2) + math.log1p(2.0 * corr)


@dataclass(frozen=True)
class DiscreteGaussianLaw(_IntegerShiftLaw):
    """Discrete Gaussian P(x) ∝ e^(-x²/(2 sigma2)) on integers, integer sensitivity Δ.

    L(x) = Δ(Δ - 2x)/(2 sigma2); the tails P[X >= k] come from a table of log masses over
    |x| <= sqrt(1490 sigma2) + 2, beyond which the mass is below e^-745 (Canonne, Kamath,
    Steinke 2020, Thm 7 gives the same δ(ε) formula).
    """

    sigma2: float
    sensitivity: int

    @cached_property
    def _table(self) -> tuple[int, np.ndarray]:
        big_k = math.ceil(math.sqrt(1490.0 * self.sigma2)) + 2
        x = np.arange(-big_k, big_k + 1, dtype=np.float64)
        logw = -(x * x) / (2.0 * self.sigma2)
        logz = _log_theta(self.sigma2) if self.sigma2 >= 4.0 else special.logsumexp(logw)
        # log P[X >= x] for each table entry. Where the weights are >= e^-700 a reverse cumsum of
        # normal floats (relative error <= n ulp, no subnormals: those make numpy ~100x slower);
        # the far right tail (weights < e^-700) by a reverse log-cumulative sum, added on top;
        # the far left tail's weights (< e^-700 against a total near 1) are dropped.
        far = int(np.searchsorted(-logw[big_k:], 700.0)) + big_k  # first right index < e^-700
        tail = np.empty_like(logw)
        far_tail = np.logaddexp.accumulate(logw[far:][::-1])[::-1]
        tail[far:] = far_tail
        near = safe_exp(logw[:far])
        carry = math.exp(far_tail[0]) if far_tail.size else 0.0  # (0 when below e^-745)
        with np.errstate(divide="ignore"):
            tail[:far] = np.log(np.cumsum(near[::-1])[::-1] + carry)
        return big_k, tail - logz

    def _log_ge(self, k: np.ndarray) -> np.ndarray:
        big_k, tail = self._table
        k = _arr(k)
        idx = np.clip(np.nan_to_num(k, posinf=big_k + 1, neginf=-big_k - 1), -big_k - 1,
                      big_k + 1).astype(np.int64)
        inside = (idx >= -big_k) & (idx <= big_k)
        vals = tail[np.clip(idx + big_k, 0, 2 * big_k)]
        return np.where(inside, vals, np.where(idx < -big_k, 0.0, -np.inf))

    def _k(self, t: np.ndarray) -> np.ndarray:
        t = _arr(t)
        d = float(self.sensitivity)
        with np.errstate(invalid="ignore"):
            v = d / 2.0 - self.sigma2 * t / d
        k = _ceil_tol(v)
        return np.where(np.isposinf(t), -np.inf, np.where(np.isneginf(t), np.inf, k))



@dataclass(frozen=True)
class AtomicLaw(LossLaw):
    """A pair with finitely many outcomes: losses (sorted) with their P- and Q-masses."""

    losses: tuple[float, ...]
    p: tuple[float, ...]
    q: tuple[float, ...]
    p_inf: float = 0.0
    q_neg_inf: float = 0.0
    _arrays: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def lo(self) -> float:  # type: ignore[override]
        return self.losses[0] if self.losses else math.inf

    @property
    def hi(self) -> float:  # type: ignore[override]
        return self.losses[-1] if self.losses else -math.inf

    @property
    def is_identity(self) -> bool:
        return self.losses == (0.0,) and self.p_inf == 0.0 and self.q_neg_inf == 0.0

    def _cums(self) -> dict:
        if not self._arrays:
            x = np.array(self.losses, dtype=np.float64)
            p = np.array(self.p, dtype=np.float64)
            q = np.array(self.q, dtype=np.float64)
            self._arrays["x"] = x
            # cdf[i] = mass of the first i atoms (+ Q's -inf atom); sf[i] = mass of atoms >= i.
            self._arrays["cdf_p"] = np.concatenate([[0.0], np.cumsum(p)])
            self._arrays["cdf_q"] = np.concatenate([[0.0], np.cumsum(q)]) + self.q_neg_inf
            self._arrays["sf_p"] = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
            self._arrays["sf_q"] = np.concatenate([np.cumsum(q[::-1])[::-1], [0.0]])
        return self._arrays

    def log_cdf(self, t: np.ndarray, q: bool) -> np.ndarray:
        a = self._cums()
        idx = np.searchsorted(a["x"], _arr(t), side="right")
        with np.errstate(divide="ignore"):
            return np.log(a["cdf_q" if q else "cdf_p"][idx])

    def log_sf(self, t: np.ndarray, q: bool) -> np.ndarray:
        a = self._cums()
        idx = np.searchsorted(a["x"], _arr(t), side="right")
        with np.errstate(divide="ignore"):
            return np.log(a["sf_q" if q else "sf_p"][idx])


def identity_law() -> AtomicLaw:
    """The pair (P, P): loss 0 with probability 1 (NoOp, q = 0, ε = 0)."""
    return AtomicLaw((0.0,), (1.0,), (1.0,))


def approx_dp_law(epsilon: float, delta: float) -> AtomicLaw:
    """The worst case of any (ε, δ)-DP mechanism (Kairouz, Oh, Viswanath 2015; Murtagh-Vadhan):
    P = (δ, (1-δ) e^ε/(1+e^ε), (1-δ)/(1+e^ε), 0), Q = (0, (1-δ)/(1+e^ε), (1-δ) e^ε/(1+e^ε), δ),
    i.e. losses +inf, ε, -ε, -inf."""
    if delta >= 1.0:
        return AtomicLaw((), (), (), p_inf=1.0, q_neg_inf=1.0)
    if epsilon == 0.0:
        return AtomicLaw((0.0,), (1.0 - delta,), (1.0 - delta,), p_inf=delta, q_neg_inf=delta)
    small = math.exp(-epsilon) / (1.0 + math.exp(-epsilon))  # 1/(1+e^ε), no overflow
    big = 1.0 / (1.0 + math.exp(-epsilon))  # e^ε/(1+e^ε)
    m = 1.0 - delta
    return AtomicLaw((-epsilon, epsilon), (m * small, m * big), (m * big, m * small),
                     p_inf=delta, q_neg_inf=delta)


def pure_dp_law(epsilon: float) -> AtomicLaw:
    """Worst case of an ε-DP mechanism: binary randomized response at ε."""
    return approx_dp_law(epsilon, 0.0)


def randomized_response_law(epsilon: float, categories: int) -> AtomicLaw:
    """k-ary randomized response: report the truth w.p. e^ε/(e^ε + k - 1), else a uniform other.

    Inputs a, b: output a has loss ε, output b loss -ε, the k - 2 others loss 0.
    """
    k = categories
    if k == 2:
        return pure_dp_law(epsilon)
    z = 1.0 + (k - 1) * math.exp(-epsilon)  # (e^ε + k - 1)/e^ε
    top = 1.0 / z
    low = math.exp(-epsilon) / z
    mid = (k - 2) * math.exp(-epsilon) / z
    return AtomicLaw((-epsilon, 0.0, epsilon), (low, mid, top), (top, mid, low))


@dataclass(frozen=True)
class MixInfLaw(LossLaw):
    """With probability δ the mechanism reveals the unit (loss ±inf), else runs ``base``."""

    base: LossLaw
    delta: float

    @property
    def p_inf(self) -> float:  # type: ignore[override]
        return self.delta + (1.0 - self.delta) * self.base.p_inf

    @property
    def q_neg_inf(self) -> float:  # type: ignore[override]
        return self.delta + (1.0 - self.delta) * self.base.q_neg_inf

    @property
    def lo(self) -> float:  # type: ignore[override]
        return self.base.lo

    @property
    def hi(self) -> float:  # type: ignore[override]
        return self.base.hi

    def log_cdf(self, t: np.ndarray, q: bool) -> np.ndarray:
        out = math.log1p(-self.delta) + self.base.log_cdf(t, q)
        if q:
            out = np.logaddexp(out, math.log(self.delta) if self.delta > 0 else -np.inf)
        return out

    def log_sf(self, t: np.ndarray, q: bool) -> np.ndarray:
        return math.log1p(-self.delta) + self.base.log_sf(t, q)


@dataclass(frozen=True)
class SubsampledLaw(LossLaw):
    """Poisson subsampling with rate q of a symmetric pair (P, Q) (Zhu, Dong, Wang 2022, Thm 11;
    dp_accounting's REMOVE / ADD adjacency types).

    ``direction="remove"``: P' = (1-q) Q + q P, Q' = Q, loss g(L) = ln(1 - q + q e^L).
    ``direction="add"``: by symmetry of (P, Q), the pair (Q, (1-q) Q + q P) is the pair
    (P, (1-q) P + q Q): loss h(L) = -ln(1 - q + q e^-L) under P.
    Both g and h increase, so P'[L' <= t] = P[L <= g^-1(t)] (mixed as above).
    """

    base: LossLaw
    rate: float
    direction: str  # "remove" | "add"

    @property
    def _lq(self) -> float:
        return math.log(self.rate)

    @property
    def _l1q(self) -> float:
        return math.log1p(-self.rate)

    def _g(self, x: float) -> float:
        if self.direction == "remove":
            return float(np.logaddexp(self._l1q, self._lq + x))
        return -float(np.logaddexp(self._l1q, self._lq - x))

    @property
    def p_inf(self) -> float:  # type: ignore[override]
        return self.rate * self.base.p_inf if self.direction == "remove" else 0.0

    @property
    def q_neg_inf(self) -> float:  # type: ignore[override]
        return 0.0 if self.direction == "remove" else self.rate * self.base.q_neg_inf

    @property
    def lo(self) -> float:  # type: ignore[override]
        if self.direction == "remove":
            return self._l1q if self.base.q_neg_inf > 0 else self._g(self.base.lo)
        return self._g(self.base.lo)

    @property
    def hi(self) -> float:  # type: ignore[override]
        if self.direction == "add" and self.base.p_inf > 0:
            return -self._l1q
        return self._g(self.base.hi)

    def _inv(self, t: np.ndarray) -> np.ndarray:
        """g^-1(t) (remove) or h^-1(t) (add); nan outside the range, handled by callers."""
        q = self.rate
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if self.direction == "remove":
                return np.log(np.expm1(t) + q) - self._lq
            return -(np.log(np.expm1(-t) + q) - self._lq)

    def _mixed(self, t: np.ndarray, q: bool, tail: Callable[[np.ndarray, bool], np.ndarray],
               *, p_atom: bool = False) -> tuple[float, np.ndarray]:
        """(edge, log of the subsampled pair's tail at t) from the base's ``tail`` (log_cdf or
        log_sf) at s = g^-1(t): remove: Q' = Q, P' = (1-q) Q + q P; add: P' = P,
        Q' = (1-q) P + q Q. ``p_atom`` adds P's atom at +inf to P's part (survival function).
        Values beyond ``edge`` (the loss's end) are the caller's to set."""
        s = self._inv(t)
        if self.direction == "remove":
            edge = self._l1q
            s = np.where(t <= edge, -np.inf, s)
            if q:
                return edge, tail(s, True)
            return edge, np.logaddexp(self._l1q + tail(s, True), self._lq + tail(s, False))
        edge = -self._l1q
        s = np.where(t >= edge, np.inf, s)
        p_part = tail(s, False)
        if p_atom:
            p_part = np.logaddexp(p_part, _log(self.base.p_inf))
        return edge, (np.logaddexp(self._l1q + p_part, self._lq + tail(s, True)) if q else p_part)

    def log_cdf(self, t: np.ndarray, q: bool) -> np.ndarray:
        t = _arr(t)
        edge, val = self._mixed(t, q, self.base.log_cdf)
        if self.direction == "remove":
            return np.where(t < edge, -np.inf, val)
        return np.where(t >= edge, 0.0, val)

    def log_sf(self, t: np.ndarray, q: bool) -> np.ndarray:
        t = _arr(t)
        edge, val = self._mixed(t, q, self.base.log_sf, p_atom=True)
        if self.direction == "remove":
            below = 0.0 if q else math.log((1.0 - self.rate) + self.rate * (1.0 - self.base.p_inf))
            return np.where(t < edge, below, val)
        return np.where(t >= edge, -np.inf, val)
