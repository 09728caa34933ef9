"""Red-team pass over the SQL front end (FINDINGS.md, section F): constructs the fuzzer's
grammar does not write, asked by hand on neighbouring datasets D and D' (D plus one unit).

Each test asserts that everything but the noisy values is the same on D and D' (outcome kind,
exception text, columns, charge), and, where the construct is refused, that it is refused
before any row is read (nothing charged)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp

Outcome = dict[str, Any]
ZOE = "'zoe'"
TEN_ZOES = "'" + "zoe" * 10 + "'"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """D: 200 people named p0..p199; D' adds one named 'zoe' (one pair for the module: the
    refusals spend nothing)."""
    tmp_path = tmp_path_factory.mktemp("redteam_sql")
    d = pd.DataFrame({"uid": range(200), "name": [f"p{i}" for i in range(200)],
                      "x": [float(i % 7) for i in range(200)]})
    d1 = pd.concat([d, pd.DataFrame({"uid": [200], "name": ["zoe"], "x": [3.0]})])
    made = []
    for i, frame in enumerate((d, d1)):
        cur = dp.Curator.create(tmp_path / f"p{i}", source=dp.noise.seeded(1),
                                budget=dp.Budget(epsilon=100, delta=1e-4))
        cur.add_table("t", frame, privacy_unit="uid", max_rows_per_unit=1,
                      bounds={"x": (0, 10)})
        made.append(cur)
    return made[0], made[1]


def _outcome(cur: Any, ask: Callable[[Any], Any]) -> Outcome:
    before = cur.budget().spent
    try:
        res = ask(cur)
    except Exception as exc:  # every exception is an outcome to compare
        out: Outcome = {"kind": type(exc).__name__,
                        "text": str(exc).replace(os.fspath(cur.path), "<project>")}
    else:
        out = {"kind": "answer", "columns": list(res.columns)}
    out["epsilon"] = round(cur.budget().spent - before, 9)
    return out


def _same(pair: tuple[Any, Any], query: str) -> Outcome:
    a, b = (_outcome(cur, lambda c: c.sql(query, epsilon=0.5)) for cur in pair)
    assert a == b, f"D and D' differ:\n  D : {a}\n  D': {b}"
    return a


def _nested_replace(depth: int, pattern: str = ZOE, by: str = TEN_ZOES) -> str:
    expr = "name"
    for _ in range(depth):
        expr = f"replace({expr}, {pattern}, {by})"
    return expr


@pytest.mark.parametrize("where", [
    f"length({_nested_replace(3)}) > 0",                     # F2: time and memory x10^depth
    f"{_nested_replace(1)} = 'x'",
    f"replace(name, name, {TEN_ZOES}) = ''",                 # a pattern from the row
    "replace(name, '', 'abc') = ''",
    f"CASE WHEN x > 1 THEN {_nested_replace(2)} ELSE 'a' END = 'b'",
])
def test_a_lengthening_replace_is_refused_before_rows_are_read(pair: tuple[Any, Any],
                                                               where: str) -> None:
    """F2: nested REPLACEs that lengthen the text turn one row's 'zoe' into 3*10^8 characters
    (depth 8): 16 ms on D, 2.7 s on D' for the same answer. Now refused, nothing charged."""
    out = _same(pair, f"SELECT COUNT(*) FROM t WHERE {where}")
    assert out["kind"] == "QueryError" and "REPLACE" in out["text"], out
    assert out["epsilon"] == 0


def test_a_replace_that_keeps_or_shrinks_the_text_is_answered(pair: tuple[Any, Any]) -> None:
    upper = _nested_replace(4, ZOE, "'ZOE'")
    for where in (f"{upper} = 'p1'",
                  "replace(name, 'p1', '') = ''"):
        assert _same(pair, f"SELECT COUNT(*) FROM t WHERE {where}")["kind"] == "answer"


@pytest.mark.parametrize("query", [
    "SELECT COUNT(*) FROM t LIMIT 1e400",
    "SELECT COUNT(*) FROM t LIMIT 1 OFFSET 1e400",
    "SELECT VAR(x * 1e200) FROM t",
    "SELECT STDDEV(x * 1e200) FROM t",
    "SELECT COUNT(*) FROM t LIMIT 10 PERCENT",         # answered as LIMIT 10 before
    "SELECT TOP 1 WITH TIES COUNT(*) AS c FROM t ORDER BY c",
])
def test_huge_or_partial_numbers_are_refused(pair: tuple[Any, Any], query: str) -> None:
    """Found by hand: these raised OverflowError (an internal error, the same on D and D',
    before the charge), or dropped PERCENT / WITH TIES; now a refusal that says what to write."""
    out = _same(pair, query)
    assert out["kind"] in ("QueryError", "PlanError") and out["epsilon"] == 0, out


@pytest.fixture(scope="module")
def fit_project(tmp_path_factory: pytest.TempPathFactory) -> Any:
    n = 60
    cur = dp.Curator.create(tmp_path_factory.mktemp("redteam_fit") / "p",
                            source=dp.noise.seeded(1), budget=dp.Budget(epsilon=100, delta=1e-4))
    cur.add_table("t", pd.DataFrame({"uid": range(n), "x": [i / n for i in range(n)],
                                     "y": [i % 2 for i in range(n)]}),
                  privacy_unit="uid", max_rows_per_unit=1, bounds={"x": (0, 1)},
                  domains={"y": [0, 1]})
    return cur


