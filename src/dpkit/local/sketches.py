"""Apple's count-mean sketch (CMS) and Hadamard count-mean sketch (HCMS), Apple Differential
Privacy Team 2017, "Learning with Privacy at Scale".

Public: ``k`` hash functions into ``[0, m)`` (simple tabulation: exactly 3-wise independent,
drawn once by the server from :mod:`dpkit.noise`). Keys are 64-bit integers.

* **CMS** (ε split over the two coordinates a change of value moves): a client draws ``j`` in
  ``[0, k)``, encodes ``v = -1^m`` with ``+1`` at ``h_j(x)``, flips every coordinate w.p.
  ``1/(1 + ρ)`` (``ρ <= e^{ε/2}`` exact rational) and sends ``(j, ṽ)`` (m bits, packed).
  Privacy ``2 ln ρ``. Server: ``x̃ = k (c/2 ṽ + 1/2)`` with ``c = (ρ+1)/(ρ-1)``, ``M[j] += x̃``.
* **HCMS** (1 bit): a client draws ``j`` and a Hadamard row ``l`` in ``[0, m)`` (m a power of two),
  sends ``(j, l, ±H[l, h_j(x)])`` with the sign flipped w.p. ``1/(1+ρ)``, ``ρ <= e^ε``. Server:
  ``M_H[j, l] += k c w̃``, then ``M = M_H Hᵀ``.

Estimate for a key d (both): ``f̂(d) = m/(m-1) · ((1/k) Σ_l M[l, h_l(d)] - n/m)``, unbiased over
the clients' randomness *and the random choice of the hash functions*. Exact variance, with
α = m/(m-1), n_d holders of d and S₂ = Σ_{x≠d} n_x²:

* CMS:  α² [ n (c²-1)/4 + (n - n_d)(1/m - 1/(km) - (k-1)/(km²)) + S₂ (1 - 1/m)/(km) ]
* HCMS: α² [ n c² - n_d + (n - n_d)(- 1/(km) - (k-1)/(km²)) + S₂ (1 - 1/m)/(km) ]

(the S₂ term is the collision noise shared by all holders of a colliding value; 3-wise
independence makes distinct colliding values uncorrelated).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import Event, PureDP
from dpkit.noise import Source

from ._bits import count_packed_bits_by_group
from ._exact import check_epsilon, ratio_below, stated_epsilon
from ._hashing import TabulationHash, fwht, tables_to_text
from .base import FrequencyEstimate, Reports, Tally, is_insecure

__all__ = ["CountMeanSketch", "HadamardCountMeanSketch"]


class _Sketch:
    kind = "sketch"
    k: int
    m: int
    c: Fraction
    epsilon: float
    requested_epsilon: float
    hashes: TabulationHash

    def _init_hashes(self, num_hashes: int, width: int, hashes: TabulationHash | None,
                     source: Source | None) -> None:
        if isinstance(num_hashes, bool) or not isinstance(num_hashes, int) or num_hashes < 1:
            raise ValueError(f"num_hashes must be an int >= 1 (got {num_hashes!r})")
        if isinstance(width, bool) or not isinstance(width, int) or width < 2:
            raise ValueError(f"width must be an int >= 2 (got {width!r})")
        self.k, self.m = num_hashes, width
        if hashes is None:
            hashes = TabulationHash.draw(self.k, self.m, source=source)
        if hashes.k != self.k or hashes.m != self.m:
            raise ValueError(f"hashes must be {self.k} functions into [0, {self.m})")
        self.hashes = hashes

    @property
    def event(self) -> Event:
        return PureDP(self.epsilon)

    def config(self) -> dict[str, Any]:
        """Public configuration, hash tables included (see :mod:`dpkit.local.reports`)."""
        return {"kind": self.kind, "epsilon": self.requested_epsilon, "num_hashes": self.k,
                "width": self.m, "tables": tables_to_text(self.hashes.tables)}

    def _sketch_matrix(self, t: Tally) -> np.ndarray:
        raise NotImplementedError

    def estimate(self, data: Reports | Tally, keys: Any) -> FrequencyEstimate:
        """Unbiased counts of ``keys`` (int64) from the sketch."""
        t = self.aggregate(data) if isinstance(data, Reports) else data  # type: ignore[attr-defined]
        M = self._sketch_matrix(t)
        d = np.asarray(keys, dtype=np.int64)
        hk = self.hashes(d)  # (k, len(d))
        avg = M[np.arange(self.k)[:, None], hk].mean(axis=0)
        counts = self.m / (self.m - 1) * (avg - t.n / self.m)
        # plug-in variance: S₂ unknown to the server -> bounded by the estimate's own scale
        var = self.count_variance_parts(np.clip(counts, 0, t.n), t.n, 0.0)
        return FrequencyEstimate(counts, var, t.n, self.event,
                                 {"oracle": self.kind, "collision_term_omitted": True},
                                 t.insecure)

    def count_variance_parts(self, n_d: Any, n: float, s2: Any) -> np.ndarray:
        raise NotImplementedError

    def count_variance(self, counts_by_key: dict[int, int], keys: Any) -> np.ndarray:
        """Exact variance of f̂(d) for each d in ``keys`` given the population's counts."""
        n = float(sum(counts_by_key.values()))
        tot2 = float(sum(v * v for v in counts_by_key.values()))
        nd = np.array([counts_by_key.get(int(d), 0) for d in np.asarray(keys)], dtype=float)
        return self.count_variance_parts(nd, n, tot2 - nd**2)

    def _collisions(self, n_d: np.ndarray, n: float, s2: Any) -> np.ndarray:
        k, m = self.k, self.m
        pair = (n - n_d) * (-1 / (k * m) - (k - 1) / (k * m * m))
        return pair + np.asarray(s2) * (1 - 1 / m) / (k * m)


