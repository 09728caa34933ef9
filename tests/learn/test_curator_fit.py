"""The estimators through the curator (``cur.fit``): the charged event bounds what fit realises,
user-level tables scale the sensitivities, missing parameters are refused before the charge."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dpkit as dp
from dpkit import accounting
from dpkit.engine import Curator
from dpkit.engine.spec import QueryError
from dpkit.learn import GaussianNB, LinearRegression, LogisticRegression

from ._helpers import patients


def _frame(n: int = 3000) -> pd.DataFrame:
    return patients(n)


@pytest.fixture
def cur(tmp_path: Path) -> Curator:
    c = Curator.create(tmp_path / "p.dpkit", epsilon=20.0, delta=1e-6, source=dp.noise.seeded(1))
    decl = {"bounds": {"age": (0, 100), "cost": (0, 300)},
            "domains": {"ward": ["A", "B"], "sick": ["no", "yes"]}}
    c.add_table("r", _frame().drop(columns=["uid"]), **decl)
    c.add_table("u", _frame(), privacy_unit="uid", max_rows_per_unit=2, **decl)
    return c


def _bounded(tm, delta: float) -> None:  # type: ignore[no-untyped-def]
    realised = accounting.epsilon(tm.model.event_, delta=delta)
    assert realised <= accounting.epsilon(tm.event, delta=delta) + 1e-9


@pytest.mark.parametrize("table", ["r", "u"])
def test_logistic_through_the_curator(cur: Curator, table: str) -> None:
    m = LogisticRegression(classes=[0, 1])
    tm = cur.fit(m, f"SELECT age, ward FROM {table}", label="sick", epsilon=1.0, delta=1e-7)
    assert m.domain_ == (3, 1 if table == "r" else 2)
    _bounded(tm, 1e-7)
    new = pd.DataFrame({"age": [10.0, 90.0], "ward": ["A", "B"]})
    assert list(tm.predict(new)) == ["no", "yes"]
    assert tm.score(_frame(), _frame()["sick"]) > 0.9


def test_naive_bayes_and_linear_regression_through_the_curator(cur: Curator) -> None:
    nb = cur.fit(GaussianNB(classes=[0, 1]), "SELECT age FROM u", label="sick",
                 epsilon=1.0)
    _bounded(nb, 0.0)
    assert nb.score(_frame(), _frame()["sick"]) > 0.85
    lin = cur.fit(LinearRegression(label_bounds=(0, 300)),
                  "SELECT age FROM r", label="cost", epsilon=1.0, delta=1e-7)
    _bounded(lin, 1e-7)
    assert lin.score(_frame(), _frame()["cost"]) > 0.95


def test_the_declarations_fill_classes_and_label_bounds(cur: Curator) -> None:
    """Through the curator the label's declared domain gives the classes and its declared bounds
    the label bounds (session 5: these were required from the user before); classes that
    disagree with the declaration are refused before the charge."""
    tm = cur.fit(LogisticRegression(), "SELECT age FROM r", label="sick",
                 epsilon=1.0)
    assert list(tm.model.classes_) == [0, 1]
    lin = cur.fit(LinearRegression(), "SELECT age FROM r", label="cost",
                  epsilon=1.0)
    assert tuple(lin.model.label_bounds) == (0.0, 300.0)
    spent = cur.budget().spent
    with pytest.raises(QueryError, match="declared classes"):
        cur.fit(LogisticRegression(classes=[0, 1, 2]), "SELECT age FROM r", label="sick",
                epsilon=1.0)
    assert cur.budget().spent == spent
