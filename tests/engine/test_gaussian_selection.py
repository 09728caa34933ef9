"""Gaussian partition selection: discrete Gaussian noise on distinct-unit counts + a threshold.

The threshold ``T`` is the smallest with ``1 - (1 - P(Z >= T-1))^L0 <= delta`` (a group made of
one unit alone shows with probability at most delta); the selection is then
``(eps, delta_g(eps) + delta)``-DP, charged as ``Composed(ZCDP(rho), ApproxDP(0, delta))``
(proof in ``dpkit.engine.plan.gaussian_threshold``). The tail is checked here against a direct
high-precision sum of the discrete Gaussian law (mpmath), not against our own helpers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mpmath
import numpy as np
import pytest

from dpkit import accounting
from dpkit import events as ev
from dpkit.engine import Curator
from dpkit.engine.plan import gaussian_selection_delta, gaussian_threshold
from dpkit.engine.sql import QueryError
from dpkit.mechanisms.plan import discrete_gaussian_plan

mpmath.mp.dps = 40


def _tail(a: int, sigma2: float) -> mpmath.mpf:
    """P(Z >= a) for the discrete Gaussian, by direct summation to 40 digits."""
    s2 = mpmath.mpf(sigma2)
    top = int(a + 60 * mpmath.sqrt(s2) + 50)
    width = int(60 * mpmath.sqrt(s2) + 50)

    def f(x: int) -> mpmath.mpf:
        return mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s2))

    num = mpmath.fsum(f(x) for x in range(a, top))
    den = mpmath.fsum(f(x) for x in range(-width, width + 1))
    return num / den


def _direct_delta(t: int, sigma2: float, l0: int) -> mpmath.mpf:
    return 1 - (1 - _tail(t - 1, sigma2)) ** l0


@pytest.mark.parametrize(("sigma2", "l0", "delta"), [
    (1.0, 1, 1e-6), (30.5, 1, 1e-9), (56.5, 2, 5e-8), (400.0, 5, 1e-7), (2.0e4, 3, 1e-10),
])
def test_threshold_is_the_smallest_meeting_delta(sigma2: float, l0: int, delta: float) -> None:
    t = gaussian_threshold(sigma2, l0, delta)
    assert _direct_delta(t, sigma2, l0) <= delta
    assert t == 2 or _direct_delta(t - 1, sigma2, l0) > delta  # smallest such T
    # our float evaluation is within its stated margin (1e-6 relative) and never below
    ours = gaussian_selection_delta(t, sigma2, l0)
    exact = _direct_delta(t, sigma2, l0)
    assert exact <= ours <= exact * (1 + 2e-6) + 1e-300


def test_engine_uses_gaussian_thresholding(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0, delta=1e-6, accountant="approx")
    # 3 big groups (>= 300 units) and 40 groups of a single unit
    g = np.concatenate([np.full(300, "big1"), np.full(400, "big2"), np.full(500, "big3"),
                        np.array([f"s{i}" for i in range(40)])]).astype(object)
    cur.add_table("t", {"g": g, "pid": np.arange(g.size)}, privacy_unit="pid",
                  max_rows_per_unit=2, max_groups_per_unit=2)
    res = cur.sql("SELECT g, COUNT(DISTINCT pid) AS u FROM t GROUP BY g", epsilon=1.0,
                  noise="gaussian", delta=2e-7)
    sel = next(s for s in res.split if "partition selection" in s["measurement"])
    assert sel["mechanism"] == "discrete Gaussian + threshold"
    rho = sel["rho"]
    # L2 sensitivity sqrt(L0), L0 = 2: sigma2 from the public noise plan, then T from it
    sigma2 = discrete_gaussian_plan(sensitivity=math.sqrt(2), rho=rho).sigma2
    assert sel["threshold"] == gaussian_threshold(sigma2, 2, 1e-7)
    assert sel["sensitivity"] == pytest.approx(math.sqrt(2))
    assert sel["delta"] == pytest.approx(1e-7)  # half of the query's delta (approx)
    # the big groups are ~37 sigma above T (sigma ~ 2.9 here): shown (P(miss) < 1e-200);
    # each single-unit group shows with probability <= 1e-7: P(any of 40) <= 4e-6
    assert set(res["g"]) == {"big1", "big2", "big3"}
    event = cur.ledger.entries("charge")[-1].event
    assert isinstance(event, ev.Composed)
    assert ev.ApproxDP(0.0, 1e-7) in event.events
    zc = [e for e in event.events if isinstance(e, ev.ZCDP)]
    # COUNT(DISTINCT) is the selection; the diagnostics' (rows read, rows dropped) rho adds in
    assert len(zc) == 1 and zc[0].rho == pytest.approx(sum(x["rho"] for x in res.split))
    b = cur.budget()
    assert b.delta_spent == pytest.approx(2e-7)  # one delta for the query
    # charged epsilon: the zCDP part at the remaining 1e-7 plus nothing for the threshold
    expect = accounting.epsilon(ev.ZCDP(zc[0].rho), delta=1e-7, method="zcdp")
    assert b.spent <= expect * (1 + 1e-9) and b.spent <= 1.0 * (1 + 1e-9)


def test_zcdp_accountant_refuses_private_selection(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=5.0, delta=1e-6, accountant="zcdp")
    cur.add_table("t", {"g": np.array(["a", "b"] * 50, dtype=object), "pid": np.arange(100)},
                  privacy_unit="pid", max_rows_per_unit=1)
    for noise in ("gaussian", "laplace"):
        with pytest.raises(QueryError, match=r"cannot express.*domains"):
            cur.sql("SELECT g, COUNT(*) FROM t GROUP BY g", epsilon=1.0, noise=noise)
    assert cur.budget().spent == 0.0 and not cur.ledger.entries("charge")


def test_bad_delta_for_selection(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=5.0, delta=1e-6, accountant="approx")
    cur.add_table("t", {"g": np.array(["a", "b"] * 50, dtype=object), "pid": np.arange(100)},
                  privacy_unit="pid", max_rows_per_unit=1)
    for bad in (0.0, 1e-5, -1.0, float("nan")):
        with pytest.raises(QueryError):
            cur.sql("SELECT g, COUNT(*) FROM t GROUP BY g", epsilon=1.0, noise="gaussian",
                    delta=bad)
    with pytest.raises(Exception, match="0 < delta < 1"):
        gaussian_threshold(4.0, 1, 0.0)
    assert cur.budget().spent == 0.0


@pytest.mark.parametrize(("sigma2", "l0", "delta", "seed"), [(4.0, 1, 0.05, 41),
                                                            (30.0, 3, 0.02, 42)])
def test_singleton_groups_show_with_probability_at_most_delta(sigma2: float, l0: int,
                                                              delta: float, seed: int) -> None:
    """The sampler itself, not the tail formula: a unit alone in its l0 groups (distinct-unit
    count 1 each) makes at least one of them appear with frequency <= delta, over n draws of
    the exact discrete Gaussian. Bound: delta + 5.3 sd of a binomial frequency (false failure
    <= 1e-7); and the frequency is within 5.3 sd of the formula's value, so a threshold set far
    too high (over-conservative) or a wrong tail would also be caught."""
    import dpkit as dp

    t = gaussian_threshold(sigma2, l0, delta)
    p = gaussian_selection_delta(t, sigma2, l0)
    n = 200_000
    z = dp.noise.discrete_gaussian(sigma2, (n, l0), source=dp.noise.seeded(seed))
    freq = float(np.mean(np.any(1 + z >= t, axis=1)))
    sd = math.sqrt(delta * (1 - delta) / n)
    assert freq <= delta + 5.3 * sd
    assert abs(freq - p) <= 5.3 * math.sqrt(p * (1 - p) / n) + 1e-12
