"""Private PAC learning by the exponential mechanism over a finite hypothesis class
(Kasiviswanathan, Lee, Nissim, Raskhodnikova, Smith 2011, "What can we learn privately?").

The learner scores every hypothesis by minus its number of training errors and samples one by
the exponential mechanism. Under add/remove one row every error count moves by at most 1 and
all in the same direction (a new row only adds errors), so the scores are monotonic and the
law is ``P(h) ∝ exp(-ε · errors(h))``.

**Sample complexity** (empirical): with probability >= 1 - β the output makes at most
``OPT + (ln|H| + ln(1/β)) / ε`` training errors, so its excess empirical error rate is at most
``(ln|H| + ln(1/β)) / (ε n)``; adding the usual uniform-convergence term, ``n = O((ln|H| +
ln(1/β)) / (α ε) + (ln|H| + ln(1/β)) / α²)`` rows give excess true error α (realizable: the
second term becomes ``/ α``). For thresholds on a domain of m points under a uniform
distribution (realizable), :func:`threshold_excess` gives a sharper expectation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from dpkit import mechanisms

from ._base import PrivateEstimator, check_epsilon, resolve_source

__all__ = [
    "Conjunctions",
    "FiniteClassLearner",
    "HypothesisClass",
    "Intervals",
    "Thresholds",
    "pac_excess_bound",
    "threshold_excess",
]


class HypothesisClass(Protocol):
    """A finite class: its size, every member's training errors, and a member's predictions."""

    def __len__(self) -> int: ...

    def errors(self, X: np.ndarray, y: np.ndarray) -> np.ndarray: ...

    def predict(self, index: int, X: np.ndarray) -> np.ndarray: ...


def _points(X: Any, size: int) -> np.ndarray:
    x = np.asarray(X).reshape(len(X), -1)[:, 0]
    if not np.issubdtype(x.dtype, np.integer) and not np.all(np.mod(x, 1) == 0):
        raise ValueError("points must be integers in [0, domain_size)")
    x = x.astype(np.int64)
    if np.any((x < 0) | (x >= size)):
        raise ValueError(f"points must lie in [0, {size}) (the declared domain)")
    return x


class Thresholds:
    """``h_t(x) = 1[x >= t]`` on the domain {0, ..., m-1}, t = 0..m (m + 1 hypotheses)."""

    def __init__(self, domain_size: int) -> None:
        self.domain_size = int(domain_size)

    def __len__(self) -> int:
        return self.domain_size + 1

    def errors(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        x = _points(X, self.domain_size)
        pos = np.bincount(x[y == 1], minlength=self.domain_size)
        neg = np.bincount(x[y == 0], minlength=self.domain_size)
        # h_t errs on positives below t and negatives at or above t
        below_pos = np.concatenate([[0], np.cumsum(pos)])
        at_or_above_neg = neg.sum() - np.concatenate([[0], np.cumsum(neg)])
        return below_pos + at_or_above_neg

    def predict(self, index: int, X: np.ndarray) -> np.ndarray:
        return (_points(X, self.domain_size) >= index).astype(np.int64)


class Intervals:
    """``h_[a,b)(x) = 1[a <= x < b]`` on {0, ..., m-1}, 0 <= a <= b <= m (all empty ones: one)."""

    def __init__(self, domain_size: int) -> None:
        self.domain_size = int(domain_size)
        a, b = np.triu_indices(self.domain_size + 1, k=1)
        self._a = np.concatenate([[0], a])  # index 0: the empty interval
        self._b = np.concatenate([[0], b])

    def __len__(self) -> int:
        return len(self._a)

    def errors(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        x = _points(X, self.domain_size)
        cp = np.concatenate([[0], np.cumsum(np.bincount(x[y == 1], minlength=self.domain_size))])
        cn = np.concatenate([[0], np.cumsum(np.bincount(x[y == 0], minlength=self.domain_size))])
        inside_pos = cp[self._b] - cp[self._a]
        inside_neg = cn[self._b] - cn[self._a]
        return (cp[-1] - inside_pos) + inside_neg

    def predict(self, index: int, X: np.ndarray) -> np.ndarray:
        x = _points(X, self.domain_size)
        return ((x >= self._a[index]) & (x < self._b[index])).astype(np.int64)


class Conjunctions:
    """Conjunctions of literals over d boolean features: each feature required 1, required 0
    or absent (3^d hypotheses; monotone=True: 1 or absent, 2^d). d <= 12."""

    def __init__(self, n_features: int, *, monotone: bool = False) -> None:
        if not 1 <= n_features <= 12:
            raise ValueError(f"n_features must be in 1..12 (3^d hypotheses; got {n_features})")
        self.n_features = int(n_features)
        self.monotone = monotone
        choices = (1, 2) if monotone else (0, 1, 2)  # 0: x_j = 0, 1: x_j = 1, 2: absent
        self._table = np.array(list(itertools.product(choices, repeat=n_features)), np.int8)

    def __len__(self) -> int:
        return len(self._table)

    def _check(self, X: np.ndarray) -> np.ndarray:
        x = np.asarray(X)
        if x.ndim != 2 or x.shape[1] != self.n_features or not np.all((x == 0) | (x == 1)):
            raise ValueError(f"X must be 0/1 with {self.n_features} columns")
        return x.astype(np.int8)

    def errors(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        x = self._check(X)
        target = y == 1
        out = np.empty(len(self._table), dtype=np.int64)
        # blocks of hypotheses keep the (hypotheses x rows) table near 16 MB whatever d and n
        block = max(1, 2**24 // max(1, len(x)))
        for start in range(0, len(self._table), block):
            t = self._table[start : start + block]
            ok = np.ones((len(t), len(x)), dtype=bool)
            for j in range(self.n_features):
                ok &= (t[:, j][:, None] == 2) | (t[:, j][:, None] == x[None, :, j])
            out[start : start + len(t)] = (ok != target[None, :]).sum(1)
        return out

    def predict(self, index: int, X: np.ndarray) -> np.ndarray:
        x = self._check(X)
        t = self._table[index]
        return np.all((t[None, :] == 2) | (t[None, :] == x), axis=1).astype(np.int64)


class _Listed:
    """A class given as a list of callables ``h(X) -> labels in {0, 1}``."""

    def __init__(self, hypotheses: Sequence[Callable[[np.ndarray], Any]]) -> None:
        self.hypotheses = list(hypotheses)

    def __len__(self) -> int:
        return len(self.hypotheses)

    def errors(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.array([int(np.sum(np.asarray(h(X)) != y)) for h in self.hypotheses])

    def predict(self, index: int, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.hypotheses[index](X)).astype(np.int64)


class FiniteClassLearner(PrivateEstimator):
    """ε-DP learner over a finite hypothesis class by the exponential mechanism.

    **Neighbouring relation**: add/remove one row (record-level privacy).
    **Guarantee**: ε-DP (and ε-bounded range): one ``dpkit.mechanisms.exponential`` call with
    scores ``-errors(h)``, sensitivity 1, ``monotonic=True`` (adding a row never lowers an error
    count), so ``P(h) ∝ exp(-ε errors(h))``. Event ``Exponential(ε)``. Under replace-one the
    counts are not monotonic: the same draw is 2ε-DP.

    ``hypotheses``: a class object (:class:`Thresholds`, :class:`Intervals`,
    :class:`Conjunctions`, or anything with ``__len__``, ``errors(X, y)``, ``predict(i, X)``) or
    a list of callables ``h(X) -> {0, 1}``. After ``fit``: ``index_`` (the chosen hypothesis),
    ``errors_bound_`` = ``(ln|H| + ln(1/β))/ε`` at β = 0.05: the extra training errors beyond
    the best hypothesis, exceeded with probability <= 5%.

    >>> import numpy as np
    >>> x = np.arange(1000) % 64; y = (x >= 40).astype(int)
    >>> m = FiniteClassLearner(hypotheses=Thresholds(64), epsilon=1.0, random_state=1)
    >>> abs(m.fit(x[:, None], y).index_ - 40) <= 2
    True
    """

    _estimator_type = "classifier"

    def __init__(self, *, hypotheses: Any = None, epsilon: float = 1.0,
                 random_state: Any = None) -> None:
        self.hypotheses = hypotheses
        self.epsilon = epsilon
        self.random_state = random_state

    def _class(self) -> HypothesisClass:
        h = self.hypotheses
        if h is None:
            raise ValueError("hypotheses is required: pass a class such as Thresholds(1024) or "
                             "a list of callables h(X) -> 0/1")
        if hasattr(h, "errors") and hasattr(h, "predict"):
            cls: HypothesisClass = h
        else:
            cls = _Listed(h)
        if len(cls) == 0:
            raise ValueError("hypotheses is empty: pass at least one hypothesis")
        return cls

    def fit(self, X: Any, y: Any) -> FiniteClassLearner:
        """Pick a hypothesis with few training errors on ``X``, ``y`` (labels 0/1)."""
        eps = check_epsilon(self.epsilon)
        cls = self._class()
        ya = np.asarray(y)
        if ya.ndim != 1 or len(ya) != len(X) or not np.all((ya == 0) | (ya == 1)):
            raise ValueError("y must be 1-d with labels in the declared classes {0, 1}, "
                             "one per row of X")
        Xa = np.asarray(X)
        if Xa.dtype.kind == "f" and not np.all(np.isfinite(Xa)):
            raise ValueError("X contains NaN or infinite values: drop or impute them")
        src = resolve_source(self.random_state)
        errs = np.asarray(cls.errors(Xa, ya.astype(np.int64)), dtype=np.float64)
        r = mechanisms.exponential(range(len(cls)), -errs, sensitivity=1.0, epsilon=eps,
                                   monotonic=True, source=src)
        self.index_ = int(r.value)
        self.classes_ = np.array([0, 1])
        self.errors_bound_ = pac_excess_bound(len(cls), eps, beta=0.05)
        self.hypothesis_class_ = cls
        self._bill(r.event, 0.0)
        return self

    def predict(self, X: Any) -> np.ndarray:
        return self.hypothesis_class_.predict(self.index_, np.asarray(X))

    def score(self, X: Any, y: Any) -> float:
        """Accuracy."""
        return float(np.mean(self.predict(X) == np.asarray(y)))


def pac_excess_bound(size: int, epsilon: float, *, beta: float = 0.05) -> float:
    """Extra training errors of the output over the best hypothesis, exceeded w.p. <= β:
    ``(ln|H| + ln(1/β)) / ε`` (monotonic exponential mechanism). Divide by n for a rate."""
    return (math.log(size) + math.log(1.0 / beta)) / epsilon


def threshold_excess(n: int, domain_size: int, epsilon: float) -> tuple[float, float]:
    """Expected excess true error of :class:`Thresholds` learnt on n rows drawn uniformly from
    the domain, labels from a threshold in it (realizable): ``(bound, estimate)``.

    A threshold k steps from the target errs on the rows in those k cells, ``Bin(n, k/m)``, so
    its weight relative to the target's (weight 1) has mean ``a_k = (1 - k(1-e^-ε)/m)^n``.
    ``bound = (2/m) Σ_k k a_k`` is rigorous (P(h) <= weight(h) / weight(target)); ``estimate
    = Σ_k k a_k / (m Σ_k a_k)`` (both sides, k = 0 once) replaces the normaliser by its mean.
    """
    m = int(domain_size)
    k = np.arange(1, m + 1, dtype=np.float64)
    a = np.exp(n * np.log1p(-k * (1.0 - math.exp(-epsilon)) / m))
    bound = float(2.0 * np.sum(k * a) / m)
    estimate = float(2.0 * np.sum(k * a) / (m * (1.0 + 2.0 * np.sum(a))))
    return bound, estimate
