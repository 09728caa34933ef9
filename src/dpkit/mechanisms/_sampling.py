"""Exact selection samplers built on dpkit.noise: weights ``exp(-gamma_r)`` with exact rationals.

For scores ``q_r`` (floats, taken at their exact binary values) and a rational factor
``c = epsilon / (2 sensitivity)`` (or ``/ sensitivity`` for monotonic scores), candidate ``r`` has
``gamma_r = c (q* - q_r) >= 0`` where ``q* = max_r q_r``, computed exactly with
:class:`fractions.Fraction` whenever a coin needs it. A Bernoulli(exp(-gamma_r)) coin is then
exact (dpkit.noise), and:

* **Exponential mechanism** (McSherry-Talwar 2007) by rejection: propose ``r`` uniformly
  (``noise.uniform_int``), accept with probability ``exp(-gamma_r)``; an accepted proposal has
  law ``P(r) ∝ exp(-gamma_r) ∝ exp(c q_r)`` exactly. Proposals are drawn in blocks and the first
  accepted one in each block is used, which is the same as drawing them one at a time.
* **Permute-and-flip** (McKenna-Sheldon 2020): visit candidates in a uniformly random order and
  return the first whose coin ``Bernoulli(exp(-gamma_r))`` comes up heads. The order is
  independent of the coins, so the first head in that order is a *uniform* element of the set
  of heads (non-empty: the best candidate has ``gamma = 0``). We flip all coins and pick a
  uniform head with ``noise.uniform_int``: the same law, vectorised.

* **Many instances at once** (:func:`exponential_rows_sample`): one exponential mechanism per
  row of a score matrix, by rejection with a stepped envelope (integer levels ``K <= gamma``,
  weights ``floor(e^-K 2^32) + 1``) so that a draw needs O(1) trials however many poor
  candidates a row has; see its docstring for the proof.

The float values ``g_r`` handed to the vectorised coin satisfy the noise layer's contract
``|g_r - gamma_r| <= 2**-44.4`` when ``g_r < 64`` and ``gamma_r >= 63.9`` otherwise: ``g_r`` is
``float(c) * (q* - q_r)`` in float64, three correctly rounded operations, so its relative error
is below ``3.0001 * 2**-53`` (absolute below ``2**-45.4`` when ``g_r < 64``); a lane whose
difference overflows to ``inf`` is flagged and decided with the exact Fraction, as are the
lanes the float bound cannot decide.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpkit import noise
from dpkit.noise import Source
from dpkit.noise.exact import LazyUniform

__all__ = [
    "RowWeights",
    "Weights",
    "coins",
    "exponential_rows_sample",
    "exponential_sample",
    "permute_and_flip_sample",
    "uniform_head",
]

_BLOCK_LANES = 1 << 18
ROW_LANES = 1 << 20  # proposals (or scores) held at once by the batched sampler


def _as_float(factor: Fraction) -> float:
    """``float(factor)``, inf beyond the float range (refused by the callers with a clear
    message rather than an OverflowError)."""
    try:
        return float(factor)
    except OverflowError:
        return math.inf


class Weights:
    """``gamma_r = c (q* - q_r)`` for float scores, with float approximations and exact values."""

    def __init__(self, scores: np.ndarray, factor: Fraction) -> None:
        self.scores = scores
        self.factor = factor
        self.best = float(scores.max())
        cf = _as_float(factor)
        if not cf > 0 or not math.isfinite(cf):
            raise ValueError(
                "epsilon / sensitivity is outside the floating-point range; use values within "
                "[1e-300, 1e300]"
            )
        with np.errstate(over="ignore"):
            self.g = cf * (self.best - scores)  # float64, >= 0, maybe inf
        self._best_exact = Fraction(self.best)
        self._cache: dict[int, Fraction] = {}

    def exact(self, r: int) -> Fraction:
        got = self._cache.get(r)
        if got is None:
            got = self.factor * (self._best_exact - Fraction(float(self.scores[r])))
            self._cache[r] = got
        return got

    @property
    def n(self) -> int:
        return int(self.scores.size)

    def trace_face(self) -> tuple[object, ...]:
        """What a work trace shows of these weights: the factor epsilon / sensitivity and the
        number of candidates (a size), never the scores."""
        return ("weights", self.factor, noise.trace.SizeOf(self.n))

    def acceptance(self) -> float:
        """Mean of exp(-g): the rejection sampler's acceptance rate (for block sizing only)."""
        return float(np.mean(np.exp(-self.g)))