class CountMeanSketch(_Sketch):
    """Apple's CMS: m-bit reports, ε split as ε/2 per moved coordinate."""

    kind = "cms"

    def __init__(self, *, epsilon: float | Fraction, num_hashes: int = 64, width: int = 1024,
                 hashes: TabulationHash | None = None, source: Source | None = None) -> None:
        eps = check_epsilon(epsilon)
        self._init_hashes(num_hashes, width, hashes, source)
        self.ratio = ratio_below(eps / 2)
        self.flip = 1 / (1 + self.ratio)
        self.c = (self.ratio + 1) / (self.ratio - 1)
        self.epsilon = stated_epsilon(self.ratio, power=2, cap=eps)
        self.requested_epsilon = float(eps)

    def randomize(self, keys: Any, *, source: Source | None = None) -> Reports:
        x = np.asarray(keys, dtype=np.int64)
        n = x.size
        j = noise.uniform_int(self.k, n, source=source)
        pos = self.hashes(x, which=j)
        bits = noise.bernoulli_matrix(self.flip, (n, self.m), source=source)  # flip indicators
        bits[np.arange(n), pos] ^= True  # +1 at h_j(x), flipped w.p. 1/(1+ρ) like the rest
        return Reports(self.kind, {"hash": j.astype(np.int32),
                                   "bits": np.packbits(bits, axis=1, bitorder="little")},
                       is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        if not isinstance(reports, Reports) or reports.kind != self.kind:
            raise TypeError("CountMeanSketch.aggregate needs reports of kind 'cms'")
        j = np.asarray(reports["hash"]).astype(np.int64)
        bits = np.asarray(reports["bits"])
        stats = count_packed_bits_by_group(j, bits, self.k, self.m)
        return Tally(self.kind, stats.ravel(), int(j.size), reports.insecure)

    def _sketch_matrix(self, t: Tally) -> np.ndarray:
        s = t.stats.reshape(self.k, self.m + 1).astype(np.float64)
        Nj, P = s[:, :1], s[:, 1:]
        c = float(self.c)
        # Σ_i k (c/2 ṽ + 1/2) with ṽ = 2 bit - 1
        return self.k * (c / 2 * (2 * P - Nj) + Nj / 2)

    def count_variance_parts(self, n_d: Any, n: float, s2: Any) -> np.ndarray:
        nd = np.asarray(n_d, dtype=float)
        c2 = float(self.c) ** 2
        a2 = (self.m / (self.m - 1)) ** 2
        return a2 * (n * (c2 - 1) / 4 + (n - nd) / self.m + self._collisions(nd, n, s2))


class HadamardCountMeanSketch(_Sketch):
    """Apple's HCMS: one bit per report plus the hash index and Hadamard row."""

    kind = "hcms"

    def __init__(self, *, epsilon: float | Fraction, num_hashes: int = 64, width: int = 1024,
                 hashes: TabulationHash | None = None, source: Source | None = None) -> None:
        eps = check_epsilon(epsilon)
        if width & (width - 1):
            raise ValueError(f"width must be a power of two for HCMS (got {width})")
        self._init_hashes(num_hashes, width, hashes, source)
        self.ratio = ratio_below(eps)
        self.keep = self.ratio / (1 + self.ratio)
        self.c = (self.ratio + 1) / (self.ratio - 1)
        self.epsilon = stated_epsilon(self.ratio, cap=eps)
        self.requested_epsilon = float(eps)

    def randomize(self, keys: Any, *, source: Source | None = None) -> Reports:
        x = np.asarray(keys, dtype=np.int64)
        n = x.size
        j = noise.uniform_int(self.k, n, source=source)
        row = noise.uniform_int(self.m, n, source=source)
        neg = (np.bitwise_count(row & self.hashes(x, which=j)) & 1).astype(bool)
        keep = noise.bernoulli(self.keep, n, source=source)
        bit = neg != keep  # 1 means +1
        return Reports(self.kind, {"hash": j.astype(np.int32), "row": row.astype(np.int32),
                                   "bits": bit.astype(np.uint8)}, is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        if not isinstance(reports, Reports) or reports.kind != self.kind:
            raise TypeError("HadamardCountMeanSketch.aggregate needs reports of kind 'hcms'")
        j = np.asarray(reports["hash"]).astype(np.int64)
        row = np.asarray(reports["row"]).astype(np.int64)
        sign = 2 * np.asarray(reports["bits"]).astype(np.int64) - 1
        S = np.bincount(j * self.m + row, weights=sign, minlength=self.k * self.m)
        return Tally(self.kind, np.rint(S).astype(np.int64), int(j.size), reports.insecure)

    def _sketch_matrix(self, t: Tally) -> np.ndarray:
        S = t.stats.reshape(self.k, self.m).astype(np.float64)
        return self.k * float(self.c) * fwht(S)

    def count_variance_parts(self, n_d: Any, n: float, s2: Any) -> np.ndarray:
        nd = np.asarray(n_d, dtype=float)
        c2 = float(self.c) ** 2
        a2 = (self.m / (self.m - 1)) ** 2
        return a2 * (n * c2 - nd + self._collisions(nd, n, s2))
