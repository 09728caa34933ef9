"""Private k-means: Lloyd's iterations on noisy per-cluster counts and sums."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit import mechanisms, noise
from dpkit.events import Composed, Event, PureDP, SelfComposed
from dpkit.noise import Source

from ._base import (
    PrivateEstimator,
    check_bounds,
    check_count,
    check_epsilon,
    check_features,
    check_laplace_epsilon,
    check_release_sensitivity,
    half_widths,
    resolve_source,
)

__all__ = ["KMeans"]


class KMeans(PrivateEstimator):
    """ε-DP k-means (Lloyd's algorithm on noisy statistics; pure DP, no δ).

    **Neighbouring relation**: add/remove one row (record-level privacy); replace-one costs 2ε.
    **Guarantee**: ε-DP. The initial centres depend on ``bounds`` only (greedy farthest points
    among uniform draws in the box: spread out, data-independent). Each of the ``max_iter``
    iterations assigns rows to their nearest centre
    and releases, with exact discrete Laplace noise, the per-cluster counts (L1 sensitivity 1,
    ε/(2·max_iter)) and per-cluster sums of the rows clamped to ``bounds`` and centred
    (sensitivity Σ_j h_j, h_j the half-widths, ε/(2·max_iter)); a row is in one cluster, so all
    clusters share each release. New centres (sum / count, clamped to the box; a centre whose
    noisy count is below 1 stays put) are post-processing.

    >>> import numpy as np
    >>> X = np.r_[np.full((500, 2), 0.5), np.full((500, 2), -0.5)]
    >>> m = KMeans(n_clusters=2, epsilon=1.0, bounds=(-1, 1), random_state=3).fit(X)
    >>> c = np.sort(m.cluster_centers_[:, 0]); bool(np.all(np.abs(c - [-0.5, 0.5]) < 0.15))
    True
    """

    _estimator_type = "clusterer"

    def __init__(self, *, n_clusters: int = 8, epsilon: float = 1.0, bounds: Any = None,
                 max_iter: int = 5, random_state: Any = None) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.bounds = bounds
        self.max_iter = max_iter
        self.random_state = random_state

    def _planned_event(self, n_features: int, contributions: int) -> Event:
        steps = check_count(self.max_iter, "max_iter")
        k = check_count(self.n_clusters, "n_clusters")
        # each step's sums: one discrete Laplace release of k x n_features values
        check_laplace_epsilon(check_epsilon(self.epsilon) / (2 * steps), k * n_features)
        # what fit checks, before the curator's charge (G5), and the sums' sensitivity
        half = half_widths((-1.0, 1.0) if self.bounds is None else self.bounds, n_features)
        check_release_sensitivity(contributions * float(half.sum()), "bounds")
        return SelfComposed(PureDP(check_epsilon(self.epsilon) / (2 * steps)), 2 * steps)

    def fit(self, X: Any, y: Any = None, units: Any = None, *,
            source: Source | None = None) -> KMeans:
        """Fit on ``X`` (clamped to ``bounds``); ``y`` is ignored (scikit-learn's convention),
        ``units`` too (the curator's; see ``privacy_event``); ``source``: this fit's noise
        source, over ``random_state`` (the curator passes its project's)."""
        eps = check_epsilon(self.epsilon)
        check_count(self.n_clusters, "n_clusters")
        check_count(self.max_iter, "max_iter")
        Xa = self._checked_rows(X)
        lo, hi = check_bounds(self._declared_bounds(self.bounds), Xa.shape[1])
        src = resolve_source(self.random_state, source)
        mid, half = (lo + hi) / 2.0, (hi - lo) / 2.0
        Xc = np.clip(Xa, lo, hi) - mid
        k, d = self.n_clusters, Xa.shape[1]
        c = float(self._contributions())
        centres = self._spread_init(k, half, src)
        step = eps / (2 * self.max_iter)
        events: list[Event] = []
        for _ in range(self.max_iter):
            label = self._nearest(Xc, centres)
            onehot = np.zeros((len(Xc), k))
            onehot[np.arange(len(Xc)), label] = 1.0
            counts = mechanisms.laplace(onehot.sum(0), sensitivity=c, epsilon=step, source=src)
            sums = mechanisms.laplace((onehot.T @ Xc).ravel(), sensitivity=c * float(half.sum()),
                                      epsilon=step, source=src)
            events += [counts.event, sums.event]
            n_c = np.asarray(counts.value, dtype=np.float64)
            s = np.asarray(sums.value).reshape(k, d)
            ok = n_c >= 1.0
            centres[ok] = np.clip(s[ok] / n_c[ok, None], -half, half)
        self.cluster_centers_ = centres + mid
        self.n_features_in_ = d
        self._bill(Composed(tuple(events)), 0.0)
        return self

    @staticmethod
    def _spread_init(k: int, half: np.ndarray, src: Any) -> np.ndarray:
        """k well-spread centres in the box, data-independent: from 20k uniform candidates,
        greedy farthest-point (a random first one), so no two start inside the same blob."""
        cand = (noise.uniform_float01((20 * k, len(half)), source=src) * 2.0 - 1.0) * half
        chosen = [0]
        dist = ((cand - cand[0]) ** 2).sum(1)
        for _ in range(k - 1):
            nxt = int(np.argmax(dist))
            chosen.append(nxt)
            dist = np.minimum(dist, ((cand - cand[nxt]) ** 2).sum(1))
        return cand[chosen].copy()

    @staticmethod
    def _nearest(X: np.ndarray, centres: np.ndarray) -> np.ndarray:
        d2 = (X**2).sum(1)[:, None] - 2 * X @ centres.T + (centres**2).sum(1)[None, :]
        return np.argmin(d2, axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest centre (post-processing: free)."""
        return self._nearest(check_features(X, self.n_features_in_), self.cluster_centers_)

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X).predict(X)

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the sum of squared distances to the nearest centre (scikit-learn's sign)."""
        Xa = check_features(X, self.n_features_in_)
        c = self.cluster_centers_[self._nearest(Xa, self.cluster_centers_)]
        return -float(((Xa - c) ** 2).sum())
