"""Red-team review, session 3: the key fill, the plan cache, the ledger/budget indices,
``not_null`` and ``exponential_rows``.

Each test here failed before the fix committed with it (or pins a property a regression would
break); see the docstrings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit import events as ev
from dpkit.accounting import Budget, BudgetExceeded
from dpkit.engine import Curator
from dpkit.engine import plan as dplan
from dpkit.engine.read import Exact


@pytest.fixture
def project(tmp_path: Path) -> Callable[..., Curator]:
    counter = {"n": 0}

    def make(*, epsilon: float = 1000.0, delta: float = 1e-6, seed: int = 1) -> Curator:
        counter["n"] += 1
        return Curator.create(tmp_path / f"p{counter['n']}.dpkit", epsilon=epsilon,
                              delta=delta, source=dp.noise.seeded(seed))

    return make


def _plan(cur: Curator, query: str, **kw: Any) -> dplan.Plan:
    args: dict[str, Any] = {"epsilon": 1.0, "rho": None, "delta": None, "noise": "laplace",
                            "level": 0.95, "bounds": None}
    args.update(kw)
    return cur._plan(query, **args)


def _both_paths(cur: Curator, query: str,
                monkeypatch: pytest.MonkeyPatch) -> tuple[Exact, Exact]:
    """The curator's exact aggregates with the key fill allowed, and with the LEFT JOIN."""
    plan = _plan(cur, query)
    assert dplan.can_fill_keys(plan)
    filled = cur._execute(plan)
    with monkeypatch.context() as m:
        m.setattr(dplan, "can_fill_keys", lambda *a, **k: False)
        joined = cur._execute(plan)
    return filled, joined


# ----------------------------------------------------------------------------- key fill

def _collated_source(tmp_path: Path, name: str, rows: str) -> Path:
    db = tmp_path / f"{name}.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE z (uid INTEGER, s VARCHAR COLLATE NOCASE, x DOUBLE)")
    con.execute(f"INSERT INTO z VALUES {rows}")
    con.close()
    return db


_ROWS = "(1, 'b', 1), (2, 'B', 1), (3, 'a', 1), (4, 'A', 1), (5, 'A', 1), (6, 'c', 1)"


@pytest.mark.parametrize("unit", ["uid", None])
def test_a_collated_source_column_is_stored_plain_and_compared_exactly(
        project: Callable[..., Curator], tmp_path: Path, unit: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A VARCHAR column declared ``COLLATE NOCASE`` in a source DuckDB file reports as plain
    VARCHAR, and under the collation DuckDB returns a group under whichever spelling it met
    first ('b' for 'b'/'B'): with private partition selection the released spelling would
    depend on one unit's rows, and the key fill missed the declared key 'B' (a whole group read
    as empty). The load now stores the column without its collation (with a warning), so keys
    are compared exactly everywhere, and the fill and the join agree."""
    db = _collated_source(tmp_path, f"src_{unit}", _ROWS)
    cur = project()
    with pytest.warns(UserWarning, match="had a collation"):
        cur.add_table("t", str(db), source_table="z", privacy_unit=unit, max_rows_per_unit=1,
                      bounds={"x": (0, 1)}, domains={"s": ["a", "A", "B"]})
    assert cur._backend.collated_columns(cur.tables()["t"].stored_name) == frozenset()
    q = "SELECT s, COUNT(*) AS n, SUM(x) AS sx FROM t GROUP BY s"
    filled, joined = _both_paths(cur, q, monkeypatch)
    assert filled.keys == joined.keys == [("A",), ("B",), ("a",)]
    assert filled.cols == joined.cols
    counts = filled.cols[_plan(cur, q).measures[0].sql_col]
    assert counts == [2, 1, 1]  # exact spellings: 'A' twice, 'B' once, 'a' once


def test_a_project_with_a_collated_column_keeps_the_join(
        project: Callable[..., Curator], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Projects loaded before collations were dropped may still hold one: the curator reads it
    from the table's CREATE statement and keeps the join for it; and at user level, where
    DuckDB filters the rows to the declared keys, a fill not told of it still notices the
    group it cannot match and falls back to the join."""
    from dpkit.engine import duckdb_load

    db = _collated_source(tmp_path, "old", _ROWS)
    cur = project()
    monkeypatch.setattr(duckdb_load, "_drop_collations", lambda con, target: None)
    cur.add_table("t", str(db), source_table="z", privacy_unit="uid", max_rows_per_unit=1,
                  bounds={"x": (0, 1)},
                  domains={"s": ["a", "B"]})
    monkeypatch.undo()
    assert cur._backend.collated_columns(cur.tables()["t"].stored_name) == {"s"}
    q = "SELECT s, COUNT(*) AS n, SUM(x) AS sx FROM t GROUP BY s"
    filled, joined = _both_paths(cur, q, monkeypatch)
    assert filled.keys == joined.keys == [("B",), ("a",)]
    assert filled.cols == joined.cols
    with monkeypatch.context() as m:
        m.setattr(cur._backend, "collated_columns", lambda name: frozenset())
        blind = cur._execute(_plan(cur, q))
    assert blind.keys == joined.keys and blind.cols == joined.cols


