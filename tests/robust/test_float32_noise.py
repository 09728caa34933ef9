"""Float32 Monte Carlo noise (dpkit.noise.gaussian_float32) and Smoothed(float32=True)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import dpkit.noise as noise
from dpkit.robust import Smoothed


def half_space(batch: np.ndarray) -> np.ndarray:
    """Class 1 where x[0] > 0: under N(0, sigma² I), pA = Phi(x[0] / sigma), true radius x[0]."""
    return (batch[:, 0] > 0).astype(np.int64)


def test_float32_gaussian_distribution() -> None:
    # KS against N(0, 2²) on 400k draws; a correct sampler fails with probability 1e-6 (the
    # truncation beyond 6.76 sigma and float32 rounding are ~1e-7, far below KS's 0.004 at
    # this n). Also the tail count beyond 3 sigma, a two-sided 1e-6 binomial test.
    n = 400_000
    z = noise.gaussian_float32(2.0, (n // 4, 4), source=noise.seeded(5))
    assert z.dtype == np.float32 and z.shape == (n // 4, 4)
    flat = z.reshape(-1).astype(np.float64)
    assert stats.kstest(flat, stats.norm(scale=2.0).cdf).pvalue > 1e-6
    tail = int(np.sum(np.abs(flat) > 6.0))
    p = 2 * stats.norm.sf(3.0)
    assert stats.binom.ppf(5e-7, n, p) <= tail <= stats.binom.isf(5e-7, n, p)
    # the cos and sin halves are independent: their correlation is N(0, 1/n) under the null
    half = n // 2
    corr = np.corrcoef(flat[:half], flat[half:])[0, 1]
    assert abs(corr) < 5.0 / np.sqrt(half)


def test_float32_gaussian_fills_the_buffer_and_checks_it() -> None:
    buf = np.full((3, 5), np.nan, dtype=np.float32)
    out = noise.gaussian_float32(1.0, (3, 5), source=noise.seeded(1), out=buf)
    assert out is buf and np.all(np.isfinite(buf))
    again = noise.gaussian_float32(1.0, (3, 5), source=noise.seeded(1))
    assert np.array_equal(again, buf)  # the same words give the same samples
    for n in (1, 2, 3):  # odd sizes use the last pair's two halves correctly
        assert noise.gaussian_float32(1.0, n, source=noise.seeded(2)).shape == (n,)
    with pytest.raises(ValueError, match="float32"):
        noise.gaussian_float32(1.0, (3, 5), out=np.zeros((3, 5)))
    with pytest.raises(ValueError, match="shape"):
        noise.gaussian_float32(1.0, (3, 5), out=np.zeros((5, 3), np.float32))
    with pytest.raises(ValueError, match="sigma"):
        noise.gaussian_float32(-1.0, 3)


def test_float32_certificate_is_close_to_the_true_radius() -> None:
    # power: n = 100k at pA = Phi(1): the bound is within ~4 standard errors: radius > 0.45;
    # radius <= 0.5 fails with probability <= alpha, fixed here by the seed
    g = Smoothed(half_space, 0.5, 2, source=noise.seeded(22), float32=True)
    label, radius = g.certify(np.array([0.5, 3.0, -1.0]), n0=100, n=100_000, alpha=0.001,
                              batch_size=30_000)
    assert label == 1 and 0.45 < radius <= 0.5
