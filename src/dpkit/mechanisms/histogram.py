"""Private histograms over public, disjoint bins (parallel composition), integer counts out.

Each privacy unit contributes at most ``max_contributions`` of the ``values`` (the caller
bounds this, e.g. with the curator's contribution bounds); adding or removing a unit then
changes the vector of bin counts by at most ``max_contributions`` in L1 norm, whichever bins
its values fall in (the bins are disjoint: parallel composition). Discrete Laplace noise of
scale ``max_contributions / ε`` on every count gives ε-DP (geometric mechanism,
Ghosh-Roughgarden-Sundararajan 2009). Bins are public: none is added or dropped because of
the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit import noise
from dpkit.events import DiscreteLaplace
from dpkit.mechanisms import validate as v
from dpkit.mechanisms._calibrate import dlap_scale_for
from dpkit.mechanisms.accuracy import dlap_halfwidth, interval_release
from dpkit.mechanisms.release import Release
from dpkit.noise import Source

__all__ = ["histogram", "true_counts"]


def _edges(bins: Any) -> np.ndarray:
    if isinstance(bins, int | np.integer) and not isinstance(bins, bool):
        raise ValueError(
            "bins must be the public bin edges (e.g. bins=[0, 10, 20, 30]), not a number of "
            "bins: edges computed from the data's range would leak it"
        )
    e = v.check_reals(bins, "bins")
    if e.ndim != 1 or e.size < 2:
        raise ValueError("bins must be a 1-d sequence of at least two edges")
    if not np.all(np.diff(e) > 0):
        raise ValueError("bins must be strictly increasing edges")
    return e


def true_counts(values: Any, *, bins: Any = None, categories: Any = None) -> tuple[np.ndarray, Any]:
    """Exact counts per bin (no privacy: the input to the mechanism) and the bin labels.

    Numeric bins follow ``numpy.histogram``: ``[e_i, e_{i+1})`` with the last bin closed;
    values outside ``[e_0, e_last]`` and values not among ``categories`` are not counted."""
    if (bins is None) == (categories is None):
        raise ValueError("pass exactly one of bins= (numeric edges) or categories= (labels)")
    arr = np.asarray(values)
    if arr.ndim != 1:
        arr = arr.ravel()
    if bins is not None:
        edges = _edges(bins)
        x = np.asarray(arr, dtype=np.float64)
        if np.any(np.isnan(x)):
            raise ValueError("values contain NaN: drop or impute them before the histogram")
        counts, _ = np.histogram(x, bins=edges)
        return counts.astype(np.int64), edges
    cats = v.check_categories(categories)
    index = {c: i for i, c in enumerate(cats)}
    codes = np.fromiter((index.get(x, -1) for x in arr.tolist()), dtype=np.int64, count=arr.size)
    counts = np.bincount(codes[codes >= 0], minlength=len(cats))
    return counts.astype(np.int64), cats


def histogram(
    values: Any,
    bins: Any = None,
    *,
    categories: Any = None,
    epsilon: float,
    max_contributions: int = 1,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[np.ndarray]:
    """ε-DP histogram over public disjoint bins: noisy integer counts with per-bin CIs.

    ``values``: the raw values (one entry per contribution). Give ``bins`` (public numeric edges,
    ``numpy.histogram`` semantics) or ``categories`` (public labels; other values are ignored).

    **Guarantee**: ε-DP under add/remove one privacy unit, provided each unit contributes at most
    ``max_contributions`` entries of ``values`` (L1 sensitivity of the count vector =
    ``max_contributions``; the caller enforces the bound).

    **Calibration**: independent ``DLap(s)`` per count, ``s = max_contributions / ε``.
    Event: ``DiscreteLaplace(s, max_contributions)``.

    **Accuracy**: per-bin ``ci = (counts - m, counts + m)``, ``m`` the smallest integer with
    ``1 - 2 q^(m+1)/(1 + q) >= level`` (``q = e^(-1/s)``); exact coverage in
    ``details["coverage"]`` (per bin, not simultaneous).

    >>> import dpkit as dp
    >>> r = dp.mechanisms.histogram([1, 2, 2, 7], bins=[0, 5, 10], epsilon=1.0,
    ...                             source=dp.noise.seeded(0))
    >>> r.value.shape, r.event
    ((2,), DiscreteLaplace(scale=1.0, sensitivity=1))
    """
    eps = v.check_epsilon(epsilon)
    m_c = v.check_positive_int(max_contributions, "max_contributions")
    lvl = v.check_level(level)
    counts, labels = true_counts(values, bins=bins, categories=categories)
    src = v.resolve_source(source)
    scale = dlap_scale_for(m_c, eps)
    y = counts + noise.discrete_laplace(scale, counts.shape, source=src)
    m, coverage = dlap_halfwidth(scale, lvl)
    return interval_release(
        y,
        m,
        coverage,
        k=None,
        shape=counts.shape,
        event=DiscreteLaplace(scale, m_c),
        level=lvl,
        insecure=src.insecure,
        details={
            "mechanism": "histogram (discrete Laplace per disjoint bin)",
            "neighbouring": f"add/remove one unit contributing at most {m_c} values",
            "bins": labels,
            "scale": scale,
        },
    )