@pytest.mark.parametrize("query", [
    "WITH q AS (SELECT 1) SELECT x, y FROM t",
    "SELECT x, y FROM t USING SAMPLE 10",
    "SELECT x, y FROM t TABLESAMPLE 10%",
    "SELECT x, y FROM t WINDOW w AS (ORDER BY x)",
    "SELECT x, y FROM t PIVOT (COUNT(*) FOR y IN (1))",
    "SELECT x, y FROM dpdata.priv.t",
    "SELECT t2.x, y FROM t",
])
def test_fit_refuses_the_clauses_it_would_ignore(fit_project: Any, query: str) -> None:
    """Found by hand: ``fit``'s own SELECT reader ignored these clauses and trained on every
    row, charged (a 10% sample asked, the whole table used). No row leaked (the statement is
    rebuilt from the declarations), but bad input must be refused before the charge."""
    from dpkit.learn.linear import LogisticRegression

    before = fit_project.budget().spent
    with pytest.raises(dp.engine.QueryError):
        fit_project.fit(LogisticRegression(), query, label="y", epsilon=0.5)
    assert fit_project.budget().spent == before


@pytest.mark.parametrize("query", [
    "SELECT COUNT(*) FROM t PIVOT (COUNT(*) FOR name IN ('p1'))",
    "SELECT COUNT(*) FROM t UNPIVOT (v FOR c IN (x))",
    "SELECT DP_CDF(x) FROM t PIVOT (COUNT(*) FOR name IN ('p1'))",
    "SELECT COUNT(*) FROM t AT (VERSION => 1)",
    "SELECT COUNT(*) FROM ONLY t",
    "SELECT DP_CDF(x) FROM t AT (VERSION => 1)",
])
def test_clauses_after_the_table_are_refused_not_ignored(pair: tuple[Any, Any], query: str) -> None:
    """Found by hand: PIVOT/UNPIVOT after the table was ignored (the aggregate ran over the
    plain table, charged); now refused before the charge, as the SELECT-level PIVOT was."""
    out = _same(pair, query)
    assert out["kind"] == "QueryError" and out["epsilon"] == 0, out


@pytest.mark.parametrize("query", [
    "SELECT COUNT(*) FROM read_csv('/etc/passwd')",
    "SELECT COUNT(*) FROM '/etc/passwd'",
    "SELECT COUNT(*) FROM t JOIN read_csv('/etc/passwd') r ON t.name = r.column0",
    "SELECT COUNT(*) FROM t WHERE name IN (SELECT column0 FROM read_csv('/etc/passwd'))",
    "SELECT COUNT(*) FROM t WHERE x > (SELECT MAX(x) FROM t)",
    "SELECT COUNT(*), (SELECT MAX(x) FROM t) FROM t",
    "SELECT COUNT(*) FROM dpdata.priv.t",
    "SELECT COUNT(*) FROM duckdb_tables()",
    "SELECT COUNT(*) FROM t WHERE current_setting('threads') = '1'",
    "SELECT COUNT(*) FROM t WHERE getvariable('v') = 1",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM t",
    "SELECT COUNT(*) FROM t QUALIFY row_number() OVER () = 1",
    "COPY t TO '/tmp/t.csv'",
    "ATTACH '/tmp/x.duckdb' AS x",
    "SELECT COUNT(*) FROM t WHERE CASE WHEN x > 8 THEN error('big') ELSE true END",
])
def test_files_catalogs_and_subqueries_are_refused_before_rows(pair: tuple[Any, Any],
                                                               query: str) -> None:
    """Safe today (pinned: a regression here would read files or rows): refused with the same
    text on D and D', nothing charged."""
    out = _same(pair, query)
    assert out["kind"] == "QueryError" and out["epsilon"] == 0, out


def test_bounds_past_a_float_are_refused_with_the_fix(pair: tuple[Any, Any]) -> None:
    """Found by hand: query bounds of 10**400 raised OverflowError (internal, before the
    charge); now the ValueError every non-finite bound gets."""
    for cur in pair:
        with pytest.raises(ValueError, match="finite numbers"):
            cur.sql("SELECT SUM(x) FROM t", epsilon=0.5, bounds={"x": (0, 10**400)})


def test_an_xlsx_answer_never_holds_a_formula(tmp_path: Path) -> None:
    """Found by hand: openpyxl stored a text starting with '=' as a formula, so a released key
    (keys come from the data: '=HYPERLINK(...)') ran in the analyst's spreadsheet."""
    openpyxl = pytest.importorskip("openpyxl")
    from dpkit.engine.output import write_columns

    target = tmp_path / "a.xlsx"
    write_columns({"k": np.array(["=1+1", "b"], dtype=object), "n": np.array([3, 4])}, target,
                  about={"query": "=2+2"})
    book = openpyxl.load_workbook(target)
    cells = [c for ws in book.worksheets for row in ws.iter_rows() for c in row]
    assert not [c.coordinate for c in cells if c.data_type == "f"]
    assert book["result"]["A2"].value == "=1+1"
