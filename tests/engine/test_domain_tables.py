"""Declared domains stored as hidden key tables (``__dpkeys``) and the columnar result path.

The key table must be an exact stand-in for the literal keys it replaces: the same rows pass
the domain filter, the same keys (of the same type) come out, so the exact aggregates are equal.
Views keep the literal path; a changed domain never reads an old key table; keys that cannot be
read as the column's type, or that coincide in it, are refused at load.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import KEYS_SCHEMA, key_table_relation, table_relation
from dpkit.engine.noisy_measures import as_int, centred_sums
from dpkit.engine.plan import compile as plan_compile
from dpkit.engine.read import Exact
from dpkit.engine.sql import QueryError
from dpkit.engine.tables import domain_table_name

N = 1500


def _frame(seed: int = 4) -> pd.DataFrame:
    """Typed key columns; some values fall outside the declared domains below."""
    src = dp.noise.seeded(seed)
    day0 = dt.date(2024, 1, 1)
    days = dp.noise.uniform_int(14, N, source=src)
    return pd.DataFrame({
        "uid": dp.noise.uniform_int(400, N, source=src).astype(np.int64),
        "i": (dp.noise.uniform_int(30, N, source=src) - 3).astype(np.int64),
        "s": [f"z{v:05d}" for v in dp.noise.uniform_int(25, N, source=src)],
        "d": [day0 + dt.timedelta(days=int(v)) for v in days],
        "ts": pd.to_datetime([str(day0 + dt.timedelta(days=int(v))) for v in days]
                             ).astype("datetime64[us]"),
        "f": dp.noise.uniform_int(12, N, source=src) * 0.1,
        "b": dp.noise.uniform_int(2, N, source=src) == 1,
        "dec": [decimal.Decimal(int(v)) / 4 for v in dp.noise.uniform_int(8, N, source=src)],
        "x": np.round(dp.noise.uniform_float01(N, source=src) * 100.0, 2),
    })


DOMAINS: dict[str, list[Any]] = {
    "i": list(range(-1, 35)),
    "s": [f"z{v:05d}" for v in range(0, 30)] + ["it's"],
    "d": [str(dt.date(2024, 1, 1) + dt.timedelta(days=k)) for k in range(16)],
    "ts": [str(dt.date(2024, 1, 1) + dt.timedelta(days=k)) for k in range(0, 16, 2)],
    "f": [round(k * 0.1, 12) for k in range(10)] + [0.30000000000000004, 2.5],
    "b": [True, False],
    "dec": ["0.25", "0.5", "1.75", "9.5"],
}


def _plan(cur: Curator, query: str, **kw: Any) -> dplan.Plan:
    return cur._plan(query, epsilon=kw.pop("epsilon", 1.0), rho=None, delta=None,
                     noise="laplace", level=0.95, bounds=None, **kw)


def _run(cur: Curator, plan: dplan.Plan, *, tables: bool, seed: int = 99,
         columnar: bool = False) -> tuple[str, Exact]:
    """Compile ``plan`` with (``tables``) or without the key tables and run it."""
    relations = {n: table_relation(m) for n, m in plan.catalog.items()}
    fixed = cur._backend.fixed_columns(plan.table.stored_name) if plan.table.storage == "copy" \
        else frozenset()
    keys = ({c: key_table_relation(t) for c, t in plan.table.key_tables.items()}
            if tables else None)
    compiled = dplan.compile_sql(plan, relations=relations, seed=seed, fixed_columns=fixed,
                                 key_tables=keys)
    if columnar:
        n, kc, cols, nulls = cur._backend.run_columns(compiled.text, compiled.group_cols,
                                                      compiled.measure_cols)
        return compiled.text, Exact(rows=n, key_columns=kc, columns=cols, nulls=nulls)
    k, c = cur._backend.run(compiled.text, compiled.group_cols, compiled.measure_cols)
    return compiled.text, Exact(keys=k, cols=c)


def _typed(keys: list[tuple[Any, ...]]) -> list[tuple[tuple[str, Any], ...]]:
    return [tuple((type(v).__name__, v) for v in k) for k in keys]


def _add_typed(cur: Curator) -> Curator:
    df = _frame()
    cur.add_table("u", df, privacy_unit="uid", max_rows_per_unit=3, bounds={"x": (0, 100)},
                  domains=DOMAINS)
    cur.add_table("r", df.drop(columns=["uid"]), bounds={"x": (0, 100)}, domains=DOMAINS)
    cur.add_public_table("lk", pd.DataFrame({"i": np.arange(-3, 30, dtype=np.int64),
                                             "region": [f"r{k % 4}" for k in range(33)]}))
    return cur


@pytest.fixture
def typed(project: Callable[..., Curator]) -> Curator:
    return _add_typed(project(epsilon=1000.0))


@pytest.fixture(scope="module")
def shared_typed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Curator]:
    """:func:`typed` built once for the 18 cases below and the tests that only plan and
    read exact aggregates (no charge, their own seed) or are refused before any charge (they
    assert it): one build instead of 21 (~0.5 s each)."""
    cur = Curator.create(tmp_path_factory.mktemp("typed") / "p1.dpkit", epsilon=1000.0,
                         delta=1e-6, accountant=None, source=dp.noise.seeded(1))
    yield _add_typed(cur)
    cur.close()


# ------------------------------------------------------------------------------ same aggregates


@pytest.mark.parametrize("table", ["u", "r"])
@pytest.mark.parametrize("group", ["i", "s", "d", "ts", "f", "b", "dec", "i, s", "b, d, f"])
def test_key_table_gives_the_literal_paths_exact_aggregates(shared_typed: Curator, table: str,
                                                            group: str) -> None:
    typed = shared_typed
    q = (f"SELECT {group}, COUNT(*) AS n, COUNT(DISTINCT {'uid' if table == 'u' else 'x'}) "
         f"AS k, SUM(x) AS sx, AVG(x) AS ax FROM {table} WHERE x > 5 GROUP BY {group}")
    if table == "r":
        q = q.replace("COUNT(DISTINCT x) AS k, ", "")
    plan = _plan(typed, q)
    assert plan.group_mode == "public"
    text_t, ex_t = _run(typed, plan, tables=True)
    text_l, ex_l = _run(typed, plan, tables=False)
    assert f'"{KEYS_SCHEMA}"' in text_t and "VALUES" not in text_t
    assert f'"{KEYS_SCHEMA}"' not in text_l and "VALUES" in text_l
    # every declared key (and only those), in the same order, with the same Python types
    assert _typed(ex_t.keys) == _typed(ex_l.keys)
    assert len(ex_t.keys) == len(plan.keys)  # type: ignore[arg-type]
    assert ex_t.cols == ex_l.cols
    # the columnar read gives the same keys and values as the row read
    _, ex_c = _run(typed, plan, tables=True, columnar=True)
    assert _typed(ex_c.keys) == _typed(ex_t.keys)
    assert ex_c.cols == ex_t.cols


def test_rows_outside_the_domain_are_dropped_before_bounding(shared_typed: Curator) -> None:
    """User level: the filter runs before the row cap, so rows outside the domain use up no
    unit's cap; key table and literals keep exactly the same rows (total COUNT(*))."""
    typed = shared_typed
    df = _frame()
    plan = _plan(typed, "SELECT s, COUNT(*) AS n FROM u GROUP BY s")
    _, ex = _run(typed, plan, tables=True)
    inside = df[df["s"].isin(DOMAINS["s"])]
    want = int(inside.groupby("uid").size().clip(upper=3).sum())
    assert sum(v or 0 for v in ex.cols[plan.measures[0].sql_col]) == want