def coins(w: Weights, r: np.ndarray, src: Source) -> np.ndarray:
    """Independent exact Bernoulli(exp(-gamma_{r_i})) for each lane ``i``."""
    return noise.bernoulli_exp_lanes(w.g[r], lambda i: w.exact(int(r[i])), source=src)


@noise.trace.traced  # one request: the rejection loop's draws depend on the scores
def exponential_sample(w: Weights, size: int, src: Source) -> np.ndarray:
    """``size`` independent draws with ``P(r) ∝ exp(-gamma_r)``, by exact rejection sampling
    (on a fixed plan, :func:`_rows_fixed`, when ``src`` is a ``noise.ConstantWork``)."""
    if isinstance(src, noise.ConstantWork):  # one row, drawn ``size`` times
        one = RowWeights(w.scores[None, :], w.factor)
        return _rows_fixed(one, src, np.zeros(size, dtype=np.int64),
                           lambda lost: exponential_sample(w, lost.size, src.plain))
    out = np.full(size, -1, dtype=np.int64)
    pending = np.arange(size)
    rate = max(w.acceptance(), 1.0 / w.n)
    while pending.size:
        # Proposals per pending draw: enough that most draws finish in this round.
        block = int(min(max(1, math.ceil(4.0 / rate)), max(1, _BLOCK_LANES // pending.size)))
        r = noise.uniform_int(w.n, (pending.size, block), source=src)
        acc = coins(w, r.ravel(), src).reshape(r.shape)
        hit = acc.any(axis=1)
        first = np.argmax(acc, axis=1)
        done = pending[hit]
        out[done] = r[hit, first[hit]]
        pending = pending[~hit]
    return out


@noise.trace.traced
def permute_and_flip_sample(w: Weights, size: int, src: Source) -> np.ndarray:
    """``size`` independent permute-and-flip draws (uniform head among exact coins); on a
    ``noise.ConstantWork`` source the coins and the head take fixed words (:func:`_pf_fixed`)."""
    if isinstance(src, noise.ConstantWork):
        return _pf_fixed(w, size, src)
    out = np.empty(size, dtype=np.int64)
    rows = max(1, _BLOCK_LANES // w.n)
    for start in range(0, size, rows):
        m = min(rows, size - start)
        r = np.broadcast_to(np.arange(w.n), (m, w.n))
        heads = coins(w, r.ravel(), src).reshape(m, w.n)
        out[start : start + m] = uniform_head(heads, src)
    return out


def uniform_head(heads: np.ndarray, src: Source) -> np.ndarray:
    """For each row of a boolean matrix (each with at least one True), a uniformly random column
    among its True entries."""
    counts = heads.sum(axis=1)
    if np.any(counts == 0):  # pragma: no cover - the best candidate always flips heads
        raise AssertionError("permute-and-flip: a row without heads")
    pick = np.empty(heads.shape[0], dtype=np.int64)
    for c in np.unique(counts).tolist():
        rows = np.flatnonzero(counts == c)
        pick[rows] = noise.uniform_int(int(c), rows.size, source=src)
    # column of the pick-th True in each row
    csum = np.cumsum(heads, axis=1)
    return np.argmax(csum > pick[:, None], axis=1).astype(np.int64)



# ------------------------------------------------------------------ many instances at once
class RowWeights:
    """``gamma_ij = c (q*_i - q_ij)`` for a matrix of scores (one instance per row, ``q*_i`` its
    row maximum), with the same float approximations and exact values as :class:`Weights`."""

    def __init__(self, scores: np.ndarray, factor: Fraction) -> None:
        self.scores = scores
        self.factor = factor
        cf = _as_float(factor)
        if not cf > 0 or not math.isfinite(cf):
            raise ValueError(
                "epsilon / sensitivity is outside the floating-point range; use values within "
                "[1e-300, 1e300]"
            )
        self.best = scores.max(axis=1)
        with np.errstate(over="ignore"):
            # the same three correctly rounded operations per entry as Weights.g
            self.g = cf * (self.best[:, None] - scores)
        self._cache: dict[tuple[int, int], Fraction] = {}

    def trace_face(self) -> tuple[object, ...]:
        """What a work trace shows: the factor and the shape (a size), never the scores."""
        return ("row_weights", self.factor, noise.trace.SizeOf(self.scores.shape))

    def exact(self, i: int, j: int) -> Fraction:
        got = self._cache.get((i, j))
        if got is None:
            got = self.factor * (Fraction(float(self.best[i])) - Fraction(float(self.scores[i, j])))
            self._cache[(i, j)] = got
        return got


# Levels of the envelope: candidate (i, j) sits at level K_ij = min(floor(g_ij - 2**-40), _TOP)
# (>= 0), an integer <= gamma_ij; its envelope weight is B_K = A_K + 1 (A_K = floor(e^-K 2^32),
# K >= 1) or B_0 = 2**32, i.e. a dyadic upper bound of e^-K 2^32.
_TOP = 23  # e^-23 * 2^32 < 1: A_23 = 0, B_23 = 1 (every candidate with gamma >= 23)
_A = noise.constant.level_thresholds(_TOP)  # A_K, K = 0.._TOP (A_0 = 2**32: always passes)
_B = _A + (np.arange(_TOP + 1) > 0)  # B_0 = 2**32, B_K = A_K + 1


def _residual(
    w: RowWeights, rows: np.ndarray, cols: np.ndarray, levels: np.ndarray
) -> Callable[[int], Fraction]:
    """Lane ``t`` -> ``gamma - K`` exactly, for the coin after the level's envelope."""
    return lambda t: w.exact(int(rows[t]), int(cols[t])) - int(levels[t])


@noise.trace.traced
def exponential_rows_sample(w: RowWeights, src: Source) -> np.ndarray:
    """One draw per row ``i`` with ``P(j) ∝ exp(-gamma_ij)``, rows independent, exactly.

    Rejection sampling with a stepped envelope instead of uniform proposals, so that the cost
    does not grow with the number of poor candidates (a row whose mass sits on a few of its
    ``n`` candidates needs ``O(1)`` proposals, not ``O(n)``):

    * **Levels.** ``K_j = min(floor(g_j - 2**-40), 23)`` clipped at 0 is an integer with
      ``K_j <= gamma_j`` (``|g_j - gamma_j| <= 2**-44.4`` when ``g_j < 64``, else
      ``gamma_j >= 63.9``). Envelope weight ``B_K = floor(e^-K 2^32) + 1 >= e^-K 2^32``
      (``B_0 = 2^32``), an integer.
    * **Proposal** ``∝ B_{K_j}``: an exact uniform integer ``u`` below ``2^b >= T = Σ_j B_{K_j}``
      (``u >= T``: no proposal this time); ``u`` falls in the block of candidate ``j`` (blocks
      of ``B_{K_j}`` integers) at offset ``o``.
    * **Acceptance** ``e^-gamma_j 2^32 / B_{K_j}`` as two independent exact events:
      ``U' = (o + V)/2^32 < e^-K`` with ``V`` uniform (``o < A_K`` decides it; ``o == A_K`` is
      finished by :class:`dpkit.noise.exact.LazyUniform`), probability ``e^-K 2^32 / B_K``;
      and a Bernoulli(exp(-(gamma_j - K))) coin (``g_j - K`` is exact in floats; ``g_j >= 64``
      lanes are decided with the exact rational).

    So one trial outputs ``j`` with probability ``e^-gamma_j 2^32 / 2^b``, the same for every
    ``j`` up to the factor; the first accepted trial has law ``∝ exp(-gamma_j)``. A trial
    succeeds with probability ``>= Σ e^-gamma_j / (2 Σ e^-K_j (1 + 2^-32 e^K_j))``, about
    ``e^-1 / 2`` or better whatever ``n``. Trials are drawn in blocks per row; the first accepted
    trial of an i.i.d. sequence has the same law however the sequence is cut.
    """
    m, n = w.g.shape
    if n * int(_B[0]) >= 1 << 62:  # pragma: no cover - 2^30 candidates per instance
        raise ValueError(f"at most 2**30 candidates per instance (got {n})")
    if isinstance(src, noise.ConstantWork):
        return _rows_fixed(w, src)
    out = np.full(m, -1, dtype=np.int64)
    g = w.g
    t = g - 2.0**-40  # g >= 64 (or inf) lands on _TOP, as gamma >= 63.9 allows
    np.floor(t, out=t)
    np.clip(t, 0, _TOP, out=t)
    lev = t.astype(np.int8)
    del t
    order = np.argsort(lev, axis=1, kind="stable")  # members of each level, level by level
    key = lev.astype(np.int64)
    key += (np.arange(m, dtype=np.int64) * (_TOP + 1))[:, None]
    counts = np.bincount(key.ravel(), minlength=m * (_TOP + 1)).reshape(m, _TOP + 1)
    del key
    first = np.zeros((m, _TOP + 2), dtype=np.int64)  # first sorted position of each level
    np.cumsum(counts, axis=1, out=first[:, 1:])
    cw = np.zeros((m, _TOP + 2), dtype=np.int64)  # cumulative envelope weight by level
    np.cumsum(counts * _B[None, :], axis=1, out=cw[:, 1:])
    total = cw[:, -1]
    bits = np.array([int(x).bit_length() for x in total.tolist()], dtype=np.int64)
    # a trial succeeds with probability >= about e^-1 / 2 (see above): 6 per row and round
    trials = 6
    pending = np.arange(m)
    while pending.size:
        still: list[np.ndarray] = []
        for b in np.unique(bits[pending]).tolist():
            grp = pending[bits[pending] == b]
            s = trials
            rows = np.repeat(grp, s)
            u = noise.uniform_int(1 << b, rows.size, source=src)
            ok = u < total[rows]
            lane_rows = rows[ok]
            uu = u[ok]
            crow = cw[lane_rows]
            k = (uu[:, None] >= crow[:, 1:]).sum(axis=1)  # level of the proposal
            off = uu - crow[np.arange(k.size), k]
            bk = _B[k]
            member, o = off // bk, off % bk
            col = order[lane_rows, first[lane_rows, k] + member]
            ak = _A[k]
            acc = o < ak
            for t in np.flatnonzero(o == ak).tolist():
                acc[t] = LazyUniform(int(o[t]), 32, src).less_than_exp_neg(Fraction(int(k[t])))
            live = np.flatnonzero(acc)
            if live.size:
                lr, lc, lk = lane_rows[live], col[live], k[live]
                g1 = g[lr, lc]
                g2 = g1 - lk  # exact: an integer <= g subtracted from a float < 2^53
                g2[~(g1 < 64.0)] = np.inf  # no float promise there: decided exactly
                acc[live] = noise.bernoulli_exp_lanes(g2, _residual(w, lr, lc, lk), source=src)
            # first accepted trial of each row, in trial order
            hit = np.zeros((grp.size, s), dtype=bool)
            hit.ravel()[np.flatnonzero(ok)] = acc
            done = hit.any(axis=1)
            pick = np.full(rows.size, -1, dtype=np.int64)
            pick[np.flatnonzero(ok)] = col
            firsts = np.argmax(hit, axis=1)
            out[grp[done]] = pick.reshape(grp.size, s)[done, firsts[done]]
            still.append(grp[~done])
        pending = np.concatenate(still) if still else pending[:0]
    return out


# ------------------------------------------------------------------ constant work
_FIXED_LANES = 1 << 16  # trial lanes per block of the fixed plan


def _fixed_envelope(w: RowWeights) -> tuple[np.ndarray, ...]:
    """Per row: candidates sorted by level, each level's first position, the cumulative
    envelope weights and the bits of their total, with levels ``K = min(floor(g - 2^-40),
    TOP_LEVEL)`` clipped at 0 and weights ``B_K = A_K + 1`` (``B_0 = 2^32``) as in
    :func:`exponential_rows_sample` (a radix sort of int8 levels: the same passes for any)."""
    top = noise.constant.TOP_LEVEL
    m, _ = w.g.shape
    t = w.g - 2.0**-40
    np.floor(t, out=t)
    np.clip(t, 0, top, out=t)
    lev = t.astype(np.int8)
    order = np.argsort(lev, axis=1, kind="stable")
    key = lev.astype(np.int64) + (np.arange(m, dtype=np.int64) * (top + 1))[:, None]
    counts = np.bincount(key.ravel(), minlength=m * (top + 1)).reshape(m, top + 1)
    first = np.zeros((m, top + 2), dtype=np.int64)
    np.cumsum(counts, axis=1, out=first[:, 1:])
    a = noise.constant.level_thresholds()
    cw = np.zeros((m, top + 2), dtype=np.int64)
    np.cumsum(counts * (a + (np.arange(top + 1) > 0))[None, :], axis=1, out=cw[:, 1:])
    bits = np.array([int(x).bit_length() for x in cw[:, -1].tolist()], dtype=np.int64)
    return order, first, cw, bits


def _fixed_rate(n: int) -> float:
    """A lower bound, from the public ``n`` only, on a trial's success: ``u < total`` (>= 1/2),
    then ``Σ e^-γ 2^32 / Σ B_K`` >= ``min(e^{-1-2^-39} / (1 + e^11 2^-32), 2^32 / (2^32 + (n-1)
    B_11))`` (a candidate below the top level has ratio >= the first, the best one has ratio
    1, the top level's (any γ >= 11) add at most ``(n-1) B_11`` to the denominator)."""
    a_top = float(noise.constant.level_thresholds()[-1])
    c = math.exp(-1.0 - 2.0**-39) / (1.0 + 1.0 / a_top)
    top_share = 2.0**32 / (2.0**32 + (n - 1) * (a_top + 1.0))
    return 0.5 * min(c, top_share) * (1.0 - 2.0**-20)


def _rows_fixed(w: RowWeights, src: noise.ConstantWork, draws: np.ndarray | None = None,
                finish: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """One draw per entry of ``draws`` (row indices; default one per row) with the law of
    :func:`exponential_rows_sample`, on a fixed plan: the work does not depend on the scores.

    Each draw makes ``T`` trials of the stepped envelope (one 64-bit word: ``u`` below
    ``2^b_i``, void at or above the row's total; the level and member it falls on; an exact
    level coin ``[(o + V)/2^32 < e^-K]`` and an exact Bernoulli(exp(-(γ - K))) coin, both with
    fixed words and slots, ``noise.constant``), all processed; the draw is its first accepted
    trial. ``T`` is the smallest count with ``(1 - a)^T`` below the request's share of
    ``2^-bits`` for the public lower bound ``a`` of :func:`_fixed_rate`. Both coins and the
    shortfall each fail with probability below a third of it; a draw with no acceptance is
    finished exactly by today's loop (``finish``), so the law is exact always and only the
    work differs on that event.
    """
    m, n = w.g.shape
    if n >= 1 << 30:  # envelope totals must stay below 2^62 (as exponential_rows_sample's)
        raise ValueError(f"at most 2**30 candidates per instance (got {n})")
    draws = np.arange(m) if draws is None else draws
    order, first, cw, rbits = _fixed_envelope(w)
    bits = noise.constant.request_bits(src)
    b = bits + (math.ceil(math.log2(draws.size)) if draws.size > 1 else 0) + 2
    t = noise.constant.attempts_for(1, _fixed_rate(n), b)
    out = np.zeros(draws.size, dtype=np.int64)
    lost: list[np.ndarray] = []
    overran = False
    per = max(1, _FIXED_LANES // t)
    for start in range(0, draws.size, per):
        rows = np.repeat(draws[start : start + per], t)
        hit, col, over = _fixed_trials(w, rows, order, first, cw, rbits, src, b)
        overran |= over
        hit = hit.reshape(-1, t)
        pick = np.argmax(hit, axis=1)
        out[start : start + hit.shape[0]] = col.reshape(-1, t)[np.arange(hit.shape[0]), pick]
        lost.append(start + np.flatnonzero(~hit.any(axis=1)))
    missing = np.concatenate(lost)
    if missing.size:  # the failure event: finished exactly, with more work
        overran = True
        out[missing] = (finish(draws[missing]) if finish is not None else
                        exponential_rows_sample(RowWeights(w.scores[draws[missing]], w.factor),
                                                src.plain))
    if overran:
        src.note_overrun()
    return out


def _fixed_trials(w: RowWeights, rows: np.ndarray, order: np.ndarray, first: np.ndarray,
                  cw: np.ndarray, rbits: np.ndarray, src: noise.ConstantWork,
                  b: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """One trial per lane (``rows[i]``: its instance): ``(accepted, candidate, overran)``."""
    top = noise.constant.TOP_LEVEL
    r, _ = noise.constant.proposals(1 << 62, rows.size, src)
    u = r >> (62 - rbits[rows])  # uniform below 2^b_i (b_i <= 62: totals < 2^62)
    crow = cw[rows]
    ok = u < crow[:, -1]
    # a void lane (u at or above the total) is made a well-formed one (level 0, the row's
    # first candidate in level order, gamma >= 0) whose answer is masked: the same work
    k = np.where(ok, np.minimum((u[:, None] >= crow[:, 1:]).sum(axis=1), top), 0)
    lanes = np.arange(rows.size)
    off = np.where(ok, u - crow[lanes, k], 0)
    bk = noise.constant.level_thresholds()[k] + (k > 0)
    member = off // bk
    o = off % bk
    col = order[rows, np.minimum(first[rows, k] + member, order.shape[1] - 1)]
    env, over1 = noise.constant.level_coins(o, k, src, b)
    g1 = w.g[rows, col]
    g2 = g1 - k  # exact: an integer <= g subtracted from a float < 2^53
    g2[~(g1 < 64.0)] = np.inf  # no float promise there: decided exactly
    coin, over2 = noise.constant.exp_coins(g2, _residual(w, rows, col, k), src, b)
    return ok & env & coin, col, over1 or over2


def _pf_fixed(w: Weights, size: int, src: noise.ConstantWork) -> np.ndarray:
    """Permute-and-flip with fixed work: every coin of every draw through
    ``noise.constant.exp_coins`` (fixed words and slots), then a uniform head from one 64-bit
    word per draw (``noise.constant.uniform_each``, whatever the number of heads); a draw whose
    word lands in the rejection region or a plan whose coins overran (together below
    ``2^-bits``) is finished exactly as today, so the law is exact."""
    bits = noise.constant.request_bits(src)
    b = bits + 2 + (math.ceil(math.log2(size)) if size > 1 else 0)
    out = np.empty(size, dtype=np.int64)
    rows = max(1, _BLOCK_LANES // w.n)
    overran = False
    for start in range(0, size, rows):
        m = min(rows, size - start)
        r = np.broadcast_to(np.arange(w.n), (m, w.n)).ravel()
        heads, over = noise.constant.exp_coins(w.g[r], lambda i: w.exact(i % w.n), src, b)
        heads = heads.reshape(m, w.n)
        counts = heads.sum(axis=1)
        pick, valid = noise.constant.uniform_each(counts, src)
        redo = np.flatnonzero(~valid)
        if redo.size:  # below 2^-(b+1) per plan
            over = True
            pick[redo] = [int(noise.uniform_int(int(counts[i]), 1, source=src.plain)[0])
                          for i in redo.tolist()]
        csum = np.cumsum(heads, axis=1)
        out[start : start + m] = np.argmax(csum > pick[:, None], axis=1)
        overran |= over
    if overran:
        src.note_overrun()
    return out
