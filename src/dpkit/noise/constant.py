"""Constant-work sampling: a request's work and random words depend on its public parameters only.

**Why** (docs/attacks.md §6; Jin, McMurtry, Rubinstein and Ohrimenko, S&P 2022). The exact
samplers of :mod:`dpkit.noise.samplers` loop until every lane is done and finish rare lanes on a
slower exact path; the lanes that take it are those with unusually large noise (the geometric
part beyond its 32-bit table), so the time of a request says something about ``|noise|``, and
with the released value about the true value. The exponential mechanism's rejection loop draws
proposals until one is accepted, at a rate set by the scores: its time follows the data.

**Decision.** A :class:`ConstantWork` source (a wrapper around any source) switches the
discrete Laplace and Gaussian samplers here, and the exponential mechanism's samplers in
:mod:`dpkit.mechanisms`, to *fixed plans*: every request draws a number of attempts computed
from its public parameters (scale, size, candidate count) and the failure bound ``2^-bits``;
every attempt draws the same words (one 64-bit word for ``U``, one 32-bit word for its coin, two
64-bit words for the geometric part, one bit for the sign) and goes through the same vectorised
arithmetic, with no branch on any lane's value; a fixed number ``K`` of *exact-resolution
slots* (each with a fixed number of 64-bit words) finishes the lanes that the certified float
bracket cannot decide (probability <= 2^-31 per lane), on dummy lanes when there are fewer. All
attempts are always processed; the first accepted ones are the output. The selections
(``dpkit.mechanisms._sampling``) use the pieces here the same way: ``T`` trials per draw of
the stepped envelope, each a :func:`proposals` word, a :func:`level_coins` coin and an
:func:`exp_coins` coin, ``T`` from a lower bound on a trial's success that depends on the
candidate count only; permute-and-flip flips every coin and picks its head by
:func:`uniform_each`.

**The failure event** ``F`` (too few accepted attempts, more ambiguous lanes than slots, a
slot that its words cannot decide, a geometric lane tied with its 128-bit threshold) has
probability at most ``2^-bits`` per request, a public bound (a Chernoff bound on the accepted
count with a proven lower bound on the acceptance rate; binomial tails for the slots; exact
counts for the rest). On ``F`` the request is *finished exactly* on today's slow path (more
attempts, the lane resolved with more words): the released value's law is **exactly** the
stated distribution in every case, so every mechanism keeps its ε (pure ε stays pure ε). Only
the *time* and the words differ, and only on ``F``. So the pair (value, work) is within total
variation ``2^-bits`` of (value, a constant), and a release that is (ε, δ)-DP in its value is
(ε, δ + (1 + e^ε) 2^-bits)-DP for an observer of both; over a sequence of releases the
``2^-bits`` add up. The curator's ``constant_work`` option charges that term as
``ApproxDP(0, δ_t)`` with every event (docs/attacks.md §6). Inside :func:`charge_scope` (one
charged release) the ``i``-th request gets ``2^-bits / (i (i + 1))``, so that all requests of
one release together stay within ``2^-bits`` however many there are.

The alternative, a fixed public output on ``F``, costs the same δ for the joint view and makes
the value itself only (ε, δ)-DP; finishing exactly is never worse.

What is *not* constant: the exact resolution in a slot is Python-integer arithmetic whose cost
varies by microseconds with the lane's γ (a dummy slot uses a public γ, so this happens only on
a real ambiguous lane: probability <= 2^-31 per lane, not counted in ``2^-bits``); numpy's own
kernels are not written to be constant-time (their cost does not branch on values here, but
that is not a CPU-level guarantee); and everything outside the samplers (the row count, above
all: docs/attacks.md §6).

>>> from dpkit import noise
>>> src = noise.constant.ConstantWork(noise.seeded(1), bits=40)
>>> noise.discrete_laplace(3, 4, source=src).dtype
dtype('int64')
>>> src.overruns
0
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction

import numpy as np

from .exact import LazyUniform, exp_neg_fixed
from .samplers import (
    Rational,
    Size,
    as_rational,
    as_shape,
    decide_lanes,
    dgauss_setup,
    dlap_attempts,
    dlap_setup,
    fill_attempts,
    lane_brackets,
    resolve_source,
)
from .samplers import bernoulli as plain_bernoulli
from .samplers import discrete_gaussian as plain_discrete_gaussian
from .samplers import discrete_laplace as plain_discrete_laplace
from .samplers import uniform_int as plain_uniform_int
from .sources import Source, default_source
from .trace import traced

__all__ = ["MAX_BITS", "TIMING_DELTA", "TOP_LEVEL", "ConstantWork", "ScopeShare", "attempts_for",
           "bernoulli", "bits_for", "charge_scope", "discrete_gaussian", "discrete_laplace",
           "exp_coins", "level_coins", "level_thresholds", "proposals", "request_bits",
           "reserve_share", "shared_scope", "slots_for", "uniform_each", "uniform_int"]

#: Largest failure exponent accepted: the geometric part reads 128 bits per lane, whose ties
#: (2^-120 per lane) must stay below the request's share of ``2^-bits``.
MAX_BITS = 80
_CHUNK = 1 << 16  # output lanes per fixed plan (a larger request is several plans)
_LN2 = math.log(2.0)
_AMBIGUOUS_LOG2 = 31  # P(a lane's float bracket cannot decide) <= 2^-31 (samplers._decide)
_SAFETY = 1.0 - 2.0**-20  # relative margin on float-computed rate bounds (their error ~1e-15)


class ConstantWork(Source):
    """A source whose requests run fixed plans (module docstring), wrapping ``inner``.

    ``bits``: each request fails its plan (and finishes exactly, with more work) with
    probability at most ``2^-bits``. ``words`` counts the 32-bit words handed out (a 64-bit
    word counts two): the deterministic proxy of a request's work. ``overruns`` counts the
    requests that met the failure event.
    """

    def __init__(self, inner: Source | None = None, *, bits: int = 64) -> None:
        if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
            raise ValueError(f"bits must be an int in [1, {MAX_BITS}] (got {bits!r}): the "
                             f"failure probability per request is 2^-bits")
        base: Source = default_source() if inner is None else inner
        if isinstance(base, ConstantWork):
            base = base.inner
        if not isinstance(base, Source):
            raise TypeError(f"inner must be a dpkit.noise Source (got {type(base).__name__})")
        self.inner: Source = base
        self.bits = bits
        self.insecure = base.insecure
        self.words = 0
        self.overruns = 0
        self._lock = threading.Lock()

    def uint64(self, n: int) -> np.ndarray:
        out = self.inner.uint64(n)
        with self._lock:
            self.words += 2 * out.size
        return out

    def uint32(self, n: int) -> np.ndarray:
        out = self.inner.uint32(n)
        with self._lock:
            self.words += out.size
        return out

    @property
    def plain(self) -> Source:
        """The same words (counted here) behind a plain :class:`Source`: today's samplers, for
        finishing a request whose plan overran."""
        return _Counted(self)

    def note_overrun(self) -> None:
        with self._lock:
            self.overruns += 1

    def __repr__(self) -> str:
        return f"ConstantWork({self.inner!r}, failure <= 2^-{self.bits} per request)"


class _Counted(Source):
    """A :class:`ConstantWork`'s words behind a plain source (no fixed plans)."""

    def __init__(self, of: ConstantWork) -> None:
        self.of = of
        self.insecure = of.insecure

    def uint64(self, n: int) -> np.ndarray:
        return self.of.uint64(n)

    def uint32(self, n: int) -> np.ndarray:
        return self.of.uint32(n)


