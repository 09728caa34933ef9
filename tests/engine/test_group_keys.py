"""GROUP BY on derived keys, WHERE constants as public keys, key-only SELECTs, other dialects
(issue 14, items 1 and 3).

Each form is answered with the keys the query and the declarations give (never the rows), and
is run on neighbouring datasets D and D' (one unit added with extreme values): same keys, same
order, same cost, same errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine.sql import QueryError

BASE = ("SELECT i AS pid, i % 90 AS age, 'w' || (i % 3) AS ward, i % 7 AS sex, i % 5 AS educ, "
        "CAST(i % 1000 AS DOUBLE) / 10 AS score, DATE '2024-01-01' + CAST(i % 200 AS INTEGER) "
        "AS d FROM range(3000) t(i)")
# the neighbour: one unit more, with values at every extreme the key expressions meet
EXTREME = ("SELECT 100000 AS pid, 2147483647 AS age, 'x''; DROP' AS ward, -7 AS sex, "
           "NULL AS educ, CAST('nan' AS DOUBLE) AS score, DATE '5877642-06-25' AS d")
DATES = ["2024-01-05", "2024-02-17", "2024-03-01", "2024-07-31"]


def _curator(tmp: Path, name: str, extreme: bool) -> Curator:
    cur = Curator.create(tmp / f"{name}.dpkit", epsilon=1000.0, delta=1e-6,
                         source=dp.noise.seeded(3))
    sql = BASE + (f" UNION ALL {EXTREME}" if extreme else "")
    cur.add_table("t", duckdb.sql(sql), privacy_unit="pid", max_rows_per_unit=1,
                  bounds={"age": (0, 100), "score": (0, 100)},
                  domains={"educ": [0, 1, 2, 3, 4], "d": DATES})
    return cur


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Curator, Curator]:
    tmp = tmp_path_factory.mktemp("neighbours")
    return _curator(tmp, "d", False), _curator(tmp, "d1", True)


@pytest.fixture(scope="module")
def cur(tmp_path_factory: pytest.TempPathFactory) -> Curator:
    """One project for the tests below (its budget is large; tests compare what they spend)."""
    return _curator(tmp_path_factory.mktemp("keys"), "c", False)


def _outcome(c: Curator, q: str, **kw: Any) -> tuple[str, Any, float]:
    """(kind, keys or the error text, spent): the public part of a query's outcome."""
    before = c.budget().spent
    try:
        res = c.sql(q, epsilon=1.0, **kw)
    except QueryError as exc:
        return "error", str(exc), c.budget().spent - before
    keys = [tuple(res.data[n][i] for n in res.columns if res.kinds[n] == "group")
            for i in range(len(res.data[res.columns[0]]))]
    return "answer", [tuple(map(str, k)) for k in keys], c.budget().spent - before


def _keys(c: Curator, q: str, name: str, **kw: Any) -> list[Any]:
    res = c.sql(q, epsilon=1.0, **kw)
    return [None if v != v else v for v in res.data[name]]  # NaN (pandas' None) -> None


# ----------------------------------------------------------------------------- derived keys


def test_case_keys_are_the_branch_values_and_null_without_else(cur: Curator) -> None:
    q = ("SELECT CASE WHEN age < 18 THEN 'child' WHEN age < 65 THEN 'adult' WHEN age > 500 "
         "THEN 'ghost' END AS band, COUNT(*) AS n FROM t GROUP BY band")
    res = cur.sql(q, epsilon=1.0)
    keys = [None if v != v else v for v in res.data["band"]]
    assert sorted(keys, key=str) == sorted(["child", "adult", "ghost", None], key=str)
    n = dict(zip(keys, res.data["n"], strict=True))
    # released though empty; Laplace scale 1/epsilon = 1 per count (one row per unit):
    # |noise| >= 60 has probability e^-60, never at a fixed seed
    assert abs(n["ghost"]) < 60
    assert n[None] > 500  # ages 65-89 match no branch: the NULL key
    assert not any("selected privately" in x for x in res.notes)


