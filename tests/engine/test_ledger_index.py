"""The ledger's in-memory indices (rows by kind, charges by analyst, analyst caps) always equal
a scan of the whole history: after appends from this handle and from another one, refused
charges (rolled back), and a full re-verification. Queries read the indices instead of
scanning, so a long history does not slow every query down."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpkit import events as ev
from dpkit.accounting import BudgetExceeded
from dpkit.engine.ledger import Ledger


def _scan_matches(led: Ledger) -> None:
    rows = led.entries()
    for kind in {e.kind for e in rows} | {"nothing"}:
        assert led.entries(kind) == [e for e in rows if e.kind == kind]
    charges = [e for e in rows if e.kind == "charge"]
    assert led._charges(None) == charges
    for who in {e.analyst for e in charges} | {"nobody"}:
        assert led._charges(who) == [e for e in charges if e.analyst == who]
    caps: dict[str, float] = {}
    for e in rows:
        if e.kind == "analyst":
            name, eps = str(e.payload["analyst"]), e.payload.get("epsilon")
            if eps is None:
                caps.pop(name, None)
            else:
                caps[name] = float(eps)
    assert led.analyst_budgets() == caps


def test_indices_follow_every_change(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    led = Ledger.create(path, epsilon=5.0, delta=1e-6, accountant="approx")
    other = Ledger.open(path)  # another process's handle on the same file
    led.record("analyst", {"analyst": "eve", "epsilon": 0.5})
    led.charge(ev.PureDP(0.1), analyst="ann", query="q1")
    other.charge(ev.PureDP(0.2), analyst="eve", query="q2")  # seen by led on its next read
    led.record("table", {"name": "t", "table": {}})
    _scan_matches(led)
    with pytest.raises(BudgetExceeded):  # eve's cap: rolled back, nothing indexed
        led.charge(ev.PureDP(0.4), analyst="eve", query="too much")
    _scan_matches(led)
    other.record("analyst", {"analyst": "eve", "epsilon": None})  # cap removed elsewhere
    led.charge(ev.PureDP(0.4), analyst="eve", query="now it fits")
    _scan_matches(led)
    assert led.spend("eve").spent == pytest.approx(0.6)
    assert led.spend().spent == pytest.approx(0.7)
    assert led.verify() == len(led.entries())  # a full re-read rebuilds them
    _scan_matches(led)
    _scan_matches(other)
    fresh = Ledger.open(path)
    assert fresh.spend().spent == led.spend().spent
    assert fresh.spend("eve").spent == led.spend("eve").spent
