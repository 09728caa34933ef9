"""Log-scale grids for CDFs and quantiles (``grid="log"`` / ``"auto"``), and the bounds
suggestion on them: the cells SQL assigns agree with the edges reported, the automatic
choice reads the declared range only, and on neighbouring tables D, D' nothing but the noisy
values differs."""

from __future__ import annotations

import math
from collections.abc import Callable

import duckdb
import numpy as np
import pandas as pd
import pytest

from dpkit.engine import Curator
from dpkit.engine.families.axes import Axis, log_grid_wanted, ordered_axis
from dpkit.engine.sql import QueryError
from dpkit.engine.tables import Column, TableMeta


def _meta(lo: float, hi: float, type_: str = "DOUBLE") -> TableMeta:
    return TableMeta(name="t", columns=(Column("x", type_),), bounds={"x": (lo, hi)})


def _cells(axis: Axis, values: np.ndarray) -> np.ndarray:
    con = duckdb.connect()
    con.register("v", pd.DataFrame({"x": values}))
    return np.array([r[0] for r in con.execute(f"SELECT {axis.cell_sql('x')} FROM v").fetchall()])


@pytest.mark.parametrize("lo, hi", [(0.0, 100_000.0), (-1e6, 1e6), (-50.0, 3e5), (10.0, 1e7)])
def test_sql_cells_agree_with_the_edges(lo: float, hi: float) -> None:
    """Every value lands in the cell whose edges hold it (to a relative 1e-9: SQL's LN and
    numpy's expm1 round differently on an edge), values outside are clamped into the end
    cells, and the cells grow geometrically away from 0 (a signed range: mirrored)."""
    axis = ordered_axis(_meta(lo, hi), "x", bins=None, bounds=None, grid="log")
    assert axis.kind == "log" and axis.size == 1024
    e = axis.edges()
    assert e[0] == lo and e[-1] == hi and np.all(np.diff(e) > 0)
    rng = np.random.default_rng(0)
    inside = np.concatenate([e, lo + (hi - lo) * rng.random(2000),
                             np.sign(rng.normal(size=2000)) * np.exp(rng.uniform(0, 14, 2000))])
    inside = inside[(inside >= lo) & (inside <= hi)]
    c = _cells(axis, inside)
    tol = 1e-9 * np.maximum(np.abs(inside), 1.0)
    assert np.all((c >= 0) & (c < axis.size))
    assert np.all(e[c] <= inside + tol) and np.all(inside <= e[c + 1] + tol)
    assert list(_cells(axis, np.array([lo - 1e9, hi + 1e9, np.nan]))[:2]) == [0, axis.size - 1]
    w = np.diff(e)
    big = e[1:] > 100 * axis.scale  # far above the scale: each cell a fixed ratio wider
    assert np.allclose(w[big][1:] / w[big][:-1], np.exp(axis.step), rtol=1e-6)
    if lo < 0:
        neg = e[:-1] < -100 * axis.scale
        assert np.allclose(w[neg][1:] / w[neg][:-1], np.exp(-axis.step), rtol=1e-6)


def test_the_automatic_choice_reads_the_declared_range_only() -> None:
    assert log_grid_wanted(0, 99_999) and log_grid_wanted(-1e6, 1e6)
    assert log_grid_wanted(1, 1e4) and not log_grid_wanted(2, 1e4)
    assert not log_grid_wanted(0, 120) and not log_grid_wanted(1000, 5000)
    assert not log_grid_wanted(0, 4356) and not log_grid_wanted(0.0, 1.0)
    ints = _meta(0, 99_999, "INTEGER")
    assert ordered_axis(ints, "x", bins=None, bounds=None, grid="auto").kind == "log"
    assert ordered_axis(ints, "x", bins=None, bounds=None).kind == "int"  # the default
    ages = _meta(0, 120, "INTEGER")
    assert ordered_axis(ages, "x", bins=None, bounds=None, grid="auto").kind == "int"
    # an integer column's log cells are never narrower than one integer near 0 ...
    small = ordered_axis(ages, "x", bins=None, bounds=None, grid="log")
    assert small.scale == 1.0
    with pytest.raises(QueryError, match="grid must be"):
        ordered_axis(ages, "x", bins=None, bounds=None, grid="geometric")


def _long_tail(n: int = 5000, seed: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"x": np.round(rng.lognormal(10, 1, n)).astype(np.int64)})