_scope = threading.local()


@contextlib.contextmanager
def charge_scope() -> Iterator[None]:
    """One charged release: its ``i``-th constant-work request gets failure probability
    ``2^-bits / (i (i + 1))`` (a sum below ``2^-bits`` for any number of requests). A nested
    scope is part of the outer one. Per thread (the service answers in worker threads); a
    release that draws on another thread hands it a :func:`reserve_share` of its scope."""
    if getattr(_scope, "count", None) is not None:
        yield
        return
    _scope.count, _scope.extra = 0, 0
    try:
        yield
    finally:
        _scope.count = None


@dataclasses.dataclass(frozen=True)
class ScopeShare:
    """A share ``2^-(bits + extra_bits)`` of a charge scope's failure bound, reserved by one
    thread for requests that another thread makes later (:func:`shared_scope`)."""

    extra_bits: int


def reserve_share() -> ScopeShare | None:
    """Take the next request's share of this thread's charge scope, now, for requests made
    later on another thread (DP-SGD's noise drawn ahead of its step); None outside a scope.

    **Why the release's bound still holds.** The scope gives its ``i``-th request (or share)
    ``2^-bits / (i (i + 1))``; a share is counted as one request here, in this thread's
    order, so the shares and the requests of this thread take distinct ``i`` and together stay
    within ``Σ_i 1/(i (i + 1)) < 1`` times ``2^-bits``. Inside :func:`shared_scope` the ``j``-th
    request gets the share times ``1/(j (j + 1))``, again a sum below the share. So every
    request of the release, on whichever thread, has its own failure probability and all of
    them add up to at most ``2^-bits``: the union bound that the charged ``δ_t`` pays for
    (module docstring). The indices are fixed by the program order of each thread alone (the
    share is taken when the draw is *handed out*, not when the thread runs it), so each
    request's plan, hence its work, is a function of public things: how many requests came
    before it in its own thread, never the scheduling of the two threads."""
    count = getattr(_scope, "count", None)
    if count is None:
        return None
    count += 1
    _scope.count = count
    return ScopeShare(_scope.extra + math.ceil(math.log2(count * (count + 1))))


@contextlib.contextmanager
def shared_scope(share: ScopeShare | None) -> Iterator[None]:
    """Run this thread's requests inside a share reserved by :func:`reserve_share`: the ``j``-th
    gets ``share / (j (j + 1))``. ``None`` (no scope where the share was asked): each request
    keeps its source's own ``2^-bits``, as it would have in line. Refused inside a scope of
    this thread (a share is spent by one thread, once per block)."""
    if share is None:
        yield
        return
    if getattr(_scope, "count", None) is not None:
        raise RuntimeError("shared_scope inside a charge scope of the same thread: the share "
                           "is for requests made on another thread")
    _scope.count, _scope.extra = 0, share.extra_bits
    try:
        yield
    finally:
        _scope.count, _scope.extra = None, 0