def test_case_with_else_by_position_and_simple_case(cur: Curator) -> None:
    q1 = "SELECT CASE WHEN age < 18 THEN 1 ELSE 2 END, COUNT(*) AS n FROM t GROUP BY 1"
    res = cur.sql(q1, epsilon=1.0)
    assert sorted(res.data[res.columns[0]]) == [1, 2]
    q2 = ("SELECT CASE sex WHEN 0 THEN 'm' WHEN 1 THEN 'f' ELSE 'other' END AS s, COUNT(*) "
          "AS n FROM t GROUP BY CASE sex WHEN 0 THEN 'm' WHEN 1 THEN 'f' ELSE 'other' END")
    assert sorted(_keys(cur, q2, "s")) == ["f", "m", "other"]


def test_a_case_of_mixed_kinds_is_refused(cur: Curator) -> None:
    spent = cur.budget().spent
    with pytest.raises(QueryError, match="one kind"):
        cur.sql("SELECT CASE WHEN age < 3 THEN 'a' ELSE 1 END AS k, COUNT(*) FROM t "
                "GROUP BY k", epsilon=1.0)
    assert cur.budget().spent == spent


@pytest.mark.parametrize(("expr", "keys"), [
    ("floor(age / 10) * 10", list(range(0, 101, 10))),
    ("floor(age / 25)", [0, 1, 2, 3, 4]),
    ("age // 30", [0, 1, 2, 3]),
    ("floor(score / 12.5) * 12.5", [12.5 * k for k in range(9)]),
])
def test_bins_of_a_bounded_column_are_the_declared_range(cur: Curator, expr: str,
                                                         keys: list[Any]) -> None:
    q = f"SELECT {expr} AS b, COUNT(*) AS n FROM t GROUP BY b"
    res = cur.sql(q, epsilon=1.0)
    assert list(res.data["b"]) == keys  # every bin, in key order, empty ones too
    assert not any("selected privately" in x for x in res.notes)


def test_date_trunc_of_a_declared_domain(cur: Curator) -> None:
    q = "SELECT date_trunc('month', d) AS m, COUNT(*) AS n FROM t GROUP BY m"
    keys = [str(k) for k in _keys(cur, q, "m")]
    assert keys == ["2024-01-01", "2024-02-01", "2024-03-01", "2024-07-01"]


def test_an_expression_without_public_keys_is_selected_privately_with_its_delta(
        cur: Curator) -> None:
    q = "SELECT lower(ward) AS lw, COUNT(*) AS n FROM t GROUP BY lw"
    pv = cur.preview(q, epsilon=1.0)
    assert pv.delta > 0
    res = cur.sql(q, epsilon=1.0)
    assert sorted(res.data["lw"]) == ["w0", "w1", "w2"]
    assert any("selected privately" in x for x in res.notes)


def test_a_case_condition_that_could_fail_never_raises(cur: Curator, tmp_path: Path) -> None:
    """CAST(ward AS INTEGER) fails on 'w0': the condition runs under TRY (an error is FALSE)."""
    q = ("SELECT CASE WHEN CAST(ward AS INTEGER) = 1 THEN 'one' ELSE 'other' END AS k, "
         "COUNT(*) AS n FROM t GROUP BY k")
    assert sorted(_keys(cur, q, "k")) == ["one", "other"]


def test_key_only_select_of_a_derived_key_is_free(cur: Curator) -> None:
    spent = cur.budget().spent
    res = cur.sql("SELECT CASE WHEN age < 18 THEN 'child' ELSE 'adult' END AS band FROM t "
                  "GROUP BY band", epsilon=1.0)
    assert sorted(res.data["band"]) == ["adult", "child"]
    assert cur.budget().spent == spent  # public keys, nothing measured


# ----------------------------------------------------------------------------- WHERE on keys


def test_where_in_on_an_undeclared_key_makes_its_keys_public(cur: Curator) -> None:
    q = "SELECT ward, COUNT(*) AS n FROM t WHERE ward IN ('w1', 'w2', 'none') GROUP BY ward"
    assert cur.preview(q, epsilon=1.0).delta == 0  # no partition selection
    res = cur.sql(q, epsilon=1.0)
    assert list(res.data["ward"]) == ["none", "w1", "w2"]  # the constants, in key order
    assert not any("selected privately" in x for x in res.notes)


def test_where_on_a_declared_key_restricts_its_domain(cur: Curator) -> None:
    q = ("SELECT educ, sex, COUNT(*) AS n FROM t WHERE educ IN (1, 3, 9) AND sex = 2 "
         "AND age > 3 GROUP BY educ, sex")
    res = cur.sql(q, epsilon=1.0)
    assert list(res.data["educ"]) == [1, 3] and list(res.data["sex"]) == [2, 2]


