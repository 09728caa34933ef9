"""Unary encoding: symmetric (basic one-time RAPPOR) and optimized (OUE), Wang et al. 2017.

A user holding ``x`` sends ``d`` bits: bit ``x`` is 1 with probability ``p``, every other bit is 1
with probability ``q``, all independent. Two inputs differ in two bits, so one report is
``ln[p(1-q) / ((1-p) q)]``-LDP (replace-one).

* **SUE**: ``p = ρ/(ρ+1)``, ``q = 1/(ρ+1)``, ``ρ <= e^{ε/2}`` exact rational: privacy ``2 ln ρ``.
  Var per user (c_v = 0): ``q(1-q)/(p-q)² = ρ/(ρ-1)²`` (= e^{ε/2}/(e^{ε/2}-1)²).
* **OUE**: ``p = 1/2``, ``q = 1/(ρ+1)`` with ``ρ <= e^ε``: privacy ``ln ρ``.
  Var per user: ``4ρ/(ρ-1)²`` (= 4e^ε/(e^ε-1)², 3.68 at ε = 1).

Reports are bit-packed (``np.packbits(..., bitorder="little")``, ``ceil(d/8)`` bytes per user);
the server counts bits per column on the packed bytes (:mod:`dpkit.local._bits`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.noise import Source

from ._bits import count_packed_bits
from ._exact import check_epsilon, ratio_below, stated_epsilon
from .base import PureOracle, Reports, Tally, check_domain, is_insecure

__all__ = ["OptimizedUnaryEncoding", "SymmetricUnaryEncoding", "UnaryEncoding"]

_CHUNK_BITS = 1 << 22


class UnaryEncoding(PureOracle):
    """Unary encoding with exact bit probabilities ``p`` (true bit) and ``q`` (other bits)."""

    kind = "ue"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction, optimized: bool = True):
        self.domain_size = check_domain(domain_size)
        eps = check_epsilon(epsilon)
        self.optimized = bool(optimized)
        if self.optimized:
            self.ratio = ratio_below(eps)
            self.p = Fraction(1, 2)
            self.q = 1 / (self.ratio + 1)
            self.epsilon = stated_epsilon(self.ratio, cap=eps)
        else:
            self.ratio = ratio_below(eps / 2)
            self.p = self.ratio / (self.ratio + 1)
            self.q = 1 / (self.ratio + 1)
            self.epsilon = stated_epsilon(self.ratio, power=2, cap=eps)
        self.p_star, self.q_star = self.p, self.q
        self.requested_epsilon = float(eps)

    @property
    def nbytes(self) -> int:
        return -(-self.domain_size // 8)

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        """Packed reports, shape ``(n, ceil(d/8))`` uint8."""
        x = self._values(values)
        n, d = x.size, self.domain_size
        out = np.empty((n, self.nbytes), dtype=np.uint8)
        step = max(1, _CHUNK_BITS // d)
        for s in range(0, n, step):
            xs = x[s : s + step]
            m = xs.size
            bits = noise.bernoulli_matrix(self.q, (m, d), source=source)
            bits[np.arange(m), xs] = noise.bernoulli(self.p, m, source=source)
            out[s : s + m] = np.packbits(bits, axis=1, bitorder="little")
        return Reports(self.kind, {"bits": out}, is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        self._check_reports(reports)
        packed = np.asarray(reports["bits"])
        if packed.ndim != 2 or packed.shape[1] != self.nbytes:
            raise ValueError(
                f"unary-encoding reports must have shape (n, {self.nbytes}) (got {packed.shape})"
            )
        stats = count_packed_bits(packed, self.domain_size)
        return Tally(self.kind, stats, int(packed.shape[0]), reports.insecure)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon, "optimized": self.optimized}


class OptimizedUnaryEncoding(UnaryEncoding):
    """OUE: p = 1/2, q = 1/(e^ε + 1) (exact rational ≤ version); Var/user 4e^ε/(e^ε-1)²."""

    kind = "oue"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction) -> None:
        super().__init__(domain_size, epsilon=epsilon, optimized=True)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon}


class SymmetricUnaryEncoding(UnaryEncoding):
    """SUE (basic one-time RAPPOR): p = e^{ε/2}/(e^{ε/2}+1), q = 1 - p."""

    kind = "sue"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction) -> None:
        super().__init__(domain_size, epsilon=epsilon, optimized=False)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon}
