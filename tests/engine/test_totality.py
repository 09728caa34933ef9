"""Row conditions never raise: the totality proof against DuckDB on extreme values.

A condition that :func:`is_total` proves total is run as written over a table of extreme values
of every type (it must not raise); every other condition runs under TRY (it must not raise
either). A wrong proof fails the first loop; a missing TRY the second.
"""

from __future__ import annotations

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from dpkit.engine.totality import is_total, total_condition_sql

TYPES = {
    "i": "INTEGER", "b": "BIGINT", "h": "HUGEINT", "u": "UBIGINT", "f": "DOUBLE",
    "d": "DECIMAL(38,20)", "s": "VARCHAR", "t": "BOOLEAN", "dt": "DATE", "ts": "TIMESTAMP",
}
ROWS = [
    "(2147483647, 9223372036854775807, 170141183460469231731687303715884105727, "
    "18446744073709551615, 'inf'::DOUBLE, 999999999999999999.99999999999999999999, 'x', true, "
    "DATE 'infinity', TIMESTAMP '294247-01-10 04:00:54')",
    "(-2147483648, -9223372036854775808, -170141183460469231731687303715884105727, 0, "
    "'nan'::DOUBLE, -999999999999999999.99999999999999999999, '1e400', false, "
    "DATE '-infinity', TIMESTAMP '-infinity')",
    "(0, 0, 0, 0, -0.0, 0, '', NULL, DATE '2020-01-01', TIMESTAMP '2020-01-01')",
    "(NULL, NULL, NULL, NULL, NULL, NULL, 'true', NULL, NULL, NULL)",
]

TOTAL = [
    "i > 5", "b <= -3", "u = 7", "f > 2.5", "f BETWEEN -1 AND 1", "i IN (1, 2, 3)",
    "s = 'a'", "s LIKE 'a%'", "s IN ('a', 'b')", "t", "NOT t", "t = TRUE", "t IS TRUE",
    "dt > '2020-01-01'", "ts <= '2021-05-01 10:00:00'", "i IS NULL", "s IS NOT NULL",
    "isnan(f)", "i = b", "i < f", "s = s", "i > 5 AND (s = 'a' OR NOT t)", "i = -4",
]
NOT_PROVED = [
    "s", "CAST(s AS INTEGER) = 1", "s = 1", "h > 2.5", "d > i", "b * b > 0", "i + 1 > 0",
    "h + d > 0", "CASE s WHEN 'x' THEN CAST('q' AS INTEGER) ELSE 1 END = 1",
    "NULLIF(s, 'x') = 'a'", "COALESCE(s, 'x') = 'a'", "s::BOOLEAN", "s IS TRUE",
    "dt + INTERVAL 9999999 YEAR > dt", "abs(i) > 0", "length(s) > 2", "dt > 5",
    "regexp_matches(s, 'a')", "i = '5'",
]


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    c.execute("SET error_on_division_by_zero=false")
    c.execute("CREATE TABLE x (" + ", ".join(f"{k} {t}" for k, t in TYPES.items()) + ")")
    c.execute("INSERT INTO x VALUES " + ", ".join(ROWS))
    c.execute("CREATE TABLE empty AS SELECT * FROM x LIMIT 0")
    return c


def _run(con: duckdb.DuckDBPyConnection, where: str) -> None:
    """Run over the extreme rows; an error that the empty table raises too is the schema's
    (the curator's dry run refuses it before anything is charged), any other is a leak."""
    try:
        con.execute(f"SELECT COUNT(*) FROM empty WHERE {where}").fetchall()
    except duckdb.Error:
        return
    con.execute(f"SELECT COUNT(*) FROM x WHERE {where}").fetchall()


def _types(col: exp.Column) -> str:
    return TYPES[col.name]


def _cond(text: str) -> exp.Expression:
    return sqlglot.parse_one(f"SELECT 1 FROM x WHERE {text}", read="duckdb").args["where"].this


@pytest.mark.parametrize("text", TOTAL)
def test_proved_total_conditions_never_raise(con: duckdb.DuckDBPyConnection, text: str) -> None:
    cond = _cond(text)
    assert is_total(cond, _types), f"{text} should be proved total"
    _run(con, total_condition_sql(cond, True))


@pytest.mark.parametrize("text", NOT_PROVED)
def test_other_conditions_run_under_try(con: duckdb.DuckDBPyConnection, text: str) -> None:
    cond = _cond(text)
    assert not is_total(cond, _types), f"{text} must not be proved total"
    sql = total_condition_sql(cond, False)
    assert sql.startswith("COALESCE(TRY(")
    _run(con, sql)


def test_some_unproved_conditions_do_raise_without_try(con: duckdb.DuckDBPyConnection) -> None:
    """The extreme rows really trigger the errors TRY absorbs (else the test proves nothing)."""
    raised = 0
    for text in NOT_PROVED:
        try:
            con.execute(f"SELECT COUNT(*) FROM x WHERE {text}").fetchall()
        except duckdb.Error:
            raised += 1
    assert raised >= 8
