"""Third red-team pass, the Spark backend (FINDINGS.md H1): pattern matching on Spark.

Spark matches LIKE / ILIKE / RLIKE with java.util.regex (backtracking). Before the fix, a
pattern read from a row failed there only when a row held a bad one (an answer on D, the
after-charge refusal on D' = D plus that unit), a pattern Java rejects was charged and then
failed, and a constant LIKE with several wildcards took time ~n^k in one row's length (one
unit's 400-character value: 14 s instead of 1 s; 1,000 characters: no answer in minutes).
The pure rewrites are tested without Spark; the D/D' tests need pyspark and Java.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import dpkit as dp
from dpkit.engine import QueryError
from dpkit.engine.spark_sql import like_regex, regex_patterns, to_spark_sql

# ---------------------------------------------------------------- without Spark


def _python_regex(java: str) -> str:
    """The Java regex of :func:`like_regex` in Python's syntax (``\\x{h}`` -> ``\\U...``)."""
    return re.sub(r"\\x\{([0-9a-f]+)\}", lambda m: f"\\U{int(m.group(1), 16):08x}", java)


def test_like_as_regex_matches_what_duckdb_like_matches() -> None:
    """The rewrite is exact: 4,000 random (value, pattern) pairs over an alphabet of LIKE and
    regex syntax agree with DuckDB's LIKE (deterministic: a fixed seed, no tolerance)."""
    rng = random.Random(7)
    alphabet = "ab_%\\.*(["
    pairs = [("".join(rng.choice("ab_%\\.*([") for _ in range(rng.randint(0, 8))),
              "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))))
             for _ in range(4000)]
    con = duckdb.connect()
    expected = con.execute("SELECT v LIKE p FROM (SELECT UNNEST(?) AS v, UNNEST(?) AS p)",
                           [[v for v, _ in pairs], [p for _, p in pairs]]).fetchall()
    for (v, p), (want,) in zip(pairs, expected, strict=True):
        got = re.search(_python_regex(like_regex(p)), v) is not None
        assert got == want, (v, p, like_regex(p))


def test_no_backtracking_like_reaches_spark() -> None:
    text = to_spark_sql("SELECT COUNT(*) FROM t WHERE s LIKE '%a%a%a%b' OR s ILIKE 'A_%'")
    assert " LIKE " not in text.upper().replace("RLIKE", "")
    assert "(?>.*?a)" in text  # each middle segment in an atomic group


@pytest.mark.parametrize("query", [
    "SELECT COUNT(*) FROM t WHERE s LIKE s",  # the pattern comes from a row
    "SELECT COUNT(*) FROM t WHERE 'x' LIKE s || '%'",
    "SELECT COUNT(*) FROM t WHERE regexp_matches(s, s)",
    "SELECT COUNT(*) FROM t WHERE regexp_matches(s, '^(a|aa)+$')",  # ~1.6^n
    "SELECT COUNT(*) FROM t WHERE regexp_matches(s, 'a.*a.*b')",  # ~n^3
    "SELECT COUNT(*) FROM t WHERE regexp_matches(s, '(a+)+')",
    "SELECT COUNT(*) FROM t WHERE regexp_matches(s, '(a)x*\\1')",
])
def test_patterns_that_follow_the_rows_are_refused_on_spark(query: str) -> None:
    with pytest.raises(QueryError, match=r"on Spark, (LIKE|regexp_matches)"):
        to_spark_sql(query)


def test_simple_regexes_pass() -> None:
    import sqlglot

    for p in ("^ab", "a.*b", "x[*+?|]y+", "(?i)abc", "a{3}", "a|b", "\\*\\+"):
        regex_patterns(sqlglot.parse_one(f"SELECT regexp_matches(s, '{p}') FROM t",
                                         read="duckdb"))


def test_the_fuzzer_asks_patterns_read_from_rows() -> None:
    """The grammar draws H1's shape (a column as its own LIKE / regex pattern; ~1.8% of
    queries), and a unit of extreme values may hold the text that breaks both on Spark."""
    from dpkit.attacks.side_channels.draw import Draw
    from dpkit.attacks.side_channels.grammar import Grammar
    from dpkit.attacks.side_channels.neighbours import extreme_literals
    from dpkit.engine.tables import Column, TableMeta

    table = TableMeta("t", (Column("uid", "BIGINT"), Column("k", "VARCHAR")),
                      privacy_unit="uid", max_rows_per_unit=2)
    grammar, d = Grammar(table, [], families=("sql",)), Draw(1)
    own = re.compile(r'(t1\."k") (?:I?LIKE|NOT LIKE) \1|regexp_matches\((t1\."k"), \2\)')
    assert any(own.search(grammar.query(d).sql()) for _ in range(1000))
    assert "'a\\b('" in extreme_literals(table, table.columns[1])


# ---------------------------------------------------------------- D / D' on Spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime (pyspark needs Java 17+)")
    from dpkit.engine.backend_spark import local_session

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        session = local_session()
    session.sparkContext.setLogLevel("OFF")
    yield session  # not stopped: tests/spark may share it (getOrCreate)


def _pair(spark: Any, extra: str) -> tuple[Any, Any, Path]:
    """Projects over D (30 units, s = 'abc') and D' = D plus one unit whose s is ``extra``
    and x = 9.5 (above every x of D), same seed, on Spark."""
    import pandas as pd

    folder = Path(tempfile.mkdtemp(prefix="rt3-spark-"))
    d = pd.DataFrame({"uid": list(range(30)), "s": ["abc"] * 30,
                      "x": [i * 0.3 for i in range(30)]})
    d1 = pd.concat([d, pd.DataFrame({"uid": [999], "s": [extra], "x": [9.5]})])
    out = []
    for name, df in (("d", d), ("d1", d1)):
        path = folder / f"{name}.parquet"
        df.to_parquet(path, index=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            cur = dp.Curator.create(folder / f"{name}.dpkit", epsilon=100, delta=1e-3,
                                    source=dp.noise.seeded(3), engine="spark", spark=spark)
            cur.add_table("t", str(path), privacy_unit="uid", max_rows_per_unit=1,
                          bounds={"x": (0, 10)})
        out.append(cur)
    return out[0], out[1], folder


def _outcome(cur: Any, query: str) -> tuple[str, str, float]:
    before = cur.budget().spent
    try:
        cur.sql(query, epsilon=0.1)
        kind, text = "answer", ""
    except Exception as exc:
        kind, text = type(exc).__name__, re.sub(r"#\d+", "#n", str(exc))
    return kind, text, cur.budget().spent - before


@pytest.mark.parametrize(("extra", "query"), [
    ("a\\b", "SELECT COUNT(*) AS n FROM t WHERE s LIKE s"),  # Spark: an escape error
    ("(", "SELECT COUNT(*) AS n FROM t WHERE regexp_matches(s, s)"),  # Java: unclosed group
])
def test_a_pattern_read_from_a_row_gives_the_same_outcome(spark: Any, extra: str,
                                                          query: str) -> None:
    """Before: D answered, D' was refused after the charge (FINDINGS.md H1)."""
    a, b, folder = _pair(spark, extra)
    try:
        on_d, on_d1 = _outcome(a, query), _outcome(b, query)
        assert on_d == on_d1
        assert on_d[0] == "QueryError" and on_d[2] == 0.0  # refused, nothing charged
    finally:
        a.close(), b.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_pattern_java_rejects_is_refused_before_the_charge(spark: Any) -> None:
    """RE2 syntax DuckDB accepts but Java does not was charged and then failed."""
    a, b, folder = _pair(spark, "zzz")
    try:
        for cur in (a, b):
            kind, text, spent = _outcome(
                cur, "SELECT COUNT(*) AS n FROM t WHERE x > 9.2 AND regexp_matches(s, 'a{,3}')")
            assert (kind, spent) == ("QueryError", 0.0), text
            assert "Java regular expressions" in text
    finally:
        a.close(), b.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_long_value_does_not_slow_a_like(spark: Any) -> None:
    """One unit's 1,000-character value and a LIKE with six wildcards: answered in seconds
    (before: ~n^5 steps of backtracking, no answer within minutes). The bound, 60 s, is 20x
    the time measured on a shared 2-core machine."""
    a, b, folder = _pair(spark, "a" * 1000)
    try:
        query = "SELECT COUNT(*) AS n FROM t WHERE s LIKE '%a%a%a%a%a%b'"
        _outcome(a, query)  # warm the session
        start = time.perf_counter()
        assert _outcome(b, query)[0] == "answer"
        assert time.perf_counter() - start < 60
    finally:
        a.close(), b.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_interval_arithmetic_cannot_raise_on_spark() -> None:
    text = to_spark_sql("SELECT COUNT(*) FROM t WHERE ts + INTERVAL 1 DAY * b > ts - "
                        "INTERVAL 2 YEAR AND x + 1 > 0")
    assert "TRY_ADD(ts, TRY_MULTIPLY(INTERVAL '1' DAY, b))" in text
    assert "TRY_SUBTRACT(ts, INTERVAL '2' YEAR)" in text
    assert "x + 1 > 0" in text  # no interval: unchanged


def test_timestamp_overflow_on_one_row_gives_the_same_outcome(spark: Any) -> None:
    """FINDINGS.md H3: Spark's timestamp + interval throws ``long overflow`` whatever its
    ANSI setting; before the fix D answered and D' (a unit at 9999-12-31) was refused after
    the charge."""
    import datetime as dt

    import pandas as pd

    folder = Path(tempfile.mkdtemp(prefix="rt3-spark-ts-"))
    d = pd.DataFrame({"uid": list(range(20)),
                      "ts": [dt.datetime(2020, 1, 1 + i) for i in range(20)]})
    d1 = pd.concat([d, pd.DataFrame({"uid": [99], "ts": [dt.datetime(9999, 12, 31)]})])
    curs = []
    try:
        for name, df in (("d", d), ("d1", d1)):
            df.to_parquet(folder / f"{name}.parquet", index=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                cur = dp.Curator.create(folder / f"{name}.dpkit", epsilon=100, delta=1e-3,
                                        source=dp.noise.seeded(3), engine="spark", spark=spark)
                cur.add_table("t", str(folder / f"{name}.parquet"), privacy_unit="uid",
                              max_rows_per_unit=1)
            curs.append(cur)
        query = ("SELECT COUNT(*) AS n FROM t WHERE ts + INTERVAL 290000 YEAR > "
                 "TIMESTAMP '2020-01-01'")
        on_d, on_d1 = _outcome(curs[0], query), _outcome(curs[1], query)
        assert on_d == on_d1
        assert on_d[0] == "answer"
    finally:
        for cur in curs:
            cur.close()
        shutil.rmtree(folder, ignore_errors=True)