def request_bits(src: ConstantWork) -> int:
    """The failure exponent of the next request on ``src`` (see :func:`charge_scope`)."""
    count = getattr(_scope, "count", None)
    if count is None:
        return src.bits
    count += 1
    _scope.count = count
    return src.bits + _scope.extra + math.ceil(math.log2(count * (count + 1)))


#: The curator's default δ per charged release for the constant-work failure event.
TIMING_DELTA = 2.0**-40


def bits_for(epsilon: float, delta: float) -> int:
    """The failure exponent whose term ``(1 + e^ε) 2^-bits`` stays within ``delta / 2`` for
    any final ε up to ``epsilon`` (the factor 2: composition may count a charged δ slightly
    less than additively, never less than half). Refuses with the fix when above MAX_BITS."""
    if not (math.isfinite(epsilon) and epsilon >= 0 and 0 < delta < 1):
        raise ValueError(f"need epsilon >= 0 and 0 < delta < 1 (got {epsilon!r}, {delta!r})")
    log2_term = (epsilon + math.log1p(math.exp(-epsilon))) / _LN2  # log2(1 + e^ε)
    bits = math.ceil(log2_term + 1 - math.log2(delta))
    if bits > MAX_BITS:
        raise ValueError(
            f"constant work at epsilon {epsilon:g} with a timing delta of {delta:g} needs "
            f"failure 2^-{bits} per release, beyond 2^-{MAX_BITS}: use a smaller total "
            f"epsilon (at most about {(MAX_BITS - 1 + math.log2(delta)) * _LN2:.0f}) or a "
            "larger timing delta")
    return bits


# ------------------------------------------------------------------ plan sizes (public only)
@functools.lru_cache(maxsize=4096)
def attempts_for(n: int, rate: float, bits: int) -> int:
    """Smallest ``M`` with ``P(Binomial(M, rate) < n) <= 2^-bits`` by the Chernoff bound
    ``P(X <= n - 1) <= exp(-M KL((n-1)/M || rate))`` (valid while ``(n-1)/M < rate``)."""
    if n <= 0:
        return 0
    if not 0.0 < rate < 1.0:
        raise ValueError(f"rate must be in (0, 1) (got {rate!r})")
    target = (bits + 1) * _LN2  # one bit of slack for the float evaluation

    def enough(m: int) -> bool:
        a = (n - 1) / m
        if a >= rate:
            return False
        kl = (a * math.log(a / rate) if a > 0 else 0.0) + (1 - a) * math.log1p(
            (rate - a) / (1 - rate))
        return m * kl >= target

    lo, hi = n, n
    while not enough(hi):
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def slots_for(lanes: int, bits: int) -> int:
    """Smallest ``K`` with ``C(lanes, K+1) 2^(-31 (K+1)) <= 2^-bits``: more than ``K``
    ambiguous lanes among ``lanes`` independent ones is that unlikely."""
    return _slots(lanes, bits, _AMBIGUOUS_LOG2)


@functools.lru_cache(maxsize=4096)
def _slots(lanes: int, bits: int, tie_log2: float) -> int:
    """:func:`slots_for` for lanes that are ambiguous with probability ``<= 2^-tie_log2``."""
    k = 0
    while k + 1 <= lanes:
        j = k + 1
        log2_tail = (math.lgamma(lanes + 1) - math.lgamma(j + 1)
                     - math.lgamma(lanes - j + 1)) / _LN2 - tie_log2 * j
        if log2_tail <= -bits:
            return k
        k += 1
    return k


def _extension_words(bits: int, slots: int) -> int:
    """64-bit words per slot: a slot's prefix of ``32 + 64 e`` bits is undecided for at most
    two values of its ``64 e`` fresh bits, so ``slots * 2^(1 - 64 e) <= 2^-bits``."""
    return max(1, math.ceil((bits + 1 + math.log2(max(slots, 1))) / 64))


# ------------------------------------------------------------------ fixed-work exact coins
def proposals(n: int, count: int, src: Source) -> tuple[np.ndarray, np.ndarray]:
    """``count`` uniform proposals on ``[0, n)`` with one 64-bit word each: ``(r, valid)``,
    ``r = w mod n``, void (``valid`` False) when ``w`` is at or above the largest multiple of
    ``n`` below 2^64 (probability ``(2^64 mod n) 2^-64 < n 2^-64``; no retry). A valid ``r``
    is exactly uniform, and the words are a function of ``count`` only."""
    w = src.uint64(count)
    lim = (1 << 64) - (1 << 64) % n
    valid = w < np.uint64(lim) if lim < 1 << 64 else np.ones(count, dtype=bool)
    return (w % np.uint64(n)).astype(np.int64), valid


