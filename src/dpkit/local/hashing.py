"""Local hashing: binary (BLH, g = 2) and optimized (OLH, g = round(e^ε) + 1), Wang et al. 2017.

Each user draws a hash function ``h`` from the exactly pairwise-independent bit-linear family
(:mod:`dpkit.local._hashing`; the seed comes from :mod:`dpkit.noise`), hashes the value into
``[0, g)``, and reports ``(seed, y)`` where ``y`` is g-ary randomized response on ``h(x)``:
``y = h(x)`` w.p. ``p = ρ/(ρ + g - 1)``, any other bucket w.p. ``1/(ρ + g - 1)`` (``ρ <= e^ε``
exact rational). The seed does not depend on ``x``, so one report is ``ln ρ``-LDP.

Support: a report supports v when ``h(v) = y``. P[support | x = v] = p, and for ``x ≠ v`` pairwise
independence gives exactly ``q* = 1/g``. Estimator ĉ_v = (C_v - n/g)/(p - 1/g), with
Var ĉ_v = [c_v p(1-p) + (n - c_v)(1/g)(1 - 1/g)]/(p - 1/g)²; at c_v = 0, per user:
(ρ + g - 1)² / ((ρ - 1)² (g - 1)) (= 4e^ε/(e^ε-1)² at g = e^ε + 1).

Server speed: the family is linear in the bits of v, so C_v for *all* v is computed without
touching n × d pairs. Split the L bits of v into high (L1) and low (L2) parts; per user only the
2^L1 partial hashes are formed and histogrammed by the user's low coefficients; then
C(v_hi, v_lo) = Σ_r Hist_r[·, v_hi]ᵀ · [lowhash(·, v_lo) = r], a (g^L2 x 2^L1)-sized matrix product
independent of n. Cost ~ n 2^L1 + g^(L2+1) 2^L, with L2 chosen to minimise it.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.noise import Source

from ._exact import check_epsilon, ratio_below, stated_epsilon
from ._hashing import bitlinear_hash, domain_bits, uniform_digits
from .base import PureOracle, Reports, Tally, check_domain, is_insecure

__all__ = ["BinaryLocalHashing", "LocalHashing", "OptimizedLocalHashing", "lh_support",
           "lh_support_candidates"]

_MAX_HIST = 1 << 24
_MAX_MASK = 1 << 22
_CHUNK = 1 << 21


class LocalHashing(PureOracle):
    """Local hashing into ``g`` buckets (``g >= 2``) at ``epsilon``."""

    kind = "lh"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction, g: int) -> None:
        self.domain_size = check_domain(domain_size)
        eps = check_epsilon(epsilon)
        if isinstance(g, bool) or not isinstance(g, int | np.integer) or g < 2:
            raise ValueError(f"g (hash range) must be an int >= 2 (got {g!r})")
        if g > 1 << 15:
            raise ValueError(f"g must be <= 32768 (got {g}); use a smaller epsilon or GRR")
        self.g = int(g)
        self.bits = domain_bits(self.domain_size)
        self.ratio = ratio_below(eps)
        self.p = self.ratio / (self.ratio + self.g - 1)
        self.p_star, self.q_star = self.p, Fraction(1, self.g)
        self.epsilon = stated_epsilon(self.ratio, cap=eps)
        self.requested_epsilon = float(eps)

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        """Reports ``seeds`` (n, L+1) digits in [0, g) and ``y`` (n,) in [0, g)."""
        x = self._values(values)
        n, g = x.size, self.g
        dt = np.uint8 if g <= 256 else np.uint16
        seeds = uniform_digits(g, (self.bits + 1, n), source).astype(dt)
        h = bitlinear_hash(seeds, x, g)
        keep = noise.bernoulli(self.p, n, source=source)
        other = noise.uniform_int(g - 1, n, source=source)
        y = np.where(keep, h, (h + 1 + other) % g)
        return Reports(self.kind, {"seeds": np.ascontiguousarray(seeds.T), "y": y.astype(dt)},
                       is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        self._check_reports(reports)
        seeds, y = np.asarray(reports["seeds"]), np.asarray(reports["y"])
        if seeds.ndim != 2 or seeds.shape[1] != self.bits + 1:
            raise ValueError(f"local-hashing seeds must have shape (n, {self.bits + 1})")
        stats = lh_support(seeds, y, self.g, self.domain_size)
        return Tally(self.kind, stats, int(y.size), reports.insecure)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon, "g": self.g}


class BinaryLocalHashing(LocalHashing):
    """BLH: local hashing into g = 2 buckets."""

    kind = "blh"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction) -> None:
        super().__init__(domain_size, epsilon=epsilon, g=2)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon}


class OptimizedLocalHashing(LocalHashing):
    """OLH: g = round(e^ε) + 1 buckets (Wang et al. 2017), the variance-optimal integer choice."""

    kind = "olh"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction) -> None:
        g = round(math.exp(float(epsilon))) + 1 if float(epsilon) <= 10 else 1 << 15
        super().__init__(domain_size, epsilon=epsilon, g=g)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon}


def _plan(n: int, g: int, L: int) -> int:
    """Choose the number of low bits L2 minimising n 2^L1 + g^(L2+1) 2^L under memory caps."""
    best, best_cost = 0, math.inf
    for L2 in range(0, L + 1):
        L1 = L - L2
        if g ** (L2 + 1) * (1 << L1) > _MAX_HIST or g**L2 * (1 << L2) > _MAX_MASK:
            break
        cost = 12.0 * n * (1 << L1) + 1.0 * g ** (L2 + 1) * (1 << L) + 4.0 * g**L2 * (1 << L2)
        if cost < best_cost:
            best, best_cost = L2, cost
    return best


def lh_support(seeds: np.ndarray, y: np.ndarray, g: int, d: int) -> np.ndarray:
    """C_v = #{i : h_i(v) = y_i} for all v in [0, d) (int64), without an n x d loop."""
    seeds = np.asarray(seeds)
    n, width = seeds.shape
    L = width - 1
    if g * (1 << L) > _MAX_HIST:  # huge g (ε > ~9): evaluate the n x d pairs in chunks
        return lh_support_candidates(seeds, y, g, np.arange(d, dtype=np.int64))
    L2 = _plan(n, g, L)
    L1 = L - L2
    H, lo = 1 << L1, 1 << L2
    nkeys = g**L2
    hist = np.zeros(nkeys * H * g, dtype=np.int64)
    pow_g = np.array([g**j for j in range(L2)], dtype=np.int64)
    step = max(1, _CHUNK // H)
    vhi = np.arange(H, dtype=np.int64)
    for s in range(0, n, step):
        a = seeds[s : s + step].T.astype(np.uint16)  # (L + 1, m), digit-major, < g <= 2^15
        m = a.shape[1]
        phi = np.empty((H, m), dtype=np.uint16)
        phi[0] = (a[L].astype(np.int64) - np.asarray(y[s : s + step], dtype=np.int64)) % g
        for t in range(L1):
            w = 1 << t
            blk = phi[w : 2 * w]
            np.add(phi[:w], a[L2 + t], out=blk)
            np.minimum(blk, blk - np.uint16(g), out=blk)  # mod g: values < 2g, wrap-around
        key = np.zeros(m, dtype=np.int64)
        for j in range(L2):
            key += a[j] * int(pow_g[j])
        idx = (key[None, :] * H + vhi[:, None]) * g + phi
        hist += np.bincount(idx.ravel(), minlength=hist.size)
    hist3 = hist.reshape(nkeys, H, g).astype(np.float64)
    digits = (np.arange(nkeys, dtype=np.int64)[:, None] // np.maximum(pow_g, 1)[None, :]) % g
    lbits = (np.arange(lo, dtype=np.int64)[None, :] >> np.arange(L2, dtype=np.int64)[:, None]) & 1
    R = (-(digits @ lbits)) % g if L2 else np.zeros((1, 1), dtype=np.int64)
    # support[v_hi, v_lo] = Σ_k Hist[k, v_hi, R[k, v_lo]]; computed transposed because
    # OpenBLAS is far faster for (2^L2 x g^L2) @ (g^L2 x 2^L1) than the other orientation.
    support_t = np.zeros((lo, H), dtype=np.float64)
    for r in range(g):
        mask_t = np.ascontiguousarray(np.equal(R, r).T, dtype=np.float64)
        support_t += mask_t @ np.ascontiguousarray(hist3[:, :, r])
    return np.rint(support_t.T).astype(np.int64).ravel()[:d]


def lh_support_candidates(
    seeds: np.ndarray, y: np.ndarray, g: int, candidates: np.ndarray
) -> np.ndarray:
    """C_v = #{i : h_i(v) = y_i} for each v in ``candidates`` (any subset of the domain)."""
    cand = np.asarray(candidates, dtype=np.int64)
    seeds = np.asarray(seeds)
    L = seeds.shape[1] - 1
    cbits = ((cand[None, :] >> np.arange(L, dtype=np.int64)[:, None]) & 1).astype(np.float64)
    out = np.zeros(cand.size, dtype=np.int64)
    step = max(1, _CHUNK // max(cand.size, 1))
    for s in range(0, seeds.shape[0], step):
        a = seeds[s : s + step].astype(np.float64)
        h = (np.rint(a[:, :L] @ cbits).astype(np.int64) + a[:, L, None].astype(np.int64)) % g
        out += (h == np.asarray(y[s : s + step], dtype=np.int64)[:, None]).sum(axis=0)
    return out


def user_hashes(seeds: np.ndarray, values: np.ndarray, g: int) -> np.ndarray:
    """h_i(values_i) for user-major seeds ``(n, L + 1)`` as carried in reports."""
    return bitlinear_hash(np.asarray(seeds).T, values, g)
