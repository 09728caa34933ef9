"""dpkit.learn estimators: they learn on easy data, bill their privacy, refuse bad input early."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpkit as dp
from dpkit import accounting, events
from dpkit.learn import GaussianNB, KMeans, LinearRegression, LogisticRegression

from ._helpers import exploding


def _blobs(n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    src = dp.noise.seeded(seed)
    y = (dp.noise.uniform_float01(n, source=src) < 0.5).astype(np.int64)
    X = dp.noise.uniform_float01((n, 3), source=src) * 0.8 - 0.4
    X[:, 0] += np.where(y == 1, 0.5, -0.5)
    return X, y


def _logreg(**kw: object) -> LogisticRegression:
    params: dict = dict(epsilon=1.0, delta=1e-6, feature_norm=1.5, classes=[0, 1], random_state=1)
    params.update(kw)
    return LogisticRegression(**params)


def test_logistic_learns_and_bills() -> None:
    X, y = _blobs()
    m = _logreg().fit(X, y)
    # the blobs are separable along x0 with margin 0.1; noise at eps=1 on 2,000 rows is small
    assert m.score(X, y) > 0.97
    assert isinstance(m.event_, events.Event)
    assert m.epsilon_ <= 1.0 + 1e-9
    assert m.epsilon_ == accounting.epsilon(m.event_, delta=1e-6)
    p = m.predict_proba(X)
    assert p.shape == (len(X), 2) and np.allclose(p.sum(1), 1)


def test_logistic_multiclass_softmax() -> None:
    src = dp.noise.seeded(8)
    y = dp.noise.uniform_int(3, 3000, source=src)
    centres = np.array([[0.6, 0.0], [-0.3, 0.5], [-0.3, -0.5]])
    X = centres[y] + (dp.noise.uniform_float01((3000, 2), source=src) - 0.5) * 0.4
    m = _logreg(classes=["a", "b", "c"], random_state=2).fit(X, np.array(["a", "b", "c"])[y])
    assert m.coef_.shape == (3, 2) and m.intercept_.shape == (3,)
    assert m.score(X, np.array(["a", "b", "c"])[y]) > 0.97
    p = m.predict_proba(X)
    assert p.shape == (3000, 3) and np.allclose(p.sum(1), 1) and m.epsilon_ <= 1.0 + 1e-9


def test_logistic_labels_are_the_declared_classes() -> None:
    X, y = _blobs()
    m = _logreg(classes=["no", "yes"]).fit(X, np.where(y == 1, "yes", "no"))
    assert set(m.predict(X)) <= {"no", "yes"}


def test_logistic_seeded_is_reproducible_and_secure_is_not_fixed() -> None:
    X, y = _blobs()
    a = _logreg(random_state=7).fit(X, y).coef_
    b = _logreg(random_state=7).fit(X, y).coef_
    c = _logreg(random_state=None).fit(X, y).coef_
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_logistic_clips_rows_so_one_outlier_cannot_dominate() -> None:
    X, y = _blobs()
    X2 = X.copy()
    X2[0] = [1e6, 1e6, 1e6]
    a = _logreg(random_state=3).fit(X, y).coef_
    b = _logreg(random_state=3).fit(X2, y).coef_
    assert np.max(np.abs(a - b)) < 0.5  # clipped to norm 1.5, the row moves little


def test_linear_regression_recovers_a_line() -> None:
    src = dp.noise.seeded(4)
    X = dp.noise.uniform_float01((5000, 2), source=src) * 2 - 1
    y = 1.5 * X[:, 0] - 0.5 * X[:, 1] + 2.0
    m = LinearRegression(epsilon=1.0, delta=1e-6, feature_norm=math.sqrt(2), label_bounds=(-2, 6),
                         random_state=0).fit(X, y)
    assert np.allclose(m.coef_, [1.5, -0.5], atol=0.1) and abs(m.intercept_ - 2.0) < 0.1
    assert m.score(X, y) > 0.95 and m.epsilon_ <= 1.0 + 1e-9


def test_gaussian_nb_learns_and_is_pure() -> None:
    X, y = _blobs()
    m = GaussianNB(epsilon=1.0, bounds=(-1, 1), classes=[0, 1], random_state=2).fit(X, y)
    assert m.score(X, y) > 0.95
    assert accounting.epsilon(m.event_, delta=0.0) <= 1.0 + 1e-9
    assert m.predict_proba(X).shape == (len(X), 2)


def test_kmeans_finds_two_clusters() -> None:
    X, y = _blobs(4000)
    m = KMeans(n_clusters=2, epsilon=1.0, bounds=(-1, 1), random_state=5).fit(X)
    assert sorted(np.round(m.cluster_centers_[:, 0], 1)) == pytest.approx([-0.5, 0.5], abs=0.11)
    agree = np.mean(m.predict(X) == y)
    assert max(agree, 1 - agree) > 0.95
    assert m.epsilon_ <= 1.0 + 1e-9 and m.score(X) < 0


# ------------------------------------------------------------------ bad input, before any noise
BAD_CASES = [
    ("missing feature_norm", dict(feature_norm=None), None, "feature_norm is required"),
    ("missing classes", dict(classes=None), None, "classes is required"),
    ("epsilon <= 0", dict(epsilon=0.0), None, "epsilon must be > 0"),
    ("epsilon nan", dict(epsilon=float("nan")), None, "epsilon"),
    ("delta >= 1/n", dict(delta=1e-3), None, "delta must lie in"),
    ("label outside classes", {}, "label", "outside the declared classes"),
    ("nan feature", {}, "nan", "NaN or infinite"),
    ("inf feature", {}, "inf", "NaN or infinite"),
]


@pytest.mark.parametrize(("name", "params", "corrupt", "message"), BAD_CASES,
                         ids=[c[0] for c in BAD_CASES])
def test_logistic_refuses_bad_input_before_training(name: str, params: dict, corrupt: str | None,
                                                    message: str) -> None:
    X, y = _blobs()
    y = y.copy()
    if corrupt == "label":
        y[3] = 2
    elif corrupt == "nan":
        X[5, 1] = np.nan
    elif corrupt == "inf":
        X[5, 1] = np.inf
    m = _logreg(random_state=exploding(), **params)
    with pytest.raises((ValueError, TypeError), match=message):
        m.fit(X, y)
    assert not hasattr(m, "event_")


@pytest.mark.parametrize("make", [
    lambda s: GaussianNB(epsilon=1.0, classes=[0, 1], random_state=s),
    lambda s: KMeans(n_clusters=2, epsilon=1.0, random_state=s),
    lambda s: LinearRegression(epsilon=1.0, feature_norm=1.0, random_state=s),
    lambda s: LinearRegression(epsilon=1.0, label_bounds=(0, 1), random_state=s),
], ids=["nb-bounds", "kmeans-bounds", "linreg-label-bounds", "linreg-feature-norm"])
def test_missing_bounds_say_what_to_pass(make) -> None:  # type: ignore[no-untyped-def]
    X, y = _blobs(200)
    with pytest.raises(ValueError, match=r"required.*pass e\.g\.|required: declare"):
        make(exploding()).fit(X, y)


def test_nb_refuses_undeclared_label_and_bad_epsilon() -> None:
    X, y = _blobs(200)
    with pytest.raises(ValueError, match="outside the declared classes"):
        GaussianNB(epsilon=1.0, bounds=(-1, 1), classes=[0, 5], random_state=exploding()).fit(X, y)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        KMeans(n_clusters=2, epsilon=-1.0, bounds=(-1, 1), random_state=exploding()).fit(X)


def test_the_exploding_source_does_explode_on_a_valid_fit() -> None:
    X, y = _blobs(200)
    with pytest.raises(AssertionError, match="noise drawn"):
        _logreg(random_state=exploding()).fit(X, y)


def _all_estimators(source: dp.noise.Source, **kw: object) -> list:
    return [
        _logreg(random_state=source, **kw),
        LinearRegression(epsilon=1.0, delta=1e-6, feature_norm=1.0, label_bounds=(0, 1),
                         random_state=source, **kw),
        GaussianNB(epsilon=1.0, bounds=(-1, 1), classes=[0, 1], random_state=source, **kw),
        KMeans(n_clusters=2, epsilon=1.0, bounds=(-1, 1), random_state=source, **kw),
    ]


@pytest.mark.parametrize("index", range(4), ids=["logreg", "linreg", "nb", "kmeans"])
@pytest.mark.parametrize(("corrupt", "message"), [
    ("nan", "NaN or infinite"), ("inf", "NaN or infinite"), ("eps0", "epsilon must be > 0"),
    ("eps_inf", "epsilon must be (a )?finite"), ("empty", "non-empty 2-d"),
])
def test_every_estimator_refuses_bad_input_before_noise(index: int, corrupt: str,
                                                        message: str) -> None:
    X, y = _blobs(300)
    kw: dict = {}
    if corrupt == "nan":
        X[0, 0] = np.nan
    elif corrupt == "inf":
        X[1, 2] = -np.inf
    elif corrupt == "eps0":
        kw = {"epsilon": 0.0}
    elif corrupt == "eps_inf":
        kw = {"epsilon": float("inf")}
    elif corrupt == "empty":
        X = X[:, :0]
    est = _all_estimators(exploding())[index]
    est.set_params(**kw)
    with pytest.raises(ValueError, match=message):
        est.fit(X, y)
    assert not hasattr(est, "event_")


def test_delta_must_be_below_one_over_n_for_the_delta_estimators() -> None:
    X, y = _blobs(300)
    for est in _all_estimators(exploding())[:2]:
        est.set_params(delta=1.0 / 300)
        with pytest.raises(ValueError, match=r"delta must lie in \(0, 1/n\)"):
            est.fit(X, y)


@pytest.mark.parametrize(("params", "message"), [
    ({"max_iter": True}, "max_iter must be an int >= 1"),
    ({"max_iter": 0}, "max_iter must be an int >= 1"),
    ({"alpha": -1.0}, "alpha must be >= 0"),
    ({"learning_rate": 0.0}, "learning_rate must be > 0"),
    ({"classes": [0]}, "at least two distinct labels"),
    ({"classes": [0, 1, 1]}, "at least two distinct labels"),
])
def test_logistic_refuses_bad_hyperparameters(params: dict, message: str) -> None:
    X, y = _blobs(200)
    with pytest.raises((ValueError, TypeError), match=message):
        _logreg(random_state=exploding(), **params).fit(X, y)