def uniform_each(highs: np.ndarray, src: Source) -> tuple[np.ndarray, np.ndarray]:
    """One uniform integer below each ``highs[i]`` (``1 <= highs[i] < 2^31``) from two 64-bit
    words each: ``X = 2^64 w1 + w2``, ``(X mod high, valid)``, invalid where ``X`` is at or
    above the largest multiple of ``high`` below 2^128 (probability below ``high 2^-128``: the
    caller redraws those). ``X mod high`` from the residues of ``w1``, ``2^64`` and ``w2``
    (products below 2^62: exact in uint64)."""
    h = np.asarray(highs, dtype=np.uint64)
    if h.size and (int(h.min()) < 1 or int(h.max()) >= 1 << 31):
        raise ValueError("uniform_each needs 1 <= high < 2**31")
    w1, w2 = src.uint64(h.size), src.uint64(h.size)
    with np.errstate(over="ignore"):
        r64 = (np.uint64(0) - h) % h  # 2^64 mod h
        d = (r64 * r64) % h  # 2^128 mod h
        valid = (w1 != np.uint64(2**64 - 1)) | (d == 0) | (w2 < np.uint64(0) - d)
    x = ((w1 % h) * r64 + w2 % h) % h
    return x.astype(np.int64), valid


def _resolve(u: int, gamma: Fraction, words: list[int], src: Source | None) -> tuple[bool, bool]:
    """``([U < exp(-gamma)], decided)`` for the uniform ``U`` whose first 32 bits are ``u``,
    continued by the 64-bit ``words``; undecided and ``src`` given: finished by drawing more
    (:class:`LazyUniform`), so the answer is exact either way."""
    prefix = u
    for w in words:
        prefix = (prefix << 64) | w
    nbits = 32 + 64 * len(words)
    lo, hi = exp_neg_fixed(gamma.numerator, gamma.denominator, nbits + 64)
    if (prefix + 1) << 64 <= lo:
        return True, True
    if prefix << 64 >= hi:
        return False, True
    if src is None:  # a dummy slot: its answer is thrown away
        return False, False
    return LazyUniform(prefix, nbits, src).less_than_exp_neg(gamma), False


#: A dummy slot's γ: public, just below 1 (the longest series of exp_neg_fixed's fraction part).
_DUMMY_GAMMA = Fraction(2**64 - 1, 2**64)


