"""RAPPOR (Erlingsson, Pihur, Korolova 2014): Bloom filter + permanent + instantaneous RR.

A client in cohort ``c`` (uniform in ``[0, m)``, drawn from :mod:`dpkit.noise`) sets the ``h``
bits ``H_{c,1..h}(x)`` of a ``k``-bit Bloom filter ``B`` (public tabulation hashes, exactly
3-wise independent), then

* **permanent** randomized response, memoised per value: ``B'_i = 1`` w.p. f/2, ``0`` w.p. f/2,
  ``B_i`` w.p. 1 - f;
* **instantaneous** randomized response on each report: ``S_i = 1`` w.p. ``q`` if ``B'_i = 1``,
  w.p. ``p`` if ``B'_i = 0``.

``f, p, q`` are exact rationals (floats are taken at their exact binary value). Privacy
(replace-one on the client's value; two values differ in at most 2h Bloom bits):

* longitudinal (any number of reports of one value): ε∞ = 2h ln((1 - f/2)/(f/2));
* one report: ε₁ = h ln(q*(1 - p*) / (p*(1 - q*))), with q* = P[S=1 | B=1] =
  (1 - f/2) q + (f/2) p and p* = P[S=1 | B=0] = (f/2) q + (1 - f/2) p.

Both are stated as proven float upper bounds. Decoding: per cohort and bit,
t̂ = (C - p* N_c)/(q* - p*) is unbiased for the true Bloom-bit count; candidate counts are the
least-squares solution of E[t̂_{c,b}] = Σ_v (n_v/m) [b ∈ Bloom_c(v)] (unbiased when every value
held is a candidate and the design has full column rank). Their covariance is exact
(:meth:`Rappor.count_covariance`): RR noise given the cohort split, plus the multinomial split.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import Event, PureDP
from dpkit.noise import Source

from ._bits import count_packed_bits_by_group
from ._exact import stated_epsilon
from ._hashing import TabulationHash, tables_to_text
from .base import FrequencyEstimate, Reports, Tally, is_insecure

__all__ = ["Rappor", "RapporClient"]


class Rappor:
    """RAPPOR's public configuration: Bloom size, hashes, cohorts and the f, p, q of RR."""

    kind = "rappor"

    def __init__(
        self,
        *,
        num_bits: int = 128,
        num_hashes: int = 2,
        num_cohorts: int = 8,
        f: float | Fraction = Fraction(1, 2),
        p: float | Fraction = Fraction(1, 2),
        q: float | Fraction = Fraction(3, 4),
        hashes: TabulationHash | None = None,
        source: Source | None = None,
    ) -> None:
        for name, val, lo in (("num_bits", num_bits, 2), ("num_hashes", num_hashes, 1),
                              ("num_cohorts", num_cohorts, 1)):
            if isinstance(val, bool) or not isinstance(val, int) or val < lo:
                raise ValueError(f"{name} must be an int >= {lo} (got {val!r})")
        self.k, self.h, self.m = num_bits, num_hashes, num_cohorts
        self.f, self.p, self.q = (
            noise.as_rational(f, "f"), noise.as_rational(p, "p"), noise.as_rational(q, "q")
        )
        if not 0 < self.f < 1:
            raise ValueError(f"f must be in (0, 1) (got {float(self.f)}); f = 0 gives no "
                             "longitudinal privacy")
        if not 0 <= self.p < self.q <= 1:
            raise ValueError(f"need 0 <= p < q <= 1 (got p={float(self.p)}, q={float(self.q)})")
        half = self.f / 2
        self.q_star = (1 - half) * self.q + half * self.p
        self.p_star = half * self.q + (1 - half) * self.p
        self.epsilon = stated_epsilon((1 - half) / half, power=2 * self.h)
        one = self.q_star * (1 - self.p_star) / (self.p_star * (1 - self.q_star)) \
            if self.p_star > 0 and self.q_star < 1 else None
        if one is None:
            self.epsilon_one_report = self.epsilon
        else:
            self.epsilon_one_report = min(stated_epsilon(one, power=self.h), self.epsilon)
        if hashes is None:
            hashes = TabulationHash.draw(self.m * self.h, self.k, source=source)
        if hashes.k != self.m * self.h or hashes.m != self.k:
            raise ValueError(f"hashes must be {self.m * self.h} functions into [0, {self.k})")
        self.hashes = hashes

    def config(self) -> dict[str, Any]:
        """Public configuration, hash tables included (see :mod:`dpkit.local.reports`)."""
        return {"kind": self.kind, "num_bits": self.k, "num_hashes": self.h,
                "num_cohorts": self.m, "f": str(self.f), "p": str(self.p), "q": str(self.q),
                "tables": tables_to_text(self.hashes.tables)}

    @property
    def event(self) -> Event:
        """Per client, any number of reports of the same value (longitudinal): PureDP(ε∞)."""
        return PureDP(self.epsilon)

    @property
    def event_one_report(self) -> Event:
        return PureDP(self.epsilon_one_report)

    @property
    def nbytes(self) -> int:
        return -(-self.k // 8)

    def bloom(self, values: Any, cohorts: Any) -> np.ndarray:
        """Bloom filters, bool ``(n, k)``: bits ``H_{c, j}(x)``, j < h."""
        x = np.asarray(values, dtype=np.int64)
        c = np.asarray(cohorts, dtype=np.int64)
        out = np.zeros((x.size, self.k), dtype=bool)
        rows = np.arange(x.size)
        for j in range(self.h):
            out[rows, self.hashes(x, which=c * self.h + j)] = True
        return out

    def permanent(self, bloom: np.ndarray, *, source: Source | None = None) -> np.ndarray:
        """Permanent RR of Bloom bits (memoise per value on the client!)."""
        b = np.asarray(bloom, dtype=bool)
        rand = noise.bernoulli_matrix(self.f, b.shape, source=source)
        coin = noise.bernoulli_matrix(Fraction(1, 2), b.shape, source=source)
        return np.where(rand, coin, b)

    def instantaneous(self, perm: np.ndarray, *, source: Source | None = None) -> np.ndarray:
        """Instantaneous RR: a fresh, independent report from the memoised ``B'``."""
        b = np.asarray(perm, dtype=bool)
        ones = noise.bernoulli_matrix(self.q, b.shape, source=source)
        zeros = noise.bernoulli_matrix(self.p, b.shape, source=source)
        return np.where(b, ones, zeros)

    def randomize(self, values: Any, *, cohorts: Any = None,
                  source: Source | None = None) -> Reports:
        """One report per user (permanent + instantaneous), cohorts uniform unless given."""
        x = np.asarray(values, dtype=np.int64)
        c = noise.uniform_int(self.m, x.size, source=source) if cohorts is None \
            else np.asarray(cohorts, dtype=np.int64)
        s = self.instantaneous(self.permanent(self.bloom(x, c), source=source), source=source)
        return Reports(self.kind, {"cohort": c.astype(np.int32),
                                   "bits": np.packbits(s, axis=1, bitorder="little")},
                       is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        if not isinstance(reports, Reports) or reports.kind != self.kind:
            raise TypeError("Rappor.aggregate needs reports of kind 'rappor'")
        c = np.asarray(reports["cohort"]).astype(np.int64)
        bits = np.asarray(reports["bits"])
        if c.size and (c.min() < 0 or c.max() >= self.m):
            raise ValueError(f"cohorts must lie in [0, {self.m})")
        stats = count_packed_bits_by_group(c, bits, self.m, self.k)
        return Tally(self.kind, stats.ravel(), int(c.size), reports.insecure)

    def design(self, candidates: Any) -> np.ndarray:
        """X[(c, b), v] = 1 if bit b is set in cohort c's Bloom filter of candidate v."""
        cand = np.asarray(candidates, dtype=np.int64)
        X = np.zeros((self.m, self.k, cand.size))
        cols = np.arange(cand.size)
        for coh in range(self.m):
            for j in range(self.h):
                X[coh, self.hashes(cand, which=coh * self.h + j), cols] = 1.0
        return X.reshape(self.m * self.k, cand.size)

    def estimate(self, data: Reports | Tally, candidates: Any) -> FrequencyEstimate:
        """Least-squares counts for ``candidates``; variance from :meth:`count_covariance`."""
        t = self.aggregate(data) if isinstance(data, Reports) else data
        stats = t.stats.reshape(self.m, self.k + 1)
        Nc, C = stats[:, :1].astype(np.float64), stats[:, 1:].astype(np.float64)
        ps, qs = float(self.p_star), float(self.q_star)
        t_hat = ((C - ps * Nc) / (qs - ps)).ravel()
        X = self.design(candidates) / self.m
        if np.linalg.matrix_rank(X) < X.shape[1]:
            raise ValueError("the Bloom design is rank-deficient for these candidates: use more "
                             "bits, hashes or cohorts, or fewer candidates")
        A = np.linalg.pinv(X)
        counts = A @ t_hat
        cov = self.count_covariance(np.clip(counts, 0, t.n), candidates, A=A)
        return FrequencyEstimate(counts, np.diag(cov).copy(), t.n, self.event,
                                 {"oracle": self.kind, "candidates": np.asarray(candidates)},
                                 t.insecure)

    def count_covariance(self, true_counts: Any, candidates: Any,
                         A: np.ndarray | None = None) -> np.ndarray:
        """Exact covariance of the least-squares counts when ``true_counts`` (over
        ``candidates``, everyone holding a candidate) are the population's counts."""
        nv = np.asarray(true_counts, dtype=np.float64)
        X = self.design(candidates)
        if A is None:
            A = np.linalg.pinv(X / self.m)
        ps, qs = float(self.p_star), float(self.q_star)
        n = nv.sum()
        T = X @ nv / self.m  # expected true bit count per (cohort, bit)
        rr = (T * qs * (1 - qs) + (n / self.m - T) * ps * (1 - ps)) / (qs - ps) ** 2
        # multinomial cohort split: Cov(T_cb, T_c'b') = Σ_v X X n_v (δ_cc'/m - 1/m²)
        Xn = X * nv[None, :]
        split = -(Xn @ X.T) / self.m**2
        blocks = (X.reshape(self.m, self.k, -1) * nv).transpose(0, 1, 2)
        for coh in range(self.m):
            sl = slice(coh * self.k, (coh + 1) * self.k)
            split[sl, sl] += blocks[coh] @ X[sl].T / self.m
        cov_t = split + np.diag(rr)
        return A @ cov_t @ A.T


class RapporClient:
    """One client: fixed cohort, permanent responses memoised per value (longitudinal privacy).

    >>> import dpkit.noise as noise
    >>> r = Rappor(num_bits=16, num_hashes=2, num_cohorts=4, source=noise.seeded(0))
    >>> cl = RapporClient(r, source=noise.seeded(1))
    >>> sorted(cl.report(42))
    ['bits', 'cohort']
    """

    def __init__(self, rappor: Rappor, *, cohort: int | None = None,
                 source: Source | None = None) -> None:
        self.rappor = rappor
        self.source = source
        if cohort is None:
            cohort = int(noise.uniform_int(rappor.m, 1, source=source)[0])
        if not 0 <= cohort < rappor.m:
            raise ValueError(f"cohort must lie in [0, {rappor.m}) (got {cohort})")
        self.cohort = int(cohort)
        self._memo: dict[int, np.ndarray] = {}

    def report(self, value: int) -> dict[str, Any]:
        """A fresh report of ``value``; the permanent response is drawn once per value."""
        v = int(value)
        if v not in self._memo:
            b = self.rappor.bloom([v], [self.cohort])
            self._memo[v] = self.rappor.permanent(b, source=self.source)
        s = self.rappor.instantaneous(self._memo[v], source=self.source)
        return {"cohort": self.cohort,
                "bits": np.packbits(s, axis=1, bitorder="little")[0].tobytes().hex()}
