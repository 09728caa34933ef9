"""Mechanism design with differential privacy: prices that no single buyer can profitably move.

:func:`digital_goods_price` posts a price for a good with unlimited supply by the exponential
mechanism (McSherry-Talwar 2007): ε-DP in the buyers' reports, hence ε-approximately truthful,
with revenue within ``O(B log|grid| / ε)`` of the best fixed price; :func:`misreport_gain`
measures the truthfulness exactly. :func:`allocate` assigns scarce goods to unit-demand buyers
by noisy price coordination, (ε, δ)-jointly DP (Hsu et al. 2014).
"""

from __future__ import annotations

from dpkit.markets.allocation import Allocation, allocate, best_responses, welfare_optimum
from dpkit.markets.pricing import (
    PriceResult,
    digital_goods_price,
    misreport_gain,
    price_grid,
    price_law,
    revenue_curve,
)

__all__ = ["Allocation", "PriceResult", "allocate", "best_responses", "digital_goods_price",
           "misreport_gain", "price_grid", "price_law", "revenue_curve", "welfare_optimum"]