def test_or_and_not_leave_the_keys_unrestricted(cur: Curator) -> None:
    q = "SELECT educ, COUNT(*) AS n FROM t WHERE educ = 1 OR educ = 2 GROUP BY educ"
    assert list(cur.sql(q, epsilon=1.0).data["educ"]) == [0, 1, 2, 3, 4]
    q = "SELECT educ, COUNT(*) AS n FROM t WHERE NOT educ IN (1, 2) GROUP BY educ"
    assert list(cur.sql(q, epsilon=1.0).data["educ"]) == [0, 1, 2, 3, 4]


def test_where_keeping_no_declared_key_is_refused_free(cur: Curator) -> None:
    spent = cur.budget().spent
    with pytest.raises(QueryError, match="keeps none"):
        cur.sql("SELECT educ, COUNT(*) FROM t WHERE educ = 7 GROUP BY educ", epsilon=1.0)
    assert cur.budget().spent == spent


# ----------------------------------------------------------------------------- key-only, dialects


def test_key_only_selects(cur: Curator) -> None:
    spent = cur.budget().spent
    for q in ("SELECT educ FROM t GROUP BY educ", "SELECT DISTINCT educ FROM t"):
        assert list(cur.sql(q, epsilon=1.0).data["educ"]) == [0, 1, 2, 3, 4]
    assert cur.budget().spent == spent  # the declared domain: nothing to measure
    res = cur.sql("SELECT DISTINCT ward FROM t", epsilon=1.0)
    assert sorted(res.data["ward"]) == ["w0", "w1", "w2"]  # selected privately
    assert cur.budget().spent == pytest.approx(spent + 1.0)


def test_top_n_verbatim_and_other_dialects(cur: Curator) -> None:
    res = cur.sql("SELECT TOP 2 educ, COUNT(*) AS n FROM t GROUP BY educ ORDER BY n DESC",
                  epsilon=1.0)
    assert len(res.data["educ"]) == 2
    res = cur.sql("SELECT TOP 3 [educ], COUNT(*) AS n FROM t GROUP BY [educ] ORDER BY [educ]",
                  epsilon=1.0, dialect="tsql")
    assert list(res.data["educ"]) == [0, 1, 2]
    res = cur.sql("SELECT `educ`, COUNT(*) AS n FROM t GROUP BY `educ`", epsilon=1.0,
                  dialect="mysql")
    assert list(res.data["educ"]) == [0, 1, 2, 3, 4]
    with pytest.raises(QueryError, match="unknown SQL dialect"):
        cur.sql("SELECT COUNT(*) FROM t", epsilon=1.0, dialect="klingon")


def test_having_prefers_the_grouped_column_over_an_alias(cur: Curator) -> None:
    """As in DuckDB: ``educ AS sex ... GROUP BY educ, sex HAVING sex > 5`` filters the column
    sex; when the column is not grouped, the alias is meant."""
    res = cur.sql("SELECT educ AS sex, COUNT(*) AS n FROM t GROUP BY educ, sex "
                  "HAVING sex > 5", epsilon=1.0)
    assert sorted(res.data["sex"]) == [0, 1, 2, 3, 4]  # one group (educ, sex = 6) per educ
    res = cur.sql("SELECT educ AS sex, COUNT(*) AS n FROM t GROUP BY educ HAVING sex > 2",
                  epsilon=1.0)
    assert sorted(res.data["sex"]) == [3, 4]


def test_builder_forms(cur: Curator) -> None:
    from dpkit.engine.builder import QueryBuilder

    q = (QueryBuilder(cur, "t").group_by_expr("floor(age / 50) * 50", alias="half")
         .where_in("educ", [1, 2]).group_by("educ").count())
    res = q.run(epsilon=1.0)
    assert list(res.data["half"]) == [0, 0, 50, 50, 100, 100]
    assert list(res.data["educ"]) == [1, 2, 1, 2, 1, 2]
    keys = QueryBuilder(cur, "t").group_by("educ").run(epsilon=1.0)
    assert list(keys.data["educ"]) == [0, 1, 2, 3, 4]


# ----------------------------------------------------------------------------- D / D'

