"""The portable keyed hash has the same value in DuckDB and Spark, bit for bit, on the values
that break engines apart: 0, +-1, +-2^62, the BIGINT extremes, NaN, +-infinity, -0.0, NULL,
dates before 1970, long and non-ASCII strings; each column alone and all together, with
Spark's ANSI mode on (overflow raises) and off (the curator's query sessions)."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import pytest

from dpkit.engine.backend_spark import to_spark_sql
from dpkit.engine.plan.portable import domain_limb_sql, portable_hash_sql

COLUMNS = {  # name: (DuckDB type, pyarrow type name, values)
    "a": ("BIGINT", "int64", [0, 1, -1, 2**62, -(2**62), 2**63 - 1, -(2**63), None]),
    "x": ("DOUBLE", "float64", [0.0, -0.0, 1.0, -1.0, 2.0**62, -(2.0**62), math.nan, math.inf,
                                -math.inf, 1e-300, 2.0**40, -0.1, None]),
    "k": ("INTEGER", "int32", [0, 1, -1, 2**31 - 1, -(2**31), None]),
    "b": ("BOOLEAN", "bool_", [True, False, None]),
    "d": ("DATE", "date32", [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(1900, 3, 1),
                             dt.date(9999, 12, 31), None]),
    "s": ("VARCHAR", "string", ["", "a", "é€😀", "x" * 5000, "~", None]),
    "t": ("TIMESTAMP", "timestamp", [dt.datetime(1969, 7, 20, 20, 17, 40, 5),
                                     dt.datetime(2024, 2, 29), None]),
}


@pytest.fixture(scope="module")
def edge_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 30
    arrays = {"i": pa.array(range(n), pa.int64())}
    for name, (_, kind, values) in COLUMNS.items():
        typ = pa.timestamp("us") if kind == "timestamp" else getattr(pa, kind)()
        arrays[name] = pa.array([values[i % len(values)] for i in range(n)], typ)
    path = tmp_path_factory.mktemp("hash") / "edge.parquet"
    pq.write_table(pa.table(arrays), path)
    return path


def test_the_hash_is_identical_in_duckdb_and_spark(spark: Any, edge_parquet: Path) -> None:
    import duckdb

    cols = [(c, t) for c, (t, _, _) in COLUMNS.items()]
    exprs = []
    for seed in (1, 2**63 - 2):
        exprs += [portable_hash_sql([c], seed) for c in cols]
        exprs.append(portable_hash_sql(cols, seed))
        exprs.append(portable_hash_sql(cols, seed, {"s": domain_limb_sql("s", ["'a'", "''"])}))
    sel = ", ".join(f"{e} AS h{j}" for j, e in enumerate(exprs))
    text = f"SELECT i, {sel} FROM {{rel}} ORDER BY i"
    want = duckdb.sql(text.format(rel=f"read_parquet('{edge_parquet}')")).fetchall()
    spark.read.parquet(str(edge_parquet)).createOrReplaceTempView("hash_edges")
    before = spark.conf.get("spark.sql.ansi.enabled")
    try:
        for ansi in ("true", "false"):
            spark.conf.set("spark.sql.ansi.enabled", ansi)
            got = [tuple(r) for r in spark.sql(to_spark_sql(text.format(rel="hash_edges")))
                   .collect()]
            assert got == want, ansi
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    assert len({r[len(cols) + 1] for r in want}) == len(want)  # all-column hashes differ