@pytest.mark.parametrize("change", ["add_top", "add_bottom", "remove", "replace"])
def test_nothing_but_the_noisy_values_depends_on_the_rows(project: Callable[..., Curator],
                                                         change: str) -> None:
    """D and D' (one row added at either end of the range, one removed, one changed to the
    top): with the same seeded noise, the grid, the notes, the charge and the event are the
    same; only the noisy quantiles (and the bounds read off them) may differ."""
    d = _long_tail()
    x = d.x.to_numpy()
    other = {"add_top": np.append(x, 10**7), "add_bottom": np.append(x, 0),
             "remove": x[1:], "replace": np.concatenate([[10**7], x[1:]])}[change]
    outs = []
    for rows in (x, other):
        cur = project(epsilon=10.0, seed=7)
        cur.add_table("t", pd.DataFrame({"x": rows}), bounds={"x": (0, 10**7)})
        got = cur.suggest_bounds("t", "x", epsilon=0.5)
        charge = cur.ledger.entries("charge")[-1]
        outs.append((got, charge))
    (a, ca), (b, cb) = outs
    assert a["grid"] == b["grid"] and "log-scale" in a["grid"]
    assert (ca.event, ca.query, ca.view, ca.payload) == (cb.event, cb.query, cb.view, cb.payload)
    public = ("column", "epsilon", "level", "insecure")
    assert {k: a[k] for k in public} == {k: b[k] for k in public}
    assert a["lower"]["probability"] == b["lower"]["probability"]


def test_log_grid_bounds_on_a_long_tail(project: Callable[..., Curator]) -> None:
    """Log-normal amounts (median ~22,000, 1st percentile ~2,150, 99th ~226,000) declared on
    [0, 10^7]: equal cells are 10,000 wide, so the lower bound can only be 0 or 10,000 (off
    by 100% or more); log cells there are ~30 wide. A log bound misses by 50% only if the
    CDF errs by 34 rows (1.5 x the 99th percentile is the 99.68th: 0.68% of 5000 rows) or
    more at the top, 44 at the bottom; the plan's expected RMSE per prefix at epsilon 1 is
    10.7 rows, so 3.2 sigma: a false-failure probability of about 0.2% over seeds (Gaussian
    approximation; the seed here is fixed)."""
    df = _long_tail()
    q1, q99 = np.quantile(df.x, [0.01, 0.99])
    cur = project(epsilon=10.0)
    cur.add_table("t", df, bounds={"x": (0, 10**7)})
    lin = cur.suggest_bounds("t", "x", epsilon=1.0, grid="linear")["bounds"]
    log = cur.suggest_bounds("t", "x", epsilon=1.0)["bounds"]
    assert lin[0] in (0.0, 10_000.0)
    assert abs(log[0] - q1) < 0.5 * q1 and abs(log[1] - q99) < 0.5 * q99
    assert log == (math.floor(log[0]), math.ceil(log[1]))  # an integer column: whole numbers


def test_signed_long_tail_gets_a_symmetric_grid(project: Callable[..., Curator]) -> None:
    """Gains and losses: a random sign times log-normal(8, 1) magnitudes, declared on
    [-10^6, 10^6] (auto: log cells mirrored around 0). The 1st and 99th percentiles are
    -/+ ~23,200 (the magnitude's 98th percentile); a bound off by 50% needs the CDF to err
    by 33 rows or more there (half the rows have each sign: 0.5 x (2% - 0.70%) of 5000), 3.1
    times the plan's expected RMSE per prefix (10.7 rows at epsilon 1): a false-failure
    probability of about 0.4% over seeds for the two (Gaussian approximation; fixed seed)."""
    rng = np.random.default_rng(6)
    x = np.where(rng.random(5000) < 0.5, -1.0, 1.0) * rng.lognormal(8, 1, 5000)
    q1, q99 = np.quantile(x, [0.01, 0.99])
    cur = project(epsilon=10.0)
    cur.add_table("t", pd.DataFrame({"x": x}), bounds={"x": (-1e6, 1e6)})
    got = cur.suggest_bounds("t", "x", epsilon=1.0)
    assert "log-scale" in got["grid"]
    lo, hi = got["bounds"]
    assert lo < 0 < hi
    assert abs(lo - q1) < 0.5 * abs(q1) and abs(hi - q99) < 0.5 * q99
