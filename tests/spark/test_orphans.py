"""Replacing a Spark table removes its old Parquet copy from the project's own ``spark/``
folder (as a replaced DuckDB table's old relation is dropped); folders a load did not name,
and the copies of tables in force, are left alone."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import dpkit as dp


def _copies(path: Path) -> set[str]:
    return {p.name for p in (path / "spark").iterdir()}


def test_a_replaced_tables_old_copy_is_removed(tmp_path: Path, spark: Any) -> None:
    path = tmp_path / "p.dpkit"
    rows = spark.createDataFrame([(i, float(i % 7)) for i in range(40)], "uid long, x double")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with dp.Curator.create(path, epsilon=1.0, engine="spark", spark=spark) as cur:
            cur.add_table("t", rows, bounds={"x": (0, 10)})
            cur.add_table("u", rows, bounds={"x": (0, 10)})
            first = _copies(path)
            (path / "spark" / "notes").mkdir()  # the owner's own folder: not a copy
            stray = path / "spark" / "t__v0123456789abcdef"  # a load that crashed before
            stray.mkdir()                                    # its ledger row
            cur.add_table("t", rows, bounds={"x": (0, 10)}, replace=True)
            after = _copies(path)
            old_t = next(n for n in first if n.startswith("t__v"))
            assert old_t not in after and stray.name not in after
            assert "notes" in after and any(n.startswith("u__v") for n in after)
            new_t = {n for n in after if n.startswith("t__v")}
            assert len(new_t) == 1 and new_t != {old_t}
            # the replaced table still answers from its new copy
            assert len(cur.sql("SELECT COUNT(*) FROM t", epsilon=0.1)) == 1
            assert cur.drop_orphans() == []  # nothing left to remove
