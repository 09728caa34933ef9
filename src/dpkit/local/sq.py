"""The statistical-query model simulated in the local model (Kasiviswanathan, Lee, Nissim,
Raskhodnikova, Smith 2011, "What can we learn privately?": SQ ⊆ LDP).

A statistical query is a function ``φ: record -> [0, 1]``; the oracle returns an estimate of
``E[φ(x)]`` over the population within a tolerance τ. Here every query is answered by a fresh
batch of users that no other query touches: each user randomly rounds ``φ(x)`` to a bit
(``Bernoulli(φ(x))``, exact) and sends it through binary randomized response
(true bit w.p. ``p = ρ/(1+ρ)``, ``ρ <= e^ε`` exact rational). The batch mean, debiased as
``(s̄ - q)/(p - q)`` with ``q = 1 - p``, is unbiased for the batch mean of φ, and each term lies in
an interval of length ``c = (ρ+1)/(ρ-1)``; by Hoeffding a batch of
``m >= c² ln(2/β) / (2 τ²)`` users answers within τ with probability >= 1 - β.

Each user answers at most once, so every user is ε-LDP (replace-one on their record) no matter
how many queries the learner asks; the learner just needs enough users.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import Event, PureDP
from dpkit.noise import Source

from ._exact import check_epsilon, ratio_below, stated_epsilon

__all__ = ["LocalSQOracle", "NaiveBayes", "learn_naive_bayes"]


class LocalSQOracle:
    """Statistical queries over ``records`` (rows held by simulated clients) at ``epsilon``.

    >>> import numpy as np, dpkit.noise as noise
    >>> data = np.zeros((4000, 1)); data[:1000] = 1
    >>> sq = LocalSQOracle(data, epsilon=2.0, source=noise.seeded(0))
    >>> round(sq.query(lambda r: r[:, 0], batch_size=4000), 1)
    0.2
    """

    def __init__(self, records: Any, *, epsilon: float | Fraction,
                 source: Source | None = None) -> None:
        self.records = np.asarray(records)
        if self.records.ndim == 1:
            self.records = self.records[:, None]
        eps = check_epsilon(epsilon)
        self.ratio = ratio_below(eps)
        self.p = self.ratio / (1 + self.ratio)
        self.c = (self.ratio + 1) / (self.ratio - 1)
        self.epsilon = stated_epsilon(self.ratio, cap=eps)
        self.source = source
        self._order = noise.permutation(len(self.records), source=source)
        self._next = 0
        self.queries_answered = 0

    @property
    def event(self) -> Event:
        """Per user: one randomized-response answer, ``PureDP(ε)``."""
        return PureDP(self.epsilon)

    @property
    def remaining(self) -> int:
        return len(self.records) - self._next

    def batch_size(self, tolerance: float, failure: float = 1e-3) -> int:
        """Users needed for |answer - batch mean| <= tolerance w.p. >= 1 - failure (Hoeffding)."""
        if not 0 < tolerance <= 1 or not 0 < failure < 1:
            raise ValueError("need 0 < tolerance <= 1 and 0 < failure < 1")
        return math.ceil(float(self.c) ** 2 * math.log(2 / failure) / (2 * tolerance**2))

    def query(self, phi: Callable[[np.ndarray], Any], *, batch_size: int | None = None,
              tolerance: float | None = None, failure: float = 1e-3) -> float:
        """Estimate E[φ(record)] with a fresh batch of users (φ vectorised over rows)."""
        m = batch_size if batch_size is not None else self.batch_size(tolerance or 0.05, failure)
        if m < 1:
            raise ValueError(f"batch_size must be >= 1 (got {m})")
        if m > self.remaining:
            raise ValueError(f"query needs {m} fresh users but only {self.remaining} remain: "
                             "ask fewer queries, a larger tolerance, or collect more users")
        rows = self.records[self._order[self._next : self._next + m]]
        self._next += m
        vals = np.asarray(phi(rows), dtype=np.float64).reshape(m)
        if np.any(vals < 0) or np.any(vals > 1) or not np.all(np.isfinite(vals)):
            raise ValueError("a statistical query must map every record into [0, 1]")
        bit = noise.bernoulli_lanes(vals, source=self.source)
        keep = noise.bernoulli(self.p, m, source=self.source)
        s = bit == keep
        self.queries_answered += 1
        p = float(self.p)
        return (float(s.mean()) - (1 - p)) / (2 * p - 1)


@dataclass(frozen=True)
class NaiveBayes:
    """Bernoulli naive Bayes on binary features; parameters learnt through SQ queries."""

    prior: float
    theta1: np.ndarray  # P(x_j = 1 | y = 1)
    theta0: np.ndarray  # P(x_j = 1 | y = 0)

    def decision(self, X: Any) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        t1 = np.clip(self.theta1, 1e-3, 1 - 1e-3)
        t0 = np.clip(self.theta0, 1e-3, 1 - 1e-3)
        pr = min(max(self.prior, 1e-3), 1 - 1e-3)
        log1 = math.log(pr) + X @ np.log(t1) + (1 - X) @ np.log(1 - t1)
        log0 = math.log(1 - pr) + X @ np.log(t0) + (1 - X) @ np.log(1 - t0)
        return log1 - log0

    def predict(self, X: Any) -> np.ndarray:
        return (self.decision(X) > 0).astype(np.int64)


def learn_naive_bayes(oracle: LocalSQOracle, *, n_features: int,
                      label_column: int = -1, batch_size: int | None = None) -> NaiveBayes:
    """Learn :class:`NaiveBayes` with 1 + 2·n_features statistical queries.

    Records are rows of 0/1 features with the 0/1 label in ``label_column``. Queries:
    P(y = 1), and P(x_j = 1, y = c) for c in {0, 1}; each answered by its own batch.
    """
    nq = 1 + 2 * n_features
    m = batch_size if batch_size is not None else oracle.remaining // nq
    feats: Sequence[int] = [j for j in range(n_features + 1)
                            if j != (label_column % (n_features + 1))]
    lab = label_column

    def and_label(j: int) -> Callable[[np.ndarray], np.ndarray]:  # 1{x_j = 1, y = 1}
        return lambda r: r[:, j] * r[:, lab]

    def and_not_label(j: int) -> Callable[[np.ndarray], np.ndarray]:  # 1{x_j = 1, y = 0}
        return lambda r: r[:, j] * (1 - r[:, lab])

    prior = oracle.query(lambda r: r[:, lab], batch_size=m)
    joint1 = np.array([oracle.query(and_label(j), batch_size=m) for j in feats])
    joint0 = np.array([oracle.query(and_not_label(j), batch_size=m) for j in feats])
    pr = min(max(prior, 1e-6), 1 - 1e-6)
    return NaiveBayes(prior, np.clip(joint1 / pr, 0, 1), np.clip(joint0 / (1 - pr), 0, 1))
