"""Strategies: the queries actually measured with noise, and least-squares reconstruction.

The factorization (matrix) mechanism (Li, Miklau, Hay, McGregor, Rastogi 2015) measures a
*strategy* ``A`` (``r × N``) instead of the workload: ``y = A x + z``, estimates
``x̂ = A⁺ y = (AᵀA)⁻¹ Aᵀ y`` by least squares, and answers ``W x̂``. With i.i.d. noise of variance
``v`` per row the estimate is unbiased (when the rows of ``W`` lie in the row space of ``A``) and

    E ‖W x̂ − W x‖² = v · tr(WᵀW (AᵀA)⁻¹) = v · ‖W A⁺‖_F².

Noise scale is set by the strategy's sensitivity: ``Δ₁(A) = max_i ‖A e_i‖₁`` (Laplace) or
``Δ₂(A) = max_i ‖A e_i‖₂`` (Gaussian), the largest column norm.

**Exact integers.** Every strategy here is stored as an *integer* matrix ``M`` (a real strategy
``A`` is scaled to ``max |M| = 2**16`` and rounded; scaling changes neither the error nor the
privacy, and the rounding error only moves the strategy, not the guarantee). On an integer
histogram ``x``, ``M x`` is computed exactly, its sensitivities ``Δ₁(M)``, ``Δ₂(M)²`` are exact
integers, and the noise is exact discrete Laplace / discrete Gaussian on ``Z^r``: there is no
floating-point step between the data and the noise (Mironov 2012), and no grid rounding to pay
for in the sensitivity.

Strategies: :class:`TreeStrategy` (b-ary hierarchical intervals, Hay-Rastogi-Miklau-Suciu 2010,
with an O(N) generalised-least-squares reconstruction that also handles per-level weights and
partial top levels: Honaker 2015), :func:`identity_strategy`, :func:`sqrt_toeplitz` (the square
root of the prefix matrix: Henzinger-Upadhyay-Upadhyay 2023; Fichtenberger-Henzinger-Upadhyay
2023) and :class:`MatrixStrategy` for any matrix (what the optimiser in
:mod:`dpkit.release.optimize` returns).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import numpy as np
from scipy import linalg

__all__ = [
    "MatrixStrategy",
    "Strategy",
    "TreeStrategy",
    "identity_strategy",
    "sqrt_toeplitz",
    "tree",
]

#: Real strategies are scaled so that their largest entry is 2**RESOLUTION_BITS, then rounded.
RESOLUTION_BITS = 16
#: Exact covariance ``(MᵀM)⁻¹`` is formed for domains up to this size.
MAX_COVARIANCE_DOMAIN = 8192


class Strategy:
    """An integer strategy matrix ``M`` (``rows × N``), its sensitivities and reconstruction."""

    name: str = "strategy"

    def __init__(self, domain_size: int, rows: int) -> None:
        self.domain_size = int(domain_size)
        self.rows = int(rows)

    # -- to implement -----------------------------------------------------------------------
    @property
    def l1_sensitivity(self) -> int:
        """``max_i Σ_j |M_ji|`` (exact integer): L1 change of ``M x`` when one cell moves by 1."""
        raise NotImplementedError

    @property
    def l2_sensitivity_sq(self) -> int:
        """``max_i Σ_j M_ji²`` (exact integer): squared L2 change of ``M x``."""
        raise NotImplementedError

    def measure(self, x: np.ndarray) -> np.ndarray:
        """``M x`` in exact int64 arithmetic for an integer histogram ``x``."""
        raise NotImplementedError

    def reconstruct(self, y: np.ndarray) -> np.ndarray:
        """Least-squares ``x̂ = argmin ‖M x − y‖₂`` for ``y`` of shape ``(rows,)`` or
        ``(rows, k)`` (post-processing: uses only the noisy measurements)."""
        raise NotImplementedError

    def _definition(self) -> bytes:
        raise NotImplementedError

    # -- generic ----------------------------------------------------------------------------
    @functools.cached_property
    def key(self) -> str:
        h = hashlib.sha256(type(self).__name__.encode())
        h.update(self._definition())
        return h.hexdigest()

    @property
    def multiplier(self) -> float:
        """``M = multiplier × A`` for the (unscaled) strategy ``A`` this approximates."""
        return 1.0

    def reconstruction_matrix(self) -> np.ndarray:
        """``R = (MᵀM)⁻¹Mᵀ`` (``N × rows``): ``x̂ = R y``."""
        self._check_small()
        return self.reconstruct(np.eye(self.rows))

    def covariance(self) -> np.ndarray:
        """``(MᵀM)⁻¹``: the covariance of ``x̂`` per unit of noise variance on each row."""
        R = self.reconstruction_matrix()
        return R @ R.T

    def _check_small(self) -> None:
        if self.domain_size > MAX_COVARIANCE_DOMAIN:
            raise ValueError(
                f"{self.name}: the exact error needs the N x N covariance; N = "
                f"{self.domain_size} exceeds {MAX_COVARIANCE_DOMAIN}"
            )

    def _check_x(self, x: Any) -> np.ndarray:
        arr = np.asarray(x)
        if arr.shape != (self.domain_size,):
            raise ValueError(
                f"x must be the histogram over the strategy's {self.domain_size} cells "
                f"(got shape {arr.shape})"
            )
        return arr

    def __repr__(self) -> str:
        return f"<{self.name} strategy: {self.rows} x {self.domain_size}>"


# ------------------------------------------------------------------------------- trees
def _levels(n: int, branching: int) -> list[int]:
    """Block sizes ``b**l`` for ``l = 0, 1, …`` while ``b**l <= n``."""
    sizes = [1]
    while sizes[-1] * branching <= n:
        sizes.append(sizes[-1] * branching)
    return sizes


class TreeStrategy(Strategy):
    """The b-ary hierarchical strategy over a 1-d ordered domain (Hay et al. 2010).

    Level ``l`` counts the blocks ``[j b^l, (j+1) b^l)`` for every level with ``b^l <= N`` (the
    last block of a level may be partial; there is a single root only when ``N`` is a power of
    ``b``). Each cell is in one block per level, so with integer level weights ``c_l``
    (default 1): ``Δ₁ = Σ c_l`` and ``Δ₂² = Σ c_l²``.

    Reconstruction is the exact least-squares (generalised least squares) estimate in O(N):
    a bottom-up pass combines each node's own measurement with the sum of its children's
    estimates by inverse-variance weighting, a top-down pass spreads each parent's remaining
    discrepancy over its children in proportion to their variances (Hay et al. 2010 for
    complete trees with equal weights; Honaker 2015 for the general case). The result equals
    ``(MᵀM)⁻¹Mᵀ y`` (tested against a dense solve).
    """

    def __init__(
        self,
        domain_size: int,
        branching: int = 16,
        weights: Any = None,
        *,
        name: str | None = None,
    ) -> None:
        n = int(domain_size)
        if n < 1:
            raise ValueError(f"domain_size must be >= 1 (got {domain_size})")
        if isinstance(branching, bool) or int(branching) != branching or branching < 2:
            raise ValueError(f"branching must be an integer >= 2 (got {branching!r})")
        b = int(branching)
        sizes = _levels(n, b)
        if weights is None:
            c = np.ones(len(sizes), dtype=np.int64)
        else:
            w = np.asarray(weights)
            if w.shape != (len(sizes),):
                raise ValueError(
                    f"weights must give one integer per level ({len(sizes)} levels for "
                    f"N = {n}, b = {b}; got shape {w.shape})"
                )
            if w.dtype.kind not in "iu" and not np.all(w == np.rint(w)):
                raise ValueError("tree level weights must be integers (scale them up first)")
            c = w.astype(np.int64)
            if np.any(c < 0) or c[0] == 0:
                raise ValueError("tree level weights must be >= 0, and the leaf weight > 0")
        self.branching = b
        self.sizes = sizes
        self.weights = c
        self.counts = [-(-n // s) for s in sizes]
        super().__init__(n, sum(self.counts))
        if name is not None:
            self.name = name
        else:
            self.name = f"tree(b={b})" if len(sizes) > 1 else "identity"

    @property
    def l1_sensitivity(self) -> int:
        return int(self.weights.sum())

    @property
    def l2_sensitivity_sq(self) -> int:
        return int((self.weights * self.weights).sum())

    def _split(self, y: np.ndarray) -> list[np.ndarray]:
        out, start = [], 0
        for n_l in self.counts:
            out.append(y[start : start + n_l])
            start += n_l
        return out

    def _starts(self, level: int) -> np.ndarray:
        return np.arange(0, self.counts[level], self.branching)

    def measure(self, x: np.ndarray) -> np.ndarray:
        cur = self._check_x(x).astype(np.int64)
        parts = [cur * self.weights[0]]
        for level in range(1, len(self.sizes)):
            cur = np.add.reduceat(cur, self._starts(level - 1))
            parts.append(cur * self.weights[level])
        return np.concatenate(parts)

    def reconstruct(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if y.shape[0] != self.rows:
            raise ValueError(f"expected {self.rows} measurements (got {y.shape[0]})")
        obs = self._split(y)
        c = self.weights.astype(np.float64)
        extra = (1,) * (y.ndim - 1)
        # bottom-up: z = best estimate from the subtree, v = its variance (unit row noise)
        z = [obs[0] / c[0]]
        v = [np.full(self.counts[0], 1.0 / c[0] ** 2)]
        child_sum: list[np.ndarray | None] = [None]
        child_var: list[np.ndarray | None] = [None]
        for level in range(1, len(self.sizes)):
            starts = self._starts(level - 1)
            S = np.add.reduceat(z[-1], starts, axis=0)
            VS = np.add.reduceat(v[-1], starts)
            child_sum.append(S)
            child_var.append(VS)
            if c[level] == 0:
                z.append(S)
                v.append(VS)
                continue
            vo = 1.0 / c[level] ** 2
            own = obs[level] / c[level]
            z.append((own * VS.reshape(-1, *extra) + S * vo) / (vo + VS).reshape(-1, *extra))
            v.append(vo * VS / (vo + VS))
        # top-down: spread the parent's discrepancy in proportion to the children's variances
        final = z[-1]
        for level in range(len(self.sizes) - 2, -1, -1):
            kid_sum, kid_var = child_sum[level + 1], child_var[level + 1]
            assert kid_sum is not None and kid_var is not None
            parent = np.arange(self.counts[level]) // self.branching
            share = (v[level] / kid_var[parent]).reshape(-1, *extra)
            final = z[level] + (final - kid_sum)[parent] * share
        return final

    def dense(self) -> np.ndarray:
        """The integer matrix ``M`` (for tests and small domains)."""
        return self.measure_matrix()

    def measure_matrix(self) -> np.ndarray:
        n = self.domain_size
        rows = []
        for level, s in enumerate(self.sizes):
            blocks = np.arange(n) // s
            B = np.zeros((self.counts[level], n), dtype=np.int64)
            B[blocks, np.arange(n)] = self.weights[level]
            rows.append(B)
        return np.vstack(rows)

    def _definition(self) -> bytes:
        return repr((self.domain_size, self.branching, self.weights.tolist())).encode()


def tree(domain_size: int, branching: int = 16, weights: Any = None) -> TreeStrategy:
    """The b-ary hierarchical strategy (see :class:`TreeStrategy`)."""
    return TreeStrategy(domain_size, branching, weights)


def identity_strategy(domain_size: int) -> TreeStrategy:
    """Measure every cell once (a one-level tree): ``Δ₁ = Δ₂ = 1``."""
    return TreeStrategy(domain_size, max(2, int(domain_size) + 1), name="identity")


# ------------------------------------------------------------------------------- matrices
def quantize(A: np.ndarray, bits: int = RESOLUTION_BITS) -> tuple[np.ndarray, float]:
    """``(M, multiplier)``: ``M = rint(A · multiplier)`` as int64 with ``max |M| = 2**bits``;
    integer matrices with entries below ``2**bits`` are kept as they are (multiplier 1)."""
    A = np.asarray(A, dtype=np.float64)
    if not np.all(np.isfinite(A)):
        raise ValueError("strategy matrix must be finite")
    top = float(np.max(np.abs(A))) if A.size else 0.0
    if top == 0.0:
        raise ValueError("strategy matrix is all zeros: it measures nothing")
    if np.all(np.rint(A) == A) and top <= 2.0**bits:
        return A.astype(np.int64), 1.0
    mult = 2.0**bits / top
    return np.rint(A * mult).astype(np.int64), mult


class MatrixStrategy(Strategy):
    """Any strategy matrix, stored as integers (see the module docstring).

    Reconstruction solves the normal equations with a Cholesky factor of ``MᵀM``; the strategy
    must determine ``x`` (full column rank), which is checked here.
    """

    def __init__(self, matrix: Any, *, name: str = "matrix", bits: int = RESOLUTION_BITS) -> None:
        A = np.asarray(matrix, dtype=np.float64)
        if A.ndim != 2:
            raise ValueError(f"a strategy matrix must be 2-d (got shape {A.shape})")
        M, mult = quantize(A, bits)
        M = M[np.any(M != 0, axis=1)]  # rows of zeros measure nothing
        super().__init__(A.shape[1], M.shape[0])
        self.name = name
        self.M = M
        self._mult = mult
        self._l1 = int(np.max(np.sum(np.abs(M), axis=0)))
        self._l2 = int(np.max(np.sum(M * M, axis=0)))
        Mf = M.astype(np.float64)
        self._Mf = Mf
        gram = Mf.T @ Mf
        try:
            self._chol = linalg.cho_factor(gram, lower=True, check_finite=False)
        except linalg.LinAlgError:
            raise ValueError(
                f"strategy {name!r} does not determine the histogram (its columns are linearly "
                "dependent): add the identity rows, e.g. np.vstack([A, np.eye(N)])"
            ) from None
        d = np.diag(self._chol[0])
        if np.min(d) <= np.max(d) * 1e-7:
            raise ValueError(
                f"strategy {name!r} is numerically rank deficient (condition ~ "
                f"{(np.max(d) / np.min(d)) ** 2:.1e}): add the identity rows"
            )

    @property
    def multiplier(self) -> float:
        return self._mult

    @property
    def l1_sensitivity(self) -> int:
        return self._l1

    @property
    def l2_sensitivity_sq(self) -> int:
        return self._l2

    def measure(self, x: np.ndarray) -> np.ndarray:
        xi = self._check_x(x).astype(np.int64)
        bound = int(np.max(np.abs(self.M))) * int(np.sum(np.abs(xi)))
        if bound < 2**53:  # every partial sum is an integer below 2**53: float is exact
            return np.rint(self._Mf @ xi.astype(np.float64)).astype(np.int64)
        if bound < 2**62:
            return self.M @ xi
        raise ValueError(
            f"counts too large for exact int64 arithmetic (sum {int(np.sum(np.abs(xi)))})"
        )

    def reconstruct(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if y.shape[0] != self.rows:
            raise ValueError(f"expected {self.rows} measurements (got {y.shape[0]})")
        return linalg.cho_solve(self._chol, self._Mf.T @ y, check_finite=False)

    @functools.cached_property
    def _cov(self) -> np.ndarray:
        self._check_small()
        return linalg.cho_solve(self._chol, np.eye(self.domain_size), check_finite=False)

    def covariance(self) -> np.ndarray:
        return self._cov

    def reconstruction_matrix(self) -> np.ndarray:
        return self._cov @ self._Mf.T

    def _definition(self) -> bytes:
        return self.M.tobytes() + str(self.M.shape).encode()


def sqrt_toeplitz_coefficients(n: int) -> np.ndarray:
    """``c_k = binom(2k, k) / 4**k``: the power series of ``(1 − z)^{-1/2}``, so the
    lower-triangular Toeplitz matrix with first column ``c`` squares to the prefix matrix."""
    c = np.ones(n)
    k = np.arange(1, n)
    c[1:] = np.cumprod((2 * k - 1) / (2 * k))
    return c


def sqrt_toeplitz(domain_size: int) -> MatrixStrategy:
    """The square-root factorization of the prefix workload, ``W = A · A`` with ``A``
    lower-triangular Toeplitz (Henzinger-Upadhyay-Upadhyay 2023; Fichtenberger-Henzinger-
    Upadhyay 2023): near-optimal for prefix sums under Gaussian noise (``Δ₂² = Σ c_k²
    ≈ (ln N)/π``), poor under Laplace noise (``Δ₁ = Σ c_k ≈ 2 √(N/π)``)."""
    n = int(domain_size)
    if n < 1:
        raise ValueError(f"domain_size must be >= 1 (got {domain_size})")
    c = sqrt_toeplitz_coefficients(n)
    A = linalg.toeplitz(c, np.zeros(n))
    return MatrixStrategy(A, name="sqrt_toeplitz")


def column_norms(A: np.ndarray, order: int) -> np.ndarray:
    """Per-column L1 (order 1) or L2 (order 2) norms."""
    return np.sum(np.abs(A), axis=0) if order == 1 else np.sqrt(np.sum(A * A, axis=0))
