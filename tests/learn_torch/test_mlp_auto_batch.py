"""``MLPClassifier(batch_size="auto")`` through the curator (the default there) and outside it:
one charge of the composed event (noisy row count, then DP-SGD), the divisor within the count's
stated error, the same charge on neighbouring tables D and D', refusals before any charge."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")

import dpkit as dp
from dpkit import events as ev
from dpkit.engine import Curator
from dpkit.engine.charge import charged_event
from dpkit.engine.spec import QueryError
from dpkit.learn import MLPClassifier
from dpkit.learn.batch_count import count_plan
from learn_torch._mlp_frames import capture_trainings, mlp_frame

BETA = 1e-6  # the false-failure probability of each "divisor within its error" check
DECL = {"bounds": {"age": (0, 100)}, "domains": {"ward": ["A", "B"], "sick": ["no", "yes"]}}


_frame = mlp_frame


def _curator(path: Path, frame: pd.DataFrame, seed: int | None = 1) -> Curator:
    """A project seeded with ``seed`` (None: the secure source)."""
    source = None if seed is None else dp.noise.seeded(seed)
    c = Curator.create(path, epsilon=10.0, delta=1e-5, source=source)
    c.add_table("r", frame.drop(columns=["uid"]), **DECL)
    c.add_table("u", frame, privacy_unit="uid", max_rows_per_unit=2, **DECL)
    return c


@pytest.fixture
def cur(tmp_path: Path) -> Curator:
    return _curator(tmp_path / "p.dpkit", _frame())


def _mlp(**kw) -> MLPClassifier:  # type: ignore[no-untyped-def]
    kw.setdefault("sample_rate", 0.1)
    return MLPClassifier((), epochs=3, max_grad_norm=1.0, learning_rate=0.5, momentum=0.0,
                         averaging=0.5, **kw)


def _planned(m: MLPClassifier, sens: int, eps: float) -> ev.Event:
    sigma = m._planned(sens)[0]
    return ev.Composed((count_plan(sensitivity=sens, epsilon=0.02 * eps).event,
                        ev.SelfComposed(ev.PoissonSampled(0.1, ev.Gaussian(sigma)), 30)))


@pytest.mark.parametrize(("table", "rows", "sens"), [("r", 900, 1), ("u", 600, 2)])
def test_auto_is_the_default_through_the_curator(cur: Curator, table: str, rows: int,
                                                 sens: int, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    seen = capture_trainings(monkeypatch)
    before = len(cur.entries())
    m = _mlp()
    assert m.batch_size is None  # the default: "auto" through the curator
    tm = cur.fit(m, f"SELECT age, ward FROM {table}", label="sick", epsilon=3.0)
    entries = cur.entries()
    # one charge (the count is inside it), then the note that records N̂ (written after the fit)
    assert [e.kind for e in entries[before:]] == ["charge", "note"]
    charge, note = entries[-2:]
    # the charge is the composed event: the count (sensitivity = rows a unit may keep) first
    # (charged with a constant-work project's timing term beside it: the default)
    assert tm.event == m.event_ == _planned(m, sens, 3.0)
    assert charge.event == charged_event(cur.ledger, tm.event)
    assert tm.epsilon == pytest.approx(dp.accounting.epsilon(tm.event, delta=m.delta), rel=1e-6)
    assert tm.epsilon <= 3.0 + 1e-9 and m.epsilon_ <= 3.0 + 1e-9
    assert seen[-1].data_loader.n == rows  # the model keeps no count (FINDINGS.md G1)
    # the analyst sees N̂ and the divisor; |divisor - q N| <= error(β) w.p. >= 1 - β
    bc = m.batch_count_
    assert bc is not None and m.rows_estimate_ == bc.rows.value
    assert m.batch_divisor_ == bc.divisor == m.training_.expected_batch_size
    assert abs(m.batch_divisor_ - 0.1 * rows) <= bc.error(BETA)
    assert any("noisy row count" in n for n in tm.notes)
    # N̂ is in the ledger history, beside the charge it belongs to
    assert note.payload["charge"] == charge.seq == tm.ledger_seq
    assert note.payload["rows_estimate"] == m.rows_estimate_ and note.payload["notes"] == tm.notes
    item = cur.budget().history[-1]
    assert item.seq == charge.seq and item.note == note.payload
    assert f"noisy row count {m.rows_estimate_}" in item.describe()
    assert tm.score(_frame(), _frame()["sick"]) > 0.8  # seeded: deterministic


def _trained(m: MLPClassifier) -> tuple[bytes, ...]:
    """The learned weights to the bit, and N̂."""
    return (*(a.tobytes() for a in (*m.coefs_, *m.intercepts_)), str(m.rows_estimate_).encode())


def test_the_charge_is_the_same_on_neighbouring_tables(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """D' = D plus one unit of 2 rows (the cap): the event and the cost do not move; only the
    count does, by the unit's rows plus noise.

    And every draw comes from the project's source (initial weights, each unit's kept rows,
    the Poisson samples, the gradient noise, the count): D again in a project seeded alike
    trains the same network to the bit with the same N̂; D in a secure project does not (a
    repeat of every weight has probability far below 1e-9). Bit-identical needs the rows in
    a fixed order too: before fit's statement ordered them, the bounding's parallel window
    returned them in varying order, and one repeat in three differed in a weight's last bits."""
    seen = capture_trainings(monkeypatch)
    d = _frame()
    extra = d[d["uid"] == 0].assign(uid=10_000).iloc[:2]
    m = _mlp()  # one estimator, fitted on each (its calibration is cached: public inputs)
    trained = []
    for name, frame, rows, seed in (("d", d, 600, 1), ("d2", pd.concat([d, extra]), 602, 1),
                                    ("again", d, 600, 1), ("secure", d, 600, None)):
        c = _curator(tmp_path / f"{name}.dpkit", frame, seed)
        tm = c.fit(m, "SELECT age FROM u", label="sick", epsilon=2.0)
        assert tm.event == _planned(m, 2, 2.0)
        assert c.entries()[-2].event == charged_event(c.ledger, tm.event)  # [-1]: its note
        assert tm.epsilon == pytest.approx(dp.accounting.epsilon(tm.event, delta=m.delta))
        assert seen[-1].data_loader.n == rows and m.batch_count_ is not None
        assert abs(m.batch_divisor_ - 0.1 * rows) <= m.batch_count_.error(BETA)
        assert m.random_state is None and m.training_.insecure == (seed is not None)
        trained.append(_trained(m))
    assert trained[2] == trained[0] != trained[3]


