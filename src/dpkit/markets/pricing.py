"""Digital-goods pricing by the exponential mechanism: approximately truthful, near-optimal revenue.

McSherry and Talwar, "Mechanism design via differential privacy" (FOCS 2007). ``n`` buyers
report values in ``[0, B]`` for a good with unlimited supply; the seller posts one price ``p``
from a public grid and every buyer whose report is at least ``p`` buys at ``p``. The price is
drawn by the exponential mechanism with the revenue ``R(p) = p · #{i : b_i >= p}`` as score.

**Privacy.** Neighbouring relation: one buyer's report replaced by another in ``[0, B]`` (what a
misreport is). Every score moves by at most ``B``, and all in the same direction: moving a report
from ``b`` up to ``b'`` adds ``p`` to ``R(p)`` for ``b < p <= b'`` and changes no other price's
revenue (down: the mirror image). The scores are therefore *monotonic* under this relation, and
drawing ``p`` with probability ``∝ exp(ε R(p) / B)`` is ε-DP (Dwork-Roth 2014, remark after
Thm. 3.10; twice the factor of the general case, so half the revenue loss). Event
``Exponential(ε)``.

**Truthfulness.** Given the price, a truthful buyer gets ``max(0, v - p)``, the most any report
can give her at that price; a misreport only moves the law of ``p``, by a factor at most
``e^ε``. So ``E[u(truth)] >= e^-ε E_{p ~ lie}[max(0, v - p)] >= e^-ε E[u(lie)]``, and the gain
from any misreport is at most ``(1 - e^-ε) B <= ε B`` (ε-approximate dominant-strategy
truthfulness). :func:`misreport_gain` measures it exactly over the mechanism's law.

**Revenue.** With probability at least ``level``, ``R(p) >= OPT - (B/ε)(ln|grid| + ln(1/(1 -
level)))``, OPT the best revenue on the grid (Dwork-Roth 2014, Thm. 3.11, monotonic scores).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit.mechanisms import exponential
from dpkit.mechanisms.exponential import utility_bound
from dpkit.noise import Source

__all__ = ["PriceResult", "digital_goods_price", "misreport_gain", "price_grid",
           "price_law", "revenue_curve"]


@dataclass(frozen=True)
class PriceResult:
    """The posted price and what it guarantees (see the module docstring)."""

    price: float
    revenue: float  # at the reports
    optimum: float  # the best revenue on the grid, at the reports (not released: for study)
    epsilon: float
    bound: float  # B: reports lie in [0, B]
    truthfulness: float  # (1 - e^-ε) B: the most a misreport can gain in expectation
    revenue_shortfall: float  # OPT - revenue is at most this with probability `level`
    level: float
    event: ev.Event
    insecure: bool


def price_grid(bound: float, size: int = 1000) -> np.ndarray:
    """``size`` prices ``B/size, 2B/size, ..., B`` (a public grid)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"the price grid needs a positive integer size (got {size!r})")
    return bound * np.arange(1, size + 1, dtype=np.float64) / size


def _check(values: Any, bound: float, prices: Any) -> tuple[np.ndarray, float, np.ndarray]:
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not (
            math.isfinite(bound) and bound > 0):
        raise ValueError(f"bound (the largest possible value, B) must be positive (got {bound!r})")
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError("the market is empty: pass at least one buyer's value")
    bad = ~np.isfinite(v) | (v < 0) | (v > bound)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"value {i} is {v[i]!r}, outside the declared [0, {bound:g}]: clip "
                         f"reports to the declared range before pricing")
    grid = price_grid(float(bound)) if prices is None else np.asarray(prices, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or (
            grid.min() < 0 or grid.max() > bound):
        raise ValueError(f"prices must be a non-empty list of numbers in [0, {bound:g}]")
    return v, float(bound), grid


def revenue_curve(values: Any, prices: np.ndarray) -> np.ndarray:
    """``R(p) = p · #{values >= p}`` for every price on the grid."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    buyers = v.size - np.searchsorted(v, prices, side="left")
    return prices * buyers


def price_law(values: Any, *, epsilon: float, bound: float = 1.0,
              prices: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """The grid and the mechanism's exact law over it (floating point, for analysis)."""
    v, b, grid = _check(values, bound, prices)
    logits = epsilon * revenue_curve(v, grid) / b  # monotonic scores: ε/B
    w = np.exp(logits - logits.max())
    return grid, w / w.sum()


def digital_goods_price(values: Any, *, epsilon: float, bound: float = 1.0, prices: Any = None,
                        level: float = 0.95, source: Source | None = None) -> PriceResult:
    """Post one price for a digital good, ε-DP in the reports (see the module docstring).

    ``values``: the buyers' reports in ``[0, bound]``; ``prices``: the public grid (default
    1,000 prices up to ``bound``). Reports outside ``[0, bound]`` are refused before any noise.
    """
    v, b, grid = _check(values, bound, prices)
    rev = revenue_curve(v, grid)
    rel = exponential(list(range(grid.size)), rev, sensitivity=b, epsilon=epsilon, level=level,
                      monotonic=True, source=source)
    i = int(rel.value)
    eps = float(epsilon)
    return PriceResult(
        price=float(grid[i]), revenue=float(rev[i]), optimum=float(rev.max()), epsilon=eps,
        bound=b, truthfulness=(1.0 - math.exp(-eps)) * b,
        revenue_shortfall=utility_bound(grid.size, b, eps, True, level), level=level,
        event=rel.event, insecure=rel.insecure)


def misreport_gain(values: Any, buyer: int, report: float, *, epsilon: float,
                   bound: float = 1.0, prices: Any = None) -> float:
    """Buyer ``buyer``'s exact expected gain from reporting ``report`` instead of her value
    (expectation over the mechanism's law; at most ``(1 - e^-ε) B``)."""
    v, b, grid = _check(values, bound, prices)
    if not 0 <= report <= b:
        raise ValueError(f"a report must lie in [0, {b:g}] (got {report!r})")
    true_value = float(v[buyer])

    def utility(reports: np.ndarray, bid: float) -> float:
        _, law = price_law(reports, epsilon=epsilon, bound=b, prices=grid)
        return float(np.sum(law * np.where(bid >= grid, true_value - grid, 0.0)))

    lie = v.copy()
    lie[buyer] = report
    return utility(lie, report) - utility(v, true_value)
