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

The float values ``g_r`` handed to the vectorised coin satisfy the noise layer's contract
``|g_r - gamma_r| <= 2**-44.4`` when ``g_r < 64`` and ``gamma_r >= 63.9`` otherwise: ``g_r`` is
``float(c) * (q* - q_r)`` in float64, three correctly rounded operations, so its relative error
is below ``3.0001 * 2**-53`` (absolute below ``2**-45.4`` when ``g_r < 64``); a lane whose
difference overflows to ``inf`` is flagged and decided with the exact Fraction, as are the
lanes the float bound cannot decide.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpkit import noise
from dpkit.noise import Source

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
_ROW_LANES = 1 << 20  # proposals (or scores) held at once by the batched sampler


class Weights:
    """``gamma_r = c (q* - q_r)`` for float scores, with float approximations and exact values."""

    def __init__(self, scores: np.ndarray, factor: Fraction) -> None:
        self.scores = scores
        self.factor = factor
        self.best = float(scores.max())
        cf = float(factor)
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

    def acceptance(self) -> float:
        """Mean of exp(-g): the rejection sampler's acceptance rate (for block sizing only)."""
        return float(np.mean(np.exp(-self.g)))


def coins(w: Weights, r: np.ndarray, src: Source) -> np.ndarray:
    """Independent exact Bernoulli(exp(-gamma_{r_i})) for each lane ``i``."""
    return noise.bernoulli_exp_lanes(w.g[r], lambda i: w.exact(int(r[i])), source=src)


def exponential_sample(w: Weights, size: int, src: Source) -> np.ndarray:
    """``size`` independent draws with ``P(r) ∝ exp(-gamma_r)``, by exact rejection sampling."""
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


def permute_and_flip_sample(w: Weights, size: int, src: Source) -> np.ndarray:
    """``size`` independent permute-and-flip draws (uniform head among exact coins)."""
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
        cf = float(factor)
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

    def exact(self, i: int, j: int) -> Fraction:
        got = self._cache.get((i, j))
        if got is None:
            got = self.factor * (Fraction(float(self.best[i])) - Fraction(float(self.scores[i, j])))
            self._cache[(i, j)] = got
        return got

    def acceptance(self) -> np.ndarray:
        """Per row, the mean of exp(-g): the rejection rate (for block sizing only)."""
        with np.errstate(under="ignore"):
            return np.asarray(np.mean(np.exp(-self.g), axis=1))


def _row_coins(w: RowWeights, rows: np.ndarray, cols: np.ndarray, src: Source) -> np.ndarray:
    """Exact Bernoulli(exp(-gamma_{rows[l], cols[l]})) for each lane ``l`` (1-d arrays)."""
    return noise.bernoulli_exp_lanes(
        w.g[rows, cols], lambda lane: w.exact(int(rows[lane]), int(cols[lane])), source=src
    )


def exponential_rows_sample(w: RowWeights, src: Source) -> np.ndarray:
    """One draw per row ``i`` with ``P(j) ∝ exp(-gamma_ij)``, rows independent, by exact
    rejection sampling: each row's uniform proposals and exact coins are its own, and its
    output is its first accepted proposal (exactly as :func:`exponential_sample` with size 1).

    Proposals are drawn in blocks per row, sized from the row's acceptance rate (rounded up to
    a power of two so that rows with similar rates share one matrix of proposals); block sizes
    depend only on the scores, never on earlier draws, and the first accepted proposal of an
    i.i.d. sequence has the same law however the sequence is cut into blocks.
    """
    m, n = w.g.shape
    out = np.full(m, -1, dtype=np.int64)
    rate = np.maximum(w.acceptance(), 1.0 / n)
    want = np.minimum(np.ceil(4.0 / rate), float(_ROW_LANES))
    size = np.exp2(np.ceil(np.log2(np.maximum(want, 1.0)))).astype(np.int64)
    pending = np.arange(m)
    while pending.size:
        still: list[np.ndarray] = []
        for s in np.unique(size[pending]).tolist():
            group = pending[size[pending] == s]
            per = max(1, _ROW_LANES // s)
            for start in range(0, group.size, per):
                rows = group[start : start + per]
                r = noise.uniform_int(n, (rows.size, s), source=src)
                acc = _row_coins(w, np.repeat(rows, s), r.ravel(), src).reshape(r.shape)
                hit = acc.any(axis=1)
                first = np.argmax(acc, axis=1)
                out[rows[hit]] = r[hit, first[hit]]
                still.append(rows[~hit])
        pending = np.concatenate(still) if still else pending[:0]
    return out
