"""Workloads: sets of linear counting queries over a finite domain, as matrices.

A histogram ``x ∈ Z^N`` (counts over a public domain of ``N`` cells) is asked ``m`` linear
queries at once: the answers are ``W x`` for a workload matrix ``W`` of shape ``(m, N)``. Under
add/remove-one neighbours one privacy unit with ``c`` rows moves ``x`` by at most ``c`` in L1
norm (``c = 1`` for record-level privacy), whatever the workload.

The factorization mechanism (:mod:`dpkit.release.mechanism`) needs three things from a
workload, each implemented without forming ``W`` where ``m`` is large:

* ``matvec(x)``: the answers ``W x`` (``x`` may be ``(N,)`` or ``(N, k)``);
* ``gram()``: the ``N × N`` Gram matrix ``G = WᵀW``, which fixes the expected error of every
  strategy (``E‖W x̂ − W x‖² = v · tr(G (AᵀA)⁻¹)``);
* ``query_variances(Sigma)``: ``diag(W Σ Wᵀ)``, the variance of every answer when the
  histogram estimate has covariance ``Σ`` (ranges use 2-D prefix sums of ``Σ``: O(N² + m)).

Structured workloads: :func:`identity`, :func:`prefix` (the CDF), :func:`all_ranges`,
:func:`ranges`, :func:`marginals` (over a product domain); any matrix: :func:`from_matrix`;
counting queries given as subsets: :func:`counting`.

>>> W = prefix(4)
>>> W.matvec(np.array([1, 2, 3, 4])).tolist()
[1.0, 3.0, 6.0, 10.0]
>>> W.gram().tolist()[0]
[4.0, 3.0, 2.0, 1.0]
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Workload",
    "all_ranges",
    "counting",
    "from_matrix",
    "identity",
    "marginals",
    "prefix",
    "ranges",
]

#: Largest number of matrix entries ``dense()`` will materialise (8 bytes each: 400 MB).
MAX_DENSE_ENTRIES = 50_000_000


def _check_domain(n: Any, name: str = "domain_size") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1 (got {n!r})")
    if int(n) < 1:
        raise ValueError(f"{name} must be >= 1 (got {n})")
    return int(n)


class Workload:
    """``m`` linear queries over a domain of ``N`` cells: the matrix ``W`` (``m × N``).

    Subclasses implement :meth:`matvec` and :meth:`gram` (and may speed up the rest); every
    workload has a stable :attr:`key` (a SHA-256 of its definition) used to cache strategies.
    """

    name: str = "workload"

    def __init__(self, domain_size: int, num_queries: int) -> None:
        self.domain_size = _check_domain(domain_size)
        self.num_queries = _check_domain(num_queries, "num_queries")

    # -- to implement -------------------------------------------------------------------
    def matvec(self, x: np.ndarray) -> np.ndarray:
        """``W x`` for ``x`` of shape ``(N,)`` or ``(N, k)``."""
        raise NotImplementedError

    def gram(self) -> np.ndarray:
        """``WᵀW`` as a dense ``N × N`` float64 array."""
        raise NotImplementedError

    def _definition(self) -> bytes:
        raise NotImplementedError

    # -- generic ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_queries, self.domain_size)

    @functools.cached_property
    def key(self) -> str:
        """SHA-256 of the workload's definition: equal workloads share cached strategies."""
        h = hashlib.sha256()
        h.update(type(self).__name__.encode())
        h.update(self._definition())
        return h.hexdigest()

    def dense(self) -> np.ndarray:
        """``W`` as a dense ``m × N`` float64 array (refused above 5e7 entries)."""
        m, n = self.shape
        if m * n > MAX_DENSE_ENTRIES:
            raise ValueError(
                f"{self.name}: {m} x {n} queries are too many to materialise; use matvec() or "
                "gram(), which this workload computes without the matrix"
            )
        return np.asarray(self.matvec(np.eye(n)), dtype=np.float64)

    def gram_matmul(self, V: np.ndarray) -> np.ndarray:
        """``V G`` for ``V`` of shape ``(p, N)`` (structured workloads do this in O(pN))."""
        return np.asarray(V, dtype=np.float64) @ self.gram()

    def query_variances(self, sigma: np.ndarray) -> np.ndarray:
        """``diag(W Σ Wᵀ)``: the variance of each answer when ``x̂`` has covariance ``Σ``."""
        W = self.dense()
        return np.einsum("ij,ij->i", W @ sigma, W)

    def query_coefficient_max(self, R: np.ndarray) -> np.ndarray | None:
        """``max_k |(W R)_jk|`` per query (``None`` when ``W R`` would be too large)."""
        m = self.num_queries
        if m * R.shape[1] > MAX_DENSE_ENTRIES // 4:
            return None
        WR = self.matvec(R)
        return np.max(np.abs(WR), axis=1)

    def nuclear_norm(self) -> float:
        """``‖W‖_*`` (sum of singular values) = ``tr((WᵀW)^{1/2})``."""
        mu = np.linalg.eigvalsh(self.gram())
        return float(np.sum(np.sqrt(np.clip(mu, 0.0, None))))

    def max_row_norm(self) -> float:
        """``‖W‖_{2→∞}``: the largest L2 norm of a query."""
        return float(np.sqrt(np.max(self._row_sq_norms())))

    def max_column_norm(self) -> float:
        """``‖W‖_{1→2}``: the largest L2 norm of a column (the workload's own L2 sensitivity)."""
        return float(np.sqrt(np.max(np.diag(self.gram()))))

    def _row_sq_norms(self) -> np.ndarray:
        W = self.dense()
        return np.einsum("ij,ij->i", W, W)

    def __repr__(self) -> str:
        return f"<{self.name}: {self.num_queries} queries over {self.domain_size} cells>"


