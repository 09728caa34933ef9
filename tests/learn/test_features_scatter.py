"""ScatterFeatures: a fixed, row-wise (hence privacy-free) transform; shapes and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.learn.features import ScatterFeatures, morlet_bank


def _images(n: int) -> np.ndarray:
    # deterministic, varied images (no randomness needed here)
    i = np.arange(n)[:, None, None]
    yy, xx = np.mgrid[0:28, 0:28]
    return (np.sin(0.3 * xx * (1 + i % 3) + 0.2 * yy * (i % 5)) ** 2).reshape(n, -1)


def test_shape_and_rows_are_transformed_independently() -> None:
    X = _images(7)
    f = ScatterFeatures((28, 28))
    F = f.fit(X).transform(X)
    assert F.shape == (7, 833) and F.dtype == np.float32
    # row-wise: a row's features do not depend on the other rows (what makes it free)
    alone = f.transform(X[3:4])
    np.testing.assert_allclose(alone[0], F[3], rtol=1e-5, atol=1e-6)
    changed = X.copy()
    changed[0] = 0.0
    np.testing.assert_allclose(f.transform(changed)[1:], F[1:], rtol=1e-5, atol=1e-6)


def test_filters_have_zero_mean_and_features_see_orientation() -> None:
    psis, phi = morlet_bank(36, 2, 8)
    assert psis.shape == (16, 36, 36) and np.abs(psis[:, 0, 0]).max() < 1e-12
    assert phi[0, 0] == 1.0
    # vertical and horizontal stripes differ in their first-order channels
    yy, xx = np.mgrid[0:28, 0:28]
    v = (np.sin(1.2 * xx) ** 2).reshape(1, -1)
    h = (np.sin(1.2 * yy) ** 2).reshape(1, -1)
    Fv, Fh = ScatterFeatures().transform(np.r_[v, h]).reshape(2, 17, 49).mean(2)
    assert np.abs(Fv[1:] - Fh[1:]).max() > 10 * np.abs(Fv[0] - Fh[0])


def test_example_normalisation_and_refusals() -> None:
    F = ScatterFeatures(normalize="example").fit_transform(_images(3))
    np.testing.assert_allclose(F.mean(1), 0.0, atol=1e-5)
    np.testing.assert_allclose(F.std(1), 1.0, atol=1e-3)
    with pytest.raises(ValueError, match="one 28x28 image per row"):
        ScatterFeatures().transform(np.zeros((2, 100)))
    with pytest.raises(ValueError, match="NaN"):
        ScatterFeatures().transform(np.full((1, 784), np.nan))
    with pytest.raises(ValueError, match="normalize"):
        ScatterFeatures(normalize="batch").fit(np.zeros((1, 784)))
    with pytest.raises(ValueError, match="unknown parameter"):
        ScatterFeatures().set_params(alpha=1)
    assert ScatterFeatures().transform(np.zeros((0, 784))).shape == (0, 833)
