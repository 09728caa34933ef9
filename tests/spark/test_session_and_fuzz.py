"""The Spark backend's privacy properties: a missing or dead session is refused before the
charge; the side-channel fuzzer finds nothing against Spark tables (few cases: each Spark
query costs seconds); a session that dies mid-query is in test_zz_session_dies.py (it stops
the shared session, so it runs last)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from _spark_helpers import DeadSession

import dpkit as dp
from dpkit.attacks import side_channels as sc
from dpkit.engine import QueryError
from dpkit.engine.tables import Column, TableMeta

# a date and a timestamp column (D holds 0001-01-01, 9999-12-31 and NULL in both, the date
# outside its declared range): the grammar's date functions and intervals run on Spark too
SMALL = TableMeta("t", (Column("uid", "BIGINT"), Column("k", "VARCHAR"), Column("x", "DOUBLE"),
                        Column("d", "DATE"), Column("ts", "TIMESTAMP")),
                  privacy_unit="uid", max_rows_per_unit=2, bounds={"x": (0, 10)},
                  date_ranges={"d": ("2000-01-01", "2030-12-31")}, domains={"k": ("a", "b")})
# a public lookup table the fuzzer joins (loaded into DuckDB, shipped to Spark by the query)
LOOKUP = TableMeta("wards", (Column("k", "VARCHAR"), Column("label", "VARCHAR")), public=True)




@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, spark: Any, parquet_rows: Path) -> Path:
    path = tmp_path_factory.mktemp("session") / "p.dpkit"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        cur = dp.Curator.create(path, epsilon=5.0, engine="spark", spark=spark)
        cur.add_table("t", spark.read.parquet(str(parquet_rows)), privacy_unit="uid",
                      max_rows_per_unit=2, bounds={"x": (0, 10)})
    cur.close()
    return path


def test_a_dead_session_is_refused_before_the_charge(project: Path) -> None:
    with dp.Curator.open(project, spark=DeadSession()) as cur:
        with pytest.raises(QueryError, match="Spark session has been stopped"):
            cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        assert cur.budget().spent == 0.0


def test_a_missing_pyspark_is_refused_before_the_charge(project: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # import pyspark.sql fails
    with dp.Curator.open(project) as cur:
        with pytest.raises(QueryError, match=r"pip install 'dpkit\[spark\]'"):
            cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        assert cur.budget().spent == 0.0


def test_the_live_session_answers(project: Path, spark: Any) -> None:
    with dp.Curator.open(project, spark=spark) as cur:
        res = cur.sql("SELECT COUNT(*) AS n, AVG(x) AS a FROM t", epsilon=0.5)
        assert res.to_pandas()["n"].iloc[0] > 0
        assert cur.budget().spent == pytest.approx(0.5)


def test_the_work_trace_sees_the_spark_statements(project: Path, spark: Any) -> None:
    """What the side-channel fuzzer compares as work (dpkit.noise.trace): on Spark, the
    statement Spark analyses before the charge and the one it runs after it, as Spark SQL."""
    with dp.Curator.open(project, spark=spark) as cur, dp.noise.trace.recording() as t:
        cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    spark_steps = [s[1] for s in t.statements if s[0] == "spark"]
    assert spark_steps == ["check", "collect"], t.statements
    assert "dpkit_" in t.statements[-1][2]  # over the Spark view, not the DuckDB relation


def _spark_factory(spark: Any, asked: list[str]) -> Any:
    """The fuzzer's Spark projects (``sc.spark_factory``); ``asked`` collects the SQL queries
    that answered."""
    base = sc.spark_factory(spark)

    def make(*args: Any, **kwargs: Any) -> Any:
        cur = base(*args, **kwargs)
        sql = cur.sql

        def recorded(text: str, *a: Any, **kw: Any) -> Any:
            out = sql(text, *a, **kw)
            asked.append(text)
            return out
        cur.sql = recorded
        return cur
    return make


@pytest.mark.parametrize(("families", "queries", "seed"), [
    # with a public lookup table (LOOKUP); seed 49 draws JOINs with it, date_part, CASE on the date
    # and casts of the timestamp (their extremes in the rows)
    (("sql",), 8, 49),
    # the release families, their SQL forms and fit (on Spark since they read a portable
    # histogram or bounded rows: tests/spark/test_spark_families.py)
    (("dp_cdf", "cdf", "filter", "synthetic", "fit"), 6, 5),
])
def test_the_side_channel_fuzzer_finds_nothing_on_spark(spark: Any, families: tuple[str, ...],
                                                        queries: int, seed: int) -> None:
    """Neighbouring datasets D, D' (one unit added) on Spark: every public part of the outcome
    (kind, error text, keys and their order, cost) is the same (docs/attacks.md)."""
    asked: list[str] = []
    public = [LOOKUP] if families == ("sql",) else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        rep = sc.fuzz(SMALL, public=public, queries=queries, seed=seed, neighbours=("add",),
                      accountants=("approx",), families=families, units=8, max_findings=1,
                      factory=_spark_factory(spark, asked))
    assert not rep.skipped, rep.skipped
    joined = [t for t in asked if " JOIN " in t]
    assert bool(joined) == bool(public), joined  # a JOIN with the public table answered
    if public:  # the datetime columns were read on Spark
        assert any('."d"' in t or '."ts"' in t for t in asked), asked
    assert rep.comparisons == queries
    assert rep.ok, rep.summary()
