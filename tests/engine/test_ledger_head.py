"""The ledger's head file after a power cut: written durably; a torn one refused, with the way out.

A power cut (not a kill) can leave a renamed file whose data never reached the disk: an empty
or cut-short head file. The write is now temp file -> fsync -> rename -> fsync of the folder, so
the head on disk is the old one or the new one, whole; a torn head left by an older dpkit (or by
someone hiding a truncation) is refused on open, spending nothing, and only the owner's explicit
``restore-head`` rewrites it from the verified rows (checked against a kept head when given).
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

import dpkit as dp
from dpkit import events as ev
from dpkit.cli import main
from dpkit.engine import Curator
from dpkit.engine.ledger import (
    Ledger,
    LedgerError,
    LedgerTampered,
    head_path,
    restore_head,
)
from dpkit.engine.ledger_rows import HeadUnreadable


def _ledger(tmp_path: Path, charges: int = 3) -> tuple[Path, tuple[int, str]]:
    led = Ledger.create(tmp_path / "l.sqlite", epsilon=1.0, delta=0.0, accountant="pure")
    for i in range(charges):
        led.charge(ev.PureDP(0.1), analyst="a", query=f"q{i}")
    head = led.head()
    led.close()
    return tmp_path / "l.sqlite", head


def test_the_head_reaches_the_disk_before_its_rename_and_the_rename_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The order that makes a power cut leave the old head or the new one, whole: the temporary
    file's data is fsynced before the rename, and the folder after it (the rename's entry)."""
    path, _ = _ledger(tmp_path, charges=0)
    steps: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        steps.append("fsync folder" if stat.S_ISDIR(mode) else "fsync file")
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst) == head_path(path):
            steps.append("rename")
        real_replace(src, dst)

    led = Ledger.open(path)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    led.charge(ev.PureDP(0.1), analyst="a", query="q")
    monkeypatch.undo()
    led.close()
    # SQLite's own fsyncs (synchronous=FULL) come first; the head's three steps end the list
    assert steps[-3:] == ["fsync file", "rename", "fsync folder"]
    assert not list(tmp_path.glob(".l.head.*.tmp"))


@pytest.mark.parametrize("torn", [b"", b'{"seq": 4, "hash": "ab'], ids=["empty", "cut short"])
def test_a_torn_head_is_refused_with_the_way_out_and_nothing_spent(
        tmp_path: Path, torn: bytes) -> None:
    folder = tmp_path / "p.dpkit"
    cur = Curator.create(folder, epsilon=1.0, source=dp.noise.seeded(0))
    cur.add_table("t", {"x": [1.0, 2.0, 3.0]}, bounds={"x": (0, 10)})
    cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.25)
    cur.close()
    head_file = folder / "ledger.head"
    head_file.write_bytes(torn)  # what a power cut leaves of a rename whose data was not synced
    with pytest.raises(HeadUnreadable) as info:
        Curator.open(folder)
    message = str(info.value)
    assert "unreadable (empty or cut short)" in message
    assert f"dpkit restore-head {folder}" in message and "--expected-head SEQ:HASH" in message
    assert isinstance(info.value, LedgerTampered)  # every caller that refuses a tampered one
    assert head_file.read_bytes() == torn  # refused before anything was written


def test_restore_head_rewrites_it_from_the_verified_rows(tmp_path: Path) -> None:
    path, head = _ledger(tmp_path)
    head_path(path).write_bytes(b"")
    with pytest.raises(HeadUnreadable):
        Ledger.open(path)
    assert restore_head(path, expected_head=head) == head
    led = Ledger.open(path)  # opens again, with the same rows and budget
    assert led.head() == head
    assert led.spend().spent == pytest.approx(0.3)
    led.close()


def test_restore_head_refuses_a_valid_head_and_a_truncation_hidden_by_a_torn_one(
        tmp_path: Path) -> None:
    path, kept = _ledger(tmp_path)
    with pytest.raises(LedgerError, match="nothing to restore"):
        restore_head(path)
    # D': the last charge removed (triggers dropped: a deliberate edit of the file) and the head
    # file emptied to hide it. The head kept outside the folder catches it; without one the
    # owner's restore accepts the ledger's end as it is, which is what the message warns of.
    con = sqlite3.connect(path)
    con.executescript("DROP TRIGGER ledger_no_delete; DELETE FROM ledger WHERE seq = "
                      f"{kept[0]};")
    con.close()
    head_path(path).write_bytes(b"")
    with pytest.raises(LedgerTampered, match="truncated"):
        restore_head(path, expected_head=kept)
    assert head_path(path).read_bytes() == b""  # refused: nothing written
    assert restore_head(path)[0] == kept[0] - 1


def test_restore_head_refuses_a_rewritten_row(tmp_path: Path) -> None:
    path, _ = _ledger(tmp_path)
    con = sqlite3.connect(path)
    con.executescript("DROP TRIGGER ledger_no_update; UPDATE ledger SET query = 'x' "
                      "WHERE seq = 2;")
    con.close()
    head_path(path).unlink()
    with pytest.raises(LedgerTampered, match="row 2"):
        restore_head(path)
    assert not head_path(path).exists()


def test_the_command_restores_with_a_kept_head_and_checks_its_form(tmp_path: Path) -> None:
    folder = tmp_path / "p.dpkit"
    Curator.create(folder, epsilon=1.0, source=dp.noise.seeded(0)).close()
    with Curator.open(folder) as cur:
        seq, digest = cur.ledger.head()
    (folder / "ledger.head").write_bytes(b"{")
    runner = CliRunner()
    bad = runner.invoke(main, ["restore-head", str(folder), "--expected-head", "1-abc"])
    assert bad.exit_code == 2 and "SEQ:HASH" in bad.output
    ok = runner.invoke(main, ["restore-head", str(folder), "--expected-head", f"{seq}:{digest}"])
    assert ok.exit_code == 0, ok.output
    assert "headrestoredatrow" in "".join(ok.output.split())  # rich wraps at CI's width
    Curator.open(folder).close()
