"""Private CDFs and quantiles from the hierarchical tree.

The histogram ``x`` over ``N`` ordered bins is measured through a b-ary tree
(:class:`~dpkit.release.strategies.TreeStrategy`, 16-ary for Laplace noise, binary for
Gaussian), made consistent by least squares, and its prefix sums give the CDF in counts.
Post-processing (no privacy cost):

* the released CDF is the isotonic (pool-adjacent-violators) least-squares projection of the
  tree's prefix sums onto non-decreasing, non-negative sequences;
* the confidence band is *simultaneous*: per-prefix intervals at level ``1 − (1−level)/N``
  (Bonferroni), then tightened with monotonicity (``low ← running max``, ``high ← running min
  from the right``), which keeps every monotone CDF inside the band that was inside before;
* the ``p``-quantile is read off the released CDF (linear within its bin), and its interval
  from the band: with ``F`` the true CDF, ``n = F[N−1]`` and ``j* = min{j : F[j] >= p n}``,
  whenever the band holds, ``min{j : high[j] >= p low[N−1]} <= j* <= min{j : low[j] >= p
  high[N−1]}``, so the interval of bin edges covers the true quantile's bin with probability
  at least ``level`` (jointly for all requested ``p``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit.mechanisms import validate as v
from dpkit.mechanisms.release import Release
from dpkit.noise import Source
from dpkit.release.mechanism import plan_workload
from dpkit.release.strategies import TreeStrategy
from dpkit.release.workloads import prefix

__all__ = ["band_level", "cdf", "cdf_band", "isotonic", "quantiles", "quantiles_from_cdf"]


def isotonic(y: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit (pool adjacent violators), O(N)."""
    y = np.asarray(y, dtype=np.float64)
    vals: list[float] = []
    counts: list[int] = []
    for value in y:
        vals.append(float(value))
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            c = counts[-2] + counts[-1]
            vals[-2] = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / c
            counts[-2] = c
            vals.pop()
            counts.pop()
    return np.repeat(np.array(vals), np.array(counts))


def cdf_band(raw: Release[np.ndarray], level: float) -> Release[np.ndarray]:
    """Post-process a release of the prefix workload made at the per-query level
    ``1 − (1 − level)/N``: the isotonic CDF and the simultaneous, monotone-tightened band at
    ``level`` (see the module docstring). No privacy cost."""
    lvl = v.check_level(level)
    F = np.maximum(isotonic(raw.value), 0.0)
    ci = None
    if raw.ci is not None:
        low = np.maximum.accumulate(np.maximum(raw.ci[0], 0.0))
        high = np.minimum.accumulate(raw.ci[1][::-1])[::-1]
        ci = (low, high)
    details = dict(raw.details)
    details.update(
        {
            "mechanism": f"{raw.details.get('strategy', 'strategy')} + least squares, isotonic CDF",
            "cdf_raw": raw.value,
            "band": "simultaneous (Bonferroni over the N prefixes, then monotone-tightened)",
        }
    )
    return Release(
        value=F, event=raw.event, ci=ci, level=lvl, insecure=raw.insecure, details=details
    )


def band_level(level: float, n: int) -> float:
    """The per-prefix level whose Bonferroni union over ``n`` prefixes gives ``level``."""
    return 1.0 - (1.0 - v.check_level(level)) / n


