"""Local range and CDF queries over an ordered domain ``[0, N)``.

Two strategies, both splitting users uniformly at random across levels (each user reports
once, so each report is ε-LDP; replace-one on the user's value):

* :class:`HierarchicalRanges` (Cormode, Kulkarni, Srivastava 2019 "HH"; Hay et al. 2010 for the
  consistency step). A B-ary tree over the (padded) domain; a user assigned to level ℓ reports
  the index of the level-ℓ node holding their value through a frequency oracle on B^ℓ nodes
  (GRR where ``(d - 2 + e^ε) <= 4 e^ε``, else OLH: whichever has the smaller variance). Node
  estimates are scaled by n/n_ℓ; then **constrained inference** makes them consistent: the
  generalised least-squares fit of leaf counts to all node estimates (weights = inverse
  per-level variances) subject to Σ leaves = n, computed exactly in two passes — bottom-up,
  each subtree total is the inverse-variance blend of its own estimate and its children's sum;
  top-down, the parent's final total is shared out by the children's variances.
* :class:`HaarRanges` ("HaarHRR", same paper). Level ℓ of the Haar tree has 2^ℓ coefficients
  w_u = count(left half of u) - count(right half); a user at level ℓ holds the signed one-hot
  vector (±1 at their ancestor) and reports it by 1-bit Hadamard response. Leaves are rebuilt
  top-down from the root total n: children = (c_u ± ŵ_u)/2. Orthogonal, so consistent as is.

Accuracy (ε = 1, N = 1024, n = 100,000, all N(N+1)/2 ranges): flat OUE 0.112 n RMSE; HH with
B = 4 and consistency 0.0256 n (exact expectation, :meth:`HierarchicalRanges.expected_range_rmse`);
HaarHRR 0.0268 n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import Event, PureDP
from dpkit.noise import Source

from ._exact import check_epsilon
from ._hashing import fwht
from .base import FrequencyOracle, Reports, Tally, check_domain, check_values, is_insecure
from .grr import GeneralizedRR
from .hadamard import HadamardResponse
from .hashing import OptimizedLocalHashing

__all__ = ["HaarRanges", "HierarchicalRanges", "RangeEstimate"]


@dataclass(frozen=True)
class RangeEstimate:
    """Consistent estimated counts per domain value (``leaves``), ready for range/CDF queries."""

    leaves: np.ndarray
    n: int
    event: Event
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def range_count(self, low: int, high: int) -> float:
        """Estimated number of users with ``low <= value <= high`` (inclusive)."""
        N = self.leaves.size
        if not 0 <= low <= high < N:
            raise ValueError(f"need 0 <= low <= high < {N} (got low={low}, high={high})")
        return float(self._prefix[high + 1] - self._prefix[low])

    def range_counts(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`range_count` for arrays of inclusive bounds."""
        return self._prefix[np.asarray(high) + 1] - self._prefix[np.asarray(low)]

    @property
    def _prefix(self) -> np.ndarray:
        return np.concatenate([[0.0], np.cumsum(self.leaves)])

    def cdf(self) -> np.ndarray:
        """Estimated fraction of users with value <= v, for each v (monotone after clipping)."""
        c = np.cumsum(self.leaves) / max(self.n, 1)
        return np.clip(np.maximum.accumulate(c), 0.0, 1.0)

    def quantile(self, q: float) -> int:
        """Smallest v whose estimated CDF reaches ``q``."""
        if not 0 <= q <= 1:
            raise ValueError(f"q must be in [0, 1] (got {q})")
        return min(int(np.searchsorted(self.cdf(), q)), self.leaves.size - 1)


def _best_oracle(d: int, epsilon: Fraction, choice: str) -> FrequencyOracle:
    if choice == "grr":
        return GeneralizedRR(d, epsilon=epsilon)
    if choice == "olh":
        return OptimizedLocalHashing(max(d, 2), epsilon=epsilon)
    if choice != "auto":
        raise ValueError(f"oracle must be 'auto', 'grr' or 'olh' (got {choice!r})")
    grr = GeneralizedRR(max(d, 2), epsilon=epsilon)
    olh = OptimizedLocalHashing(max(d, 2), epsilon=epsilon)
    return grr if grr.per_user_variance <= olh.per_user_variance else olh


