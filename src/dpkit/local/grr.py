"""Generalized (k-ary) randomized response, a.k.a. direct encoding (Warner 1965; Kairouz,
Bonawitz, Ramage 2016; Wang et al. 2017).

A user holding ``x ∈ [0, d)`` reports ``x`` with probability ``p = ρ / (ρ + d - 1)`` and each other
value with probability ``q = 1 / (ρ + d - 1)``, where ``ρ <= e^ε`` is the exact rational of
:func:`dpkit.local._exact.ratio_below`. Privacy: ``p / q = ρ``, so one report is ``ln ρ``-LDP
(replace-one on the user's value) and the stated ε is a proven upper bound.

Estimator (pure protocol, p* = p, q* = q): ĉ_v = (C_v - n q)/(p - q), unbiased, with
Var ĉ_v = [c_v p(1-p) + (n - c_v) q(1-q)]/(p-q)²; at c_v = 0 this is n (d - 2 + ρ)/(ρ - 1)².
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import Event, RandomizedResponse
from dpkit.noise import Source

from ._exact import check_epsilon, ratio_below, stated_epsilon
from .base import PureOracle, Reports, Tally, check_domain, is_insecure

__all__ = ["GeneralizedRR"]


class GeneralizedRR(PureOracle):
    """k-ary randomized response over ``[0, domain_size)`` at ``epsilon`` (ε-LDP per report).

    >>> import dpkit.noise as noise
    >>> grr = GeneralizedRR(4, epsilon=1.0)
    >>> r = grr.randomize([0, 1, 2, 3, 3], source=noise.seeded(1))
    >>> grr.estimate(r).n
    5
    """

    kind = "grr"

    def __init__(self, domain_size: int, *, epsilon: float | Fraction) -> None:
        self.domain_size = check_domain(domain_size)
        eps = check_epsilon(epsilon)
        d = self.domain_size
        self.ratio = ratio_below(eps)
        self.p = self.ratio / (self.ratio + d - 1)
        self.q = 1 / (self.ratio + d - 1)
        self.p_star, self.q_star = self.p, self.q
        self.epsilon = stated_epsilon(self.ratio, cap=eps)
        self.requested_epsilon = float(eps)

    @property
    def event(self) -> Event:
        return RandomizedResponse(self.epsilon, self.domain_size)

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        """One report per user: the true value w.p. p, else a uniform *other* value."""
        x = self._values(values)
        n = x.size
        keep = noise.bernoulli(self.p, n, source=source)
        other = noise.uniform_int(self.domain_size - 1, n, source=source)
        y = np.where(keep, x, (x + 1 + other) % self.domain_size)
        dtype = np.uint16 if self.domain_size <= 1 << 16 else np.int64
        return Reports(self.kind, {"y": y.astype(dtype)}, is_insecure(source))

    def aggregate(self, reports: Reports) -> Tally:
        self._check_reports(reports)
        y = np.asarray(reports["y"]).astype(np.intp, copy=False)
        if y.size and (y.min() < 0 or y.max() >= self.domain_size):
            raise ValueError(f"GRR report outside [0, {self.domain_size})")
        stats = np.bincount(y, minlength=self.domain_size).astype(np.int64)
        return Tally(self.kind, stats, int(y.size), reports.insecure)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "domain_size": self.domain_size,
                "epsilon": self.requested_epsilon}
