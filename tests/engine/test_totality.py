"""Row conditions never raise: the totality proof against DuckDB on extreme values.

A condition that :func:`is_total` proves total is run as written over a table of extreme values
of every type (it must not raise); every other condition runs under TRY (it must not raise
either). A wrong proof fails the first loop; a missing TRY the second.
"""

from __future__ import annotations

from pathlib import Path

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
    "b IN (999999999999999999, 0.5)", "i IN (1e400, -0.0)", "b BETWEEN -1.25 AND 1e30",
    "dt IN ('2020-01-01', 'infinity')", "ts BETWEEN '2020-01-01' AND '2021-06-30 23:59:59.5'",
]
NOT_PROVED = [
    "s", "CAST(s AS INTEGER) = 1", "s = 1", "h > 2.5", "d > i", "b * b > 0", "i + 1 > 0",
    "h + d > 0", "CASE s WHEN 'x' THEN CAST('q' AS INTEGER) ELSE 1 END = 1",
    "NULLIF(s, 'x') = 'a'", "COALESCE(s, 'x') = 'a'", "s::BOOLEAN", "s IS TRUE",
    "dt + INTERVAL 9999999 YEAR > dt", "abs(i) > 0", "length(s) > 2", "dt > 5",
    "regexp_matches(s, 'a')", "i = '5'",
    # FINDINGS.md M2: a 39-digit integer beside a decimal constant makes DuckDB compare in
    # DECIMAL(38,1), which cannot hold it: the constant's cast fails only when a row is compared
    "i IN (170141183460469231731687303715884105727, -0.0, 0)",
    "i BETWEEN -0.0 AND 170141183460469231731687303715884105727",
    "b IN (12345678901234567890123, 0.123456789012345678)",
    "b IN (999999999999999999, 0.0000000000000000000001)",
    # and a long fraction leaves too few integer digits for the column's own values
    "b IN (1, 0.0000000000000000000001)", "b = 0.0000000000000000000001",
    # FINDINGS.md M3: a text that is no date is cast to DATE when a row is compared, too
    "dt IN ('x')", "dt NOT IN ('infinity', 'x')", "dt = '2020-02-30'", "ts > 'x'",
    "ts BETWEEN 'x' AND '2021-01-01'",
    # a DATE beside a timestamp text would compare as TIMESTAMP, which far dates do not fit
    "dt > '2020-01-01 10:00:00'",
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


@pytest.mark.parametrize("where", [
    "score > 5 AND age IN (170141183460469231731687303715884105727, -0.0, 0)",  # M2
    "score > 5 AND day IN ('x')",  # M3
], ids=["long_number", "no_date"])
def test_a_constant_that_fails_only_on_rows_is_no_oracle(tmp_path: Path, where: str) -> None:
    """FINDINGS.md M2, on D and D': ``score > 5 AND age IN (<39 digits>, -0.0, 0)`` was proved
    total, so it ran as written; DuckDB casts the IN list to DECIMAL(38,1) lazily, on the rows
    that pass ``score > 5``: D (no such row) answered, D' (one unit with score 9) failed after
    the charge. Both answer now, and are charged alike. M3: a text that is no date, against a
    DATE column, likewise (cast to DATE on the first row compared, not when bound)."""
    import pandas as pd

    import dpkit as dp
    from dpkit import noise

    outcomes = []
    for extra in ([], [9.0]):
        scores = [0.0, 1.0, 2.0, *extra]
        cur = dp.Curator.create(tmp_path / f"p{len(extra)}.dpkit",
                                budget=dp.Budget(epsilon=5.0), source=noise.seeded(1))
        cur.add_table("t", pd.DataFrame({"uid": range(len(scores)), "score": scores,
                                         "age": [30] * len(scores),
                                         "day": pd.to_datetime(["2020-01-01"] * len(scores))
                                         .date}),
                      privacy_unit="uid", max_rows_per_unit=1,
                      bounds={"score": (0, 10), "age": (0, 120)})
        try:
            res = cur.sql(f"SELECT COUNT(*) AS n FROM t WHERE {where}", epsilon=0.5)
            outcomes.append(("answer", res.columns, cur.budget().spent))
        except Exception as exc:  # the leak: an error on D' only
            outcomes.append((type(exc).__name__, (), cur.budget().spent))
        try:
            cdf = cur.cdf("t", "score", where=where, epsilon=0.5)
            outcomes.append(("answer", cdf.columns, cur.budget().spent))
        except Exception as exc:
            outcomes.append((type(exc).__name__, (), cur.budget().spent))
        cur.close()
    assert outcomes[:2] == outcomes[2:], outcomes
    assert outcomes[0][0] == "answer" and outcomes[1][0] == "answer", outcomes
