"""Private CDFs and quantiles from the tree: monotone output, simultaneous coverage."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

import dpkit as dp
from dpkit.events import ZCDP, DiscreteLaplace
from dpkit.release import cdf, quantiles
from dpkit.release.quantiles import isotonic

N = 128
X = np.round(2000 * stats.norm.pdf(np.arange(N), 60, 15)).astype(np.int64)
F = np.cumsum(X)


def test_isotonic_is_the_least_squares_monotone_fit() -> None:
    y = np.array([3.0, 1.0, 2.0, 5.0, 4.0, 4.0, 0.0, 7.0])
    fit = isotonic(y)
    assert np.all(np.diff(fit) >= 0)
    # brute force over monotone fits built from block means of every partition
    best = np.inf
    n = y.size
    for cuts in itertools.product([0, 1], repeat=n - 1):
        blocks, start = [], 0
        for i, c in enumerate(cuts, start=1):
            if c:
                blocks.append((start, i))
                start = i
        blocks.append((start, n))
        cand = np.concatenate([np.full(b - a, y[a:b].mean()) for a, b in blocks])
        if np.all(np.diff(cand) >= -1e-12):
            best = min(best, float(np.sum((cand - y) ** 2)))
    assert float(np.sum((fit - y) ** 2)) == pytest.approx(best)


def test_cdf_is_monotone_and_charged_like_the_tree() -> None:
    r = cdf(X, epsilon=1.0, source=dp.noise.seeded(1))
    assert r.event == DiscreteLaplace(2.0, 2)  # 16-ary tree on 128 cells: levels 1, 16
    assert np.all(np.diff(r.value) >= 0) and r.value[0] >= 0
    g = cdf(X, rho=0.5, source=dp.noise.seeded(1))
    assert isinstance(g.event, ZCDP) and g.event.rho <= 0.5
    low, high = g.ci
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) >= 0)


def test_cdf_band_and_quantile_intervals_cover_simultaneously() -> None:
    # Each run's band must contain the whole true CDF with probability >= 0.9; misses over
    # 60 runs ~ Binomial(60, <= 0.1): P(misses > 20) < 1e-6.
    probs = [0.1, 0.5, 0.9]
    edges = np.linspace(0.0, 1.0, N + 1)
    true_bins = np.array([np.searchsorted(F, p * F[-1], side="left") for p in probs])
    band_miss = q_miss = 0
    src = dp.noise.seeded(7)
    for i in range(60):
        kw = {"epsilon": 0.5} if i % 2 else {"rho": 0.1}
        r = cdf(X, level=0.9, source=src, **kw)
        low, high = r.ci
        band_miss += bool(np.any((low > F) | (high < F)))
        q = quantiles(X, probs, edges=edges, level=0.9, source=src, **kw)
        lo, hi = q.ci
        inside = (edges[true_bins] >= lo) & (edges[true_bins + 1] <= hi)
        q_miss += bool(not np.all(inside))
        assert np.all((q.value >= lo) | np.isclose(q.value, lo))
    assert band_miss <= stats.binom.isf(1e-6, 60, 0.1)
    assert q_miss <= stats.binom.isf(1e-6, 60, 0.1)


def test_quantiles_are_accurate_at_large_epsilon() -> None:
    q = quantiles(X, [0.25, 0.5, 0.75], epsilon=20.0, source=dp.noise.seeded(3))
    true = np.array([np.searchsorted(F, p * F[-1]) for p in (0.25, 0.5, 0.75)])
    assert np.all(np.abs(q.value - true) <= 2.0)


def test_validation() -> None:
    with pytest.raises(ValueError, match="edges"):
        quantiles(X, [0.5], edges=[0, 1, 2], epsilon=1.0)
    with pytest.raises(ValueError, match="probabilities"):
        quantiles(X, [1.5], epsilon=1.0)
    with pytest.raises(ValueError, match="1-d"):
        cdf(np.ones((2, 2), dtype=int), epsilon=1.0)