class HierarchicalRanges:
    """B-ary hierarchical histogram in the local model, with constrained inference.

    >>> import dpkit.noise as noise
    >>> hh = HierarchicalRanges(16, epsilon=1.0, branching=4)
    >>> est = hh.estimate(hh.randomize(list(range(16)) * 50, source=noise.seeded(1)))
    >>> est.n
    800
    """

    kind = "hier"

    def __init__(
        self,
        domain_size: int,
        *,
        epsilon: float | Fraction,
        branching: int = 4,
        oracle: str = "auto",
    ) -> None:
        self.domain_size = check_domain(domain_size)
        eps = check_epsilon(epsilon)
        if isinstance(branching, bool) or not isinstance(branching, int) or branching < 2:
            raise ValueError(f"branching must be an int >= 2 (got {branching!r})")
        self.B = branching
        self.height = max(1, math.ceil(math.log(self.domain_size, self.B) - 1e-12))
        while self.B**self.height < self.domain_size:
            self.height += 1
        self.padded = self.B**self.height
        self.oracles = [_best_oracle(self.B**lvl, eps, oracle) for lvl in range(1, self.height + 1)]
        self.epsilon = max(o.epsilon for o in self.oracles)
        self.requested_epsilon = float(eps)
        self.seed_width = max(
            (o.bits + 1 for o in self.oracles if isinstance(o, OptimizedLocalHashing)), default=0
        )

    @property
    def event(self) -> Event:
        return PureDP(self.epsilon)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon, "branching": self.B}

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        """Reports: ``level`` (1..h), ``y`` and, for OLH levels, ``seeds`` (zero-padded)."""
        x = check_values(values, self.domain_size)
        n = x.size
        level = noise.uniform_int(self.height, n, source=source) + 1
        y = np.zeros(n, dtype=np.int64)
        seeds = np.zeros((n, self.seed_width), dtype=np.uint16)
        for lvl, oracle in enumerate(self.oracles, start=1):
            idx = np.flatnonzero(level == lvl)
            if idx.size == 0:
                continue
            node = x[idx] // self.B ** (self.height - lvl)
            rep = oracle.randomize(node, source=source)
            y[idx] = rep["y"]
            if "seeds" in rep.arrays:
                s = rep["seeds"]
                seeds[idx, : s.shape[1] - 1] = s[:, :-1]
                seeds[idx, -1] = s[:, -1]
        arrays: dict[str, np.ndarray] = {"level": level.astype(np.uint8), "y": y}
        if self.seed_width:
            arrays["seeds"] = seeds
        return Reports(self.kind, arrays, is_insecure(source))

    def _sub_reports(self, reports: Reports, lvl: int, idx: np.ndarray) -> Reports:
        oracle = self.oracles[lvl - 1]
        arrays: dict[str, np.ndarray] = {"y": np.asarray(reports["y"])[idx]}
        if isinstance(oracle, OptimizedLocalHashing):
            s = np.asarray(reports["seeds"])[idx]
            arrays["seeds"] = np.concatenate([s[:, : oracle.bits], s[:, -1:]], axis=1)
        return Reports(oracle.kind, arrays)

    def aggregate(self, reports: Reports) -> Tally:
        if not isinstance(reports, Reports) or reports.kind != self.kind:
            raise TypeError("HierarchicalRanges.aggregate needs reports of kind 'hier'")
        level = np.asarray(reports["level"]).astype(np.int64)
        if level.size and (level.min() < 1 or level.max() > self.height):
            raise ValueError(f"report levels must lie in [1, {self.height}]")
        parts = [np.array([np.count_nonzero(level == lvl) for lvl in range(1, self.height + 1)])]
        for lvl, oracle in enumerate(self.oracles, start=1):
            idx = np.flatnonzero(level == lvl)
            parts.append(oracle.aggregate(self._sub_reports(reports, lvl, idx)).stats)
        return Tally(self.kind, np.concatenate(parts).astype(np.int64), int(level.size),
                     reports.insecure)

    def level_variances(self, n: int, n_levels: np.ndarray) -> np.ndarray:
        """Per-node variance of the scaled level estimates: n² V_ℓ / n_ℓ (V at frequency 0)."""
        V = np.array([o.per_user_variance for o in self.oracles])
        with np.errstate(divide="ignore"):
            return np.where(n_levels > 0, float(n) ** 2 * V / np.maximum(n_levels, 1), np.inf)

    def estimate(self, data: Reports | Tally) -> RangeEstimate:
        t = self.aggregate(data) if isinstance(data, Reports) else data
        if not isinstance(t, Tally) or t.kind != self.kind:
            raise TypeError("HierarchicalRanges.estimate needs its own Reports or Tally")
        h, n = self.height, t.n
        n_levels = t.stats[:h]
        pos = h
        obs = []
        for lvl, oracle in enumerate(self.oracles, start=1):
            size = oracle.domain_size
            sub = Tally(oracle.kind, t.stats[pos : pos + size], int(n_levels[lvl - 1]))
            pos += size
            if n_levels[lvl - 1] == 0:
                obs.append(np.zeros(self.B**lvl))
                continue
            counts = oracle.estimate(sub).counts[: self.B**lvl]
            obs.append(counts * (n / n_levels[lvl - 1]))
        var = self.level_variances(n, n_levels)
        leaves = consistent_tree(obs, var, self.B, total=float(n))
        return RangeEstimate(leaves[: self.domain_size], n, self.event,
                             {"strategy": "hierarchical", "branching": self.B})

    def expected_range_rmse(self, n: int) -> float:
        """Exact expected RMSE over all ranges (fraction of n), users split evenly by level.

        Dense GLS covariance (N x N); meant for N <= 4096. Uses the frequency-0 oracle variance.
        """
        N = self.padded
        n_levels = np.full(self.height, n / self.height)
        var = self.level_variances(n, n_levels) / float(n) ** 2
        rows, w = [], []
        for lvl in range(1, self.height + 1):
            nodes = self.B**lvl
            rows.append(np.kron(np.eye(nodes), np.ones((1, N // nodes))))
            w.append(np.full(nodes, 1.0 / var[lvl - 1]))
        X, W = np.vstack(rows), np.concatenate(w)
        Mi = np.linalg.inv(X.T @ (W[:, None] * X))
        u = Mi.sum(axis=1)
        C = (Mi - np.outer(u, u) / u.sum())[: self.domain_size, : self.domain_size]
        return math.sqrt(_mean_range_variance(C))


def _mean_range_variance(C: np.ndarray) -> float:
    """Average of Var(Σ_{lo<=v<=hi} x_v) over all N(N+1)/2 ranges, for Cov(x) = C."""
    N = C.shape[0]
    P = np.zeros((N + 1, N + 1))
    P[1:, 1:] = np.cumsum(np.cumsum(C, axis=0), axis=1)
    dg = np.diag(P)
    K = N + 1
    pairs = K * (K - 1) / 2
    # Σ_{a<b} (P_bb + P_aa - 2 P_ab) = (K-1) Σ_a P_aa - (Σ_ab P_ab - Σ_a P_aa)
    total = (K - 1) * dg.sum() - (P.sum() - dg.sum())
    return float(total / pairs)


def consistent_tree(obs: list[np.ndarray], var: np.ndarray, B: int, *, total: float) -> np.ndarray:
    """GLS-consistent leaf counts of a complete B-ary tree (Hay et al. 2010, weighted form).

    ``obs[ℓ-1]`` holds the B^ℓ node estimates of level ℓ (all with variance ``var[ℓ-1]``,
    ``inf`` = no information); the root total is known. Returns leaves whose every subtree sum
    is the generalised-least-squares estimate given all observations and Σ leaves = ``total``.
    """
    h = len(obs)
    z: list[np.ndarray] = [np.zeros(0)] * (h + 1)
    v = np.zeros(h + 1)
    z[h] = np.asarray(obs[h - 1], dtype=np.float64)
    v[h] = var[h - 1]
    for lvl in range(h - 1, 0, -1):
        child_sum = z[lvl + 1].reshape(-1, B).sum(axis=1)
        child_var = B * v[lvl + 1]
        own, own_var = np.asarray(obs[lvl - 1], dtype=np.float64), var[lvl - 1]
        if not np.isfinite(own_var):
            z[lvl], v[lvl] = child_sum, child_var
        elif not np.isfinite(child_var):
            z[lvl], v[lvl] = own, own_var
        else:
            wo, wc = 1.0 / own_var, 1.0 / child_var
            z[lvl] = (own * wo + child_sum * wc) / (wo + wc)
            v[lvl] = 1.0 / (wo + wc)
    final = np.array([total])
    for lvl in range(1, h + 1):
        zc = z[lvl].reshape(-1, B)
        final = (zc + ((final - zc.sum(axis=1)) / B)[:, None]).ravel()
    return final


class HaarRanges:
    """HaarHRR: Haar-wavelet coefficients estimated by 1-bit Hadamard response per level."""

    kind = "haar"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction) -> None:
        self.domain_size = check_domain(domain_size)
        eps = check_epsilon(epsilon)
        self.height = max(1, (self.domain_size - 1).bit_length())
        self.padded = 1 << self.height
        self.hr = HadamardResponse(2, epsilon=eps)  # ρ, p and c are the same for every level
        self.epsilon = self.hr.epsilon
        self.requested_epsilon = float(eps)

    @property
    def event(self) -> Event:
        return PureDP(self.epsilon)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon}

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        """Reports: ``level`` (0..h-1), Hadamard ``rows`` (< 2^level) and ``bits``."""
        x = check_values(values, self.domain_size)
        n, h = x.size, self.height
        level = noise.uniform_int(h, n, source=source)
        shift = h - level
        node = x >> shift
        negative = ((x >> (shift - 1)) & 1).astype(bool)  # right half: coefficient -1
        rows = noise.uniform_int(1 << 62, n, source=source) & ((np.int64(1) << level) - 1)
        h_neg = (np.bitwise_count(rows & node) & 1).astype(bool)
        keep = noise.bernoulli(self.hr.p, n, source=source)
        bits = (negative != h_neg) != keep  # 1 means +1, as in HadamardResponse
        return Reports(self.kind, {"level": level.astype(np.uint8), "rows": rows,
                                   "bits": bits.astype(np.uint8)}, is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        if not isinstance(reports, Reports) or reports.kind != self.kind:
            raise TypeError("HaarRanges.aggregate needs reports of kind 'haar'")
        level = np.asarray(reports["level"]).astype(np.int64)
        rows = np.asarray(reports["rows"]).astype(np.int64)
        sign = 2 * np.asarray(reports["bits"]).astype(np.int64) - 1
        if level.size and (level.min() < 0 or level.max() >= self.height
                           or np.any(rows >= (np.int64(1) << level)) or rows.min() < 0):
            raise ValueError("Haar reports need 0 <= level < h and 0 <= row < 2^level")
        offset = (1 << level) - 1  # level ℓ occupies [2^ℓ - 1, 2^(ℓ+1) - 1)
        S = np.bincount(offset + rows, weights=sign, minlength=self.padded - 1)
        counts = np.bincount(level, minlength=self.height)
        return Tally(self.kind, np.concatenate([counts, np.rint(S)]).astype(np.int64),
                     int(level.size), reports.insecure)

    def estimate(self, data: Reports | Tally) -> RangeEstimate:
        t = self.aggregate(data) if isinstance(data, Reports) else data
        if not isinstance(t, Tally) or t.kind != self.kind:
            raise TypeError("HaarRanges.estimate needs its own Reports or Tally")
        h, n = self.height, t.n
        n_levels, S = t.stats[:h], t.stats[h:].astype(np.float64)
        c = float(self.hr.c)
        counts = np.array([float(n)])
        for lvl in range(h):
            s = S[(1 << lvl) - 1 : (1 << (lvl + 1)) - 1]
            w = c * fwht(s) * (n / n_levels[lvl]) if n_levels[lvl] else np.zeros(1 << lvl)
            counts = np.stack([(counts + w) / 2, (counts - w) / 2], axis=1).ravel()
        return RangeEstimate(counts[: self.domain_size], n, self.event, {"strategy": "haar"})
