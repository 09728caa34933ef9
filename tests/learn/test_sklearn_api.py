"""The estimators work inside scikit-learn's machinery (clone, Pipeline, cross_val_score)."""

from __future__ import annotations

import numpy as np
import pytest

import dpkit as dp
from dpkit.learn import GaussianNB, KMeans, LinearRegression, LogisticRegression

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402


def _data(n: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    src = dp.noise.seeded(11)
    X = dp.noise.uniform_float01((n, 2), source=src) * 2 - 1
    return X, (X[:, 0] + 0.3 * X[:, 1] > 0).astype(np.int64)


ESTIMATORS = [
    LogisticRegression(epsilon=2.0, delta=1e-6, feature_norm=1.5, classes=[0, 1], random_state=0),
    GaussianNB(epsilon=2.0, bounds=(-1, 1), classes=[0, 1], random_state=0),
    KMeans(n_clusters=2, epsilon=2.0, bounds=(-1, 1), random_state=0),
    LinearRegression(epsilon=2.0, delta=1e-6, feature_norm=1.5, label_bounds=(0, 1),
                     random_state=0),
]


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_clone_and_params_round_trip(est) -> None:  # type: ignore[no-untyped-def]
    c = clone(est)
    assert type(c) is type(est) and c.get_params() == est.get_params()
    c.set_params(epsilon=0.5)
    assert c.epsilon == 0.5 and est.epsilon == 2.0
    with pytest.raises(ValueError, match="no parameter"):
        c.set_params(bogus=1)


def test_cross_val_score_and_pipeline() -> None:
    X, y = _data()
    pipe = Pipeline([("scale", FunctionTransformer(lambda a: a / 2)), ("lr", ESTIMATORS[0])])
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,) and scores.mean() > 0.9
    nb = cross_val_score(ESTIMATORS[1], X, y, cv=3)
    assert nb.mean() > 0.8


def test_grid_search_sets_epsilon() -> None:
    # Each candidate is a separate fit and spends its own budget: the docs say so.
    X, y = _data()
    gs = GridSearchCV(ESTIMATORS[0], {"epsilon": [0.5, 2.0]}, cv=2).fit(X, y)
    assert gs.best_params_["epsilon"] in (0.5, 2.0)
