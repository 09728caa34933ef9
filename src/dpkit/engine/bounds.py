"""Contribution bounds chosen privately: rows per unit at load, clamp bounds on request.

Bounds are public (every analyst sees the declarations), so a bound read off the data must be
a differentially private release, charged like any answer. Two helpers:

* :func:`pick_max_rows`: ``add_table(..., max_rows_per_unit="auto")``. Each unit's row count
  ``r_u`` (clipped at :data:`MAX_AUTO_ROWS`) enters a histogram; the exponential mechanism
  picks a cap ``c`` of the public grid :data:`AUTO_ROWS_GRID` (1..10, then ~25% steps to
  1000) scored by the distance from ``q·N`` (``q`` = :data:`AUTO_ROWS_QUANTILE`, ``N`` units)
  to its rank range ``[#{u: r_u <= c'}, #{u: r_u <= c}]``, ``c'`` the grid point below
  (:func:`rank_scores`). Add/remove one unit moves both
  ends by 0 or 1 in the same direction and ``q·N`` by ``q``, so every score moves by at
  most ``max(q, 1-q)`` (as in :func:`dpkit.engine.noisy_quantiles.quantiles`): ε-DP for add/remove
  one unit (event ``Exponential(ε)``), one ledger charge through :mod:`dpkit.engine.charge`.
* :func:`suggested_bounds`: ``cur.suggest_bounds`` reads the ``lower``/``upper`` quantiles
  (default 1st/99th percentile) of one private CDF (:meth:`Curator.quantiles`, charged
  there, one ledger entry) over a public search range, and suggests the outer edges of the
  grid cells holding them (post-processing of the released CDF; the interpolated estimates
  and their intervals are reported beside them: extreme quantiles of a small table have wide
  ones). Not the estimates themselves: they interpolate as if a cell's rows were spread
  evenly over it, so for a column whose values sit mostly at its floor (``capital_gain``:
  92% zeros) the 1st percentile came out 11.07 inside the first cell, and a clamp there
  would move every zero; the cell's edge keeps the whole cell, the mass at the floor included.

  **The grid** (``grid=``): equal cells are coarse where a long-tailed column's quantiles sit
  (incomes, capital gains, counts: most values within a small part of a range spanning orders
  of magnitude), so ``grid="auto"`` (the default) takes log-scale cells
  (:func:`dpkit.engine.families.axes.log_grid_wanted`: the range spans four orders of
  magnitude) and ``grid="log"`` forces them (signed ranges: a grid symmetric around 0).
  The grid is a function of the search range, the column's declared type and ``bins`` only
  (public), each row still falls in exactly one cell, so the guarantee is unchanged: the
  CDF's (ε-DP with ``epsilon=``, for add/remove one privacy unit with at most
  ``max_rows_per_unit`` rows), one charge; the bounds are post-processing of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit import mechanisms
from dpkit import noise as _noise
from dpkit.engine.backend_duckdb import table_relation
from dpkit.engine.charge import charged_read
from dpkit.engine.families.axes import Axis, ordered_axis
from dpkit.engine.ledger import Entry, Ledger
from dpkit.engine.results import Result
from dpkit.engine.tables import TableMeta, check_bounds, quote_ident

__all__ = ["AUTO_ROWS_EPSILON", "AUTO_ROWS_GRID", "AUTO_ROWS_QUANTILE", "MAX_AUTO_ROWS", "AutoRows",
           "check_rows_declaration", "check_rows_epsilon", "pick_max_rows", "rank_scores",
           "rows_histogram",
           "rows_histogram_sql", "search_grid", "suggested_bounds", "with_auto_rows"]

AUTO_ROWS_QUANTILE = 0.95  # cap at the 95th percentile of rows per unit: 5% of units trimmed
AUTO_ROWS_EPSILON = 0.1  # default cost of the choice (a rank error of ~100 units at 1000 cands)
MAX_AUTO_ROWS = 1000  # the largest cap "auto" may choose (a public candidate range)
# the caps "auto" chooses among: every count to 10, then steps of ~25% (32 candidates): a
# short list keeps the exponential mechanism's error small (it grows like ln of the list),
# and a cap a quarter too high costs little
AUTO_ROWS_GRID: tuple[int, ...] = tuple(sorted(
    {*range(1, 11), *(min(round(10 * 1.25 ** k), MAX_AUTO_ROWS) for k in range(1, 22))}))


@dataclass(frozen=True)
class AutoRows:
    """The privately chosen cap and what it cost (``ledger_seq``: its charge)."""

    max_rows_per_unit: int
    epsilon: float
    quantile: float
    ledger_seq: int
    rank_error: float  # with probability 0.95 the chosen cap's rank is within this of q·N


def rows_histogram_sql(relation: str, unit: str) -> str:
    """The statement of :func:`rows_histogram` (a ``GROUP BY`` count DuckDB and Spark run
    alike)."""
    return (f"SELECT LEAST(__n, {MAX_AUTO_ROWS}) AS __r, COUNT(*) AS __k FROM (SELECT COUNT(*) "
            f"AS __n FROM {relation} GROUP BY {quote_ident(unit)}) AS __pu GROUP BY "
            f"LEAST(__n, {MAX_AUTO_ROWS})")


def rows_histogram(query: Callable[[str], list[tuple[Any, ...]]], relation: str,
                    unit: str) -> np.ndarray:
    """How many units have 1, 2, ..., MAX_AUTO_ROWS (or more) rows (exact; never released)."""
    rows = query(rows_histogram_sql(relation, unit))
    hist = np.zeros(MAX_AUTO_ROWS + 1, dtype=np.int64)
    for r, n in rows:
        hist[int(r)] = int(n)
    return hist


def rank_scores(hist: np.ndarray, q: float) -> np.ndarray:
    """Score of each cap ``c`` of :data:`AUTO_ROWS_GRID`: ``-dist(q·N, [a_c, b_c])`` with
    ``a_c = #{units with <= c' rows}`` (``c'`` the grid point below ``c``, 0 for the first)
    and ``b_c = #{units with <= c rows}`` (``hist[r]``: units with ``r`` rows, ``hist[MAX]``
    those with more): 0 for the smallest grid cap at or above the true q-quantile, and caps
    above every unit's count lose ``(1-q)·N`` (the plateau above the largest count is never
    a tie)."""
    cum = np.cumsum(hist).astype(np.float64)
    grid = np.asarray(AUTO_ROWS_GRID)
    b = cum[grid]
    a = np.concatenate([[cum[0]], cum[grid[:-1]]])
    t = q * float(hist.sum())
    return -(np.maximum(a - t, 0.0) + np.maximum(t - b, 0.0))


def pick_max_rows(ledger: Ledger, query: Callable[[str], list[tuple[Any, ...]]], *,
                  relation: str, unit: str, table: str, analyst: str, epsilon: float,
                  source: _noise.Source | None,
                  check: Callable[[str], None] | None = None) -> AutoRows:
    """Choose ``max_rows_per_unit`` by an ε-DP quantile of rows per unit (module docstring),
    charging ``Exponential(epsilon)`` to the ledger first. ``check``: called with the
    statement before the charge (a Spark table: Spark analyses it; a refusal spends nothing)."""
    epsilon = check_rows_epsilon(epsilon)
    if check is not None:
        check(rows_histogram_sql(relation, unit))
    q = AUTO_ROWS_QUANTILE
    sens = max(q, 1.0 - q)
    candidates = list(AUTO_ROWS_GRID)
    event = ev.Exponential(float(epsilon))

    def finish(hist: np.ndarray, entry: Entry) -> AutoRows:
        rel = mechanisms.exponential(candidates, rank_scores(hist, q), sensitivity=sens,
                                     epsilon=epsilon, source=source)
        return AutoRows(int(rel.value), float(epsilon), q, entry.seq,
                        float(rel.details["utility_bound"]))

    return charged_read(
        ledger, event, analyst=analyst, delta_share=None,
        query=f"CHOOSE max_rows_per_unit FOR {table} (the {q:g} quantile of rows per unit)",
        details={"auto_rows": {"quantile": q, "candidates": MAX_AUTO_ROWS}},
        read=lambda: rows_histogram(query, relation, unit), finish=finish,
        what="choice of max_rows_per_unit")


def check_rows_declaration(unit: str | None, rows: Any, *, public: bool, name: str,
                           epsilon: float) -> bool:
    """Refuse a unit-level table without ``max_rows_per_unit`` (before anything is loaded);
    True when it is ``"auto"``."""
    if isinstance(rows, str):
        if rows != "auto":
            raise ValueError(f"max_rows_per_unit must be an int >= 1 or 'auto' (got {rows!r})")
        if unit is None or public:
            raise ValueError("max_rows_per_unit='auto' needs a privacy_unit (at record level "
                             "every row is its own unit: nothing to choose)")
        check_rows_epsilon(epsilon)
        return True
    if rows is None and unit is not None and not public:
        raise ValueError(
            f"table {name!r} names privacy_unit={unit!r} but no max_rows_per_unit: how many "
            f"rows may one unit contribute to a query? Give the number you know (public, e.g. "
            f"max_rows_per_unit=1 for one row per person), or max_rows_per_unit='auto' to "
            f"choose it privately from the data (the {AUTO_ROWS_QUANTILE:g} quantile of rows "
            f"per unit, charged epsilon {AUTO_ROWS_EPSILON:g} by default: rows_epsilon=). "
            f"Nothing was loaded")
    return False


def check_rows_epsilon(epsilon: Any) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (
            math.isfinite(epsilon) and 0 < epsilon <= 10):
        raise ValueError(f"rows_epsilon must be a number in (0, 10] (got {epsilon!r}); the "
                         f"default {AUTO_ROWS_EPSILON} suits most tables")
    return float(epsilon)


def with_auto_rows(ledger: Ledger, query: Callable[[str], list[tuple[Any, ...]]],
                   meta: TableMeta, *, analyst: str, epsilon: float,
                   source: _noise.Source | None,
                   check: Callable[[str], None] | None = None) -> TableMeta:
    """``meta`` with ``max_rows_per_unit`` chosen by :func:`pick_max_rows` (charged), and the
    choice in its description."""
    assert meta.privacy_unit is not None
    got = pick_max_rows(ledger, query, relation=table_relation(meta), unit=meta.privacy_unit,
                        table=meta.name, analyst=analyst, epsilon=epsilon, source=source,
                        check=check)
    note = (f"max_rows_per_unit={got.max_rows_per_unit} chosen privately (the {got.quantile:g} "
            f"quantile of rows per unit, epsilon {got.epsilon:g}, ledger entry "
            f"#{got.ledger_seq})")
    desc = f"{meta.description}; {note}" if meta.description else note
    return dataclasses.replace(meta, max_rows_per_unit=got.max_rows_per_unit, description=desc)


def search_range(tables: dict[str, TableMeta], table: str, column: str,
                 search: Any) -> tuple[float, float]:
    """The public range a bounds suggestion searches: ``search`` or the declared bounds."""
    if search is not None:
        return check_bounds(search, column)
    meta = tables.get(table)
    found = meta.bounds_for(column) if meta is not None else None
    if found is None:
        raise ValueError(f"give search=(low, high) (--search low:high): a public range wide "
                         f"enough to hold {column!r}; the quantiles' resolution is "
                         f"(high - low) / bins. Nothing was charged")
    return found


def search_grid(tables: dict[str, TableMeta], table: str, column: str,
                search: tuple[float, float], bins: int | None, grid: str = "linear") -> Axis:
    """The public grid :meth:`Curator.quantiles` releases the CDF on for a suggestion over
    ``search`` (the same call it makes: :func:`~dpkit.engine.families.axes.ordered_axis`)."""
    return ordered_axis(tables[table], column, bins=bins, bounds={column: search}, grid=grid)


def _cell_of(estimate: float, edges: np.ndarray, integer: bool = False) -> int:
    """The cell an interpolated quantile estimate was read in: ``(e_j, e_{j+1}]`` (the first
    cell also holds ``e_0``), as :func:`dpkit.release.quantiles.quantiles_from_cdf` reads
    cell ``j`` from ``e_j`` (nothing of it) to ``e_{j+1}`` (all of it). A few ulps of slack:
    ``e_j + 1.0·(e_{j+1} − e_j)`` need not round to ``e_{j+1}``. An integer grid's estimate
    is an integer of its cell ``[e_j, e_{j+1} − 1]`` (``integer=True`` there)."""
    if integer:
        j = int(np.searchsorted(edges, estimate, side="right")) - 1
        return min(max(j, 0), edges.size - 2)
    slack = 16.0 * float(np.spacing(np.max(np.abs(edges[[0, -1]]))))
    j = int(np.searchsorted(edges, estimate - slack, side="left")) - 1
    return min(max(j, 0), edges.size - 2)


def suggested_bounds(res: Result, column: str, lower: float, upper: float,
                     grid: Axis | None = None, whole: bool = False) -> dict[str, Any]:
    """Clamp bounds from a quantiles release (post-processing only): the lower edge of the
    ``grid`` cell holding the ``lower`` quantile and the upper edge of the one holding the
    ``upper`` quantile (an integer grid: the cell's last integer), so every value of those
    cells is kept (module docstring); without ``grid``, the point estimates. ``whole``: an
    integer column, whose bounds are rounded outward (a log-scale cell's edges are not
    integers). The estimates and their intervals are reported beside them."""
    vals = {float(p): (float(v), float(lo), float(hi)) for p, v, lo, hi in zip(
        res.data["probability"], res.data["quantile"], res.data["quantile_ci_low"],
        res.data["quantile_ci_high"], strict=True)}
    lo_v, hi_v = vals[float(lower)], vals[float(upper)]
    low, high = lo_v[0], hi_v[0]
    if grid is not None and not any(n.startswith(f"grid {grid.describe()};") for n in res.notes):
        grid = None  # not the grid the CDF was released on (its note says): the estimates
    if grid is not None:
        edges, integer = grid.edges(), grid.kind == "int"
        low = float(edges[_cell_of(low, edges, integer)])
        high = float(edges[_cell_of(high, edges, integer) + 1]) - (1.0 if integer else 0.0)
        if whole:
            low, high = float(math.floor(low)), float(math.ceil(high))
    out = {"column": column, "bounds": (low, max(high, low)),
           "lower": {"probability": lower, "estimate": lo_v[0], "ci": lo_v[1:]},
           "upper": {"probability": upper, "estimate": hi_v[0], "ci": hi_v[1:]},
           "epsilon": res.epsilon, "level": res.level, "ledger_seq": res.ledger_seq,
           "insecure": res.insecure}
    if grid is not None:
        out["grid"] = grid.describe()
    return out
