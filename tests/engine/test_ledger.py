"""The ledger: durable, append-only, hash-chained, check-and-charge in one transaction."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import dpkit as dp
from dpkit import events as ev
from dpkit.accounting import BudgetExceeded
from dpkit.engine import Curator
from dpkit.engine.ledger import (
    Ledger,
    LedgerTampered,
    canonical_json,
    head_path,
    key_path,
    row_hash,
)


def _ledger(tmp_path: Path, **kw: object) -> Ledger:
    args = {"epsilon": 1.0, "delta": 1e-6, "accountant": "approx", **kw}
    return Ledger.create(tmp_path / "l.sqlite", **args)  # type: ignore[arg-type]


def test_genesis_and_charges_round_trip(tmp_path: Path) -> None:
    led = _ledger(tmp_path)
    led.charge(ev.DiscreteLaplace(2.0, 1), analyst="ann", query="q1")
    led.charge(ev.ApproxDP(0.25, 1e-7), analyst="bob", query="q2")
    led.close()
    again = Ledger.open(tmp_path / "l.sqlite")
    spend = again.spend()
    assert spend.spent == pytest.approx(0.75)
    assert spend.delta_spent == pytest.approx(1e-7)
    assert spend.remaining == pytest.approx(0.25)
    kinds = [e.kind for e in again.entries()]
    assert kinds == ["genesis", "charge", "charge"]
    charges = again.entries("charge")
    assert charges[0].event == ev.DiscreteLaplace(2.0, 1)
    assert charges[1].analyst == "bob" and charges[1].query == "q2"
    # the hash is HMAC-SHA256(owner key, prev_hash || canonical JSON of the row's fields)
    row = charges[1]
    fields = {"seq": row.seq, "kind": row.kind, "analyst": row.analyst, "time": row.time,
              "query": row.query, "event": row.event.to_json(),
              "view": canonical_json(row.view), "payload": canonical_json(row.payload)}
    key = bytes.fromhex(key_path(tmp_path / "l.sqlite").read_text().strip())
    assert row_hash(row.prev_hash, fields, key) == row.hash
    assert row_hash(row.prev_hash, fields) != row.hash  # the unkeyed hash no longer verifies
    assert row.prev_hash == charges[0].hash


def test_refused_charge_writes_nothing(tmp_path: Path) -> None:
    led = _ledger(tmp_path)
    led.charge(ev.PureDP(0.8), analyst="a", query="q")
    head = led.head()
    with pytest.raises(BudgetExceeded) as info:
        led.charge(ev.PureDP(0.3), analyst="a", query="too much")
    assert info.value.requested.epsilon == pytest.approx(0.3)
    assert info.value.remaining.epsilon == pytest.approx(0.2)
    assert info.value.missing.epsilon == pytest.approx(0.1)
    assert led.head() == head
    assert led.verify() == 2
    # exactly the remainder still fits (float slack)
    led.charge(ev.PureDP(0.2), analyst="a", query="rest")
    assert led.spend().remaining == pytest.approx(0.0, abs=1e-12)


def test_analyst_budget_caps_one_analyst(tmp_path: Path) -> None:
    led = _ledger(tmp_path)
    led.record("analyst", {"analyst": "eve", "epsilon": 0.3})
    led.charge(ev.PureDP(0.25), analyst="eve", query="q")
    with pytest.raises(BudgetExceeded, match="analyst 'eve'"):
        led.charge(ev.PureDP(0.1), analyst="eve", query="q")
    led.charge(ev.PureDP(0.5), analyst="ann", query="q")  # others still can
    assert led.spend("eve").spent == pytest.approx(0.25)
    assert led.spend().spent == pytest.approx(0.75)


def test_refusal_names_the_tighter_of_cap_and_project(tmp_path: Path) -> None:
    """Over both limits, the refusal gives the analyst's own remaining when their cap leaves
    less than the project (it gave the project's: 'missing 0.5' where asking for the project's
    remaining 0.5 would be refused again); when the project leaves less, the project's."""
    led = _ledger(tmp_path)
    led.record("analyst", {"analyst": "eve", "epsilon": 0.3})
    led.charge(ev.PureDP(0.2), analyst="eve", query="q")
    led.charge(ev.PureDP(0.3), analyst="ann", query="q")  # project: 0.5 left; eve: 0.1
    with pytest.raises(BudgetExceeded, match="analyst 'eve'") as info:
        led.charge(ev.PureDP(1.0), analyst="eve", query="too much")
    assert info.value.remaining.epsilon == pytest.approx(0.1)
    assert info.value.missing.epsilon == pytest.approx(0.9)
    led.record("analyst", {"analyst": "max", "epsilon": 0.9})  # cap above what is left
    with pytest.raises(BudgetExceeded) as info:
        led.charge(ev.PureDP(1.0), analyst="max", query="too much")
    assert "analyst 'max'" not in str(info.value)
    assert info.value.remaining.epsilon == pytest.approx(0.5)
    assert led.spend().spent == pytest.approx(0.5)  # both refusals wrote nothing
    assert led.spend("eve").spent == pytest.approx(0.2)


