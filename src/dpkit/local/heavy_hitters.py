"""Heavy hitters over a large domain by prefix extension (PEM; Wang, Li, Jha et al. 2019,
"Locally differentially private heavy hitter identification").

Values are ``bits``-bit integers. Users are split uniformly at random into G groups; group t
reports the first ``l_t = start + t·step`` bits of their value (``l_{G-1} = bits``) by optimized
local hashing over ``2^{l_t}`` prefixes. The server keeps the ``top_k`` prefixes of group 0
(estimating all ``2^start`` of them), then extends each kept prefix by every ``step``-bit suffix,
estimates only those ``top_k · 2^step`` candidates from the next group, keeps the top_k, and so
on. Each user reports once: ε-LDP (replace-one on the value), event ``PureDP(ε)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import Event, PureDP
from dpkit.noise import Source

from ._exact import check_epsilon
from .base import Reports, is_insecure
from .hashing import OptimizedLocalHashing, lh_support_candidates

__all__ = ["HeavyHitters", "PrefixExtension"]


@dataclass(frozen=True)
class HeavyHitters:
    """Identified values (most frequent first) and their estimated counts in the population."""

    values: np.ndarray
    counts: np.ndarray
    n: int
    event: Event


class PrefixExtension:
    """PEM heavy-hitter identification over ``[0, 2^bits)``."""

    kind = "pem"

    def __init__(self, *, bits: int, epsilon: float | Fraction, top_k: int = 16,
                 start_bits: int | None = None, step_bits: int = 4) -> None:
        if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 62:
            raise ValueError(f"bits must be an int in [1, 62] (got {bits!r})")
        if top_k < 1 or step_bits < 1:
            raise ValueError("top_k and step_bits must be >= 1")
        eps = check_epsilon(epsilon)
        self.bits, self.top_k, self.step = bits, int(top_k), int(step_bits)
        start = start_bits if start_bits is not None else min(bits, max(1, (top_k - 1).bit_length()
                                                                         + step_bits))
        self.lengths: list[int] = [start]
        while self.lengths[-1] < bits:
            self.lengths.append(min(bits, self.lengths[-1] + self.step))
        self.oracles = [OptimizedLocalHashing(1 << lt, epsilon=eps) for lt in self.lengths]
        self.epsilon = max(o.epsilon for o in self.oracles)
        self.width = self.bits + 1

    @property
    def event(self) -> Event:
        return PureDP(self.epsilon)

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        x = np.asarray(values, dtype=np.int64)
        if x.size and (x.min() < 0 or x.max() >= 1 << self.bits):
            raise ValueError(f"values must lie in [0, 2^{self.bits})")
        G = len(self.lengths)
        group = noise.uniform_int(G, x.size, source=source)
        y = np.zeros(x.size, dtype=np.int64)
        seeds = np.zeros((x.size, self.width), dtype=np.uint16)
        for t, (lt, oracle) in enumerate(zip(self.lengths, self.oracles, strict=True)):
            idx = np.flatnonzero(group == t)
            if not idx.size:
                continue
            rep = oracle.randomize(x[idx] >> (self.bits - lt), source=source)
            y[idx] = rep["y"]
            s = rep["seeds"]
            seeds[idx, : lt] = s[:, :-1]
            seeds[idx, -1] = s[:, -1]
        return Reports(self.kind, {"group": group.astype(np.uint8), "y": y, "seeds": seeds},
                       is_insecure(source))

    def identify(self, reports: Reports) -> HeavyHitters:
        if not isinstance(reports, Reports) or reports.kind != self.kind:
            raise TypeError("PrefixExtension.identify needs reports of kind 'pem'")
        group = np.asarray(reports["group"]).astype(np.int64)
        y, seeds = np.asarray(reports["y"]), np.asarray(reports["seeds"])
        n = group.size
        cand = np.arange(1 << self.lengths[0], dtype=np.int64)
        counts = np.zeros(0)
        for t, (lt, oracle) in enumerate(zip(self.lengths, self.oracles, strict=True)):
            if t > 0:
                ext = self.lengths[t] - self.lengths[t - 1]
                cand = (cand[:, None] << ext | np.arange(1 << ext)[None, :]).ravel()
            idx = np.flatnonzero(group == t)
            if not idx.size:
                counts = np.zeros(cand.size)
            else:
                s = np.concatenate([seeds[idx, :lt], seeds[idx, -1:]], axis=1)
                sup = lh_support_candidates(s, y[idx], oracle.g, cand)
                p, q = float(oracle.p_star), float(oracle.q_star)
                counts = (sup - idx.size * q) / (p - q) * (n / idx.size)
            keep = np.argsort(-counts, kind="stable")[: self.top_k]
            cand, counts = cand[keep], counts[keep]
        return HeavyHitters(cand, counts, n, self.event)
