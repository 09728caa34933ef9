"""Fuzzing the Spark backend: the D/D' projects' private table read by a Spark session.

:func:`fuzz` writes D and each D' as DuckDB files; :func:`spark_factory` makes the projects
over them with the private table copied to Parquet and loaded through Spark (the public
tables stay in DuckDB, shipped to Spark by the queries that join them), so that every query
the grammar draws runs on Spark's SQL engine. Spark queries cost seconds each: run a few
hundred at most (``fuzz(..., factory=spark_factory(session), queries=...)``; the CI run is
``tests/spark/test_session_and_fuzz.py``, a campaign ``benchmarks/fuzz_campaign.py --engine
spark``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from dpkit import noise
from dpkit.accounting import Budget
from dpkit.attacks.side_channels.runner import declarations
from dpkit.engine.curator import Curator
from dpkit.engine.tables import TableMeta, quote_ident

__all__ = ["spark_factory"]


def spark_factory(spark: Any, *, epsilon: float = 1000.0) -> Callable[..., Curator]:
    """A ``factory`` for :func:`~dpkit.attacks.side_channels.fuzz` whose projects read the
    private table through ``spark`` (a live session); budget ``epsilon`` (default 1000: Spark
    projects run no constant-work plans, so the fuzzer's budget of 25 has no reason to hold),
    delta 1e-3, the fuzzer's seeded source."""

    def make(path: Path, data_file: Path, table: TableMeta, public: Sequence[TableMeta], *,
             accountant: str, seed: int) -> Curator:
        import pyarrow.parquet as pq  # Spark's extra brings it

        con = duckdb.connect(str(data_file), read_only=True)
        try:
            rows = con.sql(f"SELECT * FROM {quote_ident(table.name)}").to_arrow_table()
        finally:
            con.close()
        parquet = path.with_suffix(".parquet")
        pq.write_table(rows, parquet)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # pyspark on pandas 3
            cur = Curator.create(path, budget=Budget(epsilon=epsilon, delta=1e-3,
                                                     accountant=accountant),
                                 source=noise.seeded(seed), engine="spark", spark=spark)
            for p in public:
                cur.add_table(p.name, f"{data_file}::{p.name}", public=True, engine="duckdb")
            cur.add_table(table.name, str(parquet), **declarations(table))
        return cur

    return make
