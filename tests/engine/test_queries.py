"""Queries through the engine: exact aggregates, bounding, noise laws, intervals, audits.

Statistical thresholds: z = 5.33 (two-sided normal tail 1e-7) for means and frequencies, so each
test fails falsely with probability below 1e-6 even with the handful of checks it makes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit import mechanisms
from dpkit.attacks.audit import audit
from dpkit.engine import Curator, QueryError
from dpkit.engine.noisy import release
from dpkit.engine.read import Exact

Z = 5.33


def _exact(cur: Curator, sql: str, **kw: Any) -> tuple[Any, Exact]:
    plan = cur._plan(sql, epsilon=kw.pop("epsilon", 1.0), rho=kw.pop("rho", None),
                     delta=kw.pop("delta", None), noise=kw.pop("noise", "laplace"),
                     level=kw.pop("level", 0.95), bounds=kw.pop("bounds", None),
                     diagnostics=kw.pop("diagnostics", False))  # outputs' measurements only
    return plan, cur._execute(plan)


def _dlap_var(scale: float) -> float:
    q = math.exp(-1.0 / scale)
    return 2 * q / (1 - q) ** 2


# ------------------------------------------------------------------------------ exact values


def test_exact_aggregates_match_numpy(visits_curator: Curator, visits_data: Any) -> None:
    d = visits_data()
    plan, ex = _exact(visits_curator, "SELECT ward, COUNT(*), COUNT(DISTINCT pid), SUM(cost) "
                                      "FROM visits GROUP BY ward")
    pid, ward = d["pid"], d["ward"]
    assert [k[0] for k in ex.keys] == ["A", "B", "C", "D", "E"]  # every public key, empty E too
    m = 2
    for gi, (w,) in enumerate(ex.keys):
        rows = {}
        for p in pid[ward == w]:
            rows[p] = rows.get(p, 0) + 1
        # COUNT(*) after bounding at most m rows per unit (every unit here touches one ward
        # at most? not necessarily: the row cap is per unit overall, so check bounds instead)
        got_rows = ex.cols[plan.measures[0].sql_col][gi] or 0
        assert got_rows <= sum(min(n, m) for n in rows.values())
        got_units = ex.cols[plan.measures[1].sql_col][gi] or 0
        assert got_units <= len(rows)
    # over all groups, rows kept = sum over units of min(rows, m)
    per_unit: dict[int, int] = {}
    for p in pid:
        per_unit[int(p)] = per_unit.get(int(p), 0) + 1
    total_rows = sum(ex.cols[plan.measures[0].sql_col][i] or 0 for i in range(len(ex.keys)))
    assert total_rows == sum(min(n, m) for n in per_unit.values())


def test_bounding_keeps_at_most_m_rows_per_unit(project: Callable[..., Curator]) -> None:
    cur = project()
    # unit 0 has 50 rows of value 10, the others one row of value 1
    u = np.concatenate([np.zeros(50, dtype=np.int64), np.arange(1, 21)])
    x = np.concatenate([np.full(50, 10.0), np.ones(20)])
    cur.add_table("t", {"u": u, "x": x}, privacy_unit="u", max_rows_per_unit=3,
                  bounds={"x": (0, 10)})
    plan, ex = _exact(cur, "SELECT COUNT(*), SUM(x), COUNT(DISTINCT u) FROM t")
    rows, s, units = (ex.cols[mm.sql_col][0] for mm in plan.measures)
    assert rows == 3 + 20
    sm = plan.measures[1]
    assert s == round((3 * 10.0 + 20 * 1.0) * 2**sm.f)
    assert units == 21


def test_max_groups_per_unit(project: Callable[..., Curator]) -> None:
    cur = project()
    u = np.zeros(8, dtype=np.int64)
    g = np.array(list("abcdefgh"), dtype=object)
    cur.add_table("t", {"u": u, "g": g}, privacy_unit="u", max_rows_per_unit=8,
                  max_groups_per_unit=2, domains={"g": list("abcdefgh")})
    plan, ex = _exact(cur, "SELECT g, COUNT(*) FROM t GROUP BY g")
    counts = [c or 0 for c in ex.cols[plan.measures[0].sql_col]]
    assert sum(counts) == 2 and max(counts) == 1
    assert plan.l0 == 2 and plan.measures[0].l1 == 8


def test_fixed_point_sums_bound_every_row_exactly(project: Callable[..., Curator]) -> None:
    """Adversarial floats (huge, tiny, subnormal, -0.0, inf, NaN) still move the integer sum by
    at most the stated per-row bound."""
    cur = project()
    vals = np.array([1e308, -1e308, 5e-324, -0.0, math.inf, -math.inf, math.nan, 0.1, 0.7,
                     1e-17, 2.0 - 1e-16, 123456.789])
    cur.add_table("t", {"x": vals}, bounds={"x": (-1.0, 2.0)})
    plan, ex = _exact(cur, "SELECT SUM(x), AVG(x), COUNT(x), COUNT(*) FROM t")
    by = {mm.kind: mm for mm in plan.measures}
    s = by["sum"]
    clamped = np.clip(np.where(np.isnan(vals), np.nan, vals), -1.0, 2.0)
    ints = [math.floor(abs(v) * 2**s.f + 0.5) * (1 if v >= 0 else -1)
            for v in clamped if not math.isnan(v)]
    assert all(abs(i) <= s.bound for i in ints)
    assert ex.cols[s.sql_col][0] == sum(ints)
    assert ex.cols[by["nonnull"].sql_col][0] == 11  # NaN counts as missing, like NULL
    assert ex.cols[by["rows"].sql_col][0] == 12


def test_nulls_are_ignored_like_sql(project: Callable[..., Curator]) -> None:
    import pyarrow as pa

    cur = project()
    cur.add_table("t", pa.table({"x": pa.array([1.0, None, 3.0, None]),
                                 "g": pa.array(["a", None, "a", "b"])}),
                  bounds={"x": (0, 5)}, domains={"g": ["a", "b"]})
    plan, ex = _exact(cur, "SELECT g, COUNT(*), COUNT(x), SUM(x) FROM t GROUP BY g")
    assert ex.keys == [("a",), ("b",)]
    cnt, nn, s = (ex.cols[mm.sql_col] for mm in plan.measures)
    assert list(cnt) == [2, 1] and list(nn) == [2, 0]
    assert s[0] == round(4.0 * 2 ** plan.measures[2].f)


# ------------------------------------------------------------------------------ noise laws


def _draws(plan: Any, ex: Exact, n: int, seed: int) -> list[Any]:
    src = dp.noise.seeded(seed)
    return [release(plan, ex, source=src, insecure=True, epsilon_cost=0.0, ledger_seq=None,
                    remaining=None) for _ in range(n)]


def test_count_noise_is_discrete_laplace_with_the_plan_scale(project: Callable[..., Curator]
                                                             ) -> None:
    cur = project()
    cur.add_table("t", {"x": np.arange(1000.0)})
    plan, ex = _exact(cur, "SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    mm = plan.measures[0]
    assert mm.scale == pytest.approx(2.0) and mm.event == dp.events.DiscreteLaplace(2.0, 1)
    n = 3000
    res = _draws(plan, ex, n, seed=11)
    noise = np.array([r.value("n") for r in res]) - 1000
    assert noise.dtype.kind == "i"
    var = _dlap_var(mm.scale)
    assert abs(noise.mean()) < Z * math.sqrt(var / n)
    q = math.exp(-1 / mm.scale)
    p0 = (1 - q) / (1 + q)
    assert abs((noise == 0).mean() - p0) < Z * math.sqrt(p0 * (1 - p0) / n)
    low = np.array([r["n_ci_low"][0] for r in res])
    high = np.array([r["n_ci_high"][0] for r in res])
    cover = ((low <= 1000) & (high >= 1000)).mean()
    assert cover >= 0.95 - Z * math.sqrt(0.95 * 0.05 / n)


def test_sum_noise_is_integer_laplace_on_the_fixed_point_grid(
        project: Callable[..., Curator]) -> None:
    cur = project()
    x = np.linspace(0, 10, 501)
    cur.add_table("t", {"x": x}, bounds={"x": (0, 10)})
    plan, ex = _exact(cur, "SELECT SUM(x) AS s FROM t", epsilon=1.0)
    mm = plan.measures[0]
    exact_int = ex.cols[mm.sql_col][0]
    assert abs(exact_int * 2.0 ** -mm.f - x.sum()) < 501 * 2.0 ** -mm.f
    n = 3000
    res = _draws(plan, ex, n, seed=12)
    grid = np.array([r.value("s") for r in res]) * 2.0**mm.f
    assert np.all(grid == np.round(grid))  # released on the grid
    noise = grid - exact_int
    var = _dlap_var(mm.scale)
    assert abs(noise.mean()) < Z * math.sqrt(var / n)
    # scale in native units is sensitivity / epsilon = 10
    assert mm.scale * 2.0**-mm.f == pytest.approx(10.0, rel=1e-6)
    second = np.mean(noise**2)  # E Z^2 = var; Var(Z^2) <= E Z^4 = var (1 + 12 q/(1-q)^2 ...)
    assert 0.8 * var < second < 1.25 * var  # generous: relative sd of the estimate is ~5%


def test_avg_and_var_intervals_cover(project: Callable[..., Curator]) -> None:
    cur = project()
    x = np.linspace(0, 100, 2001)
    cur.add_table("t", {"x": x}, bounds={"x": (0, 100)})
    plan, ex = _exact(cur, "SELECT AVG(x) AS a, VAR_POP(x) AS v, STDDEV(x) AS s FROM t",
                      epsilon=1.0)
    n = 400
    res = _draws(plan, ex, n, seed=13)
    a = np.array([r.value("a") for r in res])
    assert abs(a.mean() - 50.0) < 1.0
    for name, truth in (("a", x.mean()), ("v", x.var()), ("s", x.std(ddof=1))):
        lo = np.array([r[f"{name}_ci_low"][0] for r in res])
        hi = np.array([r[f"{name}_ci_high"][0] for r in res])
        cover = ((lo <= truth) & (truth <= hi)).mean()
        # the intervals are conservative (union bound): at least the level, minus sampling
        assert cover >= 0.95 - Z * math.sqrt(0.95 * 0.05 / n), name


def test_quantile_lands_near_the_true_quantile(project: Callable[..., Curator]) -> None:
    cur = project()
    x = np.arange(0, 1000) % 101  # ages 0..100, median 50
    cur.add_table("t", {"x": x.astype(np.int64)}, bounds={"x": (0, 100)})
    plan, ex = _exact(cur, "SELECT MEDIAN(x) AS m, MIN(x) AS lo, MAX(x) AS hi FROM t",
                      epsilon=3.0)
    res = _draws(plan, ex, 50, seed=14)
    med = np.array([r.value("m") for r in res])
    assert np.all(np.isin(med, np.arange(101)))  # candidates are the integers
    assert abs(np.median(med) - 50) <= 5
    assert np.median([r.value("lo") for r in res]) <= 10
    assert np.median([r.value("hi") for r in res]) >= 90


def test_audit_count_and_sum_at_user_level(project: Callable[..., Curator]) -> None:
    """Neighbours differ by one unit with more than its maximum rows at the extreme value: the
    engine's exact answers differ by at most the plan's sensitivity, and an empirical audit of
    the released values finds no epsilon above the one charged."""
    base_u = np.arange(1, 301, dtype=np.int64)
    base_x = np.full(300, 2.0)
    extra_u = np.zeros(10, dtype=np.int64)  # 10 rows; the cap is 3
    extra_x = np.full(10, 50.0)
    d0 = {"u": base_u, "x": base_x}
    d1 = {"u": np.concatenate([base_u, extra_u]), "x": np.concatenate([base_x, extra_x])}
    eps = 1.0
    plans = []
    for d in (d0, d1):
        cur = project()
        cur.add_table("t", d, privacy_unit="u", max_rows_per_unit=3, bounds={"x": (0, 50)})
        plans.append(_exact(cur, "SELECT COUNT(*), SUM(x) FROM t", epsilon=eps))
    for k in range(2):  # 0: COUNT, 1: SUM
        (p0, e0), (p1, e1) = plans
        mm = p0.measures[k]
        v0, v1 = e0.cols[mm.sql_col][0], e1.cols[p1.measures[k].sql_col][0]
        assert abs(v1 - v0) <= mm.l1
        assert abs(v1 - v0) == mm.l1  # the pair is the worst case
        src = dp.noise.seeded(20 + k)

        def mech(v: int, trials: int, mm: Any = mm, src: Any = src) -> np.ndarray:
            return mechanisms.geometric(np.full(trials, v, dtype=np.int64), sensitivity=mm.l1,
                                        epsilon=mm.epsilon, source=src).value

        r = audit(mech, v0, v1, trials=60_000, confidence=0.95)
        assert r.epsilon_lower <= mm.epsilon * (1 + 1e-9)
        assert r.epsilon_lower > 0.5 * mm.epsilon  # the audit sees the leakage it should


# ------------------------------------------------------------------------------ query shapes


def test_public_keys_show_empty_groups(visits_curator: Curator) -> None:
    res = visits_curator.sql("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward",
                             epsilon=1.0)
    assert list(res["ward"]) == ["A", "B", "C", "D", "E"]
    assert res.delta == 0.0
    e = int(np.flatnonzero(res["ward"] == "E")[0])
    assert abs(res["n"][e]) < 60  # an empty group is a noisy zero (scale 2 / 0.5 ... small)


def test_private_partition_selection_states_its_delta(visits_curator: Curator) -> None:
    res = visits_curator.sql("SELECT age, COUNT(*) AS n FROM visits GROUP BY age", epsilon=2.0,
                             delta=1e-7)
    assert res.delta == 1e-7
    assert any("selected privately" in note for note in res.notes)
    sel = [s for s in res.split if "partition selection" in s["measurement"]]
    assert sel and sel[0]["delta"] == 1e-7
    # ages with 0-2 patients exist in the data but cannot pass a threshold this high
    assert len(res) < 100
    assert visits_curator.budget().delta_spent == pytest.approx(1e-7)


def test_having_order_limit_and_expressions(visits_curator: Curator) -> None:
    res = visits_curator.sql(
        "SELECT ward, COUNT(*) AS n, SUM(cost) / COUNT(*) AS per_visit FROM visits "
        "GROUP BY ward HAVING COUNT(*) > 20 ORDER BY n DESC LIMIT 2", epsilon=2.0)
    assert len(res) <= 2
    assert list(res["n"]) == sorted(res["n"], reverse=True)
    assert all(v > 20 for v in res["n"])
    # an output over aggregates has an interval now (issue 14: union bound over its inputs)
    lo, hi = res.ci("per_visit")
    assert np.all((lo <= res["per_visit"]) & (res["per_visit"] <= hi))


def test_builder_compiles_to_the_same_plan(visits_curator: Curator) -> None:
    q = (visits_curator.table("visits").where("age >= 18").group_by("ward").count()
         .avg("cost").quantile("age", 0.9))
    sql = q.to_sql()
    p1, _ = _exact(visits_curator, sql)
    p2, _ = _exact(visits_curator, "SELECT ward, COUNT(*), AVG(cost), QUANTILE(age, 0.9) FROM "
                                   "visits WHERE age >= 18 GROUP BY ward")
    assert p1.event == p2.event
    assert [m.kind for m in p1.measures] == [m.kind for m in p2.measures]
    res = q.top_k(2, by="count").run(epsilon=1.0)
    assert len(res) == 2


def test_join_with_public_lookup_table(visits_curator: Curator) -> None:
    visits_curator.add_public_table(
        "wards", {"ward": np.array(["A", "B", "C", "D"], dtype=object),
                  "floor": np.array([1, 1, 2, 2])})
    res = visits_curator.sql(
        "SELECT w.floor, COUNT(*) AS n FROM visits v JOIN wards w ON v.ward = w.ward "
        "GROUP BY w.floor", epsilon=1.0)
    assert sorted(res["floor"]) == [1, 2]  # keys come from the public table: no delta
    assert res.delta == 0.0


def test_preview_spends_nothing_and_matches(visits_curator: Curator) -> None:
    before = visits_curator.ledger.head()
    pv = visits_curator.preview("SELECT COUNT(*) AS n, SUM(cost) AS s, AVG(age) AS a "
                                "FROM visits", epsilon=0.9)
    assert visits_curator.ledger.head() == before
    assert pv.cost == pytest.approx(0.9)
    hw = {o["name"]: o["halfwidth"] for o in pv.outputs}
    assert hw["a"] is None
    res = visits_curator.sql("SELECT COUNT(*) AS n, SUM(cost) AS s, AVG(age) AS a FROM visits",
                             epsilon=0.9)
    assert (res["n_ci_high"][0] - res["n_ci_low"][0]) / 2 == pytest.approx(hw["n"])
    assert (res["s_ci_high"][0] - res["s_ci_low"][0]) / 2 == pytest.approx(hw["s"], rel=1e-6)


def test_accuracy_picks_the_smallest_epsilon(visits_curator: Curator) -> None:
    res = visits_curator.sql("SELECT COUNT(*) AS n FROM visits", accuracy=10.0)
    half = (res["n_ci_high"][0] - res["n_ci_low"][0]) / 2
    assert half <= 10.0
    # slightly less epsilon would miss the target
    pv = visits_curator.preview("SELECT COUNT(*) AS n FROM visits", epsilon=res.epsilon * 0.98)
    assert pv.outputs[0]["halfwidth"] > 10.0
    with pytest.raises(QueryError, match="depends on the data"):
        visits_curator.sql("SELECT AVG(age) FROM visits", accuracy=1.0)


def test_gaussian_noise(project: Callable[..., Curator]) -> None:
    cur = project(accountant="zcdp")
    cur.add_table("t", {"g": np.array(["a", "b"] * 50, dtype=object), "x": np.arange(100.0)},
                  bounds={"x": (0, 100)}, domains={"g": ["a", "b"]})
    res = cur.sql("SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g", rho=0.1, noise="gaussian")
    assert len(res) == 2
    b = cur.budget()
    assert b.rho_spent == pytest.approx(0.1, rel=1e-9)


def test_record_level_and_count_distinct(project: Callable[..., Curator]) -> None:
    cur = project()
    cur.add_table("t", {"x": np.arange(10.0)})
    # answered since issue 14: at record level one row adds at most one distinct value
    res = cur.sql("SELECT COUNT(DISTINCT x) AS d FROM t", epsilon=1.0)
    assert res.split[0]["sensitivity"] == 1
    lo, hi = res.ci("d")
    assert lo[0] <= res["d"][0] <= hi[0]


def test_sources(project: Callable[..., Curator], tmp_path: Any) -> None:
    import duckdb
    import pandas as pd
    import pyarrow as pa

    cur = project()
    df = pd.DataFrame({"u": [1, 1, 2], "x": [1.0, 2.0, 3.0]})
    df.to_csv(tmp_path / "a.csv", index=False)
    df.to_parquet(tmp_path / "a.parquet")
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    con.execute("CREATE TABLE t AS SELECT * FROM df")
    con.close()
    cur.add_table("csv", tmp_path / "a.csv", privacy_unit="u", max_rows_per_unit=1)
    with pytest.raises(ValueError, match="private tables are always copied"):
        cur.add_table("pq", str(tmp_path / "a.parquet"), privacy_unit="u",
                      max_rows_per_unit=1, copy=False)
    assert "pq" not in cur.tables()
    cur.add_table("pq", str(tmp_path / "a.parquet"), privacy_unit="u", max_rows_per_unit=1)
    cur.add_table("pq_view", str(tmp_path / "a.parquet"), public=True, copy=False)
    cur.add_table("db", f"{tmp_path / 'db.duckdb'}::t", privacy_unit="u", max_rows_per_unit=1)
    cur.add_table("pd", df, privacy_unit="u", max_rows_per_unit=1)
    cur.add_table("arrow", pa.Table.from_pandas(df), privacy_unit="u", max_rows_per_unit=1)
    cur.add_table("rel", duckdb.sql("SELECT 1 AS u, 2.0 AS x"), privacy_unit="u",
                  max_rows_per_unit=1)
    for name in ("csv", "pq", "db", "pd", "arrow"):
        plan, ex = _exact(cur, f"SELECT COUNT(*) FROM {name}")
        assert ex.cols[plan.measures[0].sql_col][0] == 2  # one row per unit by default
    assert cur.tables()["pq"].storage == "copy"
    assert cur.tables()["pq_view"].storage == "view"
    # reopened, declarations intact
    again = Curator.open(cur.path)
    assert again.tables()["csv"].privacy_unit == "u"


def test_polars_source(project: Callable[..., Curator]) -> None:
    """A polars DataFrame loads like the other frames (polars is in the ``test`` extra, so this
    runs in CI; tests/test_extras.py fails there if it would skip)."""
    pl = pytest.importorskip("polars")
    cur = project()
    df = pl.DataFrame({"u": [1, 1, 2], "x": [1.0, None, 3.0], "g": ["a", "b", "a"]})
    meta = cur.add_table("pl", df, privacy_unit="u", max_rows_per_unit=2,
                         bounds={"x": (0, 5)}, domains={"g": ["a", "b"]})
    assert [(c.name, c.type) for c in meta.columns] == [("u", "BIGINT"), ("x", "DOUBLE"),
                                                        ("g", "VARCHAR")]
    plan, ex = _exact(cur, "SELECT g, COUNT(*), COUNT(x) FROM pl GROUP BY g")
    assert ex.keys == [("a",), ("b",)]
    assert ex.cols[plan.measures[0].sql_col] == [2, 1]
    assert ex.cols[plan.measures[1].sql_col] == [2, 0]  # the NULL x is not counted


@pytest.mark.parametrize("m", [1, 2, 3, 7])
def test_bounding_is_exact_with_duplicate_rows(project: Callable[..., Curator], m: int) -> None:
    """Identical rows hash alike; the unit still keeps exactly m of its rows."""
    cur = project()
    u = np.concatenate([np.zeros(30, dtype=np.int64), np.ones(4, dtype=np.int64),
                        np.full(2, 2, dtype=np.int64)])
    x = np.concatenate([np.full(25, 5.0), np.arange(5.0), np.full(4, 1.0), [2.0, 3.0]])
    g = np.array(["a"] * 36, dtype=object)
    cur.add_table("t", {"u": u, "x": x, "g": g}, privacy_unit="u", max_rows_per_unit=m,
                  bounds={"x": (0, 10)}, domains={"g": ["a"]})
    for seed in range(5):
        cur._source = dp.noise.seeded(seed)  # a different hash key each time
        plan, ex = _exact(cur, "SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g")
        rows = ex.cols[plan.measures[0].sql_col][0]
        assert rows == min(30, m) + min(4, m) + min(2, m)
        s = ex.cols[plan.measures[1].sql_col][0] * 2.0 ** -plan.measures[1].f
        # the sum is that of some m rows of each unit
        assert s <= min(30, m) * 5.0 + min(4, m) * 1.0 + min(2, m) * 3.0 + 1e-9


def test_record_level_join_needs_unique_public_keys(project: Callable[..., Curator]) -> None:
    cur = project()
    cur.add_table("t", {"k": np.array([1, 2, 2, 3]), "x": np.arange(4.0)})
    cur.add_public_table("dup", {"k": np.array([1, 2, 2]), "name": np.array(list("abc"),
                                                                            dtype=object)})
    before = cur.ledger.head()
    with pytest.raises(QueryError, match="repeated join keys"):
        cur.sql("SELECT COUNT(*) FROM t JOIN dup ON t.k = dup.k", epsilon=1.0)
    assert cur.ledger.head() == before


def test_having_on_an_aggregate_not_selected_is_measured(visits_curator: Curator) -> None:
    res = visits_curator.sql("SELECT ward, AVG(age) AS a FROM visits GROUP BY ward "
                             "HAVING COUNT(*) > 0", epsilon=1.0)
    assert any(s["measurement"] == "COUNT(*)" for s in res.split)
    assert res.columns[:2] == ["ward", "a"]


def test_max_groups_per_unit_lowers_the_selection_threshold(
        project: Callable[..., Curator]) -> None:
    data = {"u": np.repeat(np.arange(200), 5), "g": np.tile(np.arange(5), 200)}
    thresholds = []
    for groups in (5, 1):
        cur = project()
        cur.add_table("t", data, privacy_unit="u", max_rows_per_unit=5,
                      max_groups_per_unit=groups)
        plan = cur._plan("SELECT g, COUNT(*) FROM t GROUP BY g", epsilon=1.0, rho=None,
                         delta=1e-7, noise="laplace", level=0.95, bounds=None)
        sel = next(m for m in plan.measures if m.kind == "select")
        assert sel.l1 == groups and plan.l0 == groups
        thresholds.append(sel.threshold)
    assert thresholds[1] < thresholds[0]
