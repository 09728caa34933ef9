"""Black-box audit of the pricing mechanism on a worst-case misreport (replace one report).

``audit_black_box`` certifies a lower bound on ε with probability >= 1 - 1e-6; a bound above
the stated ε is a privacy bug (false-failure probability <= 1e-6). The same audit at 4ε must
certify more than ε, so the test has the power to fail.
"""

from __future__ import annotations

import dpkit as dp
from dpkit.attacks.audit_vector import audit_black_box
from dpkit.markets import digital_goods_price, price_grid

CONF = 1 - 1e-6
SRC = dp.noise.seeded(77)
GRID = price_grid(1.0, 4)
# one buyer moves her report from 0 to 1: R(p) rises by p at every price (the monotone case the
# mechanism's ε/B factor relies on)
D0 = [0.0, 0.3, 0.6]
D1 = [1.0, 0.3, 0.6]


def _price(eps: float):  # type: ignore[no-untyped-def]
    def run(values: list[float]) -> float:
        return digital_goods_price(values, epsilon=eps, prices=GRID, source=SRC).price
    return run


def test_pricing_audit_stays_under_epsilon() -> None:
    res = audit_black_box(_price(1.0), D0, D1, trials=4000, confidence=CONF)
    assert res.epsilon_lower <= 1.0
    strong = audit_black_box(_price(4.0), D0, D1, trials=4000, confidence=CONF)
    assert strong.epsilon_lower > 1.0
