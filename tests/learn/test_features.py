"""GaborFeatures: fixed filters, example by example, so it is free in privacy (checked here:
the transform of a row never depends on the other rows or on what ``fit`` saw)."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.learn import GaborFeatures
from dpkit.learn.features import gabor_bank


def _images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, (n, 784))


def test_shape_and_finite() -> None:
    f = GaborFeatures().fit_transform(_images(5, 0))
    assert f.shape == (5, 17 * 49) and f.dtype == np.float32 and np.all(np.isfinite(f))
    assert GaborFeatures(pool=7).fit_transform(_images(2, 0)).shape == (2, 17 * 16)


def test_each_row_is_a_function_of_itself_alone() -> None:
    a, b = _images(6, 1), _images(6, 2)
    g = GaborFeatures(chunk=4)
    alone = g.fit(a).transform(a[:1])
    beside_others = g.fit(b).transform(np.r_[a[:1], b])[:1]  # fit on other data, other rows
    np.testing.assert_array_equal(alone, beside_others)


def test_filters_are_zero_mean_unit_norm_pairs() -> None:
    bank = gabor_bank(7, (4.0, 7.0), 8)
    assert bank.shape == (32, 7, 7)
    np.testing.assert_allclose(bank.reshape(32, -1).sum(1), 0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(bank.reshape(32, -1), axis=1), 1)


def test_a_shifted_stroke_moves_the_pooled_energy() -> None:
    """A vertical stroke lights the vertical-edge maps where it is and nowhere else."""
    img = np.zeros((2, 28, 28))
    img[0, 4:24, 6] = 1.0
    img[1, 4:24, 20] = 1.0
    f = GaborFeatures(normalize="none").fit_transform(img.reshape(2, -1)).reshape(2, 17, 7, 7)
    left, right = f[:, 1:].sum(1)[:, :, 1].sum(1), f[:, 1:].sum(1)[:, :, 5].sum(1)
    assert left[0] > 5 * left[1] and right[1] > 5 * right[0]


@pytest.mark.parametrize("kw,msg", [({"normalize": "batch"}, "normalize"),
                                    ({"size": 6}, "odd"), ({"pool": 0}, "pool"),
                                    ({"wavelengths": ()}, "wavelengths")])
def test_bad_parameters(kw: dict[str, object], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        GaborFeatures(**kw).fit(None)  # type: ignore[arg-type]


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"shape \(n, 784\)"):
        GaborFeatures().transform(np.zeros((2, 100)))
    x = _images(1, 0)
    x[0, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        GaborFeatures().transform(x)


def test_in_a_scikit_learn_pipeline() -> None:
    sklearn = pytest.importorskip("sklearn")
    from sklearn.base import clone
    from sklearn.pipeline import make_pipeline

    from dpkit.learn import GaussianNB

    pipe = make_pipeline(GaborFeatures(pool=14), GaussianNB(
        epsilon=1.0, bounds=(-5.0, 5.0), classes=[0, 1], random_state=0))
    assert sklearn.__version__ and clone(pipe).get_params()["gaborfeatures__pool"] == 14
    X = np.r_[_images(40, 3) * 0.2, _images(40, 4)]
    y = np.r_[[0] * 40, [1] * 40]
    pipe.fit(X, y)
    assert pipe.predict(X).shape == (80,)
