"""cur.fit's side of training: public encoding, contribution bounding, one charge, refusals first.

The estimator here is a recording double (it keeps what it was given and has a fixed event), so
these tests check the curator's plumbing exactly; the real estimators' own guarantees and
accuracy are tested in tests/learn/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpkit import events as ev
from dpkit.accounting import BudgetExceeded
from dpkit.engine import Curator
from dpkit.engine.spec import QueryError


class Recorder:
    """Takes what cur.fit gives it; predicts class 0; costs Laplace(sensitivity 1, eps)."""

    def __init__(self, epsilon: float = 1.0, delta: float | None = None) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.seen: dict[str, Any] = {}

    def set_params(self, **params: Any) -> Recorder:
        for k, v in params.items():
            if k not in ("epsilon", "delta"):
                raise ValueError(f"unknown parameter {k}")
            setattr(self, k, v)
        return self

    def privacy_event(self, n_features: int, contributions: int) -> ev.Event:
        self.seen["planned"] = (n_features, contributions)
        return ev.PureDP(self.epsilon)

    def fit(self, X: np.ndarray, y: np.ndarray, units: np.ndarray | None = None) -> Recorder:
        self.seen.update(X=X, y=y, units=units)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.zeros(len(X), dtype=np.int64)

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == y))


def _frame() -> pd.DataFrame:
    return pd.DataFrame({
        "uid": [1, 1, 1, 2, 3, 3],
        "age": [20.0, 150.0, np.nan, 40.0, -5.0, 60.0],
        "ward": ["A", "B", "Z", "A", None, "B"],
        "sick": ["yes", "no", "no", "maybe", "yes", "no"],
        "note": ["a", "b", "c", "d", "e", "f"],
    })


@pytest.fixture
def cur(project: Callable[..., Curator]) -> Curator:
    c = project(epsilon=5.0)
    c.add_table("v", _frame(), privacy_unit="uid", max_rows_per_unit=2,
                bounds={"age": (0, 100)}, domains={"ward": ["A", "B"], "sick": ["no", "yes"]})
    c.add_table("r", _frame().drop(columns=["uid"]), bounds={"age": (0, 100)},
                domains={"ward": ["A", "B"], "sick": ["no", "yes"]})
    return c


def test_features_are_encoded_from_declarations_only(cur: Curator) -> None:
    m = Recorder()
    tm = cur.fit(m, "SELECT age, ward, sick FROM r", label="sick", epsilon=0.5)
    assert tm.encoding.feature_names == ["age", "ward=A", "ward=B"]
    # rows with a label outside the declared classes ("maybe") are dropped
    x, y = m.seen["X"], m.seen["y"]
    order = np.argsort(x[:, 0] * 10 + x[:, 1])  # DuckDB gives no row order: compare as sets
    expected = {(-0.6, 1.0, 0.0, 1), (1.0, 0.0, 1.0, 0), (0.0, 0.0, 0.0, 0),
                (-1.0, 0.0, 0.0, 1), (0.2, 0.0, 1.0, 0)}
    got = {(round(float(a), 9), float(b), float(c), int(lab))
           for (a, b, c), lab in zip(x[order], y[order], strict=True)}
    assert got == expected
    assert m.seen["units"] is None and m.seen["planned"] == (3, 1)
    assert tm.epsilon == pytest.approx(0.5) and m.epsilon == 0.5
    # the same public map applies to new rows
    new = pd.DataFrame({"age": [50.0, 1e9], "ward": ["B", "Q"]})
    np.testing.assert_allclose(tm.encoding.transform(new), [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert list(tm.predict(new)) == ["no", "no"]


def test_user_level_bounds_each_unit_and_passes_the_units(cur: Curator) -> None:
    m = Recorder()
    cur.fit(m, "SELECT age, ward FROM v WHERE age > -100", label="sick", epsilon=0.5)
    units = m.seen["units"]
    assert units is not None and len(units) == len(m.seen["y"])
    _, counts = np.unique(units, return_counts=True)
    assert counts.max() <= 2  # max_rows_per_unit
    assert m.seen["planned"] == (3, 2)


def test_one_charge_and_refusals_spend_nothing(cur: Curator) -> None:
    before = len(cur.entries())
    cur.fit(Recorder(), "SELECT age FROM r", label="sick", epsilon=0.25)
    assert len(cur.entries()) == before + 1
    assert cur.budget().spent == pytest.approx(0.25)
    bad = [
        ("SELECT note FROM r", "sick", "no declared bounds or domain"),
        ("SELECT age FROM r", "note", "'note' has no declared bounds or domain"),
        ("SELECT age + 1 FROM r", "sick", "plain columns"),
        ("SELECT age FROM r GROUP BY age", "sick", "one SELECT of plain columns"),
        ("SELECT nope FROM r", "sick", "nope"),
        ("SELECT age FROM v", "uid", "privacy unit"),
        ("SELECT uid, age FROM v", "sick", "privacy unit"),
    ]
    for query, label, words in bad:
        with pytest.raises(QueryError, match=words):
            cur.fit(Recorder(), query, label=label, epsilon=0.25)
    with pytest.raises(QueryError, match="cannot be trained"):
        cur.fit(object(), "SELECT age FROM r", label="sick")
    with pytest.raises(BudgetExceeded):
        cur.fit(Recorder(), "SELECT age FROM r", label="sick", epsilon=100.0)
    assert len(cur.entries()) == before + 1


def test_neighbouring_tables_give_the_same_shape_and_no_error(
        project: Callable[..., Curator]) -> None:
    """D and D' (one unit added with extreme values): the same encoding, no error, one charge."""
    shapes = []
    for extra in (False, True):
        df = _frame()
        if extra:
            df = pd.concat([df, pd.DataFrame({"uid": [9, 9, 9], "age": [np.inf, -np.inf, 1e308],
                                              "ward": ["\x00", "A", ""], "sick": ["yes"] * 3,
                                              "note": ["x"] * 3})], ignore_index=True)
        c = project(epsilon=5.0)
        c.add_table("v", df, privacy_unit="uid", max_rows_per_unit=2, bounds={"age": (0, 100)},
                    domains={"ward": ["A", "B"], "sick": ["no", "yes"]})
        m = Recorder()
        tm = c.fit(m, "SELECT age, ward FROM v", label="sick", epsilon=1.0)
        assert np.all(np.abs(m.seen["X"]) <= 1.0)
        shapes.append((tm.encoding.feature_names, m.seen["X"].shape[1], len(c.entries())))
    assert shapes[0] == shapes[1]


def test_every_undeclared_column_is_named_at_once(cur: Curator) -> None:
    """The researcher's walk met the undeclared columns one reload at a time, told in Python's
    spelling on the command line: one refusal names them all, both spellings, nothing charged."""
    cur.add_table("w", _frame().drop(columns=["uid"]).assign(score=1.5))  # nothing declared
    before = len(cur.entries())
    with pytest.raises(QueryError) as info:
        cur.fit(Recorder(), "SELECT age, score, note FROM w", label="note", epsilon=0.25)
    text = str(info.value)
    assert "'age', 'score', 'note' have no declared bounds or domain" in text
    assert "dpkit add-table w ... --bounds age=LOW:HIGH --bounds score=LOW:HIGH " \
           "--domain note=A,B --replace" in text
    assert "domains={...}" in text and "add_table(...) again" in text
    assert "Nothing was charged" in text
    assert len(cur.entries()) == before
