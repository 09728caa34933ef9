"""gaussian_float: the table-and-series Box-Muller against numpy's libm sin/cos on the same
words, the 106-bit tail, moments at stated false-failure rates, shapes and ``out=``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import dpkit.noise as noise
from dpkit.noise.sources import Source


class Fixed(Source):
    """Hands out the given words in order, cycling (deterministic test input, not random)."""

    def __init__(self, words: list[int]) -> None:
        self.words = np.array(words, dtype=np.uint64)
        self.pos = 0

    def uint64(self, n: int) -> np.ndarray:
        idx = (self.pos + np.arange(n)) % self.words.size
        self.pos += n
        return self.words[idx].copy()


def _reference(words: np.ndarray, sigma: float) -> np.ndarray:
    """The textbook Box-Muller on the same words: numpy's float64 log, sqrt, cos, sin.

    Pairs (u, v) are words (j, p + j) of each pass of ``p`` pairs; here ``p`` is the whole
    request (one pass), and no lane needs the 106-bit refinement (checked by the caller)."""
    k = words >> np.uint64(11)
    p = k.size // 2
    u = (k[:p].astype(np.float64) + 0.5) * 2.0**-53
    theta = k[p:].astype(np.float64) * (2 * math.pi * 2.0**-53)
    r = sigma * np.sqrt(-2.0 * np.log(u))
    return np.concatenate([r * np.cos(theta), r * np.sin(theta)])


def test_matches_libm_box_muller_to_a_few_ulps() -> None:
    # 2^14 pairs (one pass) of arbitrary words, none in the far tail: the fast angle (table of
    # 2^11 angles + series for the residual) must agree with cos/sin of the full angle to
    # within 16 · 2^-53 · r (both carry ~6 ulps of rounding of the angle itself).
    words = noise.seeded(1).uint64(2 * (1 << 14))
    words[: 1 << 14] |= np.uint64(1 << 63)  # u >= 1/2: no refinement word is drawn
    got = noise.gaussian_float(1.0, words.size, source=Fixed(list(map(int, words))))
    ref = _reference(words, 1.0)
    r = np.tile(np.hypot(ref[: 1 << 14], ref[1 << 14 :]), 2)
    assert np.all(np.abs(got - ref) <= 16 * 2.0**-53 * np.maximum(r, 1.0))


def test_table_boundaries_and_quadrants() -> None:
    # angles exactly on table entries (residual 0) and just below the next entry, across all
    # quadrants: the addition theorems must give cos/sin of the whole angle
    tops = [0, 1, 511, 512, 1023, 1024, 1535, 1536, 2047]
    v = []
    for t in tops:
        v += [t << 42 << 11, ((t << 42) + (1 << 42) - 1) << 11]
    u = [(1 << 63)] * len(v)  # u = 1/2 + 2^-54: r = sqrt(2 ln 2) (approximately)
    words = np.array(u + v, dtype=np.uint64)
    got = noise.gaussian_float(1.0, words.size, source=Fixed(list(map(int, words))))
    assert np.allclose(got, _reference(words, 1.0), rtol=0, atol=1e-15)


def test_the_far_tail_reaches_twelve_sigma() -> None:
    # all-zero words: u = (0 + (0 + 1/2) 2^-53) 2^-53 = 2^-107 (the 106-bit refinement), θ = 0,
    # so the sample is sqrt(2 · 107 ln 2) σ exactly up to rounding, and it is finite
    z = noise.gaussian_float(2.0, 4, source=Fixed([0]))
    assert np.all(np.isfinite(z))
    assert z[0] == pytest.approx(2.0 * math.sqrt(2 * 107 * math.log(2)), rel=1e-12)


def test_moments_and_normality() -> None:
    # n = 10^6 from the secure default: sd error 1/sqrt(2n) = 7.1e-4, kurtosis error
    # sqrt(24/n) = 4.9e-3; 6-sigma bounds and a KS test at p = 1e-7: false-failure
    # probability < 1e-6 in total
    n = 1_000_000
    z = noise.gaussian_float(1.0, n)
    assert abs(z.mean()) < 6 / math.sqrt(n)
    assert abs(z.std() - 1.0) < 6 / math.sqrt(2 * n)
    assert abs(((z / z.std()) ** 4).mean() - 3.0) < 6 * math.sqrt(24 / n)
    assert stats.kstest(z, "norm").pvalue > 1e-7
    # the cos and sin halves of each pass are independent N(0, 1) too (|corr| < 6/sqrt(n/2))
    half = z[: 2 * (1 << 14) * (n // (2 << 14))].reshape(-1, 2, 1 << 14)
    corr = np.corrcoef(half[:, 0].ravel(), half[:, 1].ravel())[0, 1]
    assert abs(corr) < 6 / math.sqrt(n / 2)


@pytest.mark.parametrize("size", [0, 1, 2, 3, (2, 3), 2 * (1 << 14) + 1, (5, 7, 3)])
def test_shapes_odd_sizes_and_out(size: int | tuple[int, ...]) -> None:
    z = noise.gaussian_float(1.0, size, source=noise.seeded(0))
    shape = (size,) if isinstance(size, int) else size
    assert z.shape == shape and z.dtype == np.float64 and np.all(np.isfinite(z))
    buf = np.full(shape, np.nan)
    got = noise.gaussian_float(1.0, size, source=noise.seeded(0), out=buf)
    assert got is buf and np.array_equal(buf, z)  # same words, same samples


def test_out_is_checked_and_sigma_zero() -> None:
    with pytest.raises(ValueError, match="C-contiguous float64"):
        noise.gaussian_float(1.0, 4, out=np.empty(4, dtype=np.float32))
    with pytest.raises(ValueError, match="C-contiguous float64"):
        noise.gaussian_float(1.0, 4, out=np.empty(8)[::2])
    assert not noise.gaussian_float(0.0, 5).any()
