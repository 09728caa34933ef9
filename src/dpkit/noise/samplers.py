"""Exact, vectorised samplers on the integers (Canonne-Kamath-Steinke 2020 structure).

Every sampler returns numbers whose distribution is *exactly* the stated one, given independent
uniform words from the :class:`~dpkit.noise.sources.Source`. Floating point is used only where a
rigorous IEEE-754 error bound proves the decision it makes; the lanes where the bound cannot
decide (probability about 2**-31 per decision) are finished with Python integers
(:mod:`dpkit.noise.exact`). The proofs are in ``docs/noise.md``.

Parameters (``p``, ``gamma``, ``scale``, ``sigma2``) may be ``int``, :class:`fractions.Fraction`
or ``float``; a float is taken at its exact binary value (``Fraction(x)``), never re-rounded.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable
from fractions import Fraction
from typing import TypeAlias

import numpy as np

from .exact import LazyUniform, exp_neg_fixed
from .sources import Source, default_source
from .trace import traced

__all__ = [
    "MAX_DGAUSS_SIGMA2",
    "MAX_DLAP_SCALE",
    "as_rational",
    "bernoulli",
    "bernoulli_exp",
    "bernoulli_exp_lanes",
    "bernoulli_lanes",
    "bernoulli_matrix",
    "discrete_gaussian",
    "discrete_laplace",
    "dlap_effective_scale",
    "fair_bits",
    "permutation",
    "uniform_float01",
    "uniform_int",
]

Rational: TypeAlias = int | float | Fraction
Size: TypeAlias = int | tuple[int, ...]

#: Largest discrete-Laplace scale accepted: samples stay far inside int64 (P(|X| >= 2**52) is
#: about exp(-2**12)) and below 2**53 so grid releases convert to float exactly.
MAX_DLAP_SCALE = Fraction(2**40)
#: Largest discrete-Gaussian variance accepted (sigma <= 2**40), for the same reason.
MAX_DGAUSS_SIGMA2 = Fraction(2**80)
#: Smallest sigma2 used; smaller requests are rounded *up* to this (more noise, never less).
MIN_DGAUSS_SIGMA2 = Fraction(1, 2**60)

_T_MAX = 1 << 56  # numerator bound for scale t/s: t*V fits int64 unless V > 127 (prob e**-128)
_S_MAX = 1 << 62  # denominator bound for scale t/s
_CHUNK = 1 << 16  # lanes per vectorised pass (stays in L2 cache)
_TWO32 = float(2**32)


# --------------------------------------------------------------------------- argument checks
def as_rational(x: object, name: str) -> Fraction:
    """``x`` (int, Fraction, or float taken at its exact binary value) as a Fraction.

    The parameter convention of every sampler here; also used by callers that build exact
    probabilities before sampling (the local randomizers).

    >>> as_rational(0.5, "p"), as_rational(3, "n")
    (Fraction(1, 2), Fraction(3, 1))
    """
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(
            f"{name} must be an int, fractions.Fraction or float (got {type(x).__name__})"
        )
    if isinstance(x, Fraction):
        return x
    if isinstance(x, numbers.Integral):
        return Fraction(int(x))
    xf = float(x)  # type: ignore[arg-type]
    if not math.isfinite(xf):
        raise ValueError(f"{name} must be finite (got {xf!r})")
    return Fraction(xf)


def _shape(size: Size | None) -> tuple[int, ...]:
    if type(size) is tuple and all(type(d) is int and d >= 0 for d in size):
        return size  # the common case (an array's .shape): already a valid tuple of ints
    if size is None:
        return ()
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        shape: tuple[int, ...] = (int(size),)
    elif isinstance(size, tuple):
        shape = tuple(int(s) for s in size)
    else:
        raise TypeError(f"size must be an int or a tuple of ints (got {size!r})")
    if any(s < 0 for s in shape):
        raise ValueError(f"size must be non-negative (got {size!r})")
    return shape


def _source(source: Source | None) -> Source:
    if source is None:
        return default_source()
    if not isinstance(source, Source):
        raise TypeError(
            "source must be a dpkit.noise Source, e.g. noise.secure() or noise.seeded(42) "
            f"(got {type(source).__name__})"
        )
    return source


# --------------------------------------------------------------------------- uniform integers
def _uniform_below(high: int, n: int, src: Source) -> np.ndarray:
    """``n`` exact uniform integers in [0, high) as int64 (1 <= high <= 2**63), no modulo bias."""
    if high == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    if high & (high - 1) == 0:  # power of two: mask
        if high <= 1 << 32:
            return (src.uint32(n) & np.uint32(high - 1)).astype(np.int64)
        return (src.uint64(n) & np.uint64(high - 1)).astype(np.int64)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    if high < 1 << 32:
        # Lemire (2019): w*high = H*2**32 + L; reject L < 2**32 mod high; each H in [0, high)
        # then has exactly floor(2**32/high) accepted words w.
        thr = np.uint64((1 << 32) % high)
        h = np.uint64(high)
        reject = ((1 << 32) % high) / 2.0**32
        while filled < n:
            need = n - filled
            w = src.uint32(need + int(need * reject * 1.2) + 8).astype(np.uint64)
            w *= h
            vals = (w >> np.uint64(32))[(w & np.uint64(0xFFFFFFFF)) >= thr]
            k = min(vals.size, need)
            out[filled : filled + k] = vals[:k]
            filled += k
        return out
    # 64-bit words: accept w < lim (a multiple of high), return w mod high
    lim_u, h, reject = _u64_rejection(high)
    while filled < n:
        need = n - filled
        w = src.uint64(need + int(need * reject * 1.2) + 8)
        vals = w[w < lim_u] % h
        k = min(vals.size, need)
        out[filled : filled + k] = vals[:k]
        filled += k
    return out


@functools.lru_cache(maxsize=256)
def _u64_rejection(high: int) -> tuple[np.uint64, np.uint64, float]:
    """``(lim, high, rejection rate)`` for 64-bit words: ``lim`` the largest multiple of
    ``high`` not above ``2**64``."""
    lim = (1 << 64) - (1 << 64) % high
    return np.uint64(lim), np.uint64(high), ((1 << 64) % high) / 2.0**64


@traced
def uniform_int(high: int, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exactly uniform integers on ``[0, high)`` (int64), ``1 <= high < 2**63``.

    No modulo bias: 32-bit words with Lemire's rejection when ``high < 2**32``, else 64-bit words
    rejected above the largest multiple of ``high``.

    >>> import dpkit.noise as noise
    >>> noise.uniform_int(6, 4, source=noise.seeded(1)).tolist()
    [2, 3, 4, 5]
    """
    if isinstance(high, bool) or not isinstance(high, numbers.Integral):
        raise TypeError(f"high must be an int (got {type(high).__name__})")
    high = int(high)
    if not 1 <= high < 2**63:
        raise ValueError(f"high must satisfy 1 <= high < 2**63 (got {high})")
    shape = _shape(size)
    src = _source(source)
    return _uniform_below(high, math.prod(shape), src).reshape(shape)


