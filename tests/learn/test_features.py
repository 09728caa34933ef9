"""ScatterFeatures is free in privacy only if it reads nothing but the row it transforms: the
transform of a row must not depend on the other rows or on what ``fit`` saw, and it must sit in
a scikit-learn pipeline in front of a private estimator."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.learn import ScatterFeatures


def _images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, (n, 784))


@pytest.mark.parametrize("normalize", [None, "example"])
def test_a_row_is_a_function_of_itself_alone(normalize: str | None) -> None:
    a, b = _images(6, 1), _images(300, 2)  # 300 rows: across the 256-row chunks
    g = ScatterFeatures(normalize=normalize)
    alone = g.fit(a).transform(a[:1])
    beside_others = g.fit(b).transform(np.r_[b[:260], a[:1], b[260:]])[260:261]
    np.testing.assert_allclose(alone, beside_others, rtol=1e-5, atol=1e-6)


def test_in_a_scikit_learn_pipeline_before_a_private_estimator() -> None:
    pytest.importorskip("sklearn")
    from sklearn.base import clone
    from sklearn.pipeline import make_pipeline

    from dpkit.learn import GaussianNB

    pipe = make_pipeline(ScatterFeatures(normalize="example"), GaussianNB(
        epsilon=1.0, bounds=(-5.0, 5.0), classes=[0, 1], random_state=0))
    assert clone(pipe).get_params()["scatterfeatures__normalize"] == "example"
    X = np.r_[_images(40, 3) * 0.2, _images(40, 4)]
    y = np.r_[[0] * 40, [1] * 40]
    pipe.fit(X, y)
    assert pipe.predict(X).shape == (80,)
