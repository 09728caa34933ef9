"""Spark answers what DuckDB answers: the same exact (pre-noise) aggregates, the same rows kept
by contribution bounding, the same released values under the same seeded noise.

Both projects load the same Parquet file (conftest.generated_rows: NULLs and NaN, duplicates,
+-1e300 and -0.0, 61 groups, heavy units). The DuckDB project compiles its statements in the
portable form (``Preparer.portable``) that Spark runs, so that bounding keeps the same rows;
at record level nothing is hashed and the DuckDB-native statement is compared too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _spark_helpers import assert_exact_parity, exact_aggregates, open_pair

import dpkit as dp
from dpkit.engine import spark_load
from dpkit.engine.backend_spark import bucket_count
from dpkit.engine.plan.portable import bounding_ctes_portable

KEYS = [f"k{i:02d}" for i in range(60)]
DECL: dict[str, Any] = {"bounds": {"x": (-100, 100), "k": (-5, 5)},
                        "domains": {"g": KEYS, "h": ["a", "b", "c"]}}

QUERIES = [
    "SELECT COUNT(*) AS n FROM {t}",
    "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(k) AS a FROM {t} GROUP BY g",
    "SELECT h, g, COUNT(x) AS n, VARIANCE(x) AS v, STDDEV(k) AS sd FROM {t} GROUP BY h, g",
    "SELECT COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM {t} WHERE k > 0 AND g <> 'k03'",
    "SELECT h, SUM(k) AS s, COUNT(DISTINCT k) AS d FROM {t} GROUP BY h",
    "SELECT k, COUNT(*) AS n FROM {t} GROUP BY k",  # no domain: private group selection
    "SELECT h, COUNT(*) AS n FROM {t} GROUP BY h ORDER BY n DESC LIMIT 2",  # noisy top-k
    "SELECT CASE WHEN x > 0 THEN 'pos' ELSE 'neg' END AS sgn, SUM(k) AS s FROM {t} "
    "GROUP BY sgn",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, spark: Any,
         parquet_rows: Path) -> Any:
    yield from open_pair(tmp_path_factory.mktemp("parity"), spark, parquet_rows, DECL,
                         seed=7)


_exact = exact_aggregates


# user level: the kinds where bounding matters (groups cap, WHERE, selection, top-k)
@pytest.mark.parametrize(("table", "queries"), [("rec", QUERIES),
                                                ("usr", [QUERIES[i] for i in (2, 3, 5, 6)])])
def test_exact_aggregates_are_equal(pair: Any, table: str, queries: list[str]) -> None:
    assert_exact_parity(*pair, queries, table)


def test_record_level_matches_the_native_duckdb_statement(tmp_path: Path,
                                                          parquet_rows: Path) -> None:
    """At record level nothing is hashed: the portable statement's exact values are those of
    DuckDB's own statement (a DuckDB project of its own: the pair's noise stays in step)."""
    duck = dp.Curator.create(tmp_path / "native.dpkit", epsilon=1000, delta=1e-3,
                             source=dp.noise.seeded(7))
    duck.add_table("rec", str(parquet_rows), **DECL)
    for q in QUERIES:
        query = q.format(t="rec")
        duck._preparer.portable = True
        portable = _exact(duck, query)
        duck._preparer.portable = False
        assert portable == _exact(duck, query), query
    duck.close()


def test_same_seeded_noise_gives_identical_answers(pair: Any) -> None:
    duck, spk = pair
    for q in (QUERIES[1], QUERIES[5], QUERIES[6]):
        query = q.format(t="usr")
        a = duck.sql(query, epsilon=0.5).to_pandas()
        b = spk.sql(query, epsilon=0.5).to_pandas()
        assert a.equals(b), query
    assert duck.budget().spent == spk.budget().spent


def test_bounding_keeps_the_same_rows(spark: Any, parquet_rows: Path) -> None:
    """Byte-equal kept rows: the portable bounding CTEs on both engines, unit + group + value
    columns (a float with NaN, NULL, +-1e300, -0.0), 3 rows per unit, two seeds."""
    import duckdb

    from dpkit.engine.backend_spark import to_spark_sql

    spark.read.parquet(str(parquet_rows)).createOrReplaceTempView("rows_view")
    for seed in (1, 2**62 + 12345):
        ctes, last = bounding_ctes_portable(
            "__src", [("__u", "BIGINT"), ("__g0", "VARCHAR"), ("__c0", "DOUBLE")], [], m=3,
            seed=seed)
        body = ", ".join(ctes)
        text = (f"WITH __src AS (SELECT uid AS __u, g AS __g0, x AS __c0 FROM {{rel}}), {body} "
                f"SELECT __u, __g0, CAST(__c0 AS VARCHAR) FROM {last}")
        d = duckdb.sql(text.format(rel=f"read_parquet('{parquet_rows}')")).fetchall()
        s_text = to_spark_sql(text.format(rel="rows_view"))
        s = [tuple(r) for r in spark.sql(s_text).collect()]
        assert _canon(s) == _canon(d)
        assert len(d) < 3400  # heavy units were cut


def _canon(rows: list[Any]) -> list[Any]:
    """Kept rows with their values as one text (the engines print doubles differently)."""
    return sorted((u, g or "", "NULL" if v is None else repr(float(v))) for u, g, v in rows)


def test_import_dpkit_does_not_import_pyspark() -> None:
    code = ("import sys, dpkit, dpkit.engine.curator, dpkit.engine.backend_spark; "
            "assert 'pyspark' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


ROUND_CASES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, -0.49999999999999994,
               4503599627370495.5, -4503599627370495.5, 4503599627370497.0, 2.0**62, -(2.0**62),
               1e15 + 0.5, 3.4999999999999996, -0.0, 0.0, 1e-300, 7.5, 123456789.50000001]


def test_spark_rounds_fixed_point_integers_as_duckdb(spark: Any) -> None:
    """``exact_rounds`` (Spark's fixed-point rounding without its BigDecimal ``round``) gives
    DuckDB's ``round`` on halves, near-halves, both signs and beyond 2^52."""
    import duckdb
    import sqlglot

    from dpkit.engine.backend_spark import exact_rounds

    values = ", ".join(f"(CAST({v!r} AS DOUBLE))" for v in ROUND_CASES)
    text = (f"SELECT CAST(round(y) AS BIGINT) AS r FROM (VALUES {values}) AS v(y) "
            f"ORDER BY y")
    want = duckdb.sql(text).fetchall()
    ours = exact_rounds(sqlglot.parse_one(text, read="duckdb"))
    assert "ROUND" not in ours.sql(dialect="spark").upper()
    assert duckdb.sql(ours.sql(dialect="duckdb")).fetchall() == want
    got = [tuple(r) for r in spark.sql(ours.sql(dialect="spark")).collect()]
    assert got == want


def test_user_level_reads_the_bucketed_copy_without_a_shuffle(pair: Any) -> None:
    """A table with a privacy unit is copied bucketed by it: the bounding window needs no
    exchange of the rows by unit (only the small exchange of the partial aggregates), and
    the record-level table (no unit) is a plain copy."""
    _, spk = pair
    for cur in pair:  # both: their seeded sources stay in step for the tests after this one
        _exact(cur, "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM usr GROUP BY g")
    backend = spk._backend
    text = next(t for t in backend._texts.values() if "ROW_NUMBER" in t)
    plan = backend.session().sql(text)._jdf.queryExecution().executedPlan().toString()
    assert "Bucketed: true" in plan
    exchanges = [ln for ln in plan.splitlines() if "Exchange hashpartitioning" in ln]
    assert exchanges and not any("uid" in ln or "__u" in ln for ln in exchanges), plan
    for name, meta in spk.tables().items():
        assert (Path(meta.source) / "_dpkit_buckets").exists() == (
            meta.privacy_unit is not None), name
    # the dropped-rows diagnostic (no groups cap) leaves Spark's window group limit on
    for cur in pair:
        _exact(cur, "SELECT COUNT(*) AS n, SUM(x) AS s FROM usr")
    text = next(t for t in backend._texts.values() if "__n2" in t)
    plan = backend.session().sql(text)._jdf.queryExecution().executedPlan().toString()
    assert "WindowGroupLimit" in plan and "lead(" not in plan.lower(), plan


def test_bucket_count_follows_the_rows() -> None:
    """Buckets: the shuffle partitions, more when a bucket would hold over 2M rows."""
    assert [bucket_count(n, 4) for n in (0, 3_200, 8_000_000, 10_000_000, 100_000_000)] == [
        4, 4, 4, 5, 50]
    assert bucket_count(100_000_001, 4) == 51 and bucket_count(5, 0) == 1
    assert bucket_count(3_200, 4, per_bucket=500) == 7


def test_a_big_table_gets_more_buckets(pair: Any, parquet_rows: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy gets :func:`bucket_count` buckets (here 500 rows per bucket: 7 for ~3,200
    rows), written in its note and read by the query side; the answers stay DuckDB's."""
    duck, spk = pair
    monkeypatch.setattr(spark_load, "ROWS_PER_BUCKET", 500)
    for cur in pair:
        cur.add_table("usr7", str(parquet_rows), privacy_unit="uid",
                      max_rows_per_unit=3, **DECL)
    meta = spk.tables()["usr7"]
    rows = spk._backend.session().read.parquet(meta.source).count()
    assert (Path(meta.source) / "_dpkit_buckets").read_text().split() == [
        "uid", str(bucket_count(rows, 4, per_bucket=500))] == ["uid", "7"]
    assert_exact_parity(duck, spk, [QUERIES[1], QUERIES[3]], "usr7")
    text = next(t for t in spk._backend._texts.values() if "usr7" in t)
    plan = spk._backend.session().sql(text)._jdf.queryExecution().executedPlan().toString()
    assert "SelectedBucketsCount: 7 out of 7" in plan, plan


def test_dropped_rows_are_totalled_on_the_driver(pair: Any, parquet_rows: Path) -> None:
    """The dropped-rows diagnostic is summed per group in the aggregation pass and totalled
    on the driver where every group reaches it (no GROUP BY, declared keys, selected groups):
    no window over the groups in the statement, so one Spark job less per query. The total
    is the same on both engines, and without a groups cap it is what the data gives (each
    unit's rows above the cap m = 3, clipped at m)."""
    import pyarrow.parquet as pq

    from dpkit import noise
    from dpkit.engine import plan as dplan
    from dpkit.engine.diagnose import exact_total

    rows = pq.read_table(parquet_rows).column("uid").to_pandas().value_counts()
    truth = int((rows - 3).clip(lower=0).clip(upper=3).sum())
    for q in (QUERIES[0], QUERIES[1], QUERIES[5]):
        query, totals = q.format(t="usr"), []
        for cur in pair:  # in turn: the same seeds, so the same rows kept
            plan = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise=dplan.LAPLACE,
                             level=0.95, bounds=None)
            with noise.trace.recording() as t:
                ex = cur._execute(plan)
            drop = next(mm for mm in plan.diag_measures if mm.kind == "ddrop")
            assert drop.per_group, query
            totals.append(exact_total(ex.column(drop.sql_col), scalar=False))
        reads = [s[2] for s in t.statements if s[:2] == ("spark", "collect")]
        assert reads and not any("OVER ()" in r for r in reads), reads
        assert totals[0] == totals[1] > 0, (query, totals)
        if q == QUERIES[0]:  # no GROUP BY: no groups cap
            assert totals[1] == truth, (totals, truth)


def test_text_is_cut_at_load_as_duckdb_cuts_it(tmp_path: Path, spark: Any) -> None:
    """``max_text_length`` cuts a Spark copy's text at load as a DuckDB copy's (the same first
    characters, multi-byte ones counted as one), and records the bound: one unit's long value
    costs no more to read on Spark either (docs/attacks.md §6)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    values = ["short", "abcdefgh", "ééééééé", "x" * 10_000, None, "abcde"]
    path = tmp_path / "text.parquet"
    pq.write_table(pa.table({"uid": list(range(len(values))), "s": values}), path)
    curs = [dp.Curator.create(tmp_path / f"{e}.dpkit", epsilon=10, delta=1e-6,
                              source=dp.noise.seeded(3), engine=e,
                              spark=spark if e == "spark" else None)
            for e in ("duckdb", "spark")]
    for cur in curs:
        cur.add_table("t", str(path), privacy_unit="uid", max_rows_per_unit=1,
                      max_text_length=5)
        assert cur.tables()["t"].max_text_length == 5
    query = "SELECT COUNT(*) AS n FROM t WHERE s = 'abcde'"
    assert exact_aggregates(curs[0], query) == exact_aggregates(curs[1], query)
    copy = spark.read.parquet(curs[1].tables()["t"].source).orderBy("uid").select("s").collect()
    relation = curs[0].tables()["t"].relation
    for cur in curs:
        cur.close()
    with duckdb.connect() as con:
        con.execute(f"ATTACH '{tmp_path / 'duckdb.dpkit' / 'data.duckdb'}' AS dpdata (READ_ONLY)")
        duck = con.execute(f"SELECT s FROM {relation} ORDER BY uid").fetchall()
    assert [r[0] for r in duck] == [r[0] for r in copy] == [
        "short", "abcde", "ééééé", "xxxxx", None, "abcde"]
