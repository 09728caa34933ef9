"""A Spark session that dies mid-query (after Spark analysed the statement and the ledger was
charged, before the rows are read) keeps the charge and releases nothing: a refund would make
failures a channel. This stops the shared session, so it runs last (file order)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

import dpkit as dp
from dpkit.engine.backend_spark import SparkBackend
from dpkit.engine.charge import ChargedQueryError


def test_a_session_dying_mid_query_keeps_the_charge(tmp_path: Path, spark: Any,
                                                   parquet_rows: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        cur = dp.Curator.create(tmp_path / "p.dpkit", epsilon=5.0, engine="spark", spark=spark)
        cur.add_table("t", str(parquet_rows), privacy_unit="uid", max_rows_per_unit=2,
                      bounds={"x": (0, 10)})
    analysed = SparkBackend.check

    def check_then_die(self: SparkBackend, text: str, tables: Any) -> None:
        analysed(self, text, tables)  # refused-for-free errors end here
        spark.stop()  # the session dies between the analysis and the read

    monkeypatch.setattr(SparkBackend, "check", check_then_die)
    with pytest.raises(ChargedQueryError) as err:
        cur.sql("SELECT COUNT(*) AS n, SUM(x) AS s FROM t", epsilon=0.5)
    assert "#" in str(err.value)  # names the ledger entry that keeps the charge
    assert cur.budget().spent == pytest.approx(0.5)
    cur.close()