NEIGHBOUR_QUERIES = [
    "SELECT CASE WHEN age < 18 THEN 'child' WHEN age < 65 THEN 'adult' END AS band, "
    "COUNT(*) AS n, SUM(age) AS s FROM t GROUP BY band",
    "SELECT CASE WHEN CAST(ward AS INTEGER) = 1 THEN 1 ELSE 0 END, COUNT(*) FROM t GROUP BY 1",
    "SELECT floor(age / 10) * 10 AS b, COUNT(*) AS n FROM t GROUP BY b",
    "SELECT age // 30 AS b, AVG(score) AS a FROM t GROUP BY b",
    "SELECT floor(score / 12.5) * 12.5 AS b, COUNT(*) AS n FROM t GROUP BY b",
    "SELECT date_trunc('month', d) AS m, COUNT(*) AS n FROM t GROUP BY m",
    "SELECT ward, COUNT(*) AS n FROM t WHERE ward IN ('w1', 'x''; DROP') GROUP BY ward",
    "SELECT educ, COUNT(*) AS n FROM t WHERE educ = 2 GROUP BY educ",
    "SELECT educ FROM t GROUP BY educ",
    "SELECT DISTINCT educ FROM t",
    "SELECT TOP 5 educ, COUNT(*) AS n FROM t GROUP BY educ ORDER BY educ",
    "SELECT educ AS sex, COUNT(*) AS n FROM t GROUP BY educ, sex HAVING sex > 9",
    "SELECT CASE WHEN age < 3 THEN 'a' ELSE 1 END AS k, COUNT(*) FROM t GROUP BY k",
    "SELECT educ, COUNT(*) FROM t WHERE educ = 7 GROUP BY educ",
]


NEIGHBOUR_IDS = ["case_no_else", "case_try", "bins_mul", "bins_intdiv", "bins_float",
                 "date_trunc", "where_in", "where_eq", "key_only", "distinct", "top",
                 "having_column", "case_mixed_refused", "where_none_refused"]


@pytest.mark.parametrize("q", NEIGHBOUR_QUERIES, ids=NEIGHBOUR_IDS)
def test_neighbours_get_the_same_keys_order_cost_and_errors(
        pair: tuple[Curator, Curator], q: str) -> None:
    d, d1 = pair
    assert _outcome(d, q) == _outcome(d1, q)


def test_cli_dialect_flag(tmp_path: Path) -> None:
    pytest.importorskip("click")
    from click.testing import CliRunner

    from dpkit.cli.query import query_command

    _curator(tmp_path, "cli", False).close()
    out = CliRunner().invoke(query_command, [
        str(tmp_path / "cli.dpkit"), "SELECT TOP 2 [educ], COUNT(*) AS n FROM t GROUP BY [educ] "
        "ORDER BY [educ]", "--epsilon", "1", "--dialect", "tsql"])
    assert out.exit_code == 0, out.output
    assert "educ" in out.output



def test_small_forms_and_refusals(cur: Curator) -> None:
    spent = cur.budget().spent
    assert list(cur.sql("SELECT educ FROM t GROUP BY (educ)", epsilon=1.0).data["educ"]) == [
        0, 1, 2, 3, 4]  # a parenthesised column is the column, not a derived key
    with pytest.raises(QueryError, match="privacy unit 'pid' without a public domain"):
        cur.sql("SELECT pid % 10 AS b, COUNT(*) FROM t GROUP BY b", epsilon=1.0)
    with pytest.raises(QueryError, match="cannot hold an aggregate"):
        cur.sql("SELECT COUNT(*) AS n FROM t GROUP BY n", epsilon=1.0)
    with pytest.raises(QueryError, match="bin width must be > 0"):
        cur.sql("SELECT floor(age / 0) AS b, COUNT(*) FROM t GROUP BY b", epsilon=1.0)
    with pytest.raises(QueryError, match="no key is left"):
        cur.sql("SELECT ward, COUNT(*) FROM t WHERE ward IN (NULL) GROUP BY ward", epsilon=1.0)
    assert cur.budget().spent == spent
    # a CASE of the privacy unit with constant results has public keys
    res = cur.sql("SELECT CASE WHEN pid < 10 THEN 'first' ELSE 'rest' END AS c, COUNT(*) AS n "
                  "FROM t GROUP BY c", epsilon=1.0)
    assert sorted(res.data["c"]) == ["first", "rest"]