def test_public_join_and_cross_product(shared_typed: Curator) -> None:
    typed = shared_typed
    q = ("SELECT l.region, u.b, COUNT(*) AS n, SUM(x) FROM u JOIN lk l ON u.i = l.i "
         "GROUP BY l.region, u.b")
    plan = _plan(typed, q)
    t_text, ex_t = _run(typed, plan, tables=True)
    _, ex_l = _run(typed, plan, tables=False)
    assert f'"{KEYS_SCHEMA}"' in t_text
    assert ex_t.keys == ex_l.keys and ex_t.cols == ex_l.cols
    assert sorted(ex_t.keys) == sorted(itertools.product(["r0", "r1", "r2", "r3"],
                                                         [False, True]))


def test_noisy_answers_are_the_same_through_either_path(project: Callable[..., Curator],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end with the same seeded noise: identical results (values, intervals, keys)."""
    df = _frame()
    answers = []
    for literal in (False, True):
        if literal:
            monkeypatch.setattr(plan_compile, "DOMAIN_TABLE_MIN_KEYS", 1 << 62)
        cur = project(epsilon=1000.0, seed=17)
        cur.add_table("u", df, privacy_unit="uid", max_rows_per_unit=3,
                      bounds={"x": (0, 100)}, domains=DOMAINS)
        got = []
        for q in ("SELECT d, COUNT(*) AS n, SUM(x) AS s, VAR(x) AS v FROM u GROUP BY d",
                  "SELECT s, COUNT(*) AS n FROM u GROUP BY s ORDER BY n DESC LIMIT 3",
                  "SELECT i, f, COUNT(*) AS n FROM u GROUP BY i, f HAVING COUNT(*) > 2"):
            r = cur.sql(q, epsilon=1.0)
            got.append((r.columns, _typed(list(r.rows()))))
        answers.append(got)
        cur.close()
    assert answers[0] == answers[1]


def test_columnar_and_row_reads_give_the_same_results(project: Callable[..., Curator],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The Arrow reads (exact aggregates, post-processing) against the row-by-row reads, with
    the same seeded noise: identical values, intervals, keys and types. Three runs: Arrow
    wherever the types allow (``postprocess.FEW_ROWS`` 0); the default, where these small
    noisy tables are loaded by one multi-row INSERT and read as tuples, with pyarrow and
    pandas made unimportable (the first hour's first ratio paid ~0.5 s importing pandas
    through ``pa.array`` to load two rows); and row by row (``executemany``)."""
    import sys

    from dpkit.engine import postprocess as dpost
    from dpkit.engine import prepare as dprepare

    df = _frame()
    queries = [
        "SELECT d, COUNT(*) AS n, SUM(x) / COUNT(*) AS per, COUNT(*) * 1.5 AS c15 FROM u "
        "GROUP BY d HAVING COUNT(*) > 40 ORDER BY d DESC",
        "SELECT f, b, AVG(x) AS a FROM u GROUP BY f, b ORDER BY a LIMIT 5 OFFSET 2",
        "SELECT dec, COUNT(*) AS n FROM u GROUP BY dec HAVING COUNT(*) > 1000000",
        "SELECT COUNT(*) AS n, SUM(x) / 2 AS h FROM u HAVING COUNT(*) > 1",
        "SELECT ts, s, COUNT(*) AS n FROM u GROUP BY ts, s",
        "SELECT b, COUNT(*) FILTER (WHERE x > 50) / COUNT(*) AS share FROM u GROUP BY b",
        "SELECT s, COUNT(*) AS n FROM u GROUP BY s ORDER BY n DESC LIMIT 3",
    ]
    answers = []
    for run in ("arrow", "insert", "rows"):
        cur = project(epsilon=1000.0, seed=23)
        cur.add_table("u", df, privacy_unit="uid", max_rows_per_unit=3,
                      bounds={"x": (0, 100)}, domains=DOMAINS)
        with monkeypatch.context() as m:
            if run == "arrow":
                m.setattr(dpost, "FEW_ROWS", 0)
            elif run == "insert":
                m.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` now fails
                m.setitem(sys.modules, "pandas", None)
            else:
                m.setattr(dprepare, "columnar_type", lambda t: False)
                m.setattr(dpost, "columnar_type", lambda t: False)
                m.setattr(dpost, "FEW_ROWS", 0)
            results = [cur.sql(q, epsilon=1.0) for q in queries]
        answers.append([(r.columns, _typed(list(r.rows())),
                         [str(r.data[c].dtype) for c in r.columns]) for r in results])
        cur.close()
    assert answers[0] == answers[1] == answers[2]
    assert len(answers[0][-1][1]) == 3 and len(answers[0][-2][1]) == 2


# ------------------------------------------------------------------------------ storage


def test_key_tables_hold_the_domain_in_the_column_type(typed: Curator) -> None:
    meta = typed.tables()["u"]
    assert set(meta.key_tables) == set(DOMAINS)
    names = typed._backend.key_tables()
    for col, name in meta.key_tables.items():
        assert name in names
        assert name == domain_table_name("u", col, meta.column(col).type,
                                         meta.domains[col])
    con = typed._backend._connect()
    rows = con.execute(f"SELECT k FROM {key_table_relation(meta.key_tables['d'])} ORDER BY k"
                       ).fetchall()
    assert [r[0] for r in rows] == [dt.date(2024, 1, 1) + dt.timedelta(days=k)
                                   for k in range(16)]
    typ = con.execute(f"SELECT typeof(k) FROM {key_table_relation(meta.key_tables['f'])} "
                      f"LIMIT 1").fetchall()[0][0]
    assert typ == "DOUBLE"
    # the ledger's copy of the declarations names them too (reopened from disk)
    typed.close()
    again = Curator.open(typed.path)
    assert again.tables()["u"].key_tables == meta.key_tables
    again.close()


def test_changed_domain_never_reads_the_old_key_table(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=1000.0)
    df = _frame()
    cur.add_table("t", df, domains={"s": DOMAINS["s"][:10]})
    old = cur.tables()["t"].key_tables["s"]
    cur.add_table("t", df, domains={"s": DOMAINS["s"][5:20]}, replace=True)
    new = cur.tables()["t"].key_tables["s"]
    assert new != old
    assert old not in cur._backend.key_tables()  # dropped with the reload
    assert new in cur._backend.key_tables()
    plan = _plan(cur, "SELECT s, COUNT(*) AS n FROM t GROUP BY s")
    _, ex = _run(cur, plan, tables=True)
    assert [k[0] for k in ex.keys] == sorted(DOMAINS["s"][5:20])
    counts = df["s"].value_counts()
    assert ex.cols[plan.measures[0].sql_col] == [int(counts.get(k, 0)) or None
                                                 for k in sorted(DOMAINS["s"][5:20])]
    # another table's key tables are left alone by this one's reload
    cur.add_table("t2", df, domains={"s": DOMAINS["s"][:3]})
    kept = cur.tables()["t2"].key_tables["s"]
    cur.add_table("t", df, domains={"s": DOMAINS["s"][:4]}, replace=True)
    assert kept in cur._backend.key_tables()
    # the same keys in another order are another declaration: another table
    assert domain_table_name("t", "s", "VARCHAR", ["a", "b"]) != \
        domain_table_name("t", "s", "VARCHAR", ["b", "a"])
    assert domain_table_name("t", "s", "VARCHAR", ["1"]) != \
        domain_table_name("t", "s", "VARCHAR", [1])


def test_missing_key_table_falls_back_to_literals(typed: Curator) -> None:
    """A declaration naming a key table that is not in the file (an older project, a failed
    write) is answered from the literals, with the same result."""
    plan = _plan(typed, "SELECT s, COUNT(*) AS n FROM u GROUP BY s")
    _, want = _run(typed, plan, tables=False)
    typed._backend._keys = frozenset()  # as if the file had none
    got = typed._execute(plan)
    assert got.keys == want.keys
    assert got.cols[plan.measures[0].sql_col] != [] and got.n_groups == len(DOMAINS["s"])


def test_private_views_are_refused_public_ones_keep_literals(
        project: Callable[..., Curator], tmp_path: Path) -> None:
    """A private view would re-read its file at every query (a row appended later, or a
    malformed one, would change answers and errors behind the ledger's back): refused, nothing
    recorded. A public view stays a view."""
    df = _frame().drop(columns=["d", "dec"])
    path = tmp_path / "v.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    doms = {k: DOMAINS[k] for k in ("i", "s", "f")}
    cur = project(epsilon=1000.0)
    before = len(cur.entries())
    with pytest.raises(ValueError, match="copy=False"):
        cur.add_table("v", str(path), copy=False, bounds={"x": (0, 100)}, domains=doms)
    assert len(cur.entries()) == before and "v" not in cur.tables()
    cur.add_table("pv", str(path), public=True, copy=False)
    assert cur.tables()["pv"].storage == "view"


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("from_file", [True, False])
def test_keys_that_cannot_be_read_are_refused_at_load(project: Callable[..., Curator],
                                                      tmp_path: Path, from_file: bool) -> None:
    df = pd.DataFrame({"d": [dt.date(2024, 1, 1)] * 3, "i": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    src: Any = str(path) if from_file else df
    copy = True
    cur = project()
    with pytest.raises(ValueError, match=r"domain of 'd' \(DATE\).*cannot be read as DATE"):
        cur.add_table("t", src, copy=copy, domains={"d": ["2024-01-01", "not a date"]})
    # coinciding keys: 1.4 and 1 are both 1 in a BIGINT column (its group would be noised
    # twice)
    with pytest.raises(ValueError, match=r"domain of 'i' \(BIGINT\) lists keys that are "
                                         r"equal.*1 \(2 times\)"):
        cur.add_table("t", src, copy=copy, domains={"i": [1, 2, 1.4]})
    with pytest.raises(ValueError, match="contains NULL"):
        cur.add_table("t", src, copy=copy, domains={"i": [1, None]})
    with pytest.raises(ValueError, match="not a number"):
        cur.add_table("t", src, copy=copy, domains={"i": ["1", "two"]})
    with pytest.raises(ValueError, match="finite"):
        cur.add_table("t", src, copy=copy, domains={"x": [1.0, float("nan")]})
    # nothing was registered or stored by the refused loads
    assert "t" not in cur.tables()
    assert cur._backend.key_tables() == frozenset()
    cur.add_table("t", src, copy=copy, domains={"i": [1, 2, 3, "4"]})
    assert cur.tables()["t"].domains["i"] == (1, 2, 3, 4)


def test_analysts_cannot_read_key_tables(shared_typed: Curator) -> None:
    typed = shared_typed
    name = typed.tables()["u"].key_tables["s"]
    spent = typed.budget().spent
    for q in (f"SELECT COUNT(*) FROM {KEYS_SCHEMA}.{name}", f"SELECT COUNT(*) FROM {name}",
              f'SELECT COUNT(*) FROM "{KEYS_SCHEMA}"."{name}"'):
        with pytest.raises(QueryError):
            typed.sql(q, epsilon=0.1)
    assert typed.budget().spent == spent  # refused before any charge


def test_too_many_keys_are_refused_before_reading(project: Callable[..., Curator]) -> None:
    cur = project()
    df = pd.DataFrame({"a": [1, 2], "b": [1, 2]})
    cur.add_table("t", df, domains={"a": list(range(1001)), "b": list(range(1000))})
    with pytest.raises(QueryError, match="1001000 groups"):
        cur.sql("SELECT a, b, COUNT(*) FROM t GROUP BY a, b", epsilon=1.0)
    assert cur.budget().spent == 0.0


# ------------------------------------------------------------------------------ vectorised parts


def test_key_product_is_itertools_product() -> None:
    doms = [[3, 1, 2], ["b", "a"], [True]]
    kp = dplan.KeyProduct(doms)
    want = list(itertools.product(*doms))
    assert len(kp) == len(want) and list(kp) == want and kp == want
    assert [kp[i] for i in range(-len(want), len(want))] == want + want
    assert kp[1:4] == want[1:4]
    with pytest.raises(IndexError):
        kp[len(want)]


def test_int_conversion_matches_python_integers() -> None:
    lim = 2**62

    def slow(values: list[Any]) -> list[int]:
        return [min(max(0 if v is None else int(v), -lim), lim) for v in values]

    cases: list[list[Any]] = [[], [None, 3, -4], [2**70, -(2**80), 5, None],
                              [True, 2, decimal.Decimal(7)], [2**62 + 1, -(2**63)]]
    for vals in cases:
        assert as_int(vals).tolist() == slow(vals)
        arr = np.array([0 if v is None else min(max(int(v), -(2**63)), 2**63 - 1)
                        for v in vals], dtype=np.int64)
        assert as_int(arr).tolist() == slow(arr.tolist())
    sums = np.array([5, -(2**40), 0, 2**62], dtype=np.int64)
    counts = np.array([1, 3, 0, 2**20], dtype=np.int64)
    for center in (0, 7, -(2**31), 2**45):
        want = slow([int(s) - int(n) * center for s, n in zip(sums, counts, strict=True)])
        assert centred_sums(sums, counts, center).tolist() == want
        assert centred_sums(sums.tolist(), counts.tolist(), center).tolist() == want
    assert centred_sums([None, 4], [None, 2], 3).tolist() == [0, -2]


def test_columnar_read_keeps_nulls_and_big_sums(tmp_path: Path) -> None:
    from dpkit.engine.backend_duckdb import DuckBackend

    db = tmp_path / "x.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 9223372036854775807::BIGINT), "
                "(1, 9223372036854775807::BIGINT), (2, 5::BIGINT), (3, NULL)) v(g, x)")
    con.close()
    be = DuckBackend(db)
    text = ("SELECT g AS __g0, SUM(x) AS s, COUNT(x) AS n, histogram(x) AS h FROM dpdata.main.t "
            "GROUP BY g ORDER BY g")
    keys, cols = be.run(text, ["__g0"], ["s", "n", "h"])
    n, kc, arrays, nulls = be.run_columns(text, ["__g0"], ["s", "n", "h"])
    ex = Exact(rows=n, key_columns=kc, columns=arrays, nulls=nulls)
    assert ex.keys == keys and _typed(ex.keys) == _typed(keys)
    assert ex.cols == cols  # a sum beyond int64 stays a Python int, NULL stays None
    assert cols["s"][0] == 2 * (2**63 - 1) and cols["s"][2] is None
    be.close()