# ------------------------------------------------------------------------------ explicit
class MatrixWorkload(Workload):
    """Any explicit query matrix."""

    name = "matrix"

    def __init__(self, matrix: np.ndarray, name: str | None = None) -> None:
        W = np.asarray(matrix, dtype=np.float64)
        if W.ndim != 2:
            raise ValueError(f"a workload matrix must be 2-d (got shape {W.shape})")
        if not np.all(np.isfinite(W)):
            raise ValueError("the workload matrix must be finite")
        super().__init__(W.shape[1], W.shape[0])
        self.matrix = W
        if name:
            self.name = name

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return self.matrix @ np.asarray(x, dtype=np.float64)

    def gram(self) -> np.ndarray:
        return self.matrix.T @ self.matrix

    def dense(self) -> np.ndarray:
        return self.matrix

    def _definition(self) -> bytes:
        return np.ascontiguousarray(self.matrix).tobytes() + str(self.matrix.shape).encode()


def from_matrix(matrix: Any, *, name: str | None = None) -> Workload:
    """A workload from an explicit ``m × N`` matrix (each row one linear query).

    >>> from_matrix([[1, 1, 0], [0, 1, 1]]).shape
    (2, 3)
    """
    return MatrixWorkload(np.asarray(matrix), name)


def counting(subsets: Iterable[Iterable[int]], domain_size: int) -> Workload:
    """Counting queries: query ``j`` counts the cells in ``subsets[j]``.

    >>> counting([[0, 2], [1]], 3).dense().tolist()
    [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    n = _check_domain(domain_size)
    rows = [sorted({int(i) for i in s}) for s in subsets]
    if not rows:
        raise ValueError("counting() needs at least one subset")
    W = np.zeros((len(rows), n))
    for j, r in enumerate(rows):
        if r and (r[0] < 0 or r[-1] >= n):
            raise ValueError(f"subset {j} has a cell outside [0, {n}): {r[0]}..{r[-1]}")
        W[j, r] = 1.0
    return MatrixWorkload(W, "counting")


# ------------------------------------------------------------------------------ identity
class IdentityWorkload(Workload):
    """Every cell's count: ``W = I``."""

    name = "identity"

    def __init__(self, domain_size: int) -> None:
        super().__init__(domain_size, domain_size)

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return np.array(x, dtype=np.float64)

    def gram(self) -> np.ndarray:
        return np.eye(self.domain_size)

    def gram_matmul(self, V: np.ndarray) -> np.ndarray:
        return np.array(V, dtype=np.float64)

    def query_variances(self, sigma: np.ndarray) -> np.ndarray:
        return np.diag(sigma).copy()

    def nuclear_norm(self) -> float:
        return float(self.domain_size)

    def _row_sq_norms(self) -> np.ndarray:
        return np.ones(self.domain_size)

    def _definition(self) -> bytes:
        return str(self.domain_size).encode()


