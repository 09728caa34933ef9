"""dpkit.learn.MLPClassifier: the scikit-learn API over make_private."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from dpkit.learn import MLPClassifier


def _blobs(n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    X = np.r_[np.full((n // 2, 2), -0.5), np.full((n // 2, 2), 0.5)]
    X = X + np.linspace(-0.1, 0.1, n)[:, None]  # deterministic spread, no randomness here
    return X, np.r_[["a"] * (n // 2), ["b"] * (n // 2)]


def test_fit_predict_score_and_epsilon() -> None:
    X, y = _blobs()
    clf = MLPClassifier((8,), epsilon=2.0, delta=1e-4, epochs=8, batch_size=100,
                        learning_rate=0.5, random_state=0).fit(X, y)
    assert list(clf.classes_) == ["a", "b"]
    assert clf.predict_proba(X).shape == (400, 2)
    assert clf.score(X, y) > 0.9  # separable blobs; seeded, so deterministic
    assert 1.9 < clf.epsilon_ <= 2.0
    assert clf.training_.insecure  # random_state makes the noise reproducible, and says so
    assert clf.get_params()["hidden_layer_sizes"] == (8,)
    assert clf.set_params(epochs=3).epochs == 3


def test_labels_outside_classes_are_refused() -> None:
    X, y = _blobs()
    with pytest.raises(ValueError, match="not in classes"):
        MLPClassifier(classes=["a"], epochs=1, delta=1e-4).fit(X, y)
    with pytest.raises(ValueError, match="unknown parameter"):
        MLPClassifier().set_params(alpha=1.0)


def test_features_and_schedule() -> None:
    X, y = _blobs()

    class Doubler:  # a fixed public map: never fitted, only transform() is called
        def transform(self, A: np.ndarray) -> np.ndarray:
            return np.c_[A, 2 * np.asarray(A)]

    clf = MLPClassifier((), epsilon=2.0, delta=1e-4, epochs=4, batch_size=100,
                        learning_rate=0.5, schedule="cosine", features=Doubler(),
                        random_state=0).fit(X, y)
    assert clf.network_[0].in_features == 4  # trained on the transformed inputs
    assert clf.score(X, y) > 0.9  # and predicts through them too
    with pytest.raises(ValueError, match="schedule"):
        MLPClassifier(schedule="step", delta=1e-4).fit(X, y)
    with pytest.raises(TypeError, match="transform"):
        MLPClassifier(features=object(), delta=1e-4).fit(X, y)
