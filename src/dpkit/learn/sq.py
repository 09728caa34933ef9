"""Statistical-query learning: a learner that touches the data only through statistical
queries, answered centrally (Gaussian or Laplace mechanism, composed) or in the local model
(``dpkit.local.LocalSQOracle``: each user answers one query by randomized response).

A (vector) statistical query is ``φ: row -> [0, 1]^k``; the oracle returns an estimate of the
mean of φ over the rows. Kearns (1998) SQ learning; Blum, Dwork, McSherry, Nissim (2005) answer
SQs with noise; Kasiviswanathan et al. (2011) show SQ ⊆ local DP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from dpkit import mechanisms
from dpkit.accounting.zcdp import epsilon_to_rho
from dpkit.events import Composed, Event, NoOp
from dpkit.local import LocalSQOracle
from dpkit.noise import Source

from ._base import (
    PrivateEstimator,
    check_bounds,
    check_classes,
    check_count,
    check_delta,
    check_epsilon,
    check_features,
    check_labels,
    check_positive,
    resolve_source,
)

__all__ = ["CentralSQOracle", "LocalVectorSQOracle", "SQLogisticRegression", "SQOracle"]

Query = Callable[[np.ndarray], np.ndarray]


class SQOracle(Protocol):
    """What an SQ learner may ask: the mean of ``φ(rows)`` in [0, 1]^k, within some tolerance."""

    def query(self, phi: Query) -> np.ndarray: ...

    @property
    def event(self) -> Event: ...


def _values(phi: Query, rows: np.ndarray) -> np.ndarray:
    v = np.asarray(phi(rows), dtype=np.float64).reshape(len(rows), -1)
    if not np.all(np.isfinite(v)) or np.any(v < 0) or np.any(v > 1):
        raise ValueError("a statistical query must map every row into [0, 1]^k")
    return v


class CentralSQOracle:
    """Answer up to ``queries`` vector SQs on all ``records`` with a trusted curator.

    **Neighbouring relation**: replace one row (n is public: the answers are means).
    **Guarantee**: ``mechanism="gaussian"``: (ε, δ)-DP, each query a ρ/queries-zCDP Gaussian
    release of the sum (L2 sensitivity sqrt(k): each coordinate moves by at most 1), ρ the
    largest zCDP budget that converts to (ε, δ); ``"laplace"``: ε-DP, each query ε/queries with
    L1 sensitivity k. ``event`` composes the releases made so far.
    """

    def __init__(self, records: np.ndarray, *, epsilon: float, delta: float | None = None,
                 queries: int, mechanism: str = "gaussian",
                 source: Source | None = None) -> None:
        self.records = records
        self.queries = int(queries)
        self.mechanism = mechanism
        self.source = source
        self._events: list[Event] = []
        eps = check_epsilon(epsilon)
        if mechanism == "gaussian":
            if delta is None:
                raise ValueError("the Gaussian oracle needs delta: pass e.g. delta=1e-6, or "
                                 "mechanism='laplace' for pure epsilon")
            self._rho = epsilon_to_rho(eps, check_delta(delta, len(records))) / self.queries
        elif mechanism == "laplace":
            self._eps = eps / self.queries
        else:
            raise ValueError(f"mechanism must be 'gaussian' or 'laplace' (got {mechanism!r})")

    @property
    def event(self) -> Event:
        return Composed(tuple(self._events)) if self._events else NoOp()

    def query(self, phi: Query) -> np.ndarray:
        if len(self._events) >= self.queries:
            raise ValueError(f"all {self.queries} declared queries are answered: declare more "
                             "queries (each then gets a smaller share of the budget)")
        v = _values(phi, self.records)
        total, k = v.sum(0), v.shape[1]
        if self.mechanism == "gaussian":
            r = mechanisms.gaussian(total, sensitivity=float(np.sqrt(k)), rho=self._rho,
                                    source=self.source)
        else:
            r = mechanisms.laplace(total, sensitivity=float(k), epsilon=self._eps,
                                   source=self.source)
        self._events.append(r.event)
        return np.clip(np.asarray(r.value, dtype=np.float64).reshape(k) / len(v), 0.0, 1.0)


class LocalVectorSQOracle:
    """Vector SQs in the local model: each coordinate is one scalar SQ of
    ``dpkit.local.LocalSQOracle`` answered by its own batch of ``n // (queries × k)`` users.

    **Guarantee**: ε-local DP for every user (replace-one on their own row), whatever the
    number of queries: each user answers one query once, by randomized response.
    """

    def __init__(self, records: np.ndarray, *, epsilon: float, queries: int, width: int,
                 source: Source | None = None) -> None:
        self.batch = len(records) // (int(queries) * int(width))
        if self.batch < 1:
            raise ValueError(f"{len(records)} users cannot answer {queries} x {width} local "
                             "queries (one each): collect more users or ask fewer queries")
        self._oracle = LocalSQOracle(records, epsilon=epsilon, source=source)

    @property
    def event(self) -> Event:
        return self._oracle.event

    def query(self, phi: Query) -> np.ndarray:
        out = []
        for j in range(len(phi(self._oracle.records[:1]).reshape(-1))):
            def coord(rows: np.ndarray, j: int = j) -> np.ndarray:
                return _values(phi, rows)[:, j]
            out.append(self._oracle.query(coord, batch_size=self.batch))
        return np.clip(np.asarray(out), 0.0, 1.0)


def _sigmoid(t: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * t))


class SQLogisticRegression(PrivateEstimator):
    """Binary logistic regression that asks only statistical queries (SQ gradient descent).

    Features are scaled into [-1, 1] by the declared ``bounds`` (clamped), an intercept column
    of 1 is added, and step t asks one vector SQ, ``φ(x, y) = (1 + (σ(w·x) - y) x) / 2`` in
    [0, 1]^(d+1), whose mean gives the gradient; ``w ← w - lr (2a - 1)``,
    ``lr = 4 learning_rate / (d + 1)``. The model returned is the last iterate.

    ``model="central"``: :class:`CentralSQOracle` (neighbouring relation: replace one row;
    (ε, δ)-DP with ``mechanism="gaussian"``, ε-DP with ``"laplace"``).
    ``model="local"``: :class:`LocalVectorSQOracle` (ε-local DP for each user, replace-one on
    their row; no trusted curator; each user answers one coordinate of one step, so the
    ``max_iter × (d+1)`` queries share the n users). The gap between the two is measured in
    ``docs/learn.md``.
    """

    _estimator_type = "classifier"

    def __init__(self, *, epsilon: float = 1.0, delta: float | None = 1e-6, bounds: Any = None,
                 classes: Any = None, model: str = "central", mechanism: str = "gaussian",
                 max_iter: int = 10, learning_rate: float = 2.0,
                 random_state: Any = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.classes = classes
        self.model = model
        self.mechanism = mechanism
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.random_state = random_state

    def _scale(self, X: np.ndarray) -> np.ndarray:
        mid, half = (self.lower_ + self.upper_) / 2, (self.upper_ - self.lower_) / 2
        z = (np.clip(X, self.lower_, self.upper_) - mid) / half
        return np.hstack([z, np.ones((len(z), 1))])

    def _oracle(self, records: np.ndarray, width: int, src: Source) -> SQOracle:
        if self.model == "central":
            return CentralSQOracle(records, epsilon=self.epsilon, delta=self.delta,
                                   queries=self.max_iter, mechanism=self.mechanism, source=src)
        if self.model == "local":
            return LocalVectorSQOracle(records, epsilon=self.epsilon, queries=self.max_iter,
                                       width=width, source=src)
        raise ValueError(f"model must be 'central' or 'local' (got {self.model!r})")

    def fit(self, X: Any, y: Any) -> SQLogisticRegression:
        """Fit through ``max_iter`` statistical queries (labels in the 2 declared classes)."""
        check_epsilon(self.epsilon)
        classes = check_classes(self.classes)
        if len(classes) != 2:
            raise ValueError("SQLogisticRegression is binary: classes must hold 2 labels")
        check_count(self.max_iter, "max_iter")
        check_positive(self.learning_rate, "learning_rate", "2.0")
        Xa = check_features(X)
        self.lower_, self.upper_ = check_bounds(self.bounds, Xa.shape[1])
        yi = check_labels(y, classes, len(Xa))
        src = resolve_source(self.random_state)
        Z = self._scale(Xa)
        d = Z.shape[1]
        oracle = self._oracle(np.hstack([Z, yi[:, None].astype(np.float64)]), d, src)
        lr = 4.0 * self.learning_rate / d
        w = np.zeros(d)
        for _ in range(self.max_iter):
            def phi(rows: np.ndarray, w: np.ndarray = w) -> np.ndarray:
                z, lab = rows[:, :-1], rows[:, -1]
                return (1.0 + (_sigmoid(z @ w) - lab)[:, None] * z) / 2.0
            w = w - lr * (2.0 * oracle.query(phi) - 1.0)
        self.coef_, self.intercept_ = w[None, :-1], np.array([w[-1]])
        self.classes_ = classes
        self.n_features_in_ = Xa.shape[1]
        if self.model == "local":  # the event is per user: each answered one query, once
            self.event_, self.epsilon_ = oracle.event, float(self.epsilon)
        else:
            gaussian = self.mechanism == "gaussian"
            self._bill(oracle.event, float(self.delta) if gaussian and self.delta else 0.0)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        return self._scale(check_features(X, self.n_features_in_)) @ np.r_[self.coef_[0],
                                                                           self.intercept_]

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[(self.decision_function(X) > 0).astype(np.int64)]

    def predict_proba(self, X: Any) -> np.ndarray:
        p = _sigmoid(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def score(self, X: Any, y: Any) -> float:
        """Accuracy."""
        return float(np.mean(self.predict(X) == np.asarray(y)))