def test_append_only_triggers(tmp_path: Path) -> None:
    led = _ledger(tmp_path)
    led.charge(ev.PureDP(0.1), analyst="a", query="q")
    conn = sqlite3.connect(tmp_path / "l.sqlite")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE ledger SET query = 'x' WHERE seq = 2")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM ledger WHERE seq = 2")


def _tamper(path: Path, statements: list[str]) -> None:
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER IF EXISTS ledger_no_update")
    conn.execute("DROP TRIGGER IF EXISTS ledger_no_delete")
    for s in statements:
        conn.execute(s)
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    ("statements", "seq"),
    [
        (["UPDATE ledger SET query = 'innocent' WHERE seq = 3"], 3),
        (["UPDATE ledger SET event = '{\"PureDP\": {\"epsilon\": 0.001}}' WHERE seq = 2"], 2),
        (["UPDATE ledger SET payload = '{\"budget\": {\"epsilon\": 100}}' WHERE seq = 1"], 1),
        (["DELETE FROM ledger WHERE seq = 2"], 2),
        (["UPDATE ledger SET view = '{}' WHERE seq = 4"], 4),
    ],
)
def test_tampering_is_detected_on_open(tmp_path: Path, statements: list[str], seq: int) -> None:
    led = _ledger(tmp_path)
    for i in range(3):
        led.charge(ev.PureDP(0.1), analyst="a", query=f"q{i}")
    led.close()
    _tamper(tmp_path / "l.sqlite", statements)
    with pytest.raises(LedgerTampered) as info:
        Ledger.open(tmp_path / "l.sqlite")
    assert info.value.seq == seq
    assert f"row {seq}" in str(info.value)


def test_tail_truncation_detected_against_a_kept_head(tmp_path: Path) -> None:
    # Changed deliberately with the keyed ledger: a truncated chain used to open silently; now
    # the authenticated head file beside the ledger catches it, and only a rollback of both
    # files together needs the head the owner kept elsewhere.
    led = _ledger(tmp_path)
    for i in range(2):
        led.charge(ev.PureDP(0.1), analyst="a", query=f"q{i}")
    stale_head_file = head_path(tmp_path / "l.sqlite").read_bytes()
    led.charge(ev.PureDP(0.1), analyst="a", query="q2")
    head = led.head()
    led.close()
    _tamper(tmp_path / "l.sqlite", ["DELETE FROM ledger WHERE seq = 4"])
    with pytest.raises(LedgerTampered, match="truncated"):
        Ledger.open(tmp_path / "l.sqlite")
    head_path(tmp_path / "l.sqlite").write_bytes(stale_head_file)  # both rolled back together
    Ledger.open(tmp_path / "l.sqlite")  # the documented limit: consistent with itself ...
    with pytest.raises(LedgerTampered, match="missing"):  # ... but not with the kept head
        Ledger.open(tmp_path / "l.sqlite", expected_head=head)


def test_tamper_detected_through_the_curator(tmp_path: Path) -> None:
    cur = Curator.create(tmp_path / "p", epsilon=1.0, source=dp.noise.seeded(0))
    cur.add_table("t", {"x": [1.0, 2.0, 3.0]}, bounds={"x": (0, 5)})
    cur.sql("SELECT COUNT(*) FROM t", epsilon=0.5)
    cur.close()
    _tamper(tmp_path / "p" / "ledger.sqlite",
            ["UPDATE ledger SET view = replace(view, '0.5', '0.05') WHERE kind = 'charge'"])
    with pytest.raises(LedgerTampered, match="row 3"):
        Curator.open(tmp_path / "p")


# ------------------------------------------------------------------------------ crash safety

