"""Private Gaussian naive Bayes from noisy per-class counts, sums and sums of squares."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit import mechanisms
from dpkit.events import Composed, Event, PureDP
from dpkit.noise import Source

from ._base import (
    PrivateEstimator,
    check_bounds,
    check_classes,
    check_epsilon,
    check_features,
    check_labels,
    check_laplace_epsilon,
    check_release_sensitivity,
    half_widths,
    resolve_source,
)

__all__ = ["GaussianNB"]


class GaussianNB(PrivateEstimator):
    """ε-DP Gaussian naive Bayes (pure DP: no δ).

    **Neighbouring relation**: add/remove one row (record-level privacy); replace-one costs 2ε.
    **Guarantee**: ε-DP, as three Laplace releases of ε/3 each (exact discrete Laplace on a
    grid): per-class counts (L1 sensitivity 1), per-class sums of the features clamped to
    ``bounds`` and centred on the midpoints (sensitivity Σ_j h_j, h_j the half-widths), and the
    per-class sums of their squares (sensitivity Σ_j h_j²). A row lies in one class only, so the
    blocks of all classes form one release each (parallel composition). The class set
    ``classes`` and ``bounds`` are declared (public): nothing is read from the data.

    Means, variances (floored at ``var_floor`` × h_j²) and priors are post-processing.

    >>> import numpy as np
    >>> X = np.r_[np.full((400, 2), 1.0), np.full((400, 2), -1.0)]; y = np.r_[[1] * 400, [0] * 400]
    >>> m = GaussianNB(epsilon=1.0, bounds=(-2, 2), classes=[0, 1], random_state=0).fit(X, y)
    >>> m.score(X, y), round(m.epsilon_, 9)
    (1.0, 1.0)
    """

    _estimator_type = "classifier"

    def __init__(self, *, epsilon: float = 1.0, bounds: Any = None, classes: Any = None,
                 var_floor: float = 1e-2, random_state: Any = None) -> None:
        self.epsilon = epsilon
        self.bounds = bounds
        self.classes = classes
        self.var_floor = var_floor
        self.random_state = random_state

    def _planned_event(self, n_features: int, contributions: int) -> Event:
        third = PureDP(check_epsilon(self.epsilon) / 3)
        # each third is one discrete Laplace release of up to (classes x features) values
        check_laplace_epsilon(third.epsilon, len(check_classes(self.classes)) * n_features)
        # what fit checks, before the curator's charge (FINDINGS.md G5); and what its sums and
        # squares' sensitivities will be (huge or tiny bounds: refused here, not in fit)
        half = half_widths((-1.0, 1.0) if self.bounds is None else self.bounds, n_features)
        with np.errstate(over="ignore"):
            for sens in (float(half.sum()), float((half**2).sum())):
                check_release_sensitivity(contributions * sens, "bounds")
        self._check_floor()
        return Composed((third, third, third))

    def _check_floor(self) -> None:
        if not self.var_floor > 0:
            raise ValueError(f"var_floor must be > 0 (got {self.var_floor!r})")

    def fit(self, X: Any, y: Any, units: Any = None, *,
            source: Source | None = None) -> GaussianNB:
        """Fit on ``X`` (clamped to ``bounds``) and ``y`` (labels among ``classes``);
        ``units`` (the curator's) is accepted and unused (see ``privacy_event``); ``source``:
        this fit's noise source, over ``random_state`` (the curator passes its project's)."""
        eps = check_epsilon(self.epsilon)
        classes = check_classes(self.classes)
        Xa = self._checked_rows(X)
        lo, hi = check_bounds(self._declared_bounds(self.bounds), Xa.shape[1])
        yi = check_labels(y, classes, len(Xa))
        self._check_floor()
        src = resolve_source(self.random_state, source)
        mid, half = (lo + hi) / 2.0, (hi - lo) / 2.0
        Xc = np.clip(Xa, lo, hi) - mid
        k, d = len(classes), Xa.shape[1]
        onehot = np.zeros((len(Xa), k))
        onehot[np.arange(len(Xa)), yi] = 1.0
        c = float(self._contributions())
        counts = mechanisms.laplace(onehot.sum(0), sensitivity=c, epsilon=eps / 3, source=src)
        sums = mechanisms.laplace((onehot.T @ Xc).ravel(), sensitivity=c * float(half.sum()),
                                  epsilon=eps / 3, source=src)
        squares = mechanisms.laplace((onehot.T @ Xc**2).ravel(),
                                     sensitivity=c * float((half**2).sum()), epsilon=eps / 3,
                                     source=src)
        n_c = np.maximum(np.asarray(counts.value, dtype=np.float64), 1.0)
        mean = np.clip(np.asarray(sums.value).reshape(k, d) / n_c[:, None], -half, half)
        second = np.asarray(squares.value).reshape(k, d) / n_c[:, None]
        self.var_ = np.maximum(second - mean**2, self.var_floor * half**2)
        self.theta_ = mean + mid
        self.class_prior_ = n_c / n_c.sum()
        self.classes_ = classes
        self.n_features_in_ = d
        self._bill(Composed((counts.event, sums.event, squares.event)), 0.0)
        return self

    def _joint_log_likelihood(self, X: Any) -> np.ndarray:
        Xa = check_features(X, self.n_features_in_)
        ll = -0.5 * (np.log(2 * np.pi * self.var_).sum(1)[None, :]
                     + (((Xa[:, None, :] - self.theta_[None]) ** 2) / self.var_[None]).sum(2))
        return ll + np.log(self.class_prior_)[None, :]

    def predict_proba(self, X: Any) -> np.ndarray:
        jll = self._joint_log_likelihood(X)
        jll -= jll.max(1, keepdims=True)
        p = np.exp(jll)
        return p / p.sum(1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[np.argmax(self._joint_log_likelihood(X), axis=1)]

    def score(self, X: Any, y: Any) -> float:
        """Accuracy."""
        return float(np.mean(self.predict(X) == np.asarray(y)))