def test_keys_of_a_collated_source_are_distinct_once_stored_plain(
        project: Callable[..., Curator], tmp_path: Path) -> None:
    """Declared keys 'a' and 'A' on a NOCASE source column: before, they passed the load's
    check and the LEFT JOIN gave the one group {'a', 'A'} to both keys (a unit counted in two
    groups). Stored plain, they are two keys with their own rows."""
    db = _collated_source(tmp_path, "nocase", "(1, 'a', 1), (2, 'b', 1), (3, 'A', 1)")
    cur = project(epsilon=1000.0)
    with pytest.warns(UserWarning, match="had a collation"):
        cur.add_table("t", str(db), source_table="z", privacy_unit="uid", max_rows_per_unit=1,
                      bounds={"x": (0, 1)}, domains={"s": ["a", "A", "b"]})
    plan = _plan(cur, "SELECT s, COUNT(*) AS n FROM t GROUP BY s")
    ex = cur._execute(plan)
    assert ex.keys == [("A",), ("a",), ("b",)]
    assert ex.cols[plan.measures[0].sql_col] == [1, 1, 1]


# ----------------------------------------------------------------------------- plan cache

@pytest.mark.parametrize(("ok", "bad"), [
    ({"weights": {"n": 1}}, {"weights": {"n": True}}),
    ({"weights": {"n": 2.0}}, {"weights": {"n": np.float32(2.0)}}),
    ({"bounds": {"x": (1, 5)}}, {"bounds": {"x": (True, 5)}}),
], ids=["weight_bool", "weight_float32", "bound_bool"])
def test_a_cached_plan_never_skips_validation(project: Callable[..., Curator],
                                              ok: dict[str, Any], bad: dict[str, Any]) -> None:
    """True == 1 and np.float32(2) == 2.0 hash alike, so the plan cache keyed by values
    returned the plan of an accepted call for arguments that validation refuses: whether a
    call was refused depended on the calls before it."""
    cur = project()
    cur.add_table("t", pd.DataFrame({"u": np.arange(20), "x": np.arange(20) * 1.0,
                                     "k": ["a", "b"] * 10}),
                  privacy_unit="u", max_rows_per_unit=1, bounds={"x": (0, 20)},
                  domains={"k": ["a", "b"]})
    q = "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k"
    with pytest.raises((TypeError, ValueError)):
        cur.sql(q, epsilon=1.0, **bad)
    cur.sql(q, epsilon=1.0, **ok)
    with pytest.raises((TypeError, ValueError)):
        cur.sql(q, epsilon=1.0, **bad)


# ----------------------------------------------------------------------------- budget sums

@pytest.mark.parametrize("accountant", ["pure", "approx"])
@pytest.mark.parametrize("event", [ev.Laplace(1e-320), ev.SelfComposed(ev.PureDP(1e308), 10)],
                         ids=["laplace_tiny_multiplier", "composed_overflow"])
def test_an_infinite_cost_is_refused_as_budget_exceeded(accountant: str,
                                                        event: ev.Event) -> None:
    """An event whose epsilon overflows to inf must be refused with BudgetExceeded, nothing
    spent (as with math.fsum before). The exact running sums converted inf to an integer
    ratio first and raised OverflowError instead."""
    b = Budget(epsilon=1.0, delta=1e-6 if accountant == "approx" else 0.0,
               accountant=accountant)
    b.charge(ev.PureDP(0.25))
    with pytest.raises(BudgetExceeded) as info:
        b.charge(event)
    assert math.isinf(info.value.requested.epsilon)
    assert not b.can_afford(event)
    assert b.spent.epsilon == 0.25 and len(b.charges) == 1


