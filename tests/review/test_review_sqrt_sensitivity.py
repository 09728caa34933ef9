"""Red-team review: the L2 sensitivity ``sqrt(L0)`` of distinct-unit counts is a float.

``COUNT(DISTINCT unit)`` (and Gaussian partition selection) has L2 sensitivity ``sqrt(L0)``
with ``L0 = min(max_groups_per_unit, max_rows_per_unit)``. The plan used ``math.sqrt(L0)``,
which for 90 of the first 199 integers (3, 6, 11, 12, ...) is *below* the true root, and then
calibrated ``sigma2`` and charged ``rho = l2_float² / (2 sigma2)``: the true zCDP cost
``L0 / (2 sigma2)`` exceeded the charged ``rho`` (by about one part in 1e16, but the code's own
invariant is that every rounding goes against the analyst, cf. ``_rho_up``). Checked exactly in
rationals over 60 budgets; no sampling.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpkit as dp

QUERIES = {
    "units": ("SELECT g, COUNT(DISTINCT uid) AS n FROM t GROUP BY g", "zcdp"),
    "select": ("SELECT h, COUNT(DISTINCT uid) AS n FROM t GROUP BY h", "approx"),
}


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_distinct_count_l2_sensitivity_rounds_up(tmp_path, kind):
    query, accountant = QUERIES[kind]
    l0 = 3
    df = pd.DataFrame({"uid": np.arange(300) // 3, "g": np.tile(["a", "b", "c"], 100),
                       "h": np.tile(["x", "y", "z"], 100)})
    cur = dp.Curator.create(tmp_path / f"s_{kind}.dpkit", epsilon=100.0, delta=1e-5,
                            accountant=accountant)
    cur.add_table("t", df, privacy_unit="uid", max_rows_per_unit=l0,
                  domains={"g": ["a", "b", "c"]})
    under = []
    for rho in np.linspace(0.01, 1.0, 60):
        plan = cur._plan(query, epsilon=None, rho=float(rho), delta=None, noise="gaussian",
                         level=0.95, bounds=None, weights=None)
        mm = next(m for m in plan.measures if m.kind == kind)
        assert Fraction(mm.l2) ** 2 >= l0, f"stated L2 sensitivity {mm.l2!r} < sqrt({l0})"
        zc = mm.event if isinstance(mm.event, dp.events.ZCDP) else next(
            e for e in mm.event.events if isinstance(e, dp.events.ZCDP))
        if Fraction(zc.rho) < Fraction(l0) / (2 * Fraction(mm.sigma2)):
            under.append(float(rho))
    assert not under, f"charged rho below L0/(2 sigma2) at {len(under)} budgets, e.g. {under[:3]}"
