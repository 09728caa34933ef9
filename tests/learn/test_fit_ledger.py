"""What a fit released besides the model (a noisy row count N̂) goes into the ledger, after the
charge, as a ``note`` row naming it; the charge row is written first and never changed, so a
failure or a crash between the two keeps the charge. The estimator here is a double that
reports a released count as ``MLPClassifier(batch_size="auto")`` does (the real one is checked
in tests/learn_torch/test_mlp_auto_batch.py), so no torch training runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit import events as ev
from dpkit.engine import Curator
from dpkit.engine.charge import ChargedQueryError
from dpkit.engine.ledger import Ledger


class Counting:
    """Releases a noisy row count beside its (empty) model, as a note: costs PureDP(epsilon)."""

    def __init__(self, *, epsilon: float = 1.0, crash: str = "") -> None:
        self.epsilon = epsilon
        self.crash = crash

    def get_params(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon}

    def set_params(self, **params: Any) -> Counting:
        self.__dict__.update(params)
        return self

    def privacy_event(self, n_features: int, contributions: int) -> ev.Event:
        return ev.PureDP(self.epsilon)

    def fit(self, X: np.ndarray, y: np.ndarray, units: Any = None, *,
            source: dp.noise.Source | None = None) -> Counting:
        if self.crash == "raise":
            raise MemoryError("the machine ran out of memory")
        if self.crash == "exit":  # the process dies between the charge and the note
            os._exit(3)
        noisy = dp.mechanisms.geometric(len(X), sensitivity=1, epsilon=self.epsilon,
                                        source=source)
        self.rows_estimate_ = int(noisy.value)
        self.notes_ = [f"noisy row count {self.rows_estimate_}"]
        return self


def _project(path: Path, constant_work: bool | None = None) -> Curator:
    cur = Curator.create(path, epsilon=5.0, delta=1e-6, source=dp.noise.seeded(2),
                         constant_work=constant_work)
    frame = pd.DataFrame({"uid": np.arange(40) // 2, "age": np.arange(40) * 2.5,
                          "sick": ["no", "yes"] * 20})
    cur.add_table("v", frame, privacy_unit="uid", max_rows_per_unit=2, bounds={"age": (0, 100)},
                  domains={"sick": ["no", "yes"]})
    return cur


QUERY = "SELECT age FROM v"


def test_the_released_count_is_a_note_after_its_charge(tmp_path: Path) -> None:
    cur = _project(tmp_path / "p.dpkit")
    m = Counting()
    tm = cur.fit(m, QUERY, label="sick", epsilon=1.0)
    charge, note = cur.entries()[-2:]
    assert (charge.kind, note.kind) == ("charge", "note") and note.seq == charge.seq + 1
    assert note.payload == {"charge": charge.seq, "notes": tm.notes,
                            "rows_estimate": m.rows_estimate_}
    assert note.event == ev.NoOp() and note.analyst == charge.analyst == "owner"
    assert charge.payload == {} and charge.view["epsilon_cost"] == 1.0  # the charge unchanged
    assert cur.budget().spent == pytest.approx(1.0)  # the note spends nothing
    item = cur.budget().history[-1]
    assert item.seq == charge.seq and item.note == note.payload
    assert item.details is not None and item.details["model"] == "Counting"
    text = item.describe()
    assert text.startswith("fit Counting -> sick, noisy row count") and QUERY in text
    assert cur.budget().to_dict()["history"][-1]["note"]["rows_estimate"] == m.rows_estimate_
    assert cur.verify() == len(cur.entries())


def test_a_fit_without_notes_writes_no_note(tmp_path: Path) -> None:
    from dpkit.learn import GaussianNB

    cur = _project(tmp_path / "p.dpkit")
    cur.fit(GaussianNB(), QUERY, label="sick", epsilon=1.0)
    assert cur.entries()[-1].kind == "charge" and cur.budget().history[-1].note is None


def test_an_analyst_sees_only_its_own_notes(tmp_path: Path) -> None:
    path = tmp_path / "p.dpkit"
    with _project(path) as cur:
        alice, bob = cur.add_analyst("alice"), cur.add_analyst("bob")
    with Curator.open(path, token=alice) as a:
        a.fit(Counting(), QUERY, label="sick", epsilon=1.0)
        assert [e.kind for e in a.entries()][-2:] == ["charge", "note"]
        assert a.budget().history[-1].note is not None
    with Curator.open(path, token=bob) as b:
        assert not [e for e in b.entries() if e.kind in ("charge", "note")]
        assert not b.budget().history


def test_a_failure_before_the_note_keeps_the_charge(tmp_path: Path) -> None:
    cur = _project(tmp_path / "p.dpkit")
    with pytest.raises(ChargedQueryError, match="the charge stands"):
        cur.fit(Counting(crash="raise"), QUERY, label="sick", epsilon=1.0)
    assert cur.entries()[-1].kind == "charge" and cur.budget().spent == pytest.approx(1.0)


def test_a_failed_note_write_keeps_the_charge_and_releases_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cur = _project(tmp_path / "p.dpkit")

    def full_disk(self: Ledger, kind: str, *a: Any, **kw: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(Ledger, "record", full_disk)
    with pytest.raises(ChargedQueryError, match="the charge stands"):
        cur.fit(Counting(), QUERY, label="sick", epsilon=1.0)
    monkeypatch.undo()
    assert cur.entries()[-1].kind == "charge" and cur.budget().spent == pytest.approx(1.0)
    assert cur.verify() == len(cur.entries())


def test_a_crash_between_the_charge_and_the_note_keeps_the_charge(tmp_path: Path) -> None:
    """The process dies inside the fit (after the charge was committed, before the note):
    reopened, the ledger verifies and holds the charge, and no note."""
    path = tmp_path / "p.dpkit"
    _project(path).close()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_fit_ledger import Counting
        from dpkit.engine import Curator
        cur = Curator.open({str(path)!r})
        cur.fit(Counting(crash="exit"), {QUERY!r}, label="sick", epsilon=1.0)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    with Curator.open(path) as cur:
        assert cur.verify() == len(cur.entries())
        assert cur.entries()[-1].kind == "charge" and cur.budget().spent == pytest.approx(1.0)


def test_dpkit_budget_shows_a_fit_readably(tmp_path: Path) -> None:
    """The history says which model was trained on what, its cost, and the N̂ it released."""
    from click.testing import CliRunner

    from dpkit.cli import main

    path = tmp_path / "p.dpkit"
    # not constant work: its timing δ (9.09e-13 on every row) widens the δ column, and at the
    # 80 columns of the CLI's console here the table splits in two and the query column folds
    with _project(path, constant_work=False) as cur:
        m = Counting()
        seq = cur.fit(m, QUERY, label="sick", epsilon=1.0).ledger_seq
    res = CliRunner().invoke(main, ["budget", str(path)], terminal_width=200)
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if "fit Counting" in x)
    assert f"fit Counting -> sick, noisy row count {m.rows_estimate_}: {QUERY}" in line
    assert re.search(rf"│ {seq} │\s+1 │", res.output)  # its row: entry #seq, epsilon 1


def test_the_service_history_names_a_fit_and_its_count(tmp_path: Path) -> None:
    from dpkit.server.views import history_json

    cur = _project(tmp_path / "p.dpkit")
    cur.sql("SELECT COUNT(*) FROM v", epsilon=0.5)
    m = Counting()
    cur.fit(m, QUERY, label="sick", epsilon=1.0)
    query, fit = history_json(cur)["items"][-2:]
    assert query["kind"] == "query" and query["description"] == query["sql"]
    assert fit["kind"] == "fit" and fit["sql"] == QUERY  # not offered to the editor as a query
    assert fit["description"].startswith(f"fit Counting -> sick, noisy row count "
                                         f"{m.rows_estimate_}")
