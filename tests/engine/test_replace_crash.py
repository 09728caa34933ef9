"""Crash-safe table replacement: the new rows and the new declarations switch together or not
at all. The rows go into a fresh relation; the ledger row naming it is the switch.

Old and new tables differ in row count (6 vs 600) and declarations (bounds, rows per unit), so a
mixed state (new rows under old declarations or the reverse) would show in the relation read or
in the declarations.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine.ledger import Ledger

OLD = {"pid": list(range(6)), "age": [10, 20, 30, 40, 50, 60]}
NEW = {"pid": [i // 3 for i in range(600)], "age": [i % 90 for i in range(600)]}
NEW_DECL = {"privacy_unit": "pid", "bounds": {"age": (0, 90)}, "max_rows_per_unit": 3}


def _project(tmp_path: Path) -> Path:
    cur = Curator.create(tmp_path / "p", epsilon=100.0, source=dp.noise.seeded(1))
    cur.add_table("t", OLD, privacy_unit="pid", max_rows_per_unit=1, bounds={"age": (0, 60)})
    cur.close()
    return tmp_path / "p"


def _relations(path: Path) -> set[str]:
    con = duckdb.connect(str(path / "data.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT schema_name || '.' || table_name FROM duckdb_tables() "
                           "WHERE schema_name IN ('priv', 'pub')").fetchall()
    finally:
        con.close()
    return {str(r[0]) for r in rows}


def _in_force(path: Path) -> tuple[int, dict[str, object]]:
    """(rows in the relation the ledger names, the declarations) after a fresh open."""
    with Curator.open(path) as cur:
        meta = cur.tables()["t"]
        n = cur._backend.query_public(f"SELECT COUNT(*) FROM {meta.relation}")[0][0]
        # the answer to a query agrees (epsilon 50: the noise is far below the 6-vs-600 gap)
        noisy = cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=50.0).to_pandas()["n"][0]
        assert abs(float(noisy) - n) < 5
        return int(n), {"bounds": dict(meta.bounds), "rows": meta.max_rows_per_unit}


OLD_STATE = (6, {"bounds": {"age": (0.0, 60.0)}, "rows": 1})
NEW_STATE = (600, {"bounds": {"age": (0.0, 90.0)}, "rows": 3})


def test_replace_switches_rows_and_declarations_and_drops_the_old_relation(
        tmp_path: Path) -> None:
    path = _project(tmp_path)
    before = _relations(path)
    with Curator.open(path) as cur:
        cur.add_table("t", NEW, replace=True, **NEW_DECL)  # type: ignore[arg-type]
    assert _in_force(path) == NEW_STATE
    after = _relations(path)
    assert len(after) == 1 and after.isdisjoint(before)  # the old version was cleaned up


def test_failure_between_load_and_ledger_keeps_the_old_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _project(tmp_path)
    real = Ledger.record

    def fail(self: Ledger, kind: str, *a: object, **k: object) -> object:
        if kind == "table":
            raise OSError("disk full (injected)")
        return real(self, kind, *a, **k)  # type: ignore[arg-type]

    with Curator.open(path) as cur:
        monkeypatch.setattr(Ledger, "record", fail)
        with pytest.raises(OSError, match="injected"):
            cur.add_table("t", NEW, replace=True, **NEW_DECL)  # type: ignore[arg-type]
        monkeypatch.setattr(Ledger, "record", real)
        assert cur.tables()["t"].bounds == {"age": (0.0, 60.0)}
    assert len(_relations(path)) == 2  # the new rows wait, unnamed, for the cleanup
    assert _in_force(path) == OLD_STATE
    with Curator.open(path) as cur:
        assert len(cur.drop_orphans()) == 1
    assert _in_force(path) == OLD_STATE and len(_relations(path)) == 1


_KILL = textwrap.dedent(
    """
    import os, signal, sys
    import dpkit.engine.duckdb_load as b
    from dpkit.engine import Curator
    from dpkit.engine.ledger import Ledger

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    real = Ledger.record
    if sys.argv[2] == "in-load":  # inside the DuckDB transaction, rows copied
        b._replace_key_tables = die
    else:  # after the DuckDB commit, before the ledger row
        Ledger.record = lambda self, kind, *a, **k: die() if kind == "table" else real(
            self, kind, *a, **k)
    cur = Curator.open(sys.argv[1])
    cur.add_table("t", {"pid": [i // 3 for i in range(600)], "age": [i % 90 for i in range(600)]},
                  privacy_unit="pid", bounds={"age": (0, 90)}, max_rows_per_unit=3, replace=True)
    print("unreachable")
    """
)


@pytest.mark.parametrize("where", ["in-load", "before-ledger"])
def test_killed_mid_replace_keeps_the_old_table(tmp_path: Path, where: str) -> None:
    path = _project(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _KILL, str(path), where],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert "unreachable" not in proc.stdout
    assert _in_force(path) == OLD_STATE
    with Curator.open(path) as cur:  # the owner loads again: it works, orphans go
        cur.add_table("t", NEW, replace=True, **NEW_DECL)  # type: ignore[arg-type]
    assert _in_force(path) == NEW_STATE
    assert len(_relations(path)) == 1
