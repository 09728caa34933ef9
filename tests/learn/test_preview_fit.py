"""``cur.preview_fit``: what ``cur.fit`` would charge, after the same checks, writing nothing;
``TableModel.delta``: the δ a fit was charged."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpkit as dp
from dpkit.accounting import BudgetExceeded
from dpkit.engine import Curator
from dpkit.engine.spec import QueryError
from dpkit.learn import GaussianNB, LinearRegression, LogisticRegression

from ._helpers import patients

SQL = "SELECT age, ward FROM u"


@pytest.fixture
def cur(tmp_path: Path) -> Curator:
    c = Curator.create(tmp_path / "p.dpkit", epsilon=3.0, delta=1e-6, source=dp.noise.seeded(1))
    c.add_table("u", patients(600), privacy_unit="uid", max_rows_per_unit=2,
                bounds={"age": (0, 100), "cost": (0, 300)},
                domains={"ward": ["A", "B"], "sick": ["no", "yes"]})
    return c


def test_the_preview_is_the_charge_and_writes_nothing(cur: Curator) -> None:
    for model, label in ((LogisticRegression(), "sick"), (GaussianNB(), "sick"),
                         (LinearRegression(), "cost")):
        rows = len(cur.entries())
        p = cur.preview_fit(model, SQL, label=label, epsilon=0.5)
        assert len(cur.entries()) == rows and p.affordable
        assert p.features == ["age", "ward=A", "ward=B"] and p.table == "u"
        assert p.remaining == pytest.approx(cur.budget().remaining)
        tm = cur.fit(model, SQL, label=label, epsilon=0.5)
        assert tm.epsilon == pytest.approx(p.cost) and tm.delta == pytest.approx(p.delta)
        assert tm.event == p.event
        row = cur.entries()[-1] if tm.notes == [] else cur.entries()[-2]
        assert row.view["delta_cost"] == pytest.approx(tm.delta)
        assert "cost epsilon" in repr(p)


def test_an_unaffordable_fit_previews_as_such_and_refusals_are_the_fits(cur: Curator) -> None:
    p = cur.preview_fit(GaussianNB(), SQL, label="sick", epsilon=5.0)
    assert not p.affordable and p.cost == pytest.approx(5.0) and "NOT affordable" in repr(p)
    with pytest.raises(BudgetExceeded):
        cur.fit(GaussianNB(), SQL, label="sick", epsilon=5.0)
    for bad in (LogisticRegression(learning_rate=-1.0), LogisticRegression(random_state=0),
                LogisticRegression(feature_norm=1e300)):
        with pytest.raises(QueryError):
            cur.preview_fit(bad, SQL, label="sick", epsilon=0.5)
    with pytest.raises(QueryError):
        cur.preview_fit(LogisticRegression(), "SELECT uid, age FROM u", label="sick",
                        epsilon=0.5)
    assert len(cur.ledger.entries("charge")) == 0
