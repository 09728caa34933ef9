"""MLPClassifier through the curator (``cur.fit``) at record and user level, and its own
``fit(X, y, units=)``: one charge of the planned event, refusals before any row is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

import dpkit as dp
from dpkit.accounting import BudgetExceeded
from dpkit.engine import Curator
from dpkit.engine.spec import QueryError
from dpkit.learn import MLPClassifier
from learn_torch._mlp_frames import capture_trainings, mlp_frame

_frame = mlp_frame


@pytest.fixture
def cur(tmp_path: Path) -> Curator:
    c = Curator.create(tmp_path / "p.dpkit", epsilon=10.0, delta=1e-5, source=dp.noise.seeded(1))
    decl = {"bounds": {"age": (0, 100)}, "domains": {"ward": ["A", "B"], "sick": ["no", "yes"]}}
    c.add_table("r", _frame().drop(columns=["uid"]), **decl)
    c.add_table("u", _frame(), privacy_unit="uid", max_rows_per_unit=2, **decl)
    return c


def _mlp(**kw) -> MLPClassifier:  # type: ignore[no-untyped-def]
    kw.setdefault("sample_rate", 0.1)
    # through the curator the noisy sum is divided by batch_size: about 0.1 x 600 rows
    return MLPClassifier((), epochs=10, batch_size=60, max_grad_norm=1.0, learning_rate=0.5,
                         momentum=0.0, averaging=0.5, **kw)


@pytest.mark.parametrize("table", ["r", "u"])
def test_mlp_through_the_curator(cur: Curator, table: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    seen = capture_trainings(monkeypatch)
    before = len(cur.entries())
    m = _mlp()
    tm = cur.fit(m, f"SELECT age, ward FROM {table}", label="sick", epsilon=3.0)
    assert len(cur.entries()) == before + 1  # one charge
    assert tm.event == m.event_  # the planned event is the one the training realised
    assert tm.epsilon == pytest.approx(dp.accounting.epsilon(tm.event, delta=m.delta), rel=1e-6)
    assert tm.epsilon <= 3.0 + 1e-9
    assert m.domain_ == (3, 1 if table == "r" else 2)
    # the model keeps the public summary (FINDINGS.md G1); the full training checks the read
    assert m.training_ == seen[-1].summary() and not hasattr(m.training_, "units")
    tr = seen[-1]
    if table == "r":
        assert tr.units is None and tr.neighbours == "add/remove one example"
    else:  # 300 users, capped by the curator at 2 of their 3 rows
        assert tr.units is not None and tr.units.n_units == 300
        assert tr.units.n_examples == 600 and tr.units.dropped == 0
        assert tr.neighbours == "add/remove one unit"
    assert tr.sample_rate == 0.1 and tr.steps == 100
    assert tm.score(_frame(), _frame()["sick"]) > 0.8  # seeded: deterministic


def test_refusals_before_any_row_is_read(cur: Curator) -> None:
    before = len(cur.entries())
    m = _mlp(sample_rate=None)
    with pytest.raises(QueryError, match="sample_rate"):  # the row count is private
        cur.fit(m, "SELECT age FROM u", label="sick", epsilon=1.0)
    m = _mlp()
    with pytest.raises(BudgetExceeded):
        cur.fit(m, "SELECT age FROM u", label="sick", epsilon=50.0)
    assert not hasattr(m, "training_")  # never trained: refused before the read
    assert len(cur.entries()) == before


def test_an_empty_read_trains_on_noise_alone(cur: Curator,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the WHERE matched is private: no refusal after the charge, the same event."""
    seen = capture_trainings(monkeypatch)
    m = _mlp()
    tm = cur.fit(m, "SELECT age FROM u WHERE age > 1000", label="sick", epsilon=1.0)
    assert seen[-1].units is not None and seen[-1].units.n_units == 0
    assert tm.event == m.event_
    assert all(bool(np.isfinite(p.detach().numpy()).all()) for p in m.network_.parameters())


def test_fit_with_units_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    X = _frame()[["age"]].to_numpy() / 50.0 - 1.0
    y = _frame()["sick"].to_numpy()
    units = _frame()["uid"].to_numpy()
    seen = capture_trainings(monkeypatch)  # the model keeps only the summary, direct fit too
    clf = MLPClassifier((), epsilon=2.0, delta=1e-4, epochs=5, batch_size=90,
                        learning_rate=0.5, momentum=0.0, random_state=0,
                        max_examples_per_unit=2).fit(X, y, units=units)
    tr = seen[-1]
    assert clf.training_ == tr.summary() and clf.training_.neighbours == "add/remove one unit"
    assert tr.units is not None and tr.units.n_units == 300 and tr.units.n_examples == 600
    assert clf.epsilon_ <= 2.0 and clf.score(X, y) > 0.8
    with pytest.raises(ValueError, match="negative"):
        MLPClassifier(epochs=1, delta=1e-4).fit(X, y, units=np.r_[units[:-1], -1])
    with pytest.raises(ValueError, match="units"):  # δ checked against the 300 units
        MLPClassifier(epochs=1, delta=1e-2).fit(X, y, units=units)


def test_dpkit_fit_trains_an_mlp_from_the_command_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dpkit.cli import main

    path = tmp_path / "c.dpkit"
    with Curator.create(path, epsilon=5.0, delta=1e-6, source=dp.noise.seeded(1)) as c:
        c.add_table("u", _frame(), privacy_unit="uid", max_rows_per_unit=2,
                    bounds={"age": (0, 100)}, domains={"sick": ["no", "yes"]})
    res = CliRunner().invoke(main, ["fit", str(path), "SELECT age FROM u", "--label", "sick",
                                    "--model", "mlp", "--epsilon", "1", "--param", "epochs=2",
                                    "--param", "sample_rate=0.1", "--param", "batch_size=60",
                                    "--output",
                                    str(tmp_path / "m.json")])
    assert res.exit_code == 0, res.output
    assert "charged epsilon 0.99" in res.output or "charged epsilon 1" in res.output
    import json

    learned = json.loads((tmp_path / "m.json").read_text())["learned"]
    # the network's weights are saved, in scikit-learn's layout: 1 input, (64,), 2 classes
    shapes = [(len(w), len(w[0])) for w in learned["coefs_"]]
    assert shapes == [(1, 64), (64, 2)] and [len(b) for b in learned["intercepts_"]] == [64, 2]


def test_preview_fit_plans_without_importing_torch(cur: Curator,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The preview is planning only (the researcher's hour: 6 s of it, half torch's import):
    torch is found, not imported, and the grid is checked without it; a missing torch is
    still refused before any charge."""
    import importlib.util

    from dpkit.learn import mlp

    def no_import() -> None:
        raise AssertionError("the preview imported torch")

    monkeypatch.setattr(mlp, "_torch", no_import)
    p = cur.preview_fit(_mlp(), "SELECT age, ward FROM u", label="sick", epsilon=3.0)
    assert p.affordable and p.cost <= 3.0 + 1e-9
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(QueryError, match="PyTorch"):
        cur.preview_fit(_mlp(), "SELECT age, ward FROM u", label="sick", epsilon=3.0)
    with pytest.raises((QueryError, ImportError), match="PyTorch"):
        cur.fit(_mlp(), "SELECT age, ward FROM u", label="sick", epsilon=3.0)
    assert len(cur.ledger.entries("charge")) == 0
