"""Hadamard response, 1-bit (Hadamard randomized response; cf. Acharya-Sun-Zhang 2019,
Cormode-Kulkarni-Srivastava 2019 "HRR", Apple's HCMS).

Let D = 2^L >= d and H[j, v] = (-1)^{popcount(j & v)} the Sylvester-Hadamard matrix. A user with
value x draws a row ``j`` uniformly from [0, D) and sends ``(j, s)`` with ``s = H[j, x]`` w.p.
``p = ρ/(ρ+1)`` and ``-H[j, x]`` otherwise (ρ <= e^ε exact rational): ``ln ρ``-LDP, since j does
not depend on x.

Server: S[j] = Σ_{i: j_i = j} s_i, then ĉ = c · (H S) with c = (ρ+1)/(ρ-1), one fast
Walsh-Hadamard transform (O(D log D), independent of n). Each user contributes
Z = c s H[j, v] ∈ {±c} with E[Z] = [x = v] (rows of H are orthogonal), so ĉ_v is unbiased and
Var ĉ_v = n c² - c_v exactly; per user (c_v = 0): ((ρ+1)/(ρ-1))² = ((e^ε+1)/(e^ε-1))².
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.noise import Source

from ._exact import check_epsilon, ratio_below, stated_epsilon
from ._hashing import domain_bits, fwht
from .base import FrequencyEstimate, FrequencyOracle, Reports, Tally, check_domain, is_insecure

__all__ = ["HadamardResponse"]


class HadamardResponse(FrequencyOracle):
    """1-bit Hadamard response over ``[0, domain_size)`` at ``epsilon``."""

    kind = "hr"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction) -> None:
        self.domain_size = check_domain(domain_size)
        eps = check_epsilon(epsilon)
        self.D = 1 << domain_bits(self.domain_size)
        self.ratio = ratio_below(eps)
        self.p = self.ratio / (self.ratio + 1)
        self.c = (self.ratio + 1) / (self.ratio - 1)
        self.epsilon = stated_epsilon(self.ratio, cap=eps)
        self.requested_epsilon = float(eps)

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        """Reports ``rows`` (n,) in [0, D) and ``bits`` (n,) in {0, 1} (1 means s = +1)."""
        x = self._values(values)
        n = x.size
        j = noise.uniform_int(self.D, n, source=source)
        parity = (np.bitwise_count(j & x) & 1).astype(bool)  # H[j, x] = -1 iff odd
        keep = noise.bernoulli(self.p, n, source=source)
        bit = parity != keep  # s = +1 iff (H = +1 and keep) or (H = -1 and flip)
        dt = np.uint16 if self.D <= 1 << 16 else np.int64
        return Reports(self.kind, {"rows": j.astype(dt), "bits": bit.astype(np.uint8)},
                       is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        self._check_reports(reports)
        j = np.asarray(reports["rows"]).astype(np.intp, copy=False)
        b = np.asarray(reports["bits"]).astype(np.intp, copy=False)
        if j.size and (j.min() < 0 or j.max() >= self.D or b.max() > 1 or b.min() < 0):
            raise ValueError(f"Hadamard reports need rows in [0, {self.D}) and bits in {{0, 1}}")
        stats = np.bincount(2 * j + b, minlength=2 * self.D).astype(np.int64)
        return Tally(self.kind, stats, int(j.size), reports.insecure)

    def estimate(self, data: Reports | Tally) -> FrequencyEstimate:
        t = self._tally(data)
        pairs = t.stats.reshape(self.D, 2)
        S = pairs[:, 1] - pairs[:, 0]
        counts = float(self.c) * fwht(S)[: self.domain_size].astype(np.float64)
        clipped = np.clip(counts, 0, t.n)
        return FrequencyEstimate(
            counts=counts,
            variance=t.n * float(self.c) ** 2 - clipped,
            n=t.n,
            event=self.event,
            details={"oracle": self.kind, "c": self.c},
            insecure=t.insecure,
        )

    def count_variance(self, true_counts: Any) -> np.ndarray:
        c = np.asarray(true_counts, dtype=np.float64)
        return float(c.sum()) * float(self.c) ** 2 - c

    @property
    def per_user_variance(self) -> float:
        return float(self.c**2)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon}