def cdf(
    x: Any,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    branching: int | None = None,
    strategy: Any = None,
    contributions: int = 1,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[np.ndarray]:
    """The CDF (in counts) of a histogram over ordered bins, from a consistent b-ary tree.

    **Guarantee** (add/remove one unit, moving ``x`` by at most ``contributions`` in L1):
    ε-DP with ``epsilon=`` (event ``DiscreteLaplace``), ρ-zCDP with ``rho=`` (event ``ZCDP``),
    as :func:`~dpkit.release.answer_workload`. ``value[j]`` estimates ``x[0] + … + x[j]``
    (non-decreasing, >= 0); ``ci`` is a band that holds for all ``j`` at once with probability
    at least ``level``. ``strategy`` (default: the b-ary tree) may name any strategy for the
    prefix workload, e.g. ``"optimized"``.

    >>> import dpkit as dp
    >>> r = cdf([5, 0, 3, 2], epsilon=1.0, source=dp.noise.seeded(1))
    >>> bool(np.all(np.diff(r.value) >= 0))
    True
    """
    xs = v.check_integers(x, "x")
    if xs.ndim != 1:
        raise ValueError(f"x must be a 1-d histogram over ordered bins (got shape {xs.shape})")
    lvl = v.check_level(level)
    n = xs.size
    if strategy is None:
        gaussian = rho is not None or delta is not None
        b = branching if branching is not None else (2 if gaussian else 16)
        strategy = TreeStrategy(n, b)
    elif branching is not None:
        raise ValueError("give branching= (for the tree) or strategy=, not both")
    plan = plan_workload(
        prefix(n), strategy, epsilon=epsilon, rho=rho, delta=delta, contributions=contributions
    )
    raw = plan.answer(xs, level=band_level(lvl, n), source=source)
    return cdf_band(raw, lvl)


def quantiles(
    x: Any,
    probabilities: Any,
    *,
    edges: Any = None,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    branching: int | None = None,
    contributions: int = 1,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[np.ndarray]:
    """Quantiles of the data behind the histogram ``x`` (``edges``: the ``N + 1`` public bin
    edges, default ``0..N``), from one private CDF (:func:`cdf`): any number of
    probabilities for one charge.

    ``value[i]`` is the ``probabilities[i]``-quantile, linearly interpolated inside its bin;
    ``ci`` = ``(low, high)`` bin edges that contain the true quantile's bin for all ``i`` at
    once with probability at least ``level`` (module docstring).

    >>> import dpkit as dp
    >>> r = quantiles([0, 10, 80, 10, 0], [0.5], epsilon=2.0, source=dp.noise.seeded(3))
    >>> 2.0 <= float(r.value[0]) <= 3.0
    True
    """
    xs = v.check_integers(x, "x")
    n = xs.size
    e = _check_edges(edges, n)
    p = _check_probabilities(probabilities)
    c = cdf(
        xs,
        epsilon=epsilon,
        rho=rho,
        delta=delta,
        branching=branching,
        contributions=contributions,
        level=level,
        source=source,
    )
    return quantiles_from_cdf(c, p, edges=e)


def _check_edges(edges: Any, n: int) -> np.ndarray:
    e = np.arange(n + 1, dtype=np.float64) if edges is None else v.check_reals(edges, "edges")
    if e.shape != (n + 1,) or not np.all(np.diff(e) > 0):
        raise ValueError(f"edges must be {n + 1} strictly increasing bin edges (N + 1 for N bins)")
    return e


def _check_probabilities(probabilities: Any) -> np.ndarray:
    p = np.atleast_1d(v.check_reals(probabilities, "probabilities"))
    if np.any((p < 0) | (p > 1)):
        raise ValueError("probabilities must lie in [0, 1]")
    return p


def quantiles_from_cdf(
    c: Release[np.ndarray], probabilities: Any, *, edges: Any = None, integer: bool = False
) -> Release[np.ndarray]:
    """Quantiles read off a CDF release from :func:`cdf` / :func:`cdf_band` (post-processing,
    free): point estimates interpolated within bins, joint intervals from the band.

    ``integer``: the data are integers and bin ``j`` holds ``e_j, …, e_{j+1} − 1`` (integer
    ``edges``). Then each estimate is an integer of its bin (the interpolation's floor, as if
    integer ``k`` spread over ``[k, k + 1)``) and each interval is *inclusive*: from the first
    integer of its lowest bin to the last integer of its highest, ``(e_lo, e_{hi+1} − 1)``.
    Both ends are values of the column's domain and the coverage is unchanged: the true
    ``p``-quantile is an integer of the bin ``j*`` and ``lo <= j* <= hi`` whenever the band
    holds (module docstring), so all intervals hold it jointly with probability >= ``level``.

    >>> import dpkit as dp
    >>> c = cdf([0, 3, 5, 2], epsilon=4.0, source=dp.noise.seeded(2))
    >>> q = quantiles_from_cdf(c, [0.5], edges=[0, 10, 20, 30, 40], integer=True)
    >>> [float(x) for x in (q.ci[0][0], q.value[0], q.ci[1][0])]  # 'to 39', never 'to 40'
    [10.0, 24.0, 39.0]
    """
    F = np.asarray(c.value, dtype=np.float64)
    n = F.size
    e = _check_edges(edges, n)
    if integer and not np.all(e == np.round(e)):
        raise ValueError("integer=True needs integer bin edges (bin j holds e_j .. e_{j+1} - 1)")
    p = _check_probabilities(probabilities)
    values = _point_estimates(F, p, e, integer)
    ci = None
    if c.ci is not None:
        lo_idx, hi_idx = _band_cells(c.ci[0], c.ci[1], p)
        high = e[np.maximum(hi_idx, lo_idx) + 1]
        ci = (e[lo_idx], high - 1.0 if integer else high)
    details = dict(c.details)
    details.update({"cdf": F, "probabilities": p, "edges": e})
    return Release(
        value=values, event=c.event, ci=ci, level=c.level, insecure=c.insecure, details=details
    )


def _point_estimates(F: np.ndarray, p: np.ndarray, e: np.ndarray, integer: bool) -> np.ndarray:
    """Each ``p``-quantile of the released CDF ``F``, interpolated within its bin (an integer
    of the bin with ``integer``)."""
    n = F.size
    total = F[-1]
    values = np.empty(p.size)
    for i, pi in enumerate(p):
        target = pi * total
        j = min(int(np.searchsorted(F, target, side="left")), n - 1)
        prev = F[j - 1] if j > 0 else 0.0
        width = F[j] - prev
        frac = 0.0 if width <= 0 else float(np.clip((target - prev) / width, 0.0, 1.0))
        values[i] = e[j] + frac * (e[j + 1] - e[j])
        if integer:
            values[i] = min(np.floor(values[i]), e[j + 1] - 1.0)
    return values


def _band_cells(low: np.ndarray, high: np.ndarray, p: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest bin that may hold each true ``p``-quantile while the band
    ``(low, high)`` holds (module docstring)."""
    n = low.size
    lo_idx = np.empty(p.size, dtype=np.int64)
    hi_idx = np.empty(p.size, dtype=np.int64)
    for i, pi in enumerate(p):
        up = np.flatnonzero(high >= pi * low[-1])
        lo_idx[i] = up[0] if up.size else n - 1
        dn = np.flatnonzero(low >= pi * high[-1])
        hi_idx[i] = dn[0] if dn.size else n - 1
    return lo_idx, hi_idx