def exp_coins(g: np.ndarray, exact_gamma: Callable[[int], Fraction], src: Source, bits: int,
              *, below_one: bool = False,
              force: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """Exact Bernoulli(exp(-gamma_i)) lanes with fixed work, and whether the plan overran.

    ``g`` and ``exact_gamma`` carry the contract of :func:`dpkit.noise.bernoulli_exp_lanes`
    (non-finite ``g`` allowed). Words: one 32-bit word per lane and ``K`` slots of ``e`` 64-bit
    words (``K``, ``e`` from ``len(g)`` and ``bits``); every lane's bracket is computed with the
    same numpy operations; the ambiguous lanes (<= 2^-31 each) take the slots in lane order,
    the others run on a public dummy γ (never a lane's: its cost would follow the lane). More
    ambiguous lanes than slots, an undecided slot, or a
    lane in ``force`` (no float promise) are finished exactly: overran, probability
    ``<= 2^-bits`` when ``force`` is None.
    """
    g = np.asarray(g, dtype=np.float64)
    lanes = g.size
    k = slots_for(lanes, bits + 1)
    e = _extension_words(bits + 1, k)
    u = src.uint32(lanes)
    lo, hi = lane_brackets(np.where(np.isfinite(g), g, 64.0), below_one)
    out, amb = decide_lanes(u, lo, hi, None)
    ext = src.uint64(k * e).reshape(k, e).tolist()
    overran = len(amb) > k
    for slot in range(k):
        if slot < len(amb):
            j = amb[slot]
            out[j], decided = _resolve(int(u[j]), exact_gamma(j), ext[slot], src)
            overran |= not decided
        else:
            _resolve(int(u[0]) if lanes else 0, _DUMMY_GAMMA, ext[slot], None)
    rest = amb[k:]
    if force is not None and force.any():
        overran = True
        rest = sorted(set(rest) | set(np.flatnonzero(force).tolist()))
    for j in rest:
        out[j] = LazyUniform(int(u[j]), 32, src).less_than_exp_neg(exact_gamma(j))
    return out, overran


#: Largest integer level of :func:`level_coins` (e^-11 2^32 = 71,704.7: an offset ties its
#: threshold with probability <= 1/71,705 < 2^-16).
TOP_LEVEL = 11
_LEVEL_TIE_LOG2 = 16.1


@functools.cache
def _level_bounds(p: int) -> tuple[tuple[int, int], ...]:
    """Certified bounds on ``e^-k 2^p`` for every level ``k`` (one public ``p`` per plan: cached
    for all levels at once, so a slot's cost is a comparison of Python integers, the same for
    every level and for a dummy slot)."""
    return tuple(exp_neg_fixed(k, 1, p) for k in range(TOP_LEVEL + 1))


@functools.cache
def level_thresholds(top: int = TOP_LEVEL) -> np.ndarray:
    """``A_k = floor(e^-k 2^32)`` for ``k = 0..top`` (``A_0 = 2^32``), int64, from certified
    bounds on ``e^-k`` (irrational)."""
    out = [1 << 32]
    for k in range(1, top + 1):
        p = 96
        while True:
            lo, hi = exp_neg_fixed(k, 1, p)
            a, b = lo >> (p - 32), hi >> (p - 32)
            if a == b:
                break
            p += 64
        out.append(a)
    table = np.array(out, dtype=np.int64)
    table.flags.writeable = False  # cached and shared
    return table


def level_coins(o: np.ndarray, k: np.ndarray, src: Source,
                bits: int) -> tuple[np.ndarray, bool]:
    """``[(o_i + V_i) / 2^32 < e^-k_i]`` for offsets ``0 <= o_i <= A_{k_i}`` and integer levels
    ``0 <= k_i <= TOP_LEVEL``, ``V_i`` uniform on [0, 1) (fresh bits), with fixed work: the
    offset decides unless ``o_i == A_{k_i}`` (``k_i >= 1``), and those lanes (at most one
    offset in ``A_k + 1``: ``< 2^-16`` each when the offset is uniform) take ``K`` slots of
    ``e`` 64-bit words compared with cached bounds of ``e^-k``; dummy slots compare the same
    way. More tied lanes than slots or an undecided slot: finished exactly (overran)."""
    a = level_thresholds()[k]
    out = o < a
    tied = np.flatnonzero((o == a) & (k > 0)).tolist()
    lanes = o.size
    slots = _slots(lanes, bits + 1, _LEVEL_TIE_LOG2)
    e = _extension_words(bits + 1, slots)
    ext = src.uint64(slots * e).reshape(slots, e).tolist()
    overran = len(tied) > slots
    for slot in range(slots):
        real = slot < len(tied)
        j = tied[slot] if real else 0
        level = int(k[j]) if real else TOP_LEVEL
        prefix = int(o[j]) if real else 0
        for w in ext[slot]:
            prefix = (prefix << 64) | w
        nbits = 32 + 64 * e
        lo, hi = _level_bounds(nbits + 64)[level]
        if not real:
            continue
        if (prefix + 1) << 64 <= lo:
            out[j] = True
        elif prefix << 64 >= hi:
            out[j] = False
        else:
            overran = True
            out[j] = LazyUniform(prefix, nbits, src).less_than_exp_neg(Fraction(level))
    for j in tied[slots:]:
        out[j] = LazyUniform(int(o[j]), 32, src).less_than_exp_neg(Fraction(int(k[j])))
    return out, overran


# ------------------------------------------------------------------ geometric(e^-1), 128 bits
@functools.cache
def _geo128() -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    """``A_v = floor(e^-v 2^128)`` for ``v = 1..VMAX`` (while >= 1), split for searchsorted:
    ``(VH, VMAX, high words ascending (v <= VH), their low words, low words ascending (v > VH))``
    where ``v <= VH`` are the thresholds with a non-zero high word."""
    table = []
    v = 1
    while True:
        p = 256
        while True:  # e^-v 2^128 is irrational: its bounds pin the floor at some precision
            lo, hi = exp_neg_fixed(v, 1, p)
            a, b = lo >> (p - 128), hi >> (p - 128)
            if a == b:
                break
            p += 64
        if a == 0:
            break
        table.append(a)
        v += 1
    mask = (1 << 64) - 1
    high = np.array([a >> 64 for a in table], dtype=np.uint64)
    low = np.array([a & mask for a in table], dtype=np.uint64)
    vh = int(np.count_nonzero(high))
    return (vh, len(table), high[:vh][::-1].copy(), low[:vh][::-1].copy(),
            low[vh:][::-1].copy())


def _geometric128(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``V = #{v >= 1 : U < e^-v}`` for the uniforms ``U`` with 128-bit prefixes
    ``(hi, lo)``, and the lanes it cannot decide (``u == A_v`` for some ``v``, or ``u <=
    A_VMAX``; probability < 2^-120 each). Every lane: the same searches and selections."""
    vh, vmax, high, high_low, low = _geo128()
    right = np.searchsorted(high, hi, side="right")  # #{v <= VH : A_v's high word <= hi}
    v = (vh - right).astype(np.int64)
    at = np.maximum(right - 1, 0)
    tie = (right > 0) & (high[at] == hi)  # hi is one high word (distinct): its low word decides
    tl = high_low[at]
    v += tie & (lo < tl)
    fail = tie & (lo == tl)
    zero = hi == 0  # every v <= VH counts; the others by the low word
    r2 = np.searchsorted(low, lo, side="right")
    v += np.where(zero, (vmax - vh) - r2, 0)
    fail |= zero & ((low[np.maximum(r2 - 1, 0)] == lo) | (lo <= low[0]))
    return v, fail


def _geometric_exact(hi: int, lo: int, src: Source) -> int:
    """The exact ``V`` of one undecided lane, continuing its uniform with more words."""
    lazy = LazyUniform((hi << 64) | lo, 128, src)
    v = 0
    while lazy.less_than_exp_neg(Fraction(v + 1)):
        v += 1
    return v


def _bits_of(n: int, src: Source) -> np.ndarray:
    words = src.uint32((n + 31) // 32)
    return np.unpackbits(words.view(np.uint8))[:n].view(bool)


# ------------------------------------------------------------------ discrete Laplace attempts
def _dlap_lanes(m: int, t: int, s: int, src: Source,
                bits: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """``m`` CKS attempts for DLap(t/s) with fixed words: ``(Y, accepted, overran)``.

    Per attempt: ``U`` from one 64-bit word (``w mod t``, the attempt rejected when ``w`` is
    at or above the largest multiple of ``t``: a public rate, no retry), its coin
    Bernoulli(exp(-U/t)) (:func:`exp_coins`), ``V`` from 128 bits (:func:`_geometric128`), a
    sign bit; ``(negative, 0)`` rejected. Accepted attempts are exact DLap(t/s) samples (CKS
    2020, Algorithm 2, with a uniform ``U`` conditioned on acceptance of the word).
    """
    if t == 1:
        u = np.zeros(m, dtype=np.int64)
        valid = np.ones(m, dtype=bool)
        acc = valid
        overran = False
    else:
        w = src.uint64(m)
        if t & (t - 1) == 0:
            u = (w & np.uint64(t - 1)).astype(np.int64)
            valid = np.ones(m, dtype=bool)
        else:
            valid = w < np.uint64((1 << 64) - (1 << 64) % t)
            u = (w % np.uint64(t)).astype(np.int64)
        g = u.astype(np.float64)
        g /= float(t)  # the contract of samplers._dlap_attempts (three roundings)
        acc, overran = exp_coins(g, lambda i: Fraction(int(u[i]), t), src, bits,
                                 below_one=t <= 2**53)
    hi, lo = src.uint64(m), src.uint64(m)
    v, fail = _geometric128(hi, lo)
    y = v * t  # v <= 88 off the failure lanes: (88 t + t) < 2^63 for t <= 2^56
    y += u
    if s != 1:
        y //= s
    neg = _bits_of(m, src)
    for i in np.flatnonzero(fail).tolist():  # probability < 2^-120 each: finished exactly
        overran = True
        yi = (int(u[i]) + t * _geometric_exact(int(hi[i]), int(lo[i]), src)) // s
        if yi >= 2**62:
            raise OverflowError("discrete Laplace sample does not fit int64")
        y[i] = yi
    keep = valid & acc & ~(neg & (y == 0))
    np.negative(y, out=y, where=neg)
    return y, keep, overran


def _first(y: np.ndarray, keep: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """The first ``n`` accepted values (attempt order) and how many were accepted; a stable
    sort of the flags, the same passes whatever they are."""
    order = np.argsort(~keep, kind="stable")[:n]
    got = int(np.count_nonzero(keep))
    return y[order[: min(got, n)]], got


@functools.lru_cache(maxsize=1024)
def _dlap_rate_bound(t: int, s: int) -> float:
    """A lower bound on an attempt's acceptance rate, from public ``t, s`` only: the coin
    ``(1/t) Σ_U e^{-U/t} = (1 - e^-1) / (t (1 - e^{-1/t}))``, the word ``1 - (2^64 mod t)
    2^-64``, and ``1 - P(Y = 0)/2 = 1 - (1 - e^{-s/t})/2`` for the rejected (negative, 0)."""
    coin = 1.0 if t == 1 else -math.expm1(-1.0) / (-math.expm1(-1.0 / t) * t)
    word = 1.0 if t & (t - 1) == 0 else 1.0 - ((1 << 64) % t) / 2.0**64
    zero = -math.expm1(-s / t) if s / t < 700 else 1.0
    return min(coin, 1.0) * word * (1.0 - zero / 2.0) * _SAFETY


def _plans(n: int, bits: int) -> tuple[list[int], int]:
    """The output lanes of each fixed plan of a request of ``n``, and each plan's bits."""
    sizes = [min(_CHUNK, n - lo) for lo in range(0, n, _CHUNK)]
    b = bits + (math.ceil(math.log2(len(sizes))) if len(sizes) > 1 else 0)
    return sizes, b


def _check_geometric_share(m: int, bits: int) -> None:
    # the geometric lanes' ties: m 2^-120 must stay within this plan's 2^-(bits + 2)
    if bits + 2 + math.log2(max(m, 1)) > 120:
        raise ValueError(f"constant-work plan too strict ({bits} bits over {m} attempts): "
                         f"use fewer bits (at most {MAX_BITS}) or fewer requests per release")


def _dlap_fixed(scale: Rational, n: int, src: ConstantWork) -> np.ndarray:
    t, s, rate = dlap_setup(scale)
    sizes, b = _plans(n, request_bits(src))
    bound = _dlap_rate_bound(t, s)
    out = np.empty(n, dtype=np.int64)
    pos, overran = 0, False
    for k in sizes:
        m = attempts_for(k, bound, b + 2)  # shortfall: 2^-(b+2); coins: 2^-(b+1)
        _check_geometric_share(m, b)
        y, keep, over = _dlap_lanes(m, t, s, src, b + 1)
        got, count = _first(y, keep, k)
        if count < k:  # the failure event: today's loop finishes the request, exactly
            over = True
            got = np.concatenate([got, fill_attempts(
                k - count, lambda j: dlap_attempts(j, t, s, src), rate)])
        out[pos : pos + k] = got
        pos += k
        overran |= over
    if overran:
        src.note_overrun()
    return out


# ------------------------------------------------------------------ discrete Gaussian
@functools.lru_cache(maxsize=256)
def _dgauss_rate_bound(t: int, c: float, k: float) -> float:
    """A lower bound on ``E[exp(-(|Y| - c)^2 k)]`` for ``Y ~ DLap(t)`` (``c = σ²/t``,
    ``k = 1/(2σ²)``): ``P(y) = tanh(1/(2t)) e^{-|y|/t}``; on a block ``[a, z]`` of integers
    ``e^{-y/t}`` is smallest at ``z`` and the unimodal coin at an end, so the block adds at
    least ``(z - a + 1) e^{-z/t} min(coin(a), coin(z))``; the tail beyond ``30 t`` is left
    out (a lower bound)."""
    top = 30 * t
    h = max(1, -(-top // (1 << 16)))
    a = np.arange(1, top + 1, h, dtype=np.float64)
    z = np.minimum(a + (h - 1), float(top))
    coin_a = np.exp(-((a - c) ** 2) * k)
    coin_z = np.exp(-((z - c) ** 2) * k)
    body = float(np.sum((z - a + 1) * np.exp(-z / t) * np.minimum(coin_a, coin_z)))
    mass = math.tanh(1.0 / (2 * t)) * (math.exp(-(c * c) * k) + 2.0 * body)
    return mass * (1.0 - 2.0**-10)  # float error of the sum over 2^16 blocks, with room


def _dgauss_gamma(ay: np.ndarray, a: int, bt: int, den: int) -> Callable[[int], Fraction]:
    """Lane ``i`` -> ``(|Y_i| - σ²/t)² / (2σ²)`` exactly, as in samplers.discrete_gaussian."""
    return lambda i: Fraction((bt * int(ay[i]) - a) ** 2, den)


def _dgauss_fixed(sigma2: Rational, n: int, src: ConstantWork) -> np.ndarray:
    a, t, c_f, k_f, bt, den, _ = dgauss_setup(sigma2)
    sizes, b = _plans(n, request_bits(src))
    bound = _dlap_rate_bound(t, 1) * _dgauss_rate_bound(t, c_f, k_f)
    out = np.empty(n, dtype=np.int64)
    pos, overran = 0, False
    for k in sizes:
        m = attempts_for(k, bound, b + 2)  # shortfall 2^-(b+2), each coin stage 2^-(b+2)
        _check_geometric_share(m, b)
        y, keep, over = _dlap_lanes(m, t, 1, src, b + 2)
        ay = np.abs(y)
        d = ay.astype(np.float64)
        d -= c_f
        g = d * d
        g *= k_f  # the contract of samplers.discrete_gaussian
        acc, over2 = exp_coins(g, _dgauss_gamma(ay, a, bt, den), src, b + 2,
                               force=ay >= 2**53)
        keep &= acc
        got, count = _first(y, keep, k)
        if count < k:
            over = True
            got = np.concatenate([got, plain_discrete_gaussian(sigma2, k - count,
                                                               source=src.plain)])
        out[pos : pos + k] = got
        pos += k
        overran |= over or over2
    if overran:
        src.note_overrun()
    return out


# ------------------------------------------------------------------ the public entry points
@traced
def discrete_laplace(scale: Rational, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exact discrete Laplace samples (int64): ``P(x) ∝ exp(-|x| / scale)``, ``scale > 0``.

    :func:`dpkit.noise.samplers.discrete_laplace` (CKS 2020, Algorithm 2; its docstring has the
    limits and rounding), on a fixed plan when ``source`` is a :class:`ConstantWork` (the same
    exact law, work set by public parameters: module docstring).

    >>> import dpkit.noise as noise
    >>> noise.discrete_laplace(3, 5, source=noise.seeded(1)).tolist()
    [-1, -2, 8, 3, -2]
    """
    src = resolve_source(source)
    if not isinstance(src, ConstantWork):
        return plain_discrete_laplace(scale, size, source=src)
    shape = as_shape(size)
    return _dlap_fixed(scale, math.prod(shape), src).reshape(shape)


@traced
def discrete_gaussian(sigma2: Rational, size: Size, *,
                      source: Source | None = None) -> np.ndarray:
    """Exact discrete Gaussian samples (int64): ``P(x) ∝ exp(-x**2 / (2 sigma2))``.

    :func:`dpkit.noise.samplers.discrete_gaussian` (CKS 2020, Algorithm 3; ``0 < sigma2 <=
    2**80``), on a fixed plan when ``source`` is a :class:`ConstantWork` (the same exact law,
    work set by public parameters: module docstring).

    >>> import dpkit.noise as noise
    >>> noise.discrete_gaussian(10, 5, source=noise.seeded(1)).tolist()
    [-3, 3, 2, -6, -2]
    """
    src = resolve_source(source)
    if not isinstance(src, ConstantWork):
        return plain_discrete_gaussian(sigma2, size, source=src)
    shape = as_shape(size)
    return _dgauss_fixed(sigma2, math.prod(shape), src).reshape(shape)


# ------------------------------------------------------------------ Bernoulli and uniform
def _bernoulli_fixed(p: Fraction, n: int, src: ConstantWork) -> np.ndarray:
    """``[U < p]`` per lane from ``k`` 32-bit words of ``U`` each, ``k`` set by ``n`` and the
    request's bits: the words decide unless they equal the first ``32 k`` bits of ``p``
    (probability ``2^-32k`` per lane, ``n 2^-32k <= 2^-bits`` in all: the failure event, on
    which the lane finishes exactly with more words, as :func:`samplers.bernoulli` does)."""
    bits = request_bits(src)
    k = max(1, math.ceil((bits + math.log2(max(n, 1))) / 32))
    num, den = p.numerator, p.denominator
    A, rem = divmod(num << (32 * k), den)  # p 2^{32k} = A + rem/den
    w = src.uint32(n * k).reshape(k, n)
    less = np.zeros(n, dtype=bool)
    equal = np.ones(n, dtype=bool)
    for j in range(k):  # lexicographic comparison of the words with A's, on every lane
        digit = np.uint32((A >> (32 * (k - 1 - j))) & 0xFFFFFFFF)
        less |= equal & (w[j] < digit)
        equal &= w[j] == digit
    tie = np.flatnonzero(equal) if rem else np.zeros(0, dtype=np.int64)
    if tie.size:  # U >= A/2^{32k} decides nothing when p is not on the grid: finish exactly
        src.note_overrun()
        for i in tie:
            less[i] = LazyUniform(A, 32 * k, src.plain).less_than_fraction(p)
    return less


def _uniform_fixed(high: int, n: int, src: ConstantWork) -> np.ndarray:
    """``n`` uniform integers on ``[0, high)`` from a fixed number of words: ``M`` proposals
    (64-bit words below the largest multiple of ``high``; ``M`` from the Chernoff bound so that
    fewer than ``n`` accepted has probability <= ``2^-bits``), the first ``n`` accepted taken;
    on that failure event today's loop finishes the request, so the law is exact."""
    if high & (high - 1) == 0:  # a power of two: one masked word per lane, nothing rejected
        return (src.uint64(n) & np.uint64(high - 1)).astype(np.int64)
    lim, h, reject = _u64_bounds(high)
    m = attempts_for(n, 1.0 - reject, request_bits(src)) if n else 0
    w = src.uint64(m)
    ok = w < lim
    vals = (w % h).astype(np.int64)
    got, count = _first(vals, ok, n)
    if count < n:
        src.note_overrun()
        got = np.concatenate([got, plain_uniform_int(high, n - count, source=src.plain)])
    return got


@functools.lru_cache(maxsize=256)
def _u64_bounds(high: int) -> tuple[np.uint64, np.uint64, float]:
    lim = (1 << 64) - (1 << 64) % high
    # the rate bound 1 - reject must stay below 1.0 in floats; a larger reject is still a bound
    return np.uint64(lim), np.uint64(high), max(((1 << 64) % high) / 2.0**64, 2.0**-50)


@traced
def bernoulli(p: Rational, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exact Bernoulli(p) booleans (:func:`dpkit.noise.samplers.bernoulli`), on a fixed plan
    when ``source`` is a :class:`ConstantWork`: ``k`` words per lane whatever they say, so
    the work does not follow the drawn bits (DP-SGD's Poisson masks are secret).

    >>> import dpkit.noise as noise
    >>> noise.bernoulli(0.5, 4, source=noise.seeded(1)).tolist()
    [True, False, False, False]
    """
    src = resolve_source(source)
    if not isinstance(src, ConstantWork):
        return plain_bernoulli(p, size, source=src)
    pf = as_rational(p, "p")
    if not 0 <= pf <= 1:
        raise ValueError(f"p must be in [0, 1] (got {p!r})")
    shape = as_shape(size)
    if pf in (0, 1):
        return np.full(shape, pf == 1, dtype=bool)
    return _bernoulli_fixed(pf, math.prod(shape), src).reshape(shape)


@traced
def uniform_int(high: int, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Exactly uniform integers on ``[0, high)`` (:func:`dpkit.noise.samplers.uniform_int`),
    on a fixed plan when ``source`` is a :class:`ConstantWork`.

    >>> import dpkit.noise as noise
    >>> noise.uniform_int(6, 4, source=noise.seeded(1)).tolist()
    [2, 3, 4, 5]
    """
    src = resolve_source(source)
    if not isinstance(src, ConstantWork) or isinstance(high, bool) or not isinstance(
            high, (int, np.integer)) or not 1 <= int(high) < 2**63:
        return plain_uniform_int(high, size, source=src)  # its checks and messages
    shape = as_shape(size)
    return _uniform_fixed(int(high), math.prod(shape), src).reshape(shape)