_CRASH_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import dpkit as dp
    import dpkit.engine.query_methods as qm

    def die(*args, **kwargs):  # runs right after the ledger commit, before any noise
        os.kill(os.getpid(), signal.SIGKILL)

    qm.release = die
    cur = dp.Curator.open(sys.argv[1])
    cur.sql("SELECT COUNT(*) FROM t", epsilon=0.25)
    print("unreachable")
    """
)


def test_kill_between_commit_and_answer_keeps_the_charge(tmp_path: Path) -> None:
    path = tmp_path / "p"
    cur = Curator.create(path, epsilon=1.0)
    cur.add_table("t", {"x": [1.0, 2.0, 3.0]}, bounds={"x": (0, 5)})
    cur.close()
    proc = subprocess.run([sys.executable, "-c", _CRASH_SCRIPT, str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert "unreachable" not in proc.stdout
    again = Curator.open(path)  # the chain verifies
    status = again.budget()
    assert [h.query for h in status.history] == ["SELECT COUNT(*) FROM t"]
    assert status.spent == pytest.approx(0.25)
    assert again.verify() == 3
    # and the project keeps working
    again.sql("SELECT COUNT(*) FROM t", epsilon=0.25)
    assert again.budget().spent == pytest.approx(0.5)


# ------------------------------------------------------------------------------ concurrency

_RACE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import dpkit as dp
    from dpkit.accounting import BudgetExceeded
    cur = dp.Curator.open(sys.argv[1], token=sys.argv[2])  # each worker its own analyst
    ok = refused = 0
    for _ in range(6):
        try:
            cur.sql("SELECT COUNT(*) FROM t", epsilon=0.1)
            ok += 1
        except BudgetExceeded:
            refused += 1
    print(json.dumps({"ok": ok, "refused": refused}))
    """
)


_LEDGER_RACE_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from dpkit import events as ev
    from dpkit.accounting import BudgetExceeded
    from dpkit.engine.ledger import Ledger
    led = Ledger.open(sys.argv[1])
    while time.time() < float(sys.argv[3]):  # start together
        time.sleep(0.001)
    ok = refused = 0
    for _ in range(6):
        try:
            led.charge(ev.DiscreteLaplace(10.0, 1), analyst="w" + sys.argv[2], query="q")
            ok += 1
        except BudgetExceeded:
            refused += 1
    print(json.dumps({"ok": ok, "refused": refused}))
    """
)


def test_eight_processes_never_overspend_the_ledger(tmp_path: Path) -> None:
    """8 processes x 6 charges of epsilon 0.1 against 1.0: exactly 10 succeed."""
    import time

    led = _ledger(tmp_path, accountant="pure", delta=0.0)
    led.close()
    start = str(time.time() + 3.0)
    procs = [subprocess.Popen([sys.executable, "-c", _LEDGER_RACE_SCRIPT,
                               str(tmp_path / "l.sqlite"), str(i), start],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["ok"] for r in results) == 10
    assert sum(r["refused"] for r in results) == 38
    again = Ledger.open(tmp_path / "l.sqlite")
    assert len(again.entries("charge")) == 10
    assert again.spend().spent <= 1.0 * (1 + 1e-9)


@pytest.mark.slow
def test_eight_processes_never_overspend(tmp_path: Path, visits_data: Any) -> None:
    path = tmp_path / "p"
    cur = Curator.create(path, epsilon=1.0, accountant="pure")
    cur.add_table("t", visits_data(200), privacy_unit="pid", max_rows_per_unit=1)
    tokens = [cur.add_analyst(f"w{i}") for i in range(8)]
    cur.close()
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    procs = [subprocess.Popen([sys.executable, "-c", _RACE_SCRIPT, str(path), tokens[i]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    ok = sum(r["ok"] for r in results)
    assert ok == 10  # 8 x 6 = 48 attempts at 0.1 each against a budget of 1.0
    assert sum(r["refused"] for r in results) == 38
    again = Curator.open(path)
    status = again.budget()
    assert len(status.history) == 10
    assert status.spent <= 1.0 * (1 + 1e-9)
    assert again.verify() == 2 + 8 + 10  # genesis, table, 8 analysts (tokens), 10 charges


def test_two_handles_on_one_ledger_stay_in_step(tmp_path: Path) -> None:
    """Cached budgets advance with rows written by another handle (another process)."""
    a = _ledger(tmp_path, epsilon=1.0)
    b = Ledger.open(tmp_path / "l.sqlite")
    a.record("analyst", {"analyst": "x", "epsilon": 0.5})
    for i in range(4):
        (a if i % 2 else b).charge(ev.PureDP(0.2), analyst="x" if i < 2 else "y", query=str(i))
    assert a.spend().spent == pytest.approx(0.8) == b.spend().spent
    assert a.spend("x").spent == pytest.approx(0.4) == b.spend("x").spent
    with pytest.raises(BudgetExceeded):
        a.charge(ev.PureDP(0.2), analyst="x", query="over the analyst's 0.5")
    with pytest.raises(BudgetExceeded):
        b.charge(ev.PureDP(0.3), analyst="y", query="over the project's 1.0")
    b.charge(ev.PureDP(0.2), analyst="y", query="fits")
    fresh = Ledger.open(tmp_path / "l.sqlite")
    assert fresh.spend().spent == pytest.approx(1.0) == a.spend().spent
