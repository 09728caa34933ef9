"""A few declared keys filled in Python instead of joined in DuckDB.

For a public GROUP BY over at most ``FILL_MAX_KEYS`` declared keys, the statement returns only
the groups present in the data and :func:`dpkit.engine.read.fill_declared_keys` adds the absent
keys with NULL measurements. That must be an exact stand-in for ``keys LEFT JOIN groups``: the
same keys in the same order and of the same Python types, the same exact aggregates, groups
outside the domain dropped, and (with the same seeded noise) the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import key_table_relation, table_relation
from dpkit.engine.read import Exact, fill_declared_keys

N = 2000


def _frame(seed: int = 11) -> pd.DataFrame:
    """Keys partly outside the declared domains below; some declared keys never occur."""
    src = dp.noise.seeded(seed)
    return pd.DataFrame({
        "uid": dp.noise.uniform_int(500, N, source=src).astype(np.int64),
        "i": (dp.noise.uniform_int(30, N, source=src) - 3).astype(np.int32),
        "s": [f"z{v:03d}" for v in dp.noise.uniform_int(25, N, source=src)],
        "b": dp.noise.uniform_int(2, N, source=src) == 1,
        "f": dp.noise.uniform_int(5, N, source=src) * 0.5,
        "x": np.round(dp.noise.uniform_float01(N, source=src) * 100.0, 2),
    })


DOMAINS: dict[str, list[Any]] = {
    "i": list(range(-1, 35)),
    "s": [f"z{v:03d}" for v in range(30)] + ["it's", ""],
    "b": [True, False],
    "f": [0.0, 0.5, 1.0, 1.5, 2.0],
}


def _add_tables(c: Curator) -> Curator:
    df = _frame()
    c.add_table("u", df, privacy_unit="uid", max_rows_per_unit=3, bounds={"x": (0, 100)},
                domains=DOMAINS)
    c.add_table("r", df.drop(columns=["uid"]), bounds={"x": (0, 100)}, domains=DOMAINS)
    return c


@pytest.fixture(scope="module")
def shared_cur(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Curator]:
    """:func:`cur` built once for the parametrized cases that only plan and read exact
    aggregates (no charge, their own seed), and for one query whose assertion reads public
    keys only (neither the budget left nor the noise): one build instead of thirteen."""
    c = Curator.create(tmp_path_factory.mktemp("key_fill") / "p1.dpkit", epsilon=1000.0,
                       delta=1e-6, accountant=None, source=dp.noise.seeded(1))
    yield _add_tables(c)
    c.close()


def _plan(cur: Curator, query: str) -> dplan.Plan:
    return cur._plan(query, epsilon=1.0, rho=None, delta=None, noise="laplace", level=0.95,
                     bounds=None)


def _exact(cur: Curator, plan: dplan.Plan, *, fill: bool) -> Exact:
    relations = {n: table_relation(m) for n, m in plan.catalog.items()}
    compiled = dplan.compile_sql(
        plan, relations=relations, seed=5,
        fixed_columns=cur._backend.fixed_columns(plan.table.stored_name),
        key_tables={c: key_table_relation(t) for c, t in plan.table.key_tables.items()},
        fill_keys=fill)
    if fill:
        assert compiled.keys_text is not None and "LEFT JOIN" not in compiled.text
        rows, _ = cur._backend.run_rows(compiled.text)
        declared = cur._preparer._declared_keys(compiled.keys_text, 0)
        keys, cols = fill_declared_keys(declared, rows,
                                              len(compiled.measure_cols))
        return Exact(keys=keys, cols=dict(zip(compiled.measure_cols, cols, strict=True)))
    assert compiled.keys_text is None and "LEFT JOIN" in compiled.text
    k, c = cur._backend.run(compiled.text, compiled.group_cols, compiled.measure_cols)
    return Exact(keys=k, cols=c)


def _typed(keys: list[tuple[Any, ...]]) -> list[tuple[tuple[str, Any], ...]]:
    return [tuple((type(v).__name__, v) for v in k) for k in keys]


@pytest.mark.parametrize("table", ["u", "r"])
@pytest.mark.parametrize("group", ["i", "s", "b", "i, b", "b, s"])
def test_fill_gives_the_joins_exact_aggregates(shared_cur: Curator, table: str,
                                               group: str) -> None:
    cur = shared_cur
    q = (f"SELECT {group}, COUNT(*) AS n, SUM(x) AS sx, AVG(x) AS ax, MEDIAN(x) AS md "
         f"FROM {table} WHERE x > 5 GROUP BY {group}")
    plan = _plan(cur, q)
    assert dplan.can_fill_keys(plan)
    filled, joined = _exact(cur, plan, fill=True), _exact(cur, plan, fill=False)
    assert _typed(filled.keys) == _typed(joined.keys)
    assert len(filled.keys) == len(plan.keys)  # type: ignore[arg-type]
    assert filled.cols == joined.cols
    # the data has keys outside the domain and the domain keys absent from the data
    present = {k for k, v in zip(filled.keys, filled.cols[plan.measures[0].sql_col],
                                 strict=True) if v is not None}
    assert 0 < len(present) <= len(filled.keys)
    if group != "b":  # both booleans occur
        assert len(present) < len(filled.keys)


def test_many_groups_outside_a_small_domain(project: Callable[..., Curator]) -> None:
    """Record level: the domain filter is the join, so every group in the data comes back
    from DuckDB; the fill keeps only the declared ones, read in chunks."""
    c = project(epsilon=1000.0)
    n = 30_000
    c.add_table("t", pd.DataFrame({"k": np.arange(n, dtype=np.int64) % 20_000,
                                   "x": np.ones(n)}),
                bounds={"x": (0, 1)}, domains={"k": [3, 7, 25_000]})
    plan = _plan(c, "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k")
    filled, joined = _exact(c, plan, fill=True), _exact(c, plan, fill=False)
    assert filled.keys == joined.keys == [(3,), (7,), (25_000,)]
    assert filled.cols == joined.cols
    count = plan.measures[0].sql_col
    assert filled.cols[count] == [2, 2, None]


@pytest.mark.parametrize("query", [
    "SELECT f, COUNT(*) FROM u GROUP BY f",  # DOUBLE: NaN and -0.0 compare differently
    "SELECT s, COUNT(*) FROM u GROUP BY s HAVING COUNT(*) > 3",
])
def test_when_the_fill_applies(shared_cur: Curator, query: str) -> None:
    cur = shared_cur
    plan = _plan(cur, query)
    assert dplan.can_fill_keys(plan) == (" f," not in query)


def test_large_domains_keep_the_join(project: Callable[..., Curator]) -> None:
    c = project(epsilon=1000.0)
    keys = list(range(dplan.FILL_MAX_KEYS + 1))
    c.add_table("t", pd.DataFrame({"k": np.arange(10, dtype=np.int64), "x": np.ones(10)}),
                bounds={"x": (0, 1)}, domains={"k": keys})
    assert not dplan.can_fill_keys(_plan(c, "SELECT k, COUNT(*) FROM t GROUP BY k"))
    c.add_table("t2", pd.DataFrame({"k": np.arange(10, dtype=np.int64), "x": np.ones(10)}),
                bounds={"x": (0, 1)}, domains={"k": keys[:-1]})
    assert dplan.can_fill_keys(_plan(c, "SELECT k, COUNT(*) FROM t2 GROUP BY k"))


def test_noisy_answers_are_the_same_either_way(project: Callable[..., Curator],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end with the same seeded noise: identical columns, values, intervals, keys."""
    df = _frame()
    queries = [
        "SELECT i, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM u GROUP BY i",
        "SELECT s, COUNT(*) AS n FROM u GROUP BY s ORDER BY n DESC LIMIT 3",
        "SELECT b, s, COUNT(*) AS n FROM r WHERE x < 50 GROUP BY b, s HAVING COUNT(*) > 2",
    ]
    answers = []
    for fill in (True, False):
        if not fill:
            monkeypatch.setattr(dplan, "can_fill_keys", lambda *a, **k: False)
        c = project(epsilon=1000.0, seed=29)
        c.add_table("u", df, privacy_unit="uid", max_rows_per_unit=3, bounds={"x": (0, 100)},
                    domains=DOMAINS)
        c.add_table("r", df.drop(columns=["uid"]), bounds={"x": (0, 100)}, domains=DOMAINS)
        answers.append([(r.columns, _typed(list(r.rows())))
                        for r in (c.sql(q, epsilon=1.0) for q in queries)])
        c.close()
    assert answers[0] == answers[1]