# --------------------------------------------------------------------------- Bernoulli
def _exact_fallback_fraction(u: np.ndarray, idx: np.ndarray, p: Fraction, src: Source) -> list:
    return [LazyUniform(int(u[i]), 32, src).less_than_fraction(p) for i in idx]


def _probability(p: Rational) -> Fraction:
    pf = as_rational(p, "p")
    if not 0 <= pf <= 1:
        raise ValueError(f"p must be in [0, 1] (got {p!r})")
    return pf


@traced
def bernoulli(p: Rational, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exact Bernoulli(p) booleans, ``0 <= p <= 1`` rational (a float is taken exactly).

    A uniform real ``U`` is drawn lazily: its first 32 bits ``u`` decide ``U < p`` unless
    ``u == floor(p * 2**32)``; those lanes (probability < 2**-32) draw more bits with exact
    integer comparisons. The result is exactly ``[U < p]``, so ``P(True) = p``.

    >>> import dpkit.noise as noise
    >>> noise.bernoulli(0.5, 4, source=noise.seeded(1)).tolist()
    [True, False, False, False]
    """
    pf = _probability(p)
    shape = _shape(size)
    src = _source(source)
    n = math.prod(shape)
    if pf == 0 or pf == 1:
        return np.full(shape, pf == 1, dtype=bool)
    num, den = pf.numerator, pf.denominator
    A, rem = divmod(num << 32, den)  # p * 2**32 = A + rem/den
    u = src.uint32(n)
    out = u < A  # u + 1 <= A  =>  U < (u+1)/2**32 <= p
    if rem:
        idx = np.flatnonzero(u == A)  # U's interval straddles p
        if idx.size:
            out[idx] = _exact_fallback_fraction(u, idx, pf, src)
    return out.reshape(shape)


@traced
def bernoulli_matrix(p: Rational, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exact Bernoulli(p) booleans from one random *byte* per draw (``bernoulli`` reads four).

    ``[U < p]`` for a uniform real ``U = (u + V) / 256``, ``u`` a uniform byte and ``V`` uniform
    on [0, 1): the byte decides unless ``u == T = floor(256 p)`` (probability 1/256); those lanes
    finish with an exact ``Bernoulli(256 p - T)`` (:func:`bernoulli`), i.e. ``[V < 256 p - T]``.
    So ``P(True) = T/256 + (256 p - T)/256 = p`` exactly, with about 1/4 of the words of
    :func:`bernoulli`: the fast path for the large bit matrices of local-model clients (unary
    encoding, RAPPOR, count-mean sketches draw d bits per user).

    >>> import dpkit.noise as noise
    >>> noise.bernoulli_matrix(0.25, (2, 3), source=noise.seeded(1)).shape
    (2, 3)
    """
    pf = _probability(p)
    shape = _shape(size)
    src = _source(source)
    n = math.prod(shape)
    if pf == 0 or pf == 1 or n == 0:
        return np.full(shape, pf == 1, dtype=bool)
    u = src.uint64(-(-n // 8)).view(np.uint8)[:n]  # eight uniform bytes per word
    T = math.floor(pf * 256)
    out = u < T
    tie = np.flatnonzero(u == T)
    if tie.size:
        out[tie] = bernoulli(pf * 256 - T, tie.size, source=src)
    return out.reshape(shape)


@traced
def bernoulli_lanes(probs: np.ndarray, *, source: Source | None = None) -> np.ndarray:
    """Independent exact Bernoulli(probs[i]) booleans, one per lane, for float probabilities
    (each taken at its exact binary value), any shape.

    ``[U < p]`` with ``U`` uniform on [0, 1): 62 uniform bits decide unless they equal
    ``floor(p 2**62)`` (probability 2**-62); those lanes finish with an exact
    ``Bernoulli(p 2**62 - floor(p 2**62))`` (:func:`bernoulli`). ``p 2**62`` is exact (a power of
    two scaling), so ``P(True) = p`` exactly, as in :func:`bernoulli_matrix`.

    >>> import dpkit.noise as noise
    >>> noise.bernoulli_lanes([0.0, 1.0, 0.5], source=noise.seeded(1)).tolist()[:2]
    [False, True]
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.size and (not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1):
        raise ValueError("probabilities must lie in [0, 1]")
    src = _source(source)
    scaled = np.ldexp(p, _LANE_BITS)  # exact (power-of-two scaling)
    T = np.floor(scaled)
    u = _uniform_below(1 << _LANE_BITS, p.size, src).reshape(p.shape)
    Ti = T.astype(np.int64)
    out = u < Ti
    tie = np.flatnonzero((u == Ti).ravel())
    flat = out.ravel()
    for i in tie:  # probability 2**-62 per lane
        rem = Fraction(float(scaled.ravel()[i])) - int(T.ravel()[i])
        flat[i] = bool(bernoulli(rem, 1, source=src)[0])
    return flat.reshape(p.shape)


_LANE_BITS = 62


def _exp_neg_floor32(gamma: Fraction) -> int:
    """``floor(exp(-gamma) * 2**32)`` exactly (gamma > 0; exp(-gamma)*2**32 is irrational)."""
    P = 96
    while True:
        lo, hi = exp_neg_fixed(gamma.numerator, gamma.denominator, P)
        a, b = lo >> (P - 32), hi >> (P - 32)
        if a == b:
            return a
        P += 64


@traced
def bernoulli_exp(gamma: Rational, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exact Bernoulli(exp(-gamma)) booleans for rational ``gamma >= 0``.

    The threshold ``A = floor(exp(-gamma) * 2**32)`` is computed exactly with integer interval
    arithmetic; a 32-bit word ``u`` decides ``U < exp(-gamma)`` unless ``u == A``, and those lanes
    are finished exactly by drawing more bits. ``P(True) = exp(-gamma)`` exactly.
    """
    g = as_rational(gamma, "gamma")
    if g < 0:
        raise ValueError(f"gamma must be >= 0 (got {gamma!r})")
    shape = _shape(size)
    src = _source(source)
    n = math.prod(shape)
    if g == 0:
        return np.ones(shape, dtype=bool)
    A = _exp_neg_floor32(g)
    u = src.uint32(n)
    out = u < A
    idx = np.flatnonzero(u == A)
    for i in idx:
        out[i] = LazyUniform(int(u[i]), 32, src).less_than_exp_neg(g)
    return out.reshape(shape)


# ------------------------------------------------------- vectorised Bernoulli(exp(-gamma_i))
_TAYLOR_DEG = 17
# a_i = (-1)**i / i!, correctly rounded; p(f) = sum a_i f**i approximates exp(-f) on [0, 1]
_TAYLOR = [float(Fraction((-1) ** i, math.factorial(i))) for i in range(_TAYLOR_DEG + 1)]


def _exp_neg_int_table(count: int) -> np.ndarray:
    vals = []
    for m in range(count):
        lo, hi = exp_neg_fixed(m, 1, 200)
        a, b = float(Fraction(lo, 2**200)), float(Fraction(hi, 2**200))
        if a != b:  # both bounds round to the same double => it is exp(-m) correctly rounded
            raise ArithmeticError("exp(-m) table: bounds do not pin the double")
        vals.append(a)
    return np.array(vals, dtype=np.float64)


_EXP_NEG_INT = _exp_neg_int_table(64)  # exp(-m) for m = 0..63, each correctly rounded
_EXP_NEG_INT_LIST = _EXP_NEG_INT.tolist()
_GUARD = 2.0**-40  # relative guard; the proven error is < 2**-43 (docs/noise.md)
_BIG_GAMMA = 64.0  # g_f >= 64 implies gamma >= 63.9 and exp(-gamma) < 2**-63
_LO_FACTOR = (1.0 - _GUARD) * _TWO32  # lo = p * _LO_FACTOR (see _bern_exp_lanes)
_HI_FACTOR = (1.0 + _GUARD) * _TWO32
#: Up to this many lanes, _bern_exp_lanes evaluates lane by lane in Python floats: numpy's
#: per-call cost (about 40 ufunc calls) dominates small batches, and Python floats are the same
#: IEEE-754 doubles with the same correctly rounded operations in the same order (no fused
#: multiply-add), so both paths compute bit-identical bounds and decisions.
_SMALL_LANES = 12


def _taylor_horner(
    fs: list[float],
    a: tuple[float, ...] = tuple(_TAYLOR),
) -> list[float]:
    """``p(f)`` for each ``f`` (the degree-17 Horner scheme of :func:`_bern_exp_lanes`, written
    out so that every product and sum is one correctly rounded double operation in the same
    order as the numpy loop there: ``p = f a17; p += a16; p *= f; p += a15; ...``)."""
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17 = a
    return [
        ((((((((((((((((f * a17 + a16) * f + a15) * f + a14) * f + a13) * f + a12) * f + a11)
                  * f + a10) * f + a9) * f + a8) * f + a7) * f + a6) * f + a5) * f + a4)
             * f + a3) * f + a2) * f + a1) * f + a0
        for f in fs
    ]


def _bern_exp_lanes_small(
    g: np.ndarray,
    u: np.ndarray,
    force_exact: np.ndarray | None,
    below_one: bool,
) -> tuple[np.ndarray, list[int]]:
    """The decisions of :func:`_bern_exp_lanes` for a small batch, lane by lane in Python floats:
    the same operations on the same doubles (so the same ``lo``, ``hi`` and outcomes), returned
    as the boolean array ``out`` and the ambiguous lanes (ascending) still to resolve exactly.

    ``u + 1.0`` and ``u < hi`` for a Python int ``u < 2**32`` are exactly the float64 operations
    of the numpy path (the int converts exactly; int/float comparison is exact)."""
    gl = g.tolist()
    ul = u.tolist()
    lo_f, hi_f = _LO_FACTOR, _HI_FACTOR
    if below_one:
        ps = _taylor_horner(gl)
        los = [p * lo_f for p in ps]
        his = [p * hi_f for p in ps]
    else:
        table = _EXP_NEG_INT_LIST
        big = _BIG_GAMMA
        ms = [0 if x >= big else math.floor(x) for x in gl]
        fs = [0.0 if x >= big else x - m for x, m in zip(gl, ms, strict=True)]
        ps = [p * table[m] for p, m in zip(_taylor_horner(fs), ms, strict=True)]
        # big lanes: exp(-gamma) < 2**-63, bracketed by [0, 2**-63] (times 2**32)
        los = [0.0 if x >= big else p * lo_f for x, p in zip(gl, ps, strict=True)]
        his = [2.0**-31 if x >= big else p * hi_f for x, p in zip(gl, ps, strict=True)]
    out = [uj + 1.0 <= lo for uj, lo in zip(ul, los, strict=True)]
    if force_exact is None:
        amb = [j for j, (o, uj, hi) in enumerate(zip(out, ul, his, strict=True))
               if not o and uj < hi]
    else:
        amb = [j for j, (o, uj, hi, fj) in enumerate(zip(out, ul, his, force_exact.tolist(),
                                                          strict=True))
               if (not o and uj < hi) or fj]
    return np.array(out, dtype=bool), amb


def _bern_exp_lanes(
    g: np.ndarray,
    src: Source,
    exact_gamma: Callable[[int], Fraction],
    force_exact: np.ndarray | None = None,
    below_one: bool = False,
) -> np.ndarray:
    """Exact Bernoulli(exp(-gamma_i)) for each lane, given float approximations ``g``.

    Contract on the caller: for every lane, ``|g_i - gamma_i| <= 2**-44.4`` whenever
    ``g_i < 64``, and ``gamma_i >= 63.9`` whenever ``g_i >= 64`` (``g_i >= 0`` always); lanes where
    this is not known are flagged in ``force_exact``. ``exact_gamma(i)`` returns gamma_i exactly.
    ``below_one=True`` promises every ``g_i < 1`` (skips the exp(-m) table).

    Each lane draws a 32-bit word ``u`` (the first bits of a uniform ``U``). The float value
    ``q ~ exp(-g)`` (Taylor degree 17 times a table entry) is certified within relative 2**-43 of
    ``exp(-gamma)``; with a 2**-40 guard, ``[lo, hi]`` brackets ``exp(-gamma)`` and the lane
    returns ``U < exp(-gamma)`` whenever ``[u, u+1)/2**32`` is on one side of the bracket, and
    otherwise resolves it exactly (:class:`LazyUniform`).
    """
    n = g.size
    u = src.uint32(n)
    if n <= _SMALL_LANES:
        out, lanes = _bern_exp_lanes_small(g, u, force_exact, below_one)
    elif _FILTER:
        out, lanes = _bern_exp_lanes_filtered(g, u, force_exact, below_one)
    else:
        out, lanes = _bern_exp_lanes_numpy(g, u, force_exact, below_one)
    for j in lanes:
        out[j] = LazyUniform(int(u[j]), 32, src).less_than_exp_neg(exact_gamma(j))
    return out


#: Degree of the screening polynomial and its relative margin (see _bern_exp_lanes_filtered).
_SCREEN_DEG = 6
_SCREEN_MARGIN = 2.0**-9
_SCREEN_LO = (1.0 - _SCREEN_MARGIN) * _TWO32
_SCREEN_HI = (1.0 + _SCREEN_MARGIN) * _TWO32
_FILTER = True  # False: always the plain numpy path (tests compare the two)


def _bern_exp_lanes_filtered(
    g: np.ndarray,
    u: np.ndarray,
    force_exact: np.ndarray | None,
    below_one: bool,
) -> tuple[np.ndarray, list[int]]:
    """The decisions of :func:`_bern_exp_lanes_numpy` (same ``out``, same ambiguous lanes),
    screening each lane with a degree-6 Taylor value first and evaluating the degree-17 bracket
    (lane by lane, :func:`_bern_exp_lanes_small`) only where the screen cannot tell.

    Why the screen gives the same answers: for ``f`` in [0, 1) the alternating Taylor series
    has ``|exp(-f) - T6(f)| <= f**7/7! <= 1/5040``, i.e. relative error below ``e/5040 <
    2**-10.8`` (``exp(-f) >= 1/e``); its float evaluation adds under ``2**-45``, and the table
    factor and the scaling three roundings of ``2**-53``. The degree-17 value is within
    ``2**-42`` of the same ``exp(-f) exp(-m)`` (docs/noise.md). So with ``M = 2**-9``:
    ``qlo = q6 (1 - M) 2**32 < (1 - 2**-10) X 2**32 < lo`` and ``qhi = q6 (1 + M) 2**32 >
    (1 + 2**-10) X 2**32 > hi`` (``X = exp(-f) exp(-m)``, ``lo``/``hi`` the degree-17 bracket).
    Hence ``u + 1 <= qlo`` implies ``u + 1 <= lo`` (True, not ambiguous) and ``u >= qhi``
    implies ``u >= hi`` (False, not ambiguous): exactly the numpy path's answers. The other
    lanes (probability about ``2**-8`` each, plus big-gamma lanes) get the full computation."""
    q, big = _taylor_exp_neg(g, below_one, _SCREEN_DEG)
    uf = u.astype(np.float64)
    out = (uf + 1.0) <= q * _SCREEN_LO
    near = uf < q * _SCREEN_HI
    near &= ~out
    if big is not None:  # decided by the full path (lo = 0, hi = 2**-31)
        out[big] = False
        near[big] = True
    idx = near.nonzero()[0]
    if idx.size:
        sub_out, sub_amb = _bern_exp_lanes_small(g[idx], u[idx], None, below_one)
        out[idx] = sub_out
        amb = idx[sub_amb]
    else:
        amb = idx
    if force_exact is None:
        return out, amb.tolist()
    mask = force_exact.copy()
    mask[amb] = True
    return out, mask.nonzero()[0].tolist()


def _bern_exp_lanes_numpy(
    g: np.ndarray,
    u: np.ndarray,
    force_exact: np.ndarray | None,
    below_one: bool,
) -> tuple[np.ndarray, list[int]]:
    """The degree-17 bracket for every lane with numpy: ``out`` and the ambiguous lanes."""
    lo, hi = _brackets(g, below_one)
    return _decide(u, lo, hi, force_exact)


def _brackets(g: np.ndarray, below_one: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``: the certified bracket of ``exp(-gamma) 2**32`` for each lane (see
    :func:`_bern_exp_lanes`); elementwise, so a lane's bracket depends on its ``g`` only."""
    p, big = _taylor_exp_neg(g, below_one, _TAYLOR_DEG)
    lo = p * ((1.0 - _GUARD) * _TWO32)  # exact scaling by 2**32 folded in; see docs/noise.md
    hi = p * ((1.0 + _GUARD) * _TWO32)
    if big is not None:
        lo[big] = 0.0
        hi[big] = 2.0**-31  # 2**-63 * 2**32
    return lo, hi


def _taylor_exp_neg(g: np.ndarray, below_one: bool,
                    degree: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``fl(T(f)·e^-m)`` per lane, ``T`` the degree-``degree`` Taylor polynomial of ``exp(-f)``
    by Horner, ``m = floor(g)``, ``f = g - m`` (exact, Sterbenz), and the mask of big-gamma lanes
    (``g >= 64``, whose value is meaningless; None when there is none). ``below_one``: the
    caller guarantees ``0 <= g < 1`` (``m = 0``, no table factor)."""
    big: np.ndarray | None = None
    if below_one:
        f = g
    else:
        big = g >= _BIG_GAMMA
        if not big.any():
            big = None
        m = np.floor(g)
        f = g - m
        if big is not None:
            m[big] = 0.0
            f[big] = 0.0
    a = _TAYLOR
    p = f * a[degree]
    p += a[degree - 1]
    for i in range(degree - 2, -1, -1):
        p *= f
        p += a[i]
    if not below_one:
        p *= _EXP_NEG_INT[m.astype(np.intp)]
    return p, big


def _decide(
    u: np.ndarray, lo: np.ndarray, hi: np.ndarray, force_exact: np.ndarray | None
) -> tuple[np.ndarray, list[int]]:
    """``out = [u + 1 <= lo]`` and the ambiguous lanes ``not out and u < hi`` (or forced)."""
    uf = u.astype(np.float64)
    out = (uf + 1.0) <= lo
    amb = ~out
    amb &= uf < hi
    if force_exact is not None:
        amb |= force_exact
    return out, amb.nonzero()[0].tolist()


# Tabulated brackets. Where a lane's g can take only a few values (g = fl(U / t) with U in
# [0, t) for the discrete Laplace acceptance; g = fl(fl(|Y| - c)**2 k) for the discrete Gaussian
# one, |Y| below a bound), the brackets of :func:`_brackets` are computed once for every value
# and looked up: the same float operations on the same inputs, so the same brackets, decisions
# and words as computing them per lane.
_TABLE_MAX = 1 << 16  # entries per table (two float64 arrays: 1 MiB)
_TABLE_MIN_LANES = 512  # fewer lanes: computing their brackets is cheaper than a new table


@functools.lru_cache(maxsize=16)
def _dlap_accept_table(t: int) -> tuple[np.ndarray, np.ndarray]:
    """Brackets for ``g = fl(U / t)``, indexed by ``U`` in [0, t) (``2 <= t <= _TABLE_MAX``),
    computed as in :func:`_dlap_attempts`."""
    g = np.arange(t, dtype=np.int64).astype(np.float64)
    g /= float(t)
    lo, hi = _brackets(g, below_one=True)
    lo.flags.writeable = hi.flags.writeable = False
    return lo, hi


@functools.lru_cache(maxsize=16)
def _dgauss_accept_table(c_f: float, k_f: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Brackets for ``g = fl(fl(fl(y) - c_f)**2 k_f)``, indexed by ``y = |Y|`` from 0 while
    ``g < 64`` (then on, every lane is a big-gamma lane), computed as in
    :func:`discrete_gaussian`; None when that would take more than ``_TABLE_MAX`` entries."""
    size = math.ceil(c_f + math.sqrt(_BIG_GAMMA / k_f)) + 2
    if size > _TABLE_MAX:
        return None
    d = np.arange(size, dtype=np.int64).astype(np.float64)
    d -= c_f
    g = d * d
    g *= k_f
    lo, hi = _brackets(g, below_one=False)
    lo.flags.writeable = hi.flags.writeable = False
    return lo, hi


def _bern_exp_table(
    keys: np.ndarray,
    table: tuple[np.ndarray, np.ndarray],
    src: Source,
    exact_gamma: Callable[[int], Fraction],
) -> np.ndarray:
    """:func:`_bern_exp_lanes` for lanes whose brackets are ``table[0][keys]``,
    ``table[1][keys]`` (every key inside the table): one word per lane, then the ambiguous
    lanes exactly, in lane order, as there."""
    u = src.uint32(keys.size)
    out, lanes = _decide(u, table[0][keys], table[1][keys], None)
    for j in lanes:
        out[j] = LazyUniform(int(u[j]), 32, src).less_than_exp_neg(exact_gamma(j))
    return out


@traced
def bernoulli_exp_lanes(
    g: np.ndarray,
    exact_gamma: Callable[[int], Fraction],
    *,
    source: Source | None = None,
) -> np.ndarray:
    """Independent exact Bernoulli(exp(-gamma_i)), one per lane, for vectors of rationals.

    ``g`` holds float64 approximations of the exact ``gamma_i >= 0`` that ``exact_gamma(i)``
    returns. The caller promises ``|g_i - gamma_i| <= 2**-44.4`` where ``g_i < 64`` and
    ``gamma_i >= 63.9`` where ``g_i >= 64`` (e.g. ``g`` computed from exact inputs by three or
    fewer correctly rounded float operations); non-finite ``g_i`` carry no promise and are
    decided exactly. Within that contract ``P(True) = exp(-gamma_i)`` exactly (docs/noise.md).
    """
    g = np.asarray(g, dtype=np.float64)
    if g.ndim != 1:
        raise ValueError(f"g must be a 1-D array (got shape {g.shape})")
    finite = np.isfinite(g)
    if np.any(g[finite] < 0):
        raise ValueError("every g_i must be >= 0: gamma is a non-negative rational")
    force = ~finite
    src = _source(source)
    if force.any():
        g = np.where(finite, g, _BIG_GAMMA)
        return _bern_exp_lanes(g, src, exact_gamma, force)
    return _bern_exp_lanes(g, src, exact_gamma)


# --------------------------------------------------------------------------- geometric(e^-1)
def _geometric_thresholds() -> np.ndarray:
    """A_v = floor(exp(-v) * 2**32) for v = 1.. while positive, in ascending order."""
    out = []
    v = 1
    while True:
        a = _exp_neg_floor32(Fraction(v))
        if a == 0:
            break
        out.append(a)
        v += 1
    return np.array(out[::-1], dtype=np.uint32)


_GEO_T = _geometric_thresholds()  # ascending: A_22, ..., A_1


def _geometric_e1(n: int, src: Source) -> np.ndarray:
    """``V`` with ``P(V >= v) = exp(-v)`` exactly, one 32-bit word per lane.

    ``V = #{v >= 1 : U < exp(-v)}``. With ``u`` the first 32 bits of ``U``: ``U < exp(-v)`` for
    the whole interval iff ``u < A_v`` and for none of it iff ``u > A_v``; lanes with
    ``u == A_v`` for some v (or ``u == 0``, below every threshold v >= 23) are finished exactly.
    """
    return _geometric_e1_bound(n, src)[0]


_GEO_T0 = np.concatenate([np.zeros(1, dtype=np.uint32), _GEO_T])  # 0, A_22, ..., A_1


def _geometric_e1_bound(n: int, src: Source) -> tuple[np.ndarray, int]:
    """:func:`_geometric_e1` and an upper bound on its largest value (``T.size`` unless a lane
    was finished exactly), so that callers can skip a reduction on small batches."""
    u = src.uint32(n)
    T = _GEO_T
    pos = np.searchsorted(T, u, side="right")
    V = (T.size - pos).astype(np.int64, copy=False)
    # u equals some A_v iff T[pos - 1] == u (pos >= 1); u == 0 iff pos == 0 and u == 0: both
    # are "_GEO_T0[pos] == u" (the same lanes as searchsorted left < right, or u == 0)
    amb = (_GEO_T0[pos] == u).nonzero()[0]
    if not amb.size:
        return V, T.size
    for i in amb.tolist():
        lazy = LazyUniform(int(u[i]), 32, src)
        v = 0
        while lazy.less_than_exp_neg(Fraction(v + 1)):
            v += 1
        V[i] = v
    return V, max(T.size, int(V.max()))


def _random_bits(n: int, src: Source) -> np.ndarray:
    words = src.uint32((n + 31) // 32)
    return np.unpackbits(words.view(np.uint8))[:n].view(bool)


# --------------------------------------------------------------------------- discrete Laplace
def _dlap_params(scale: Fraction) -> tuple[int, int]:
    """(t, s) with t/s >= scale, t <= 2**56, s <= 2**62; equal to scale when it fits."""
    t, s = scale.numerator, scale.denominator
    if t <= _T_MAX and s <= _S_MAX:
        return t, s
    e = 62
    while True:
        t2 = -((-scale.numerator << e) // scale.denominator)  # ceil(scale * 2**e)
        if t2 <= _T_MAX:
            break
        e -= 1
    while e > 0 and t2 % 2 == 0:
        t2 //= 2
        e -= 1
    return t2, 1 << e


def dlap_effective_scale(scale: Rational) -> Fraction:
    """The scale :func:`discrete_laplace` really uses for ``scale``: equal to it, or rounded *up*
    to a dyadic rational t/2**e with t <= 2**56, e <= 62 when the exact rational does not fit
    int64 arithmetic (e.g. floats below about 2**-9 with long mantissas)."""
    t, s, _ = _dlap_setup(scale)
    return Fraction(t, s)


def _noise_parameter(x: Rational, name: str, limit: Fraction, limit_text: str) -> Fraction:
    """A scale-like parameter in (0, limit] as an exact Fraction."""
    v = as_rational(x, name)
    if v <= 0:
        raise ValueError(f"{name} must be > 0 (got {x!r})")
    if v > limit:
        raise ValueError(
            f"{name} must be <= {limit_text} (got {x!r}): samples would not fit int64 safely; "
            "release on a coarser grid (noise.grid.choose_exponent) to reduce the scale"
        )
    return v


def _check_scale(scale: Rational) -> Fraction:
    return _noise_parameter(scale, "scale", MAX_DLAP_SCALE, "2**40")


def _dlap_attempts(m: int, t: int, s: int, src: Source) -> np.ndarray:
    """Run ``m`` independent CKS attempts for DLap(t/s); return the accepted samples."""
    if t == 1:
        U = np.zeros(m, dtype=np.int64)  # U = 0 is accepted with probability exp(0) = 1
    else:
        U = _uniform_below(t, m, src)
        nz = U.nonzero()[0]  # U is 1-D: its non-zero lanes, as np.flatnonzero(U)
        Unz = U[nz]
        if t <= _TABLE_MAX and (m >= _TABLE_MIN_LANES or t <= m):  # brackets looked up by U
            # (the same values as computed below; a table is worth building for many lanes)
            acc_nz = _bern_exp_table(Unz, _dlap_accept_table(t), src,
                                     lambda i: Fraction(int(Unz[i]), t))
        else:
            g = Unz.astype(np.float64)
            g /= float(t)  # |g - U/t| <= 3.0001 * 2**-53 * U/t  (three roundings)
            # t <= 2**53 makes fl(U/t) <= 1 - 2**-53 < 1, so the m = 0 shortcut is valid
            acc_nz = _bern_exp_lanes(g, src, lambda i: Fraction(int(Unz[i]), t),
                                     below_one=t <= 2**53)
        if nz.size == m:  # no U = 0 lane (the usual case for large t)
            U = Unz[acc_nz]
        else:
            acc = np.ones(m, dtype=bool)  # U = 0 is accepted with probability exp(0) = 1
            acc[nz] = acc_nz
            U = U[acc]
    k = U.size
    V, vbound = _geometric_e1_bound(k, src)
    vmax = (2**63 - 1 - (t - 1)) // t
    if k and vbound > vmax and int(V.max()) > vmax:
        Z = np.array([int(a) + t * int(b) for a, b in zip(U, V, strict=True)], dtype=object)
        Y_obj = Z // s
        if any(abs(int(y)) >= 2**62 for y in Y_obj):
            raise OverflowError("discrete Laplace sample does not fit int64")
        Y = Y_obj.astype(np.int64)
    else:
        Y = V * t
        Y += U
        if s != 1:
            Y //= s
    neg = _random_bits(k, src)
    keep = ~(neg & (Y == 0))  # (B = 1, Y = 0) is rejected so that 0 is not counted twice
    np.negative(Y, out=Y, where=neg)
    return Y[keep]


def _fill(n: int, attempt: Callable[[int], np.ndarray], rate: float) -> np.ndarray:
    """Collect ``n`` accepted samples from independent batches of attempts."""
    if n == 0:  # no attempt, no words
        return np.empty(0, dtype=np.int64)
    m = min(_CHUNK, int(n / rate * 1.03) + 16)  # the first batch, as in the loop below
    got = attempt(m)
    if got.size >= n:  # the usual case: one batch is enough
        return got[:n]
    out = np.empty(n, dtype=np.int64)
    out[: got.size] = got
    filled = got.size
    tried, got_total = m, got.size
    rate = max(got_total / tried, 0.02)
    while filled < n:
        need = n - filled
        m = min(_CHUNK, int(need / rate * 1.03) + 16)
        got = attempt(m)
        tried += m
        got_total += got.size
        rate = max(got_total / tried, 0.02)
        k = min(got.size, need)
        out[filled : filled + k] = got[:k]
        filled += k
    return out


def _dlap_rate(t: int, s: int) -> float:
    """Approximate acceptance rate of one attempt (batch sizing only; not privacy-relevant)."""
    pu = 1.0 if t == 1 else -math.expm1(-1.0) / (-math.expm1(-1.0 / t) * t)
    p_zero = -math.expm1(-s / t) if s / t < 700 else 1.0
    return max(pu * (1.0 - p_zero / 2.0), 0.05)


@traced
def discrete_laplace(scale: Rational, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exact discrete Laplace samples (int64): ``P(x) ∝ exp(-|x| / scale)``, ``scale > 0``.

    Canonne-Kamath-Steinke 2020, Algorithm 2, with scale = t/s: U uniform on [0, t) accepted
    with probability exp(-U/t), V geometric with P(V >= v) = exp(-v), Y = (U + t V) // s, a
    random sign, rejecting (negative, 0). ``scale`` above 2**40 raises ValueError; a scale whose
    exact rational does not fit int64 arithmetic is rounded up (see :func:`dlap_effective_scale`).

    >>> import dpkit.noise as noise
    >>> noise.discrete_laplace(3, 5, source=noise.seeded(1)).tolist()
    [-1, -2, 8, 3, -2]
    """
    t, s, rate = _dlap_setup(scale)
    shape = _shape(size)
    src = _source(source)
    n = math.prod(shape)
    out = _fill(n, lambda m: _dlap_attempts(m, t, s, src), rate)
    return out.reshape(shape)


#: Parameter types whose values are cached as keys (typed, so 1, 1.0 and Fraction(1) are
#: separate entries and a bool never reaches a cached entry of 1): each is validated on its
#: first use, and errors are never cached.
_CACHEABLE = (float, int, Fraction, np.float64)


def _dlap_setup(scale: Rational) -> tuple[int, int, float]:
    """``(t, s, rate)`` for :func:`discrete_laplace`: ``_dlap_params(_check_scale(scale))`` and
    the batch-sizing rate, cached for plain floats, ints and Fractions (a pure function of the
    exact value: the per-call cost of a small release is mostly this rational arithmetic)."""
    if type(scale) in _CACHEABLE:
        return _dlap_setup_cached(scale)
    return _dlap_setup_uncached(scale)


def _dlap_setup_uncached(scale: Rational) -> tuple[int, int, float]:
    t, s = _dlap_params(_check_scale(scale))
    return t, s, _dlap_rate(t, s)


_dlap_setup_cached = functools.lru_cache(maxsize=1024, typed=True)(_dlap_setup_uncached)


# --------------------------------------------------------------------------- discrete Gaussian
def _check_sigma2(sigma2: Rational) -> Fraction:
    return max(_noise_parameter(sigma2, "sigma2", MAX_DGAUSS_SIGMA2, "2**80"), MIN_DGAUSS_SIGMA2)


@traced
def discrete_gaussian(sigma2: Rational, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exact discrete Gaussian samples (int64): ``P(x) ∝ exp(-x**2 / (2 sigma2))``.

    Canonne-Kamath-Steinke 2020, Algorithm 3: t = floor(sqrt(sigma2)) + 1, Y ~ DLap(t),
    accept with probability exp(-(|Y| - sigma2/t)**2 / (2 sigma2)). The acceptance test uses a
    certified float bound and exact integers on ambiguous lanes. ``0 < sigma2 <= 2**80``;
    sigma2 below 2**-60 is rounded up to 2**-60 (more noise; the output is 0 anyway).

    >>> import dpkit.noise as noise
    >>> noise.discrete_gaussian(10, 5, source=noise.seeded(1)).tolist()
    [-3, 3, 2, -6, -2]
    """
    a, t, c_f, k_f, bt, den, rate = _dgauss_setup(sigma2)
    shape = _shape(size)
    src = _source(source)
    n = math.prod(shape)

    # a table of brackets pays off over many lanes; for a few, computing theirs is cheaper
    table = _dgauss_accept_table(c_f, k_f) if n >= _TABLE_MIN_LANES else None

    def attempt(m: int) -> np.ndarray:
        Y = _dlap_attempts(m, t, 1, src)
        ay = np.abs(Y)
        if table is not None and (not ay.size or int(ay.max()) < table[0].size):
            acc = _bern_exp_table(ay, table, src,
                                  lambda i: Fraction((bt * int(ay[i]) - a) ** 2, den))
            return Y[acc]
        d = ay.astype(np.float64)
        d -= c_f
        g = d * d
        g *= k_f  # |g - gamma| <= 2**-53 (sqrt(2 gamma) + 5 gamma) * 1.0001 (docs/noise.md)
        force = ay >= 2**53
        acc = _bern_exp_lanes(
            g,
            src,
            lambda i: Fraction((bt * int(ay[i]) - a) ** 2, den),
            force if force.any() else None,
        )
        return Y[acc]

    return _fill(n, attempt, rate).reshape(shape)


def _dgauss_setup_uncached(sigma2: Rational) -> tuple[int, int, float, float, int, int, float]:
    """``(a, t, c_f, k_f, bt, den, rate)`` for :func:`discrete_gaussian` with ``sigma2 = a/b``:
    ``t = floor(sqrt(sigma2)) + 1``, ``c_f = fl(sigma2 / t)``, ``k_f = fl(1 / (2 sigma2))``,
    ``bt = b t``, ``den = 2 a b t**2`` and the batch-sizing rate."""
    s2 = _check_sigma2(sigma2)
    a, b = s2.numerator, s2.denominator
    t = math.isqrt(a // b) + 1
    c_f = float(Fraction(a, b * t))  # sigma2 / t, correctly rounded
    k_f = float(Fraction(b, 2 * a))  # 1 / (2 sigma2), correctly rounded
    return a, t, c_f, k_f, b * t, 2 * a * b * t * t, 0.7 * _dlap_rate(t, 1)


_dgauss_setup_cached = functools.lru_cache(maxsize=1024, typed=True)(_dgauss_setup_uncached)


def _dgauss_setup(sigma2: Rational) -> tuple[int, int, float, float, int, int, float]:
    """:func:`_dgauss_setup_uncached`, cached for plain floats, ints and Fractions."""
    if type(sigma2) in _CACHEABLE:
        return _dgauss_setup_cached(sigma2)
    return _dgauss_setup_uncached(sigma2)


# --------------------------------------------------------------------------- helpers
@traced
def fair_bits(size: Size, *, source: Source | None = None) -> np.ndarray:
    """Independent fair bits (uint8 0/1), 64 from each draw of the source: the fast way to
    many coin flips (for experiments' data; noise uses the exact samplers above)."""
    shape = _shape(size)
    n = math.prod(shape)
    words = _source(source).uint64(-(-n // 64))
    return np.unpackbits(words.view(np.uint8))[:n].reshape(shape)


@traced
def uniform_float01(size: Size, *, source: Source | None = None) -> np.ndarray:
    """Floats ``k / 2**53`` with ``k`` uniform on [0, 2**53): for shuffling and similar
    non-privacy uses only (never to build noise)."""
    shape = _shape(size)
    src = _source(source)
    k = src.uint64(math.prod(shape)) >> np.uint64(11)
    return (k.astype(np.float64) * 2.0**-53).reshape(shape)


@traced
def permutation(n: int, *, source: Source | None = None) -> np.ndarray:
    """An exactly uniform random permutation of ``range(n)`` (int64).

    Sorts ``n`` independent uniform 64-bit keys and redraws all keys if any two are equal;
    conditioned on distinct keys, every ordering is equally likely (exchangeability), so the
    result is exactly uniform. Same distribution as Fisher-Yates, but vectorised.

    >>> import dpkit.noise as noise
    >>> noise.permutation(5, source=noise.seeded(1)).tolist()
    [2, 4, 0, 3, 1]
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"n must be an int (got {type(n).__name__})")
    n = int(n)
    if n < 0:
        raise ValueError(f"n must be >= 0 (got {n})")
    src = _source(source)
    while True:
        keys = src.uint64(n)
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        if n < 2 or not np.any(sk[1:] == sk[:-1]):
            return order.astype(np.int64)


# public names for the other samplers of this package (noise/gaussian.py, noise/constant.py)
as_shape = _shape
resolve_source = _source
lane_brackets = _brackets
decide_lanes = _decide
dlap_setup = _dlap_setup
dgauss_setup = _dgauss_setup
dlap_attempts = _dlap_attempts
fill_attempts = _fill
geometric_exact = _geometric_e1_bound
