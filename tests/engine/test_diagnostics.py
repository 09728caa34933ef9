"""Answers that say when they mislead: rows dropped by the per-unit cap, values clamped.

Exact checks read the uncharged exact totals (``Curator._execute``, tests only) against pandas;
D / D' checks add or remove one unit with extreme rows and bound the change of every
diagnostic total by ``m`` (their stated sensitivity). Noisy checks use seeded projects; each
states the probability that a correct implementation fails it, from the noise law.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpkit import events as ev
from dpkit.engine import Curator
from dpkit.engine import plan as dplan
from dpkit.engine.diagnose import WARN_SHARE, exact_total

M = 2


def _table(n_units: int = 3000, heavy: int = 0, out: int = 0, seed: int = 0) -> pd.DataFrame:
    """``n_units`` units of 1-2 rows with x in [0, 100]; ``heavy`` more units of 20 rows;
    ``out`` rows with x = 500 (outside the bounds)."""
    rng = np.random.default_rng(seed)
    sizes = np.concatenate([rng.integers(1, M + 1, n_units), np.full(heavy, 20)])
    u = np.repeat(np.arange(sizes.size), sizes)
    x = rng.uniform(0, 100, u.size)
    x[:out] = 500.0
    g = np.where(np.arange(u.size) % 2 == 0, "a", "b").astype(object)
    return pd.DataFrame({"u": u, "x": x, "g": g})


def _truth(df: pd.DataFrame, m: int) -> dict[str, int]:
    n = df.groupby("u").size()
    return {"dkept": int(n.clip(upper=m).sum()),
            "ddrop": int((n - m).clip(lower=0).clip(upper=m).sum())}


def _exact_diag(cur: Curator, query: str, **kw: Any) -> dict[str, int]:
    plan = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise="laplace", level=0.95,
                     bounds=kw.get("bounds"))
    ex = cur._execute(plan)
    return {mm.kind + (f":{mm.column}" if mm.kind == "dclamp" else ""):
            exact_total(ex.column(mm.sql_col), scalar=mm.kind == "ddrop" and not mm.per_group)
            for mm in plan.diag_measures}


def _load(cur: Curator, df: pd.DataFrame, **kw: Any) -> None:
    cur.add_table("t", df, privacy_unit="u", max_rows_per_unit=M, bounds={"x": (0, 100)},
                  domains={"g": ["a", "b"]}, replace="t" in cur.tables(), **kw)


QUERIES = [
    "SELECT COUNT(*) AS n, AVG(x) AS ax FROM t",
    "SELECT g, COUNT(*) AS n, SUM(x) AS sx FROM t GROUP BY g",
    "SELECT COUNT(*) AS n, MEDIAN(x) AS mx FROM t WHERE x > 10",
]


@pytest.mark.parametrize("query", QUERIES)
def test_exact_totals_match_the_data(project: Callable[..., Curator], query: str) -> None:
    cur = project()
    df = _table(heavy=40, out=25)
    _load(cur, df)
    got = _exact_diag(cur, query)
    rows = df[df.x > 10] if "WHERE" in query else df
    truth = _truth(rows, M)
    assert got["dkept"] == truth["dkept"] and got["ddrop"] == truth["ddrop"]
    # rows kept after bounding outside [0, 100]: every unit keeps at most M of its rows, so
    # the count lies between the out-of-bounds rows of the light units and all of them
    assert 0 < got["dclamp:__t.x"] <= 25


def test_groups_cap_counts_its_dropped_rows(project: Callable[..., Curator]) -> None:
    cur = project()
    df = _table(heavy=10)
    cur.add_table("t", df, privacy_unit="u", max_rows_per_unit=4, max_groups_per_unit=1,
                  bounds={"x": (0, 100)}, domains={"g": ["a", "b"]})
    got = _exact_diag(cur, "SELECT g, COUNT(*) AS n FROM t GROUP BY g")
    per_unit = df.groupby("u").size()
    # rows before minus rows after both caps (one group, then <= 4 rows), clipped at m = 4
    kept = df.groupby(["u", "g"]).size().groupby("u").max().clip(upper=4)
    drop = (per_unit - kept).clip(upper=4).sum()
    assert got["ddrop"] == int(drop)


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("change", ["add", "remove"])
def test_one_unit_moves_each_diagnostic_by_at_most_m(project: Callable[..., Curator],
                                                      query: str, change: str) -> None:
    # D and D': one unit added (or removed) with 500 rows, all far outside the bounds
    base = _table(n_units=500, heavy=3, out=10, seed=2)
    extreme = pd.DataFrame({"u": np.full(500, 10_000), "x": np.full(500, 1e12),
                            "g": np.array(["a", "b"] * 250, dtype=object)})
    with_unit = pd.concat([base, extreme], ignore_index=True)
    d, d2 = (base, with_unit) if change == "add" else (with_unit, base)
    cur = project()
    _load(cur, d)
    before = _exact_diag(cur, query)
    _load(cur, d2)
    after = _exact_diag(cur, query)
    assert before.keys() == after.keys()
    for k in before:
        assert abs(after[k] - before[k]) <= M, k
    # the extreme unit is seen: it adds M kept rows, M dropped (clipped), M clamped
    big, small = (after, before) if change == "add" else (before, after)
    assert big["ddrop"] - small["ddrop"] == M


def test_warnings_fire_on_heavy_dropping_and_clamping(project: Callable[..., Curator]) -> None:
    # 3000 light units (~4500 rows) + 1500 units of 20 rows: ~40% of the capped rows are
    # dropped (true share ~0.4) and 30% of the rows read lie outside the bounds. The warning
    # is missed only if the noise on a count of thousands moves it by more than ~1500: with
    # epsilon 2 the diagnostics get 0.1/3 each, scale m/eps_d = 60, P < 2·exp(-20) per count.
    cur = project(epsilon=50.0)
    df = _table(n_units=3000, heavy=1500, seed=3)
    df.loc[df.index % 10 < 3, "x"] = -50.0
    _load(cur, df)
    res = cur.sql("SELECT COUNT(*) AS n, AVG(x) AS ax FROM t", epsilon=2.0)
    d = res.diagnostics
    assert set(d) == {"rows_read", "rows_dropped", "clamped:x"}
    assert d["rows_dropped"]["share_low"] > WARN_SHARE
    assert any("per-unit cap" in w and "max_rows_per_unit=2" in w for w in res.warnings)
    assert any("values of x lay outside [0, 100]" in w for w in res.warnings)
    # the fixes are the owner's (a service analyst cannot change bounds or caps): said so
    assert all("the data owner can" in w for w in res.warnings)
    assert "warning:" in repr(res)
    truth = _truth(df, M)
    share = truth["ddrop"] / (truth["ddrop"] + truth["dkept"])
    assert abs(d["rows_dropped"]["share"] - share) < 0.05  # same noise bound as above


def test_no_warning_when_nothing_is_dropped_or_clamped(project: Callable[..., Curator]) -> None:
    # 20000 units of one row each, every value inside the bounds: a warning needs the noisy
    # dropped count's lower end above 5% of ~20000 rows, i.e. noise > ~1000 on a scale of
    # m/eps_d = 2/(2·0.05/3) = 60: P < exp(-16) per diagnostic
    cur = project(epsilon=50.0)
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"u": np.arange(20000), "x": rng.uniform(0, 100, 20000),
                       "g": np.array(["a", "b"] * 10000, dtype=object)})
    _load(cur, df)
    res = cur.sql("SELECT g, COUNT(*) AS n, SUM(x) AS sx FROM t GROUP BY g", epsilon=2.0)
    assert res.warnings == []
    assert res.diagnostics["rows_read"]["ci_low"] <= 20000 <= res.diagnostics["rows_read"][
        "ci_high"] + 400


def test_diagnostics_cost_a_stated_share_in_the_one_charge(
        project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0)
    _load(cur, _table())
    q = "SELECT COUNT(*) AS n, SUM(x) AS sx FROM t"
    before = len(cur.ledger.entries("charge"))
    res = cur.sql(q, epsilon=1.0)
    charges = cur.ledger.entries("charge")
    assert len(charges) == before + 1 and charges[-1].event == res.event
    diag = [s for s in res.split if s["measurement"].startswith("diagnostics")]
    assert len(diag) == 3  # rows read, rows dropped, x clamped
    assert sum(s["epsilon"] for s in diag) == pytest.approx(dplan.DIAGNOSTICS_SHARE)
    assert sum(s["epsilon"] for s in res.split) == pytest.approx(1.0)
    assert res.epsilon == pytest.approx(1.0)
    assert isinstance(res.event, ev.Composed) and len(res.event.events) == 5
    # the preview shows the same split
    pv = cur.preview(q, epsilon=1.0)
    assert [s["measurement"] for s in pv.split] == [s["measurement"] for s in res.split]


def test_diagnostics_can_be_switched_off(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0)
    _load(cur, _table())
    res = cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=1.0, diagnostics=False)
    assert res.diagnostics == {} and res.warnings == []
    assert [s["measurement"] for s in res.split] == ["COUNT(*)"]
    assert res.split[0]["epsilon"] == pytest.approx(1.0)
    with pytest.raises(dplan.PlanError, match="True or False"):
        cur.sql("SELECT COUNT(*) FROM t", epsilon=1.0, diagnostics="no")  # type: ignore[arg-type]


def test_record_level_without_bounds_measures_nothing_more(
        project: Callable[..., Curator]) -> None:
    cur = project()
    cur.add_table("r", pd.DataFrame({"x": np.arange(10.0)}))
    res = cur.sql("SELECT COUNT(*) AS n FROM r", epsilon=1.0)
    assert res.diagnostics == {} and len(res.split) == 1
    plan = cur._plan("SELECT SUM(x) FROM r", epsilon=1.0, rho=None, delta=None,
                     noise="laplace", level=0.95, bounds={"x": (0, 5)})
    assert sorted(m.kind for m in plan.diag_measures) == ["dclamp", "dkept"]


def test_gaussian_queries_measure_diagnostics_in_rho(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0, accountant="zcdp")
    _load(cur, _table())
    res = cur.sql("SELECT COUNT(*) AS n FROM t", rho=0.5, noise="gaussian")
    diag = [s for s in res.split if s["measurement"].startswith("diagnostics")]
    assert sum(s["rho"] for s in diag) == pytest.approx(0.5 * dplan.DIAGNOSTICS_SHARE)
    assert "rows_dropped" in res.diagnostics


@pytest.mark.parametrize("groups_cap", [False, True])
def test_portable_statement_folds_the_same_dropped_rows(project: Callable[..., Curator],
                                                        groups_cap: bool) -> None:
    """The portable statement (the one Spark runs) counts the dropped rows inside its main
    aggregation (``__d`` on each unit's first kept row, summed per group and totalled on the
    driver, or by a window where a public table's keys may leave groups out) instead of the
    native scalar subquery: the same totals, with and without a groups cap."""
    cur = project()
    df = _table(heavy=40, out=25, seed=4)
    kw: dict[str, Any] = {"max_groups_per_unit": 1} if groups_cap else {}
    cur.add_table("t", df, privacy_unit="u", max_rows_per_unit=4 if groups_cap else M,
                  bounds={"x": (0, 100)}, domains={"g": ["a", "b"]}, **kw)
    for query in QUERIES[:2]:
        native = _exact_diag(cur, query)
        cur._preparer.portable = True
        portable = _exact_diag(cur, query)
        cur._preparer.portable = False
        # (the clamped counts may differ: the two hashes keep different rows of a unit)
        assert portable["ddrop"] == native["ddrop"] > 0, query
        assert portable["dkept"] == native["dkept"], query