# ----------------------------------------------------------------------------- exponential_rows

@pytest.mark.parametrize("rows", [True, False], ids=["exponential_rows", "exponential"])
def test_an_extreme_epsilon_over_sensitivity_is_a_clear_value_error(rows: bool) -> None:
    """epsilon / sensitivity beyond the float range (1e300 / 1e-300): the samplers mean to
    refuse it with a ValueError naming the range, but float(Fraction) overflowed first and
    raised a bare OverflowError."""
    src = dp.noise.seeded(2)
    with pytest.raises(ValueError, match="floating-point range"):
        if rows:
            dp.mechanisms.exponential_rows([[0.0, -1.0]], sensitivity=1e-300, epsilon=1e300,
                                           source=src)
        else:
            dp.mechanisms.exponential(["a", "b"], [0.0, -1.0], sensitivity=1e-300,
                                      epsilon=1e300, source=src)


def test_running_sums_equal_fsum_over_the_history_and_survive_a_round_trip() -> None:
    """The exact running sums must give the exact sum of the recorded costs rounded *up*
    (never below the truth; changed in session 4 from math.fsum's round-to-nearest, which can
    be below it), also with subnormal and large costs, and Budget.from_dict(to_dict()) must
    report the same totals and refuse the same next charge."""
    from fractions import Fraction

    costs = [0.1] * 10 + [5e-324, 2.5e-310, 3.0, 1e-17, 123.456, 5e-324]
    b = Budget(epsilon=1000.0, delta=1e-6, accountant="approx")
    for c in costs:
        b.charge(ev.PureDP(c))
    exact = sum(Fraction(c) for c in costs)
    assert Fraction(b.spent.epsilon) >= exact
    assert b.spent.epsilon <= math.nextafter(math.fsum(costs), math.inf)
    assert sum(costs[:10]) != math.fsum(costs[:10])  # the naive float sum drifts here
    again = Budget.from_dict(b.to_dict())
    assert again.spent == b.spent and again.remaining == b.remaining
    rest = b.remaining.epsilon
    for budget in (b, again):
        assert not budget.can_afford(ev.PureDP(rest * (1 + 1e-9)))
        budget.charge(ev.PureDP(rest))
    assert b.spent == again.spent


# ----------------------------------------------------------------------------- not_null

def test_replacing_a_table_without_not_null_drops_the_shared_count(
        project: Callable[..., Curator]) -> None:
    """The declaration belongs to one load: after replace=True without it (and NULLs in the
    new rows) the same query text must measure COUNT(x) again, not reuse the cached plan that
    divided by COUNT(*)."""
    cur = project()
    full = pd.DataFrame({"u": np.arange(40), "x": np.arange(40) % 7 * 1.0})
    cur.add_table("t", full, privacy_unit="u", max_rows_per_unit=1, bounds={"x": (0, 10)},
                  not_null=["X"])
    assert cur.tables()["t"].not_null == ("x",)
    q = "SELECT COUNT(*) AS n, AVG(x) AS a, COUNT(x) AS c FROM t"
    # the outputs' measurements (the bounding diagnostics, plan.diag_measures, come on top)
    kinds = sorted(m.kind for m in _plan(cur, q).measures
                   if m.kind not in ("dkept", "ddrop", "dclamp"))
    assert kinds == ["csum", "rows"]
    holes = full.assign(x=[None if i % 4 == 0 else v for i, v in enumerate(full["x"])])
    cur.add_table("t", holes, privacy_unit="u", max_rows_per_unit=1, bounds={"x": (0, 10)},
                  replace=True)
    assert cur.tables()["t"].not_null == ()
    assert sorted(m.kind for m in _plan(cur, q).measures
                  if m.kind not in ("dkept", "ddrop", "dclamp")) == ["csum", "nonnull", "rows"]
    res = cur.sql(q, epsilon=1.0)
    assert len([x for x in res.split if not x["measurement"].startswith("diagnostics")]) == 3