@pytest.mark.parametrize(("kw", "match"), [
    ({"batch_size": 0}, "batch_size must be"),
    ({"batch_size": -60}, "batch_size must be"),
    ({"batch_size": "big"}, "batch_size must be"),
    ({"count_fraction": 0.0}, "count_fraction"),
    ({"count_fraction": 1.0}, "count_fraction"),
    ({"batch_size": "auto", "count_fraction": 2}, "count_fraction"),
    ({"sample_rate": None}, "sample_rate"),
])
def test_bad_input_is_refused_before_anything_is_charged(cur: Curator, kw: dict,
                                                          match: str) -> None:
    before = len(cur.entries())
    m = _mlp(**kw)
    with pytest.raises(QueryError, match=match):
        cur.fit(m, "SELECT age FROM u", label="sick", epsilon=1.0)
    assert len(cur.entries()) == before and not hasattr(m, "training_")


def test_over_budget_draws_no_count(cur: Curator) -> None:
    """The composed event is priced before any row is read: refused whole, count included."""
    from dpkit.accounting import BudgetExceeded

    before = len(cur.entries())
    m = _mlp()
    with pytest.raises(BudgetExceeded):
        cur.fit(m, "SELECT age FROM u", label="sick", epsilon=50.0)
    assert len(cur.entries()) == before and not hasattr(m, "batch_count_")


def test_fixed_batch_size_keeps_dpsgd_alone(cur: Curator) -> None:
    m = _mlp(batch_size=60)
    tm = cur.fit(m, "SELECT age FROM r", label="sick", epsilon=1.0)
    assert isinstance(tm.event, ev.SelfComposed) and m.batch_count_ is None
    assert m.batch_divisor_ == 60.0 and m.rows_estimate_ is None and tm.notes == []


def test_auto_outside_the_curator() -> None:
    X = _frame()[["age"]].to_numpy() / 50.0 - 1.0
    y = _frame()["sick"].to_numpy()
    with pytest.raises(ValueError, match="needs sample_rate"):
        MLPClassifier(batch_size="auto", epochs=1, delta=1e-4).fit(X, y)
    with pytest.raises(ValueError, match="max_examples_per_unit"):
        _mlp(batch_size="auto", delta=1e-4, random_state=0).fit(
            X, y, units=_frame()["uid"].to_numpy())
    with pytest.raises(ValueError, match="batch_size must be"):
        MLPClassifier(batch_size=0, epochs=1, delta=1e-4).fit(X, y)
    clf = _mlp(batch_size="auto", epsilon=2.0, delta=1e-4, random_state=0).fit(X, y)
    assert isinstance(clf.event_, ev.Composed) and clf.epsilon_ <= 2.0
    assert clf.event_.events[0] == count_plan(sensitivity=1, epsilon=0.04).event
    assert clf.batch_count_ is not None
    assert abs(clf.batch_divisor_ - 90.0) <= clf.batch_count_.error(BETA)
    assert clf.score(X, y) > 0.8


def test_dpkit_fit_mlp_without_batch_size(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dpkit.cli import main

    path = tmp_path / "c.dpkit"
    with Curator.create(path, epsilon=5.0, delta=1e-6, source=dp.noise.seeded(1)) as c:
        c.add_table("u", _frame(), privacy_unit="uid", max_rows_per_unit=2,
                    bounds={"age": (0, 100)}, domains={"sick": ["no", "yes"]})
    out = tmp_path / "m.json"
    res = CliRunner().invoke(main, ["fit", str(path), "SELECT age FROM u", "--label", "sick",
                                    "--model", "mlp", "--epsilon", "1", "--param", "epochs=2",
                                    "--param", "sample_rate=0.1",
                                    "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert "noisy row count" in res.output and "divisor" in res.output
    learned = json.loads(out.read_text())["learned"]
    assert learned["rows_estimate_"] is not None and learned["batch_divisor_"] >= 1.0
