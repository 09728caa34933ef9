"""The keyed ledger: rows authenticated with HMAC-SHA256 under the owner key, and a stored head.

An attacker here can write the ledger file (and the head file) but does not hold the key: every
rewrite, reordering, deletion or truncation must be refused on open and by ``verify()``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

import dpkit as dp
from dpkit import events as ev
from dpkit.engine import Curator
from dpkit.engine.ledger import (
    GENESIS_PREV,
    Ledger,
    LedgerError,
    LedgerTampered,
    canonical_json,
    head_path,
    key_path,
    migrate,
    row_hash,
)
from dpkit.engine.ledger_rows import COLUMNS


def _ledger(tmp_path: Path, charges: int = 3) -> Path:
    led = Ledger.create(tmp_path / "l.sqlite", epsilon=1.0, delta=0.0, accountant="pure")
    for i in range(charges):
        led.charge(ev.PureDP(0.1), analyst="a", query=f"q{i}")
    led.close()
    return tmp_path / "l.sqlite"


def _rows(path: Path) -> list[list[object]]:
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT seq, kind, analyst, time, query, event, view, payload, "
                        "prev_hash, hash FROM ledger ORDER BY seq").fetchall()
    conn.close()
    return [list(r) for r in rows]


def _rewrite(path: Path, rows: list[list[object]], key: bytes | None) -> None:
    """Replace the whole table with ``rows``, rechained with ``key`` (None: plain SHA-256)."""
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER IF EXISTS ledger_no_update")
    conn.execute("DROP TRIGGER IF EXISTS ledger_no_delete")
    conn.execute("DELETE FROM ledger")
    prev = GENESIS_PREV
    for seq, r in enumerate(rows, start=1):
        fields = dict(zip(COLUMNS, [seq, *r[1:8]], strict=True))
        digest = row_hash(prev, fields, key)
        conn.execute("INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (*[fields[c] for c in COLUMNS], prev, digest))
        prev = digest
    conn.commit()
    conn.close()


def _cheaper(rows: list[list[object]]) -> list[list[object]]:
    out = [list(r) for r in rows]
    out[2][5] = ev.PureDP(0.001).to_json()  # the attacker's goal: budget back
    return out


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["unkeyed", "wrong-key"])
def test_rewritten_and_rechained_history_is_detected(tmp_path: Path, key: bytes | None) -> None:
    path = _ledger(tmp_path)
    _rewrite(path, _cheaper(_rows(path)), key)  # a chain that verifies under the old scheme
    with pytest.raises(LedgerTampered, match="row 1"):  # every row's MAC is now wrong
        Ledger.open(path)


def test_reordered_rows_are_detected(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    rows = _rows(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER ledger_no_update")
    # swap rows 2 and 3 keeping their MACs: each row's own MAC binds its seq and predecessor
    conn.execute("UPDATE ledger SET seq = -1 WHERE seq = 2")
    conn.execute("UPDATE ledger SET seq = 2 WHERE seq = 3")
    conn.execute("UPDATE ledger SET seq = 3 WHERE seq = -1")
    conn.commit()
    conn.close()
    assert _rows(path)[1][4] == rows[2][4]
    with pytest.raises(LedgerTampered, match="row 2"):
        Ledger.open(path)


def test_deleted_middle_row_is_detected(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER ledger_no_delete")
    conn.execute("DELETE FROM ledger WHERE seq = 3")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerTampered, match="row 3"):
        Ledger.open(path)


def _truncate(path: Path, keep: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER ledger_no_delete")
    conn.execute("DELETE FROM ledger WHERE seq > ?", (keep,))
    conn.commit()
    conn.close()


def test_truncation_is_detected_by_the_stored_head(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    _truncate(path, 2)
    with pytest.raises(LedgerTampered, match="truncated"):
        Ledger.open(path)


def test_head_file_cannot_be_removed_or_forged(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    stored = json.loads(head_path(path).read_text())
    assert stored["seq"] == 4
    _truncate(path, 2)
    rows = _rows(path)
    forged = {"seq": 2, "hash": rows[1][9],
              "mac": hashlib.sha256(f"dpkit-head:2:{rows[1][9]}".encode()).hexdigest()}
    head_path(path).write_text(json.dumps(forged))
    with pytest.raises(LedgerTampered, match="MAC"):
        Ledger.open(path)
    head_path(path).unlink()
    with pytest.raises(LedgerTampered, match="head file"):
        Ledger.open(path)


def test_verify_catches_tampering_while_open(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    led = Ledger.open(path)
    assert led.verify() == 4
    _rewrite(path, _cheaper(_rows(path)), None)
    with pytest.raises(LedgerTampered):
        led.verify()


def test_missing_key_is_a_clear_error(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    key_path(path).unlink()
    with pytest.raises(LedgerError, match=r"owner key .* is missing"):
        Ledger.open(path)


def test_curator_detects_a_rechained_history(tmp_path: Path) -> None:
    cur = Curator.create(tmp_path / "p", epsilon=1.0, source=dp.noise.seeded(0))
    cur.add_table("t", {"x": [1.0, 2.0, 3.0]}, bounds={"x": (0, 5)})
    cur.sql("SELECT COUNT(*) FROM t", epsilon=0.5)
    cur.close()
    path = tmp_path / "p" / "ledger.sqlite"
    rows = _rows(path)
    rows[2][6] = rows[2][6].replace("0.5", "0.05")  # type: ignore[union-attr]
    _rewrite(path, rows, None)
    with pytest.raises(LedgerTampered):
        Curator.open(tmp_path / "p")


# ------------------------------------------------------------------------------ format 1


def _format1(tmp_path: Path) -> Path:
    """A ledger as dpkit wrote it before the keyed chain (plain SHA-256, no key, no head)."""
    path = _ledger(tmp_path)
    rows = _rows(path)
    payload = json.loads(str(rows[0][7]))
    payload["format"] = 1
    rows[0][7] = canonical_json(payload)
    _rewrite(path, rows, None)
    key_path(path).unlink()
    head_path(path).unlink()
    return path


def test_old_unkeyed_ledger_is_refused_then_migrated(tmp_path: Path) -> None:
    path = _format1(tmp_path)
    with pytest.raises(LedgerError, match="dpkit migrate"):
        Ledger.open(path)
    kept = migrate(path)
    assert kept.exists() and kept.name == "l.v1.sqlite"
    led = Ledger.open(path)
    assert led.verify() == 4
    assert led.spend().spent == pytest.approx(0.3)
    assert [e.query for e in led.entries("charge")] == ["q0", "q1", "q2"]
    assert led.entries()[0].payload["migrated_from"]["seq"] == 4
    led.charge(ev.PureDP(0.1), analyst="a", query="after")
    with pytest.raises(LedgerError, match="not a format-1"):
        migrate(path)


def test_migrate_refuses_a_broken_unkeyed_chain(tmp_path: Path) -> None:
    path = _format1(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER IF EXISTS ledger_no_update")
    conn.execute("UPDATE ledger SET query = 'x' WHERE seq = 3")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerTampered, match="row 3"):
        migrate(path)
