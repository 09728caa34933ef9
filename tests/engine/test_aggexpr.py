"""Aggregates over expressions, FILTER, COUNT(DISTINCT col) and intervals of outputs over
aggregates (issue 14, items 2 and 3).

Values are checked against pandas on a record-level table (no contribution bounding, so the
exact aggregate is the pandas one) through intervals at level ``1 - 1e-6`` each: a test fails
falsely with probability at most 1e-6 per interval checked (union bound over the listed ones).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine.noisy import release
from dpkit.engine.plan.intervals import derive, output_interval
from dpkit.engine.plan.model import PlanError
from dpkit.engine.spec import QueryError

LEVEL = 1 - 1e-6


def _frame(n: int = 400, seed: int = 7) -> pd.DataFrame:
    src = dp.noise.seeded(seed)
    return pd.DataFrame({
        "ward": np.array(["A", "B", "C", "D"], dtype=object)[dp.noise.uniform_int(4, n,
                                                                                    source=src)],
        "age": dp.noise.uniform_int(100, n, source=src).astype(np.int64),
        "cost": np.round(dp.noise.uniform_float01(n, source=src) * 1000.0, 2),
        "qty": 1 + dp.noise.uniform_int(5, n, source=src).astype(np.int64),
    })


@pytest.fixture
def rec(project: Callable[..., Curator]) -> tuple[Curator, pd.DataFrame]:
    return _add_t(project(epsilon=1000.0))


@pytest.fixture(scope="module")
def shared_rec(module_project: Callable[..., Curator]) -> tuple[Curator, pd.DataFrame]:
    """:func:`rec` once for the refusals (tests/engine/conftest.py, module_project)."""
    return _add_t(module_project(epsilon=1000.0))


def _add_t(cur: Curator) -> tuple[Curator, pd.DataFrame]:
    df = _frame()
    cur.add_table("t", {c: df[c].to_numpy() for c in df.columns}, privacy_unit=None,
                  bounds={"age": (0, 100), "cost": (0, 1000), "qty": (1, 5)},
                  domains={"ward": ["A", "B", "C", "D"]})
    return cur, df


def _covers(res: Any, name: str, truth: Any) -> None:
    lo, hi = res.ci(name)
    truth = np.asarray(truth, dtype=np.float64)
    assert np.all((lo <= truth + 1e-9) & (truth - 1e-9 <= hi)), (name, lo, truth, hi)


def _charges(cur: Curator) -> int:
    return len(cur.budget().history)


def test_sums_and_averages_of_expressions(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.sql(
        "SELECT SUM(age * 2 + 1) AS s, AVG(cost / qty) AS a, "
        "SUM(CASE WHEN age >= 65 THEN cost ELSE 0 END) AS old_cost, "
        "AVG(ABS(age - 50)) AS dev, SUM(LEAST(cost, 100) - GREATEST(qty, 2)) AS lg FROM t",
        epsilon=20.0, level=LEVEL)
    _covers(res, "s", (df.age * 2 + 1).sum())
    _covers(res, "a", (df.cost / df.qty).mean())
    _covers(res, "old_cost", df.cost.where(df.age >= 65, 0).sum())
    _covers(res, "dev", (df.age - 50).abs().mean())
    _covers(res, "lg", (df.cost.clip(upper=100) - df.qty.clip(lower=2)).sum())
    # the derived ranges are stated (and in the preview, before anything is spent)
    assert any("values in [1, 201]" in n for n in res.notes)
    pv = cur.preview("SELECT AVG(cost / qty) FROM t", epsilon=1.0)
    assert any("values in [0, 1000]" in n and "qty in [1, 5]" in n for n in pv.notes)


def test_sensitivity_comes_from_the_derived_range(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=100.0)
    df = _frame()
    cur.add_table("u", {c: df[c].to_numpy() for c in df.columns}, privacy_unit="qty",
                  max_rows_per_unit=3, bounds={"age": (0, 100)})
    # SUM(age * 2 - 50): per row in [-50, 150]; 3 rows per unit: sensitivity 450
    res = cur.preview("SELECT SUM(age * 2 - 50) FROM u", epsilon=1.0)
    assert res.split[0]["sensitivity"] == pytest.approx(450.0, rel=1e-6)
    # COUNT(DISTINCT ward) at user level: each kept row adds at most one value
    d = cur.preview("SELECT COUNT(DISTINCT ward) FROM u", epsilon=1.0)
    assert d.split[0]["sensitivity"] == 3


def test_filter_with_and_without_group_by(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.sql("SELECT COUNT(*) FILTER (WHERE age > 50) AS old, "
                  "SUM(cost) FILTER (WHERE ward = 'A') AS a_cost, "
                  "AVG(age) FILTER (WHERE cost < 500) AS cheap_age FROM t",
                  epsilon=20.0, level=LEVEL)
    _covers(res, "old", (df.age > 50).sum())
    _covers(res, "a_cost", df.cost[df.ward == "A"].sum())
    _covers(res, "cheap_age", df.age[df.cost < 500].mean())
    assert res["old"].dtype.kind == "i"  # a count: integer noise
    g = cur.sql("SELECT ward, COUNT(*) FILTER (WHERE age > 50) AS old, "
                "SUM(cost) FILTER (WHERE qty >= 3) AS big FROM t GROUP BY ward",
                epsilon=20.0, level=LEVEL)
    assert list(g["ward"]) == ["A", "B", "C", "D"]
    by = df.groupby("ward")
    _covers(g, "old", by.age.apply(lambda s: (s > 50).sum()).to_numpy())
    _covers(g, "big", by.apply(lambda x: x.cost[x.qty >= 3].sum(),
                               include_groups=False).to_numpy())


def test_conditional_count_is_a_count(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.sql("SELECT SUM(CASE WHEN ward = 'B' THEN 1 ELSE 0 END) AS b, "
                  "SUM(IF(age < 18, 1, 0)) AS kids FROM t", epsilon=20.0, level=LEVEL)
    assert res["b"].dtype.kind == "i" and res["kids"].dtype.kind == "i"
    assert all(s["measurement"].startswith("COUNT") for s in res.split)
    _covers(res, "b", (df.ward == "B").sum())
    _covers(res, "kids", (df.age < 18).sum())


def test_count_distinct_at_record_level(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.sql("SELECT COUNT(DISTINCT age) AS ages, COUNT(DISTINCT ward) AS wards, "
                  "COUNT(DISTINCT age) FILTER (WHERE ward = 'A') AS ages_a FROM t",
                  epsilon=20.0, level=LEVEL)
    assert {s["sensitivity"] for s in res.split} == {1}
    _covers(res, "ages", df.age.nunique())
    _covers(res, "wards", df.ward.nunique())
    _covers(res, "ages_a", df.age[df.ward == "A"].nunique())


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("SELECT SUM(age / cost) FROM t", "divisor \"cost\" may be 0"),
        ("SELECT SUM(age / (qty - 1)) FROM t", "may be 0"),
        ("SELECT AVG(age / 0) FROM t", "may be 0"),
        ("SELECT SUM(age * ward) FROM t", "'ward' is not a number"),
        ("SELECT SUM(age || 'x') FROM t", "no interval rule"),
        ("SELECT SUM(SQRT(age - 50)) FROM t", "may be negative"),
        ("SELECT SUM(SUM(age)) FROM t", "aggregate inside an aggregate"),
        ("SELECT SUM(POWER(age, age)) FROM t", "whole n"),
        ("SELECT SUM(age * 1e308 * 1e308) FROM t", "not finite"),
    ],
)
def test_unbounded_expressions_are_refused_before_the_charge(
        shared_rec: tuple[Curator, pd.DataFrame], query: str, match: str) -> None:
    cur, _ = shared_rec
    with pytest.raises(QueryError, match=match):
        cur.sql(query, epsilon=1.0)
    assert _charges(cur) == 0


def test_a_column_without_bounds_is_refused(project: Callable[..., Curator]) -> None:
    cur = project()
    cur.add_table("t", {"x": np.arange(10.0), "y": np.arange(10.0)}, bounds={"x": (0, 9)})
    with pytest.raises(QueryError, match=r"'y' has no bounds.*bounds=\{'y'"):
        cur.sql("SELECT SUM(x + y) FROM t", epsilon=1.0)
    # bounds given with the query make it answerable; COUNT needs no range at all
    cur.sql("SELECT SUM(x + y) FROM t", epsilon=1.0, bounds={"y": (0, 9)})
    cur.sql("SELECT COUNT(x + y) FROM t", epsilon=1.0)
    assert _charges(cur) == 2


def test_expressions_that_fail_on_some_rows_are_answered(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=100.0)
    cur.add_table("t", {"x": np.array([-5.0, 1.0, 2.0, 3.0]),
                        "s": np.array(["1", "x", "2", "3"], dtype=object)},
                  privacy_unit=None, bounds={"x": (-10, 10)})
    # a text cast that fails on 'x', an INTEGER product that overflows on some rows
    for q in ("SELECT SUM(CASE WHEN CAST(s AS INTEGER) > 1 THEN x ELSE 0 END) FROM t",
              "SELECT COUNT(*) FILTER (WHERE CAST(s AS INTEGER) > 1) FROM t",
              "SELECT SUM(CASE WHEN CAST(x AS INTEGER) * 2147483647 > 0 THEN x END) FROM t",
              "SELECT AVG(x) FILTER (WHERE CAST(s AS INTEGER) * 2147483647 > 1) FROM t",
              "SELECT COUNT(DISTINCT CAST(s AS INTEGER) * 2147483647) FROM t"):
        res = cur.sql(q, epsilon=1.0)
        assert len(res) == 1


# ------------------------------------------------------------------ interval arithmetic


def test_row_intervals_contain_every_value() -> None:
    bounds = {"a": (-3.0, 2.0), "b": (1.0, 4.0)}
    cases = {
        '"__t"."a" * "__t"."b" - 1': lambda a, b: a * b - 1,
        '"__t"."a" / "__t"."b"': lambda a, b: a / b,
        'ABS("__t"."a") + POWER("__t"."a", 2)': lambda a, b: abs(a) + a * a,
        'CASE WHEN "__t"."a" > 0 THEN -"__t"."b" ELSE 2 END': lambda a, b: -b if a > 0 else 2,
        'GREATEST("__t"."a", "__t"."b" / 2) + ROUND("__t"."a", 1)':
            lambda a, b: max(a, b / 2) + round(a, 1),
    }
    grid = [(a, b) for a in np.linspace(-3, 2, 21) for b in np.linspace(1, 4, 13)]
    for text, f in cases.items():
        d = derive(text, bounds=bounds.get, kind=lambda c: "float", label=text)
        vals = [f(a, b) for a, b in grid]
        assert d.lo <= min(vals) and max(vals) <= d.hi, text
    with pytest.raises(PlanError, match="may be 0"):
        derive('"__t"."b" / "__t"."a"', bounds=bounds.get, kind=lambda c: "float", label="x")


def test_output_intervals_are_enclosures() -> None:
    import sqlglot

    lo, hi = np.array([-2.0, 1.0]), np.array([3.0, 2.0])
    boxes = {"__a0": (lo, hi), "__a1": (np.array([1.0, -1.0]), np.array([2.0, 1.0]))}
    node = sqlglot.parse_one("POWER(__a0, 2) / __a1 + SQRT(ABS(__a0))", read="duckdb")
    got = output_interval(node, boxes)
    assert got is not None
    assert got[0][0] <= 0.0 and got[1][0] >= 9.0 + np.sqrt(3.0)
    assert np.isinf(got[0][1]) and np.isinf(got[1][1])  # a divisor interval holding 0
    assert output_interval(sqlglot.parse_one("hash(__a0)"), boxes) is None


# ------------------------------------------------------------------ coverage by simulation

COVERAGE_QUERY = (
    "SELECT ward, SUM(cost) / SUM(age) AS r, "
    "COUNT(*) FILTER (WHERE age > 50) / COUNT(*) AS share, POWER(AVG(age), 2) AS p, "
    "SQRT(VAR(cost)) AS sd, ROUND(AVG(age), 1) AS ra FROM t GROUP BY ward")


@pytest.mark.parametrize(("reps", "max_misses"), [
    (40, 58), pytest.param(250, 262, marks=pytest.mark.slow)])
def test_output_intervals_cover_at_the_stated_level(rec: tuple[Curator, pd.DataFrame],
                                                    reps: int, max_misses: int) -> None:
    """``4·reps`` independent intervals per output (``reps`` releases x 4 groups) at level 0.8.

    Each misses with probability at most 0.2 (the union bound makes it smaller), so the misses
    are stochastically below Binomial(4·reps, 0.2); the test fails if one output misses more
    than ``max_misses`` times, the smallest k with P(Bin(4·reps, 0.2) > k) < 1e-6 (scipy's
    binom.sf): false-failure probability < 1e-6 per output, 5e-6 in all.
    """
    cur, df = rec
    level = 0.8
    plan = cur._plan(COVERAGE_QUERY, epsilon=0.3, rho=None, delta=None, noise="laplace",
                     level=level, bounds=None)
    exact = cur._execute(plan)
    by = df.groupby("ward")
    truth = {
        "r": (by.cost.sum() / by.age.sum()).to_numpy(),
        "share": by.age.apply(lambda s: (s > 50).mean()).to_numpy(),
        "p": (by.age.mean() ** 2).to_numpy(),
        "sd": by.cost.std().to_numpy(),
        "ra": by.age.mean().round(1).to_numpy(),
    }
    misses = dict.fromkeys(truth, 0)
    src = dp.noise.seeded(11)
    for _ in range(reps):
        res = release(plan, exact, source=src, insecure=True, epsilon_cost=0.3, ledger_seq=None,
                      remaining=None)
        for name, t in truth.items():
            lo, hi = res.ci(name)
            misses[name] += int(np.sum((t < lo - 1e-9) | (t > hi + 1e-9)))
    assert max(misses.values()) <= max_misses, misses
    assert _charges(cur) == 0  # nothing in this test spends budget


# ------------------------------------------------------------------ D / D' seal

SEAL_QUERIES = (
    "SELECT SUM(age * 2 - cost / 4) AS a, AVG(CASE WHEN CAST(s AS INTEGER) > 1 THEN cost END) "
    "AS b FROM t",
    "SELECT ward, COUNT(*) FILTER (WHERE CAST(s AS INTEGER) * 2147483647 > 0) AS a, "
    "SUM(cost) FILTER (WHERE age > 50) AS b FROM t GROUP BY ward",
    "SELECT ward, SUM(cost) / SUM(age) AS r, POWER(AVG(age), 2) AS p FROM t GROUP BY ward",
    "SELECT COUNT(DISTINCT s) AS d, SUM(CASE WHEN ln(cost) > 1 THEN 1 ELSE 0 END) AS c FROM t",
    "SELECT ward, MEDIAN(ABS(age - 50)) AS m FROM t GROUP BY ward HAVING COUNT(*) > 2",
    "SELECT SUM(age / cost) FROM t",  # refused: the same refusal on both
)


def _seal_table(change: str) -> dict[str, np.ndarray]:
    n = 60
    data = {"pid": np.arange(n) // 2, "ward": np.array(["A", "B", "C"] * 20, dtype=object),
            "age": np.arange(n, dtype=np.int64) % 90,
            "cost": np.linspace(1.0, 900.0, n), "s": np.array(["1", "2", "3"] * 20, dtype=object)}
    if change == "remove":
        return {k: v[2:] for k, v in data.items()}
    extreme = {"pid": np.array([999, 999]), "ward": np.array(["Z", "A"], dtype=object),
               "age": np.array([2**63 - 1, -(2**63)], dtype=np.int64),
               "cost": np.array([np.inf, np.nan]), "s": np.array(["x", "9" * 30], dtype=object)}
    if change == "add":
        return {k: np.concatenate([v, extreme[k]]) for k, v in data.items()}
    if change == "replace":  # unit 0 changed to extremes
        return {k: np.concatenate([extreme[k][:1] if k != "pid" else v[:1], v[1:]])
                for k, v in data.items()}
    return data


def _outcome(cur: Curator, q: str) -> tuple[Any, ...]:
    try:
        res = cur.sql(q, epsilon=1.0)
    except QueryError as exc:
        return ("refused", str(exc))
    return ("answered", tuple(res.columns), len(res) if "HAVING" not in q else None,
            tuple(res["ward"]) if "ward" in res.columns and "HAVING" not in q else None)


@pytest.mark.parametrize("change", ["add", "remove", "replace"])
def test_neighbours_give_the_same_outcome_and_shape(project: Callable[..., Curator],
                                                    change: str) -> None:
    """One unit added (with extreme values: the largest BIGINT, inf, NaN, a text that fails a
    cast, a key outside the domain), removed, or changed to extremes: every query gives the
    same outcome (the same refusal, or an answer with the same columns and groups)."""
    outs = []
    for table in (_seal_table("none"), _seal_table(change)):
        cur = project(epsilon=100.0)
        cur.add_table("t", table, privacy_unit="pid", max_rows_per_unit=2,
                      bounds={"age": (0, 100), "cost": (0, 1000)},
                      domains={"ward": ["A", "B", "C"]})
        outs.append([_outcome(cur, q) for q in SEAL_QUERIES])
    assert outs[0] == outs[1]
    assert outs[0][-1][0] == "refused" and all(o[0] == "answered" for o in outs[0][:-1])


def test_builder_filters_and_expressions(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    q = (cur.table("t").group_by("ward").count(alias="n")
         .count(filter="age > 50", alias="old").sum("cost", filter="qty >= 3", alias="big")
         .expr("SUM(cost) / SUM(age)", alias="r").expr("SUM(age * 2)", alias="s2"))
    assert "FILTER(WHERE age > 50)" in q.to_sql().replace("FILTER (", "FILTER(")
    res = q.run(epsilon=20.0, level=LEVEL)
    by = df.groupby("ward")
    _covers(res, "old", by.age.apply(lambda s: (s > 50).sum()).to_numpy())
    _covers(res, "s2", (by.age.sum() * 2).to_numpy())
    _covers(res, "r", (by.cost.sum() / by.age.sum()).to_numpy())


def test_try_only_where_a_part_is_not_proved_total() -> None:
    b = {"a": (0.0, 1.0)}.get

    def kind(c: str) -> str:
        return "float"

    plain = derive('"__t"."a" * 2 + 1', bounds=b, kind=kind, label="x")
    assert not plain.sql.startswith("TRY(")  # clamped DOUBLE arithmetic with finite ranges
    case = 'CASE WHEN "__t"."a" > 0 THEN "__t"."a" END'
    assert not derive(case, bounds=b, kind=kind, label="x", total=lambda n: True).sql.startswith(
        "TRY(")
    assert derive(case, bounds=b, kind=kind, label="x").sql.startswith("TRY(")
