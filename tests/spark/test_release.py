"""A project's shipped lookups leave Spark's cache when the project is closed.

A public DuckDB table joined with a Spark table is shipped to Spark as cached rows
(``backend_spark.ship_public``). The cache belongs to the SparkContext, shared by every
session of the application, so before ``Curator.close`` released them (``backend.release``) a
closed project's lookups held executor memory until the application stopped. Not released by
``backend.close``, which runs at every ``add_table``: a second table keeps the lookup cached.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pandas as pd

import dpkit as dp


def test_close_releases_the_shipped_lookups_cache(tmp_path: Path, spark: Any) -> None:
    from pyspark import StorageLevel

    rows = spark.createDataFrame([(i, f"k{i % 3}", float(i % 7)) for i in range(60)],
                                 "uid long, g string, x double")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        cur = dp.Curator.create(tmp_path / "p.dpkit", epsilon=10.0, engine="spark",
                                spark=spark, source=dp.noise.seeded(3))
        try:
            cur.add_table("t", rows, bounds={"x": (0, 10)})
            cur.add_public_table("wards", pd.DataFrame({"g": ["k0", "k1"], "r": ["n", "s"]}),
                                 engine="duckdb")
            cur.sql("SELECT COUNT(*) AS n FROM t JOIN wards w ON t.g = w.g", epsilon=1.0)
            backend = cur._backend
            df, view = backend._cached["wards"], backend._shipped[next(iter(backend._shipped))]
            session = backend.session()
            assert df.storageLevel != StorageLevel.NONE and session.catalog.tableExists(view)
            cur.add_table("u", rows, bounds={"x": (0, 10)})  # backend.close: still cached
            assert df.storageLevel != StorageLevel.NONE
        finally:
            cur.close()
    assert df.storageLevel == StorageLevel.NONE  # before: still MEMORY_AND_DISK after close
    assert not session.catalog.tableExists(view)
