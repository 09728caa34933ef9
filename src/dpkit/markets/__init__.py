"""Mechanism design with differential privacy: prices that no single buyer can profitably move.

:func:`digital_goods_price` posts a price for a good with unlimited supply by the exponential
mechanism (McSherry-Talwar 2007): ε-DP in the buyers' reports, hence ε-approximately truthful,
with revenue within ``O(B log|grid| / ε)`` of the best fixed price; :func:`misreport_gain`
measures the truthfulness exactly.
"""

from __future__ import annotations

from dpkit.markets.pricing import (
    PriceResult,
    digital_goods_price,
    misreport_gain,
    price_grid,
    price_law,
    revenue_curve,
)

__all__ = ["PriceResult", "digital_goods_price", "misreport_gain", "price_grid", "price_law",
           "revenue_curve"]
