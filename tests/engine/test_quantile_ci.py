"""Intervals for MEDIAN / QUANTILE / MIN / MAX (two extra exponential mechanisms per quantile).

Coverage: each quantile interval covers a true q-quantile with probability >= level (proof in
``dpkit.engine.noisy_quantiles.quantiles``). Over N independent seeded releases the number of
covering intervals is then stochastically at least Binomial(N, level); we fail if it is below the
``1e-6 / checks`` quantile of that binomial, so the test fails falsely with probability <= 1e-6.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy import stats

import dpkit as dp
from dpkit import accounting
from dpkit.engine import Curator
from dpkit.engine.noisy import release
from dpkit.engine.plan import QUANTILE_CI_SHARE
from dpkit.engine.read import Exact
from dpkit.engine.sql import MAX_QUANTILE, MIN_QUANTILE

FALSE_FAILURE = 1e-6
QUERY = ("SELECT MEDIAN(x) AS med, QUANTILE(x, 0.9) AS p90, MIN(x) AS mn, MAX(x) AS mx "
         "FROM t")
QS = {"med": 0.5, "p90": 0.9, "mn": MIN_QUANTILE, "mx": MAX_QUANTILE}


def _exact(cur: Curator, sql: str, **kw: Any) -> tuple[Any, Exact]:
    plan = cur._plan(sql, epsilon=kw.pop("epsilon", 1.0), rho=None, delta=None,
                     noise=kw.pop("noise", "laplace"), level=kw.pop("level", 0.95), bounds=None)
    return plan, cur._execute(plan)


def _true_quantile(x: np.ndarray, q: float) -> float:
    """The ceil(q·n)-th smallest value: #{x <= Q} >= q·n and #{x >= Q} >= (1-q)·n."""
    s = np.sort(x)
    return float(s[max(math.ceil(q * len(s)) - 1, 0)])


def _min_covered(n: int, level: float, checks: int) -> int:
    # smallest k with P[Binomial(n, level) < k] <= FALSE_FAILURE / checks
    k = int(stats.binom.ppf(FALSE_FAILURE / checks, n, level))
    while stats.binom.cdf(k - 1, n, level) > FALSE_FAILURE / checks:
        k -= 1
    return k


@pytest.mark.parametrize("kind", ["int_with_atoms", "continuous"])
def test_quantile_intervals_cover(project: Callable[..., Curator], kind: str) -> None:
    cur = project()
    if kind == "int_with_atoms":
        # a big atom at 40 holding the median and the 10th..60th percentiles: ties must not
        # break coverage
        x = np.concatenate([np.arange(0, 100) % 40, np.full(250, 40), np.arange(41, 101)]
                           ).astype(np.int64)
        cur.add_table("t", {"x": x}, bounds={"x": (0, 100)})
    else:
        x = np.linspace(0.0, 50.0, 401) ** 2 / 25.0  # skewed on [0, 100]
        cur.add_table("t", {"x": x}, bounds={"x": (0.0, 100.0)})
    level = 0.8  # a low level, so that a miscalibrated interval would show
    plan, ex = _exact(cur, QUERY, epsilon=4.0, level=level)  # t ≈ 37 rows of ~400
    n = 150
    src = dp.noise.seeded(21 if kind == "continuous" else 22)
    res = [release(plan, ex, source=src, insecure=True, epsilon_cost=0.0, ledger_seq=None,
                   remaining=None) for _ in range(n)]
    need = _min_covered(n, level, checks=2 * len(QS))
    widths = []
    for name, q in QS.items():
        truth = _true_quantile(x, q)
        lo = np.array([r[f"{name}_ci_low"][0] for r in res], dtype=np.float64)
        hi = np.array([r[f"{name}_ci_high"][0] for r in res], dtype=np.float64)
        val = np.array([r.value(name) for r in res], dtype=np.float64)
        assert np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)), name  # filled
        assert np.all((lo <= val) & (val <= hi)), name  # the point lies inside
        covered = int(((lo <= truth) & (truth <= hi)).sum())
        assert covered >= need, (name, covered, need)
        widths.append(float(np.median(hi - lo)))
    # informative, not the whole range (deterministic given the seeds; the bound is loose)
    assert widths[0] < 40.0, widths


def test_quantile_interval_spends_exactly_the_requested_epsilon(
        project: Callable[..., Curator]) -> None:
    cur = project(epsilon=5.0, accountant="pure")
    cur.add_table("t", {"x": np.arange(200.0)}, bounds={"x": (0.0, 200.0)})
    before = cur.budget().spent
    r = cur.sql(QUERY + "", epsilon=0.8)
    after = cur.budget()
    assert after.spent - before == pytest.approx(0.8, rel=1e-12)
    assert r.epsilon == pytest.approx(0.8, rel=1e-12)
    charge = [e for e in cur.entries() if e.kind == "charge"][-1]  # one ledger entry
    assert accounting.epsilon(charge.event, 0.0, method="pure") == pytest.approx(0.8, rel=1e-12)
    # the split table states the three shares of every quantile measurement
    quant = [row for row in r.split if row["mechanism"] == "exponential mechanism"]
    assert len(quant) == 4 and sum(row["epsilon"] for row in r.split) == pytest.approx(0.8)
    for row in quant:
        eps = row["epsilon"]
        end = eps * QUANTILE_CI_SHARE / 2
        assert row["split"] == (f"point {eps - 2 * end:.6g} + interval low {end:.6g} + "
                                f"interval high {end:.6g}")
    for name in QS:
        assert np.isfinite(r[f"{name}_ci_low"][0]) and np.isfinite(r[f"{name}_ci_high"][0])
        assert r[f"{name}_ci_low"][0] <= r.value(name) <= r[f"{name}_ci_high"][0]
