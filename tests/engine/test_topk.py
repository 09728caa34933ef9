"""Top-k groups by noisy max: ``ORDER BY <COUNT/SUM> [DESC|ASC] LIMIT k`` over groups.

The k groups are chosen by k rounds of the exponential mechanism (peeling; Durfee-Rogers 2019)
on the exact per-group scores, monotone with sensitivity ``m`` (proof in
``dpkit.engine.plan.calibrate.calibrate_topk``); only then are their values measured. Every
statistical check below states its false-failure probability (each <= 1e-6).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit import accounting
from dpkit import events as ev
from dpkit.engine import Curator
from dpkit.engine.noisy import _top_k
from dpkit.engine.plan import top_k_utility
from dpkit.engine.read import Exact
from dpkit.engine.sql import QueryError

WARDS = [f"w{i}" for i in range(10)]
# rows per ward: three clear leaders, seven small groups (gap to the 3rd >= 180 rows)
SIZES = [400, 15, 300, 10, 20, 200, 5, 12, 8, 3]
TOP3 = {"w0", "w2", "w5"}


def _table() -> dict[str, np.ndarray]:
    ward = np.concatenate([np.full(n, w, dtype=object) for w, n in zip(WARDS, SIZES,
                                                                       strict=True)])
    cost = np.linspace(0.0, 100.0, ward.size)
    return {"ward": ward, "cost": cost, "pid": np.arange(ward.size, dtype=np.int64)}


def _curator(project: Callable[..., Curator], *, seed: int = 1, **kw: Any) -> Curator:
    cur = project(epsilon=50.0, seed=seed, **kw)
    cur.add_table("visits", _table(), privacy_unit="pid", max_rows_per_unit=1,
                  bounds={"cost": (0, 100)}, domains={"ward": WARDS})
    return cur


def _exp_weights(scores: np.ndarray, factor: float) -> np.ndarray:
    return np.exp(factor * (scores - scores.max()))


def _peeling_probabilities(scores: np.ndarray, factor: float, k: int) -> dict[tuple[int, ...],
                                                                            float]:
    """Exact law of k rounds of the exponential mechanism with weights exp(factor·score)."""
    w = _exp_weights(scores, factor)
    out: dict[tuple[int, ...], float] = {}
    for seq in itertools.permutations(range(len(scores)), k):
        p, left = 1.0, float(w.sum())
        for i in seq:
            p *= w[i] / left
            left -= w[i]
        out[seq] = p
    return out


def test_top_k_picks_the_true_leaders(project: Callable[..., Curator]) -> None:
    # Each round picks a non-leader with probability <= 7·exp(-eps_r·180/m) (monotone EM: a
    # weight ratio exp(eps_r·gap/m) against the best remaining leader, whose count is >= 200
    # while every non-leader has <= 20). eps = 1 split equally between COUNT(*) and the
    # selection: eps_r = 0.5/3, so per round <= 7·e^-30 < 1e-12; over 3 rounds and 5 seeds
    # the false-failure probability is < 2e-11.
    for seed in range(5):
        cur = _curator(project, seed=seed)
        res = cur.sql("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward "
                      "ORDER BY n DESC LIMIT 3", epsilon=1.0, diagnostics=False)
        assert set(res["ward"]) == TOP3
        assert list(res["n"]) == sorted(res["n"], reverse=True)  # ORDER BY on noisy values
        sel = res.selection
        assert sel is not None and sel["k"] == 3 and sel["candidates"] == len(WARDS)
        assert sel["round_epsilon"] == pytest.approx(0.5 / 3)
        # utility bound (Dwork-Roth 3.11 + union over rounds), recomputed here: m = 1, monotone
        beta = 0.05
        u = 1.0 / (0.5 / 3) * (math.log(len(WARDS)) + math.log(3 / beta))
        assert sel["utility_bound"] == pytest.approx(u)
        assert any("top-3" in n and "within" in n for n in res.notes)
        cur.close()


def test_ledger_charged_once_with_the_composed_event(project: Callable[..., Curator]) -> None:
    cur = _curator(project)
    before = len(cur.ledger.entries("charge"))
    res = cur.sql("SELECT ward, COUNT(*) AS n, SUM(cost) AS s FROM visits GROUP BY ward "
                  "ORDER BY s DESC LIMIT 2", epsilon=0.9, diagnostics=False)
    charges = cur.ledger.entries("charge")
    assert len(charges) == before + 1
    event = charges[-1].event
    assert event == res.event
    assert isinstance(event, ev.Composed)
    parts = list(event.events)
    sel = [p for p in parts if isinstance(p, ev.SelfComposed)]
    assert sel == [ev.SelfComposed(ev.Exponential(0.3 / 2), 2)]
    assert sum(isinstance(p, ev.DiscreteLaplace) for p in parts) == 2
    # pure DP: the charge is the sum of the parts, at most the epsilon asked for
    assert accounting.epsilon(event, delta=0.0, method="pure") <= 0.9 * (1 + 1e-12)
    assert cur.budget().spent == pytest.approx(0.9, rel=1e-9)
    split = [s for s in res.split if "noisy max" in s["measurement"]]
    assert split and split[0]["epsilon"] == pytest.approx(0.3) and split[0]["monotonic"]


def test_peeling_law_matches_the_exponential_mechanism(project: Callable[..., Curator]) -> None:
    """Frequencies of the engine's selection vs the exact peeling law; then the exact law's
    privacy loss between neighbours stays within the charged epsilon."""
    cur = _curator(project)
    plan = cur._plan("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n DESC "
                     "LIMIT 2", epsilon=1.2, rho=None, delta=None, noise="laplace",
                     level=0.95, bounds=None)
    topk = plan.top_k
    assert topk is not None and topk.monotonic and topk.score_sensitivity == 1
    score_mm = plan.measure(topk.score_key)
    counts = np.array([5, 4, 2])  # three candidate groups, close scores
    score_mm.sql_col = "x"  # the plan was not compiled: name the exact column here
    exact = Exact(keys=[("a",), ("b",), ("c",)], cols={"x": [int(c) for c in counts]})
    factor = topk.round_epsilon / topk.score_sensitivity  # monotone: eps_r / m
    law = _peeling_probabilities(counts.astype(float), factor, 2)
    n = 3000
    src = dp.noise.seeded(11)
    freq: dict[tuple[int, ...], int] = dict.fromkeys(law, 0)
    for _ in range(n):
        chosen, _meta = _top_k(topk, score_mm, exact, np.arange(3), 0.95, src)
        freq[tuple(int(i) for i in chosen)] += 1
    # 6 outcomes, each a binomial; |z| > 5.3 has probability < 1.2e-7 each: total < 1e-6
    for seq, p in law.items():
        z = (freq[seq] - n * p) / math.sqrt(n * p * (1 - p))
        assert abs(z) < 5.3, (seq, freq[seq], n * p)
    # exact privacy: neighbours add one unit (m = 1 row) to any one group, or remove one
    charged = accounting.epsilon(topk.event, delta=0.0, method="pure")
    worst = 0.0
    for g, sign in itertools.product(range(3), (1, -1)):
        other = counts.copy()
        other[g] += sign
        law2 = _peeling_probabilities(other.astype(float), factor, 2)
        for seq in law:
            worst = max(worst, abs(math.log(law[seq] / law2[seq])))
    assert worst <= charged * (1 + 1e-12)
    assert worst > 0.5 * charged  # the bound is not vacuous: the law really moves


def test_orderings_and_sensitivities(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0)
    data = _table()
    data["signed"] = np.linspace(-5.0, 5.0, data["ward"].size)
    cur.add_table("visits", data, privacy_unit="pid", max_rows_per_unit=3,
                  bounds={"cost": (0, 100), "signed": (-5, 5)}, domains={"ward": WARDS})

    def plan(sql: str) -> Any:
        return cur._plan(sql, epsilon=1.0, rho=None, delta=None, noise="laplace", level=0.95,
                         bounds=None)

    p = plan("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n ASC LIMIT 2")
    assert p.top_k is not None and not p.top_k.desc and p.top_k.score_sensitivity == 3
    p = plan("SELECT ward, COUNT(DISTINCT pid) AS u FROM visits GROUP BY ward "
             "ORDER BY COUNT(DISTINCT pid) DESC LIMIT 2")
    assert p.top_k is not None and p.top_k.score_sensitivity == 1
    p = plan("SELECT ward, SUM(cost) FROM visits GROUP BY ward ORDER BY 2 DESC LIMIT 2")
    assert p.top_k is not None and p.top_k.monotonic  # lo >= 0: all sums move together
    p = plan("SELECT ward, SUM(signed) AS s FROM visits GROUP BY ward ORDER BY s DESC LIMIT 2")
    assert p.top_k is not None and not p.top_k.monotonic  # factor 2
    res = cur.sql("SELECT ward, SUM(signed) AS s FROM visits GROUP BY ward ORDER BY s DESC "
                  "LIMIT 2", epsilon=1.0)
    assert len(res) == 2 and res.selection is not None and not res.selection["monotonic"]
    # utility of a non-monotone selection has the factor 2
    assert res.selection["utility_bound"] == pytest.approx(top_k_utility(p.top_k, 10, 0.95))
    p.top_k.monotonic = True
    # in shifted score units the bound is c·u0, plus one step of the floor when shifted
    step = math.ldexp(2.0 ** p.top_k.score_shift, -p.top_k.f)
    floor_steps = 1.0 if p.top_k.score_shift else 0.0
    assert p.top_k.score_shift > 0  # SUM(signed) has a wide grid: the floor term is exercised
    assert res.selection["utility_bound"] / step - floor_steps == pytest.approx(
        2 * (top_k_utility(p.top_k, 10, 0.95) / step - floor_steps))
    # not COUNT/SUM, HAVING, or LIMIT >= the number of keys: no noisy-max measurement
    for sql, why in [
        ("SELECT ward, AVG(cost) AS a FROM visits GROUP BY ward ORDER BY a DESC LIMIT 2",
         "post-processing"),
        ("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward HAVING n > 3 ORDER BY n DESC "
         "LIMIT 2", "HAVING"),
        ("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n DESC LIMIT 10",
         "no selection"),
    ]:
        q = plan(sql)
        assert q.top_k is None and any(why in n for n in q.notes), (sql, q.notes)
    res = cur.sql("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n ASC LIMIT 3",
                  epsilon=2.0)
    assert len(res) == 3 and list(res["n"]) == sorted(res["n"])


def test_top_k_after_private_partition_selection(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0, delta=1e-6)
    cur.add_table("visits", _table(), privacy_unit="pid", max_rows_per_unit=1)  # no domain
    res = cur.sql("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n DESC "
                  "LIMIT 2", epsilon=2.0, delta=1e-7)
    # the three leaders (>= 200 units) pass the threshold (scale 1/0.667: T ~ 26) with
    # probability 1 - e^-260-ish; the top-2 of them by noisy max: gap >= 100 at eps_r = 1/3,
    # a wrong pick has probability < 10·e^-33. False failure < 1e-12.
    assert set(res["ward"]) == {"w0", "w2"}
    assert res.selection is not None and res.selection["candidates"] >= 3
    assert res.delta == 1e-7
    assert any("selected privately" in n for n in res.notes)


def test_builder_top_k_is_the_same_query(project: Callable[..., Curator]) -> None:
    cur = _curator(project)
    q = cur.table("visits").group_by("ward").count(alias="n").top_k(3, by="n")
    p1 = cur._plan(q.to_sql(), epsilon=1.0, rho=None, delta=None, noise="laplace",
                   level=0.95, bounds=None)
    p2 = cur._plan("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n DESC "
                   "LIMIT 3", epsilon=1.0, rho=None, delta=None, noise="laplace", level=0.95,
                   bounds=None)
    assert p1.event == p2.event and p1.top_k is not None
    res = q.run(epsilon=1.0)
    assert set(res["ward"]) == TOP3  # same bound as test_top_k_picks_the_true_leaders
    low = cur.table("visits").group_by("ward").count(alias="n").top_k(2, by="n",
                                                                      largest=False)
    assert "ASC" in low.to_sql()
    with pytest.raises(QueryError, match="k >= 1"):
        cur.table("visits").group_by("ward").count().top_k(0)


def test_gaussian_top_k_costs_its_rho_share(project: Callable[..., Curator]) -> None:
    cur = _curator(project, accountant="zcdp")
    res = cur.sql("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n DESC LIMIT 3",
                  rho=0.2, noise="gaussian")
    assert set(res["ward"]) == TOP3  # eps_r = sqrt(8·0.1/3) = 0.52: even safer than above
    # k rounds of Exponential(eps_r) are k·eps_r²/8 = 0.1 zCDP: with COUNT's 0.1, rho 0.2
    assert cur.budget().rho_spent == pytest.approx(0.2, rel=1e-9)


def test_privacy_loss_when_a_unit_touches_several_groups(
        project: Callable[..., Curator]) -> None:
    """The sensitivity is ``m`` in L∞ whatever the number of groups a unit touches: exact law of
    the selected sequence under every monotone change a unit with m = 3 rows can make (up to 3
    rows spread over 4 groups, added or removed), against the charged epsilon."""
    cur = project(epsilon=50.0)
    cur.add_table("visits", _table(), privacy_unit="pid", max_rows_per_unit=3,
                  bounds={"cost": (0, 100)}, domains={"ward": WARDS})
    plan = cur._plan("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n DESC "
                     "LIMIT 2", epsilon=0.8, rho=None, delta=None, noise="laplace",
                     level=0.95, bounds=None)
    topk = plan.top_k
    assert topk is not None and topk.score_sensitivity == 3 and topk.monotonic
    charged = accounting.epsilon(topk.event, delta=0.0, method="pure")
    factor = topk.round_epsilon / topk.score_sensitivity
    counts = np.array([9.0, 8.0, 6.0, 5.0])
    base = _peeling_probabilities(counts, factor, 2)
    worst = 0.0
    for v in itertools.product(range(4), repeat=4):
        if sum(v) > 3 or sum(v) == 0:
            continue
        for sign in (1, -1):
            law = _peeling_probabilities(counts + sign * np.array(v, dtype=float), factor, 2)
            worst = max(worst, max(abs(math.log(base[s] / law[s])) for s in base))
    assert worst <= charged * (1 + 1e-12)
    # the SUM score's sensitivity covers m rows at the upper bound, on the shifted grid
    p = cur._plan("SELECT ward, SUM(cost) AS s FROM visits GROUP BY ward ORDER BY s DESC "
                  "LIMIT 2", epsilon=0.8, rho=None, delta=None, noise="laplace",
                  level=0.95, bounds=None)
    assert p.top_k is not None
    sens = next(s for s in p.split() if "noisy max" in s["measurement"])["sensitivity"]
    assert 3 * 100 <= sens <= 3 * 100 * (1 + 2.0**-9)
