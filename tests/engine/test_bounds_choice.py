"""Bounds chosen privately: ``max_rows_per_unit="auto"``, ``suggest_bounds``; and
``accuracy=`` for AVG and quantiles (``accuracy_rows``).

Statistical checks use seeded projects; each states its false-failure probability from the
exponential mechanism's law.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from dpkit.engine import Curator
from dpkit.engine import bounds as dbounds
from dpkit.engine.accuracy import expected_errors
from dpkit.engine.sql import QueryError


def _units(light: int = 4000, two: int = 900, heavy: int = 100, extra: int = 0) -> pd.DataFrame:
    sizes = np.concatenate([np.ones(light, int), np.full(two, 2), np.full(heavy, 10),
                            np.full(extra, 1000)])
    u = np.repeat(np.arange(sizes.size), sizes)
    return pd.DataFrame({"u": u, "x": np.linspace(0, 100, u.size)})


def test_a_unit_table_needs_max_rows_per_unit(project: Callable[..., Curator]) -> None:
    cur = project()
    with pytest.raises(ValueError, match="max_rows_per_unit='auto'") as err:
        cur.add_table("t", _units(), privacy_unit="u")
    assert "Nothing was loaded" in str(err.value)
    assert cur.tables() == {} and cur.budget().spent == 0.0
    with pytest.raises(ValueError, match="int >= 1 or 'auto'"):
        cur.add_table("t", _units(), privacy_unit="u", max_rows_per_unit="many")
    with pytest.raises(ValueError, match="needs a privacy_unit"):
        cur.add_table("t", _units(), max_rows_per_unit="auto")
    cur.add_table("r", _units())  # record level: nothing to choose
    assert cur.tables()["r"].max_rows_per_unit == 1 and cur.budget().spent == 0.0


def test_auto_picks_the_95th_percentile_of_rows_per_unit(
        project: Callable[..., Curator]) -> None:
    # 5000 units: 80% with 1 row, 18% with 2, 2% with 10. q·N = 4750 lies in the rank range
    # [4000, 4900] of cap 2 (score 0); cap 1 scores -750, caps 3..10 -150, caps > 10 -250. Any
    # of the 31 caps but 2 has probability <= 31·exp(-eps·150/(2·0.95)) = 31·e^-158 at eps 2.
    cur = project(epsilon=10.0)
    meta = cur.add_table("t", _units(), privacy_unit="u", max_rows_per_unit="auto",
                         rows_epsilon=2.0)
    assert meta.max_rows_per_unit == 2
    assert "chosen privately" in meta.description
    charges = cur.ledger.entries("charge")
    assert len(charges) == 1 and "CHOOSE max_rows_per_unit" in charges[0].query
    assert cur.budget().spent == pytest.approx(2.0)
    assert cur.tables()["t"].max_rows_per_unit == meta.max_rows_per_unit


@pytest.mark.parametrize("change", ["add", "remove"])
def test_auto_scores_move_by_at_most_the_stated_sensitivity(change: str) -> None:
    import duckdb

    d = _units(light=300, two=50, heavy=5)
    extreme = pd.DataFrame({"u": np.full(5000, 99_999), "x": np.zeros(5000)})
    d2 = pd.concat([d, extreme], ignore_index=True)
    if change == "remove":
        d, d2 = d2, d

    def scores(df: pd.DataFrame) -> np.ndarray:
        con = duckdb.connect()
        con.register("rows_", df)
        hist = dbounds.rows_histogram(lambda q: con.execute(q).fetchall(), "rows_", "u")
        return dbounds.rank_scores(hist, dbounds.AUTO_ROWS_QUANTILE)

    q = dbounds.AUTO_ROWS_QUANTILE
    assert np.max(np.abs(scores(d) - scores(d2))) <= max(q, 1 - q) + 1e-12


def test_suggest_bounds_from_private_percentiles(project: Callable[..., Curator]) -> None:
    # 20000 rows of N(50, 10): true 1st/99th percentiles ~26.7 and ~73.3; the search range
    # [-1000, 1000] in 2000 cells of width 1. At epsilon 2 the CDF's noise on a count of
    # 200 rows (1%) is a few rows; a miss of 5 cells needs ~1/4 of 1% of the data misplaced.
    cur = project(epsilon=10.0)
    rng = np.random.default_rng(0)
    x = rng.normal(50, 10, 20000)
    cur.add_table("t", pd.DataFrame({"x": x}))
    with pytest.raises(ValueError, match="search="):
        cur.suggest_bounds("t", "x", epsilon=1.0)
    assert cur.budget().spent == 0.0
    got = cur.suggest_bounds("t", "x", epsilon=2.0, search=(-1000, 1000), bins=2000)
    lo, hi = got["bounds"]
    assert abs(lo - np.quantile(x, 0.01)) < 5 and abs(hi - np.quantile(x, 0.99)) < 5
    assert cur.budget().spent == pytest.approx(2.0)
    assert len(cur.ledger.entries("charge")) == 1


def test_accuracy_for_avg_and_quantiles_needs_rows(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0)
    cur.add_table("t", pd.DataFrame({"x": np.linspace(0, 100, 5000)}), bounds={"x": (0, 100)})
    with pytest.raises(QueryError, match="accuracy_rows"):
        cur.sql("SELECT AVG(x) AS a FROM t", accuracy=1.0)
    assert cur.budget().spent == 0.0
    for q, target in (("SELECT AVG(x) AS a FROM t", 1.0),
                      ("SELECT MEDIAN(x) AS a FROM t", 0.02)):
        spent = cur.budget().spent
        cur.sql(q, accuracy=target, accuracy_rows=1000)
        eps = cur.budget().spent - spent

        def hw(e: float, q: str = q) -> float:
            plan = cur._plan(q, epsilon=e, rho=None, delta=None, noise="laplace", level=0.95,
                             bounds=None)
            return float(expected_errors(plan, 1000)[0]["halfwidth"])

        assert hw(eps) <= target < hw(eps * 0.99)  # the smallest epsilon that meets it
    with pytest.raises(QueryError, match="accuracy_rows must be"):
        cur.sql("SELECT AVG(x) AS a FROM t", accuracy=1.0, accuracy_rows=0)
