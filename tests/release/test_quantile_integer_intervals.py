"""Quantiles of integer data (``quantiles_from_cdf(..., integer=True)``): inclusive intervals
whose ends are values of the column's domain ("5100 to 100000", never the exclusive cell edge
100001), and integer estimates inside them.

The claim (module docstring of :mod:`dpkit.release.quantiles`): whenever the band holds, each
interval holds the true quantile, so the intervals hold jointly with probability >= level.
Tested exactly on the CDF -> interval mapping (any band that holds, any CDF inside it; no
randomness in the claim, the sweep's instances only are drawn, from a fixed seed), then end
to end with the band's own noise (seeded; false-failure probability <= 1e-6).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

import dpkit as dp
from dpkit.mechanisms.release import Release
from dpkit.release.quantiles import cdf, quantiles_from_cdf

FALSE_FAILURE = 1e-6


def _instance(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, Release[np.ndarray]]:
    """Integer data on a grid of integer cells, its true CDF, and a released CDF with a
    band that holds (monotone ends, as :func:`cdf_band` makes them) and a value inside it."""
    width, cells = int(rng.choice([1, 2, 5, 10, 1000])), int(rng.integers(1, 20))
    edges = int(rng.integers(-50, 50)) + width * np.arange(cells + 1, dtype=np.float64)
    data = rng.integers(int(edges[0]), int(edges[-1]), int(rng.integers(1, 60)))
    F = np.cumsum(np.histogram(data, bins=edges)[0]).astype(np.float64)
    low = np.maximum.accumulate(F - rng.exponential(3.0, cells))
    high = np.minimum.accumulate((F + rng.exponential(3.0, cells))[::-1])[::-1]
    value = np.maximum.accumulate(np.clip(F + rng.normal(0, 3.0, cells), low, high))
    rel = Release(value=value, event=dp.events.PureDP(1.0), ci=(low, high), level=0.95)
    return np.sort(data), edges, rel


def test_the_mapping_keeps_every_true_quantile_inside_domain_values() -> None:
    rng = np.random.default_rng(20261126)
    top_seen = 0
    for _ in range(3000):
        data, edges, rel = _instance(rng)
        probs = np.concatenate([[1.0], rng.uniform(1e-9, 1.0, 4)])
        q = quantiles_from_cdf(rel, probs, edges=edges, integer=True)
        lo, hi = q.ci
        for i, p in enumerate(probs):
            true = data[max(math.ceil(p * data.size) - 1, 0)]
            ctx = (p, edges.tolist(), lo[i], q.value[i], hi[i], true)
            assert lo[i] <= true <= hi[i], ctx  # the band holds: so does the interval
            # domain values, inclusive: a cell's first integer to a cell's last
            assert edges[0] <= lo[i] <= q.value[i] <= hi[i] <= edges[-1] - 1, ctx
            assert lo[i] in edges and hi[i] + 1 in edges, ctx
            assert all(float(v).is_integer() for v in (lo[i], q.value[i], hi[i])), ctx
            top_seen += int(hi[i] == edges[-1] - 1)
    assert top_seen > 100  # the top cell's interval was reached (where 'to hi + 1' showed)


def test_continuous_data_keep_the_cell_edges() -> None:
    """Without ``integer`` nothing changes: the interval ends on the cell's upper edge."""
    rel = Release(value=np.array([2.0, 5.0, 10.0]), event=dp.events.PureDP(1.0),
                  ci=(np.array([2.0, 5.0, 10.0]), np.array([2.0, 5.0, 10.0])))
    q = quantiles_from_cdf(rel, [1.0], edges=[0.0, 0.5, 1.0, 1.5])
    assert (q.ci[0][0], q.value[0], q.ci[1][0]) == (1.0, 1.5, 1.5)
    qi = quantiles_from_cdf(rel, [1.0], edges=[0, 5, 10, 15], integer=True)
    assert (qi.ci[0][0], qi.value[0], qi.ci[1][0]) == (10.0, 14.0, 14.0)


def test_integer_needs_integer_edges() -> None:
    rel = Release(value=np.array([1.0, 2.0]), event=dp.events.PureDP(1.0))
    try:
        quantiles_from_cdf(rel, [0.5], edges=[0.0, 0.5, 1.0], integer=True)
    except ValueError as exc:
        assert "integer bin edges" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("fractional edges were accepted as integer cells")


def test_noisy_intervals_cover_at_their_level() -> None:
    """End to end, the band's own noise (seeded): N releases at level 0.8 of three
    quantiles; the joint coverage is at least Binomial(N, 0.8), failed below its
    FALSE_FAILURE quantile."""
    rng = np.random.default_rng(7)
    data = np.sort(np.minimum(rng.geometric(0.02, 400), 199))  # skewed, atoms, a top cell
    edges = np.arange(0, 201, 10, dtype=np.float64)
    x = np.histogram(data, bins=edges)[0]
    probs = [0.1, 0.5, 0.99]
    truth = [data[math.ceil(p * data.size) - 1] for p in probs]
    src, n, level = dp.noise.seeded(11), 300, 0.8
    covered = 0
    for _ in range(n):
        q = quantiles_from_cdf(cdf(x, epsilon=0.5, level=level, source=src), probs,
                               edges=edges, integer=True)
        lo, hi = q.ci
        assert np.all(hi <= 199) and np.all(lo >= 0)
        covered += int(all(lo[i] <= t <= hi[i] for i, t in enumerate(truth)))
    assert covered >= stats.binom.ppf(FALSE_FAILURE, n, level), covered


def test_the_docstring_examples_run() -> None:
    import doctest
    import importlib

    module = importlib.import_module("dpkit.release.quantiles")  # the package's name is a function
    result = doctest.testmod(module)
    assert result.attempted >= 3 and result.failed == 0, result