def test_fill_declared_keys_semantics() -> None:
    keys = [("a", 1), ("a", 2), ("b", 1)]
    rows = [("b", 1, 10, 20), ("zz", 9, 1, 1), ("a", 1, 3, None)]
    got_keys, cols = fill_declared_keys(keys, iter(rows), 2)
    assert got_keys == keys
    assert cols == [[3, None, 10], [None, None, 20]]


def test_fill_matches_nan_keys_as_the_engines_equality_does() -> None:
    """A float key's NaN (a public key set read by Spark) matches the group's NaN, another
    NaN object, as the key join's ``=`` matches them in DuckDB and Spark; -0.0 matches 0.0;
    keys of other types compare as tuples (no matcher)."""
    import datetime as dt

    from dpkit.engine.read import key_matcher

    assert key_matcher(["VARCHAR", "DATE", "TIMESTAMP"]) is None
    match = key_matcher(["VARCHAR", "DOUBLE"])
    assert match is not None
    keys = [("a", float("nan")), ("a", 0.0), ("b", float("nan"))]
    rows = [("a", -0.0, 1), ("a", float("nan"), 2), ("c", float("nan"), 3)]
    assert fill_declared_keys(keys, iter(rows), 1, match=match) == (keys, [[2, 1, None]])
    # without the matcher the NaN group is lost: what the fill would do unaided
    assert fill_declared_keys(keys, iter(rows), 1)[1] == [[None, 1, None]]
    day = dt.date(1969, 12, 31)
    assert fill_declared_keys([(day,)], iter([(dt.date(1969, 12, 31), 4)]), 1)[1] == [[4]]


def test_collated_columns_are_read_from_the_create_statement() -> None:
    from dpkit.engine.duckdb_layout import collated_in

    sql = ('CREATE TABLE priv."t"(a VARCHAR COLLATE NOCASE, "b c" VARCHAR, '
           'c VARCHAR COLLATE NOACCENT.NOCASE, n INTEGER);')
    assert collated_in(sql) == {"a", "c"}
    assert collated_in('CREATE TABLE t(a VARCHAR, n INTEGER);') == frozenset()
    assert "anything" in collated_in("CREATE TABLE t(a VARCHAR COLLATE ((( nonsense")


def test_a_failure_while_reading_rows_leaves_the_backend_usable(shared_cur: Curator) -> None:
    """run_rows reads under the backend's lock and returns a list: an exception half-way (an
    interrupt, say) must not leave the lock held, or the next query would hang. (The shared
    project: one charge of 1.0 of its 1000, and an assertion on public keys only.)"""
    cur = shared_cur
    def boom(row: tuple[Any, ...]) -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cur._backend.run_rows('SELECT * FROM range(10)', keep=boom)
    res = cur.sql("SELECT i, COUNT(*) AS n FROM r GROUP BY i", epsilon=1.0)
    assert len(res) == len(DOMAINS["i"])