def identity(domain_size: int) -> Workload:
    """The histogram itself: one query per cell."""
    return IdentityWorkload(domain_size)


# ------------------------------------------------------------------------------ ranges
def _block_sums(sigma: np.ndarray) -> np.ndarray:
    """``P[a, b] = Σ_{i<a, j<b} Σ_ij`` ((N+1) × (N+1)), for O(1) sums over square blocks."""
    n = sigma.shape[0]
    P = np.zeros((n + 1, n + 1))
    np.cumsum(np.cumsum(sigma, axis=0), axis=1, out=P[1:, 1:])
    return P


def _range_variances(sigma: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``1_[lo,hi]ᵀ Σ 1_[lo,hi]`` for inclusive ranges, via 2-D prefix sums."""
    P = _block_sums(sigma)
    a, b = lo, hi + 1
    return P[b, b] - P[a, b] - P[b, a] + P[a, a]


def _range_coef_max(R: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
    if lo.size * R.shape[1] > MAX_DENSE_ENTRIES // 4:
        return None
    C = np.zeros((R.shape[0] + 1, R.shape[1]))
    np.cumsum(R, axis=0, out=C[1:])
    return np.max(np.abs(C[hi + 1] - C[lo]), axis=1)


class RangeWorkload(Workload):
    """Interval counts ``x[lo] + … + x[hi]`` (inclusive) for a list of intervals."""

    name = "ranges"

    def __init__(self, domain_size: int, lo: np.ndarray, hi: np.ndarray, name: str = "ranges"):
        lo = np.asarray(lo, dtype=np.int64).ravel()
        hi = np.asarray(hi, dtype=np.int64).ravel()
        if lo.size == 0 or lo.shape != hi.shape:
            raise ValueError("ranges need as many lower as upper ends, at least one of each")
        super().__init__(domain_size, lo.size)
        n = self.domain_size
        if np.any(lo < 0) or np.any(hi >= n) or np.any(lo > hi):
            bad = int(np.flatnonzero((lo < 0) | (hi >= n) | (lo > hi))[0])
            raise ValueError(
                f"range {bad} = [{lo[bad]}, {hi[bad]}] is not inside [0, {n - 1}] with lo <= hi"
            )
        self.lo, self.hi, self.name = lo, hi, name

    def matvec(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        C = np.zeros((x.shape[0] + 1, *x.shape[1:]))
        np.cumsum(x, axis=0, out=C[1:])
        return C[self.hi + 1] - C[self.lo]

    def gram(self) -> np.ndarray:
        # Σ_j 1_[lo_j,hi_j] 1_[lo_j,hi_j]ᵀ through a 2-D difference array: O(m + N²).
        n = self.domain_size
        D = np.zeros((n + 1, n + 1))
        a, b = self.lo, self.hi + 1
        np.add.at(D, (a, a), 1.0)
        np.add.at(D, (a, b), -1.0)
        np.add.at(D, (b, a), -1.0)
        np.add.at(D, (b, b), 1.0)
        return np.cumsum(np.cumsum(D, axis=0), axis=1)[:n, :n]

    def query_variances(self, sigma: np.ndarray) -> np.ndarray:
        return _range_variances(sigma, self.lo, self.hi)

    def query_coefficient_max(self, R: np.ndarray) -> np.ndarray | None:
        return _range_coef_max(R, self.lo, self.hi)

    def _row_sq_norms(self) -> np.ndarray:
        return (self.hi - self.lo + 1).astype(np.float64)

    def _definition(self) -> bytes:
        return str(self.domain_size).encode() + self.lo.tobytes() + self.hi.tobytes()


class PrefixWorkload(RangeWorkload):
    """The CDF: ``x[0] + … + x[i]`` for every ``i`` (a lower-triangular matrix of ones)."""

    def __init__(self, domain_size: int) -> None:
        n = _check_domain(domain_size)
        super().__init__(n, np.zeros(n, dtype=np.int64), np.arange(n), name="prefix")

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return np.cumsum(np.asarray(x, dtype=np.float64), axis=0)

    def gram(self) -> np.ndarray:
        i = np.arange(self.domain_size)
        return (self.domain_size - np.maximum.outer(i, i)).astype(np.float64)

    def gram_matmul(self, V: np.ndarray) -> np.ndarray:
        # V G = ((V Wᵀ) W) with W x = cumsum(x) and Wᵀ u = reversed cumsum: O(pN).
        C = np.cumsum(np.asarray(V, dtype=np.float64), axis=-1)
        return np.cumsum(C[..., ::-1], axis=-1)[..., ::-1]

    def query_variances(self, sigma: np.ndarray) -> np.ndarray:
        return np.diag(np.cumsum(np.cumsum(sigma, axis=0), axis=1)).copy()

    def query_coefficient_max(self, R: np.ndarray) -> np.ndarray | None:
        if self.num_queries * R.shape[1] > MAX_DENSE_ENTRIES // 4:
            return None
        return np.max(np.abs(np.cumsum(R, axis=0)), axis=1)

    def nuclear_norm(self) -> float:
        # Singular values of the N × N lower-triangular ones matrix:
        # 1 / (2 sin((2k - 1) π / (2 (2N + 1)))), k = 1..N.
        n = self.domain_size
        k = np.arange(1, n + 1)
        return float(np.sum(0.5 / np.sin((2 * k - 1) * np.pi / (2 * (2 * n + 1)))))

    def _definition(self) -> bytes:
        return str(self.domain_size).encode()


def prefix(domain_size: int) -> Workload:
    """All prefix sums (the empirical CDF in counts): ``N`` queries."""
    return PrefixWorkload(domain_size)


class AllRangeWorkload(RangeWorkload):
    """Every interval ``[lo, hi]``, ``0 <= lo <= hi < N``: ``N(N+1)/2`` queries."""

    def __init__(self, domain_size: int) -> None:
        n = _check_domain(domain_size)
        lo, hi = np.triu_indices(n)
        super().__init__(n, lo, hi, name="all_ranges")

    def gram(self) -> np.ndarray:
        # cells i <= j are both covered by (i + 1)(N - j) intervals
        i = np.arange(self.domain_size)
        lo = np.minimum.outer(i, i)
        hi = np.maximum.outer(i, i)
        return ((lo + 1) * (self.domain_size - hi)).astype(np.float64)

    def gram_matmul(self, V: np.ndarray) -> np.ndarray:
        # G = Σ_{a<=b} 1_[a,b] 1_[a,b]ᵀ;  (V G)_j = Σ_i V_i (min(i,j)+1)(N-max(i,j)), O(pN).
        V = np.asarray(V, dtype=np.float64)
        n = self.domain_size
        i = np.arange(n, dtype=np.float64)
        # split i <= j and i > j
        left = np.cumsum(V * (i + 1), axis=-1) * (n - i)  # Σ_{i<=j} V_i (i+1) (N-j)
        right_terms = V * (n - i)
        right = (np.cumsum(right_terms[..., ::-1], axis=-1)[..., ::-1] - right_terms) * (i + 1)
        return left + right

    def _definition(self) -> bytes:
        return str(self.domain_size).encode()


def all_ranges(domain_size: int) -> Workload:
    """Every interval count over a 1-d domain of ``N`` ordered cells."""
    return AllRangeWorkload(domain_size)


def ranges(intervals: Sequence[tuple[int, int]], domain_size: int) -> Workload:
    """Interval counts for the given inclusive ``(lo, hi)`` pairs.

    >>> ranges([(0, 1), (2, 3)], 4).matvec(np.array([1, 2, 3, 4])).tolist()
    [3.0, 7.0]
    """
    arr = np.asarray(list(intervals), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError("intervals must be a list of (lo, hi) pairs")
    return RangeWorkload(domain_size, arr[:, 0], arr[:, 1])


# ------------------------------------------------------------------------------ marginals
class MarginalWorkload(Workload):
    """Marginal tables over a product domain ``n_1 × … × n_d`` (cells in C order).

    The marginal on attributes ``S`` is ``⊗_i (I if i ∈ S else 1ᵀ)``: one query per cell of the
    sub-domain ``×_{i∈S} n_i``; the empty set is the total count.
    """

    name = "marginals"

    def __init__(self, shape: Sequence[int], attributes: Sequence[tuple[int, ...]]) -> None:
        self.dims = tuple(_check_domain(n, "every attribute size") for n in shape)
        d = len(self.dims)
        if d == 0:
            raise ValueError("marginals need at least one attribute")
        sets: list[tuple[int, ...]] = []
        for s in attributes:
            t = tuple(sorted({int(a) for a in s}))
            if any(a < 0 or a >= d for a in t):
                raise ValueError(f"marginal {s!r} names an attribute outside 0..{d - 1}")
            if t not in sets:
                sets.append(t)
        if not sets:
            raise ValueError("marginals need at least one attribute set (e.g. [(0,), (0, 1)])")
        self.attribute_sets = tuple(sets)
        m = sum(math.prod(self.dims[a] for a in t) for t in sets)
        super().__init__(math.prod(self.dims), m)

    def matvec(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        extra = x.shape[1:]
        X = x.reshape(*self.dims, *extra)
        d = len(self.dims)
        out = []
        for t in self.attribute_sets:
            axes = tuple(a for a in range(d) if a not in t)
            out.append(X.sum(axis=axes).reshape(-1, *extra))
        return np.concatenate(out, axis=0)

    def gram(self) -> np.ndarray:
        n = self.domain_size
        G = np.zeros((n, n))
        for t in self.attribute_sets:
            K: np.ndarray = np.ones((1, 1))  # grows by Kronecker products
            for a, na in enumerate(self.dims):
                K = np.kron(K, np.eye(na) if a in t else np.ones((na, na)))
            G += K
        return G

    def gram_matmul(self, V: np.ndarray) -> np.ndarray:
        V = np.asarray(V, dtype=np.float64)
        p = V.shape[0]
        d = len(self.dims)
        X = V.reshape(p, *self.dims)
        out = np.zeros_like(X)
        for t in self.attribute_sets:
            axes = tuple(1 + a for a in range(d) if a not in t)
            out += X.sum(axis=axes, keepdims=True) if axes else X
        return out.reshape(p, -1)

    def _row_sq_norms(self) -> np.ndarray:
        parts = []
        for t in self.attribute_sets:
            rest = self.domain_size // math.prod(self.dims[a] for a in t)
            parts.append(np.full(math.prod(self.dims[a] for a in t), float(rest)))
        return np.concatenate(parts)

    def _definition(self) -> bytes:
        return repr((self.dims, self.attribute_sets)).encode()


def marginals(shape: Sequence[int], attributes: Sequence[Sequence[int]] | int) -> Workload:
    """Marginals over a product domain; ``attributes`` is a list of attribute sets, or an int
    ``k`` for every ``k``-way marginal.

    >>> marginals((2, 3), [(0,), (1,)]).shape
    (5, 6)
    >>> marginals((2, 2, 2), 2).num_queries
    12
    """
    dims = tuple(shape)
    if isinstance(attributes, int):
        k = attributes
        if not 0 <= k <= len(dims):
            raise ValueError(f"k must lie in [0, {len(dims)}] for {len(dims)} attributes")
        sets: list[tuple[int, ...]] = list(itertools.combinations(range(len(dims)), k))
    else:
        sets = [tuple(s) for s in attributes]
    return MarginalWorkload(dims, sets)
