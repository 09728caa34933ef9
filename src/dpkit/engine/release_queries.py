"""Correlated-noise release inside the curator: range/CDF queries, marginals, synthetic data.

:class:`ReleaseQueries` is mixed into :class:`dpkit.engine.curator.Curator`. Its methods answer
whole *families* of counting queries at once through :mod:`dpkit.release` (the factorization
mechanism with an optimised or hierarchical strategy, or MWEM), charged to the ledger once:

* :meth:`ReleaseQueries.ranges`: ``COUNT(*) WHERE x BETWEEN a AND b`` for many ``(a, b)``;
* :meth:`ReleaseQueries.cdf` and :meth:`ReleaseQueries.quantiles`: the whole CDF of a column
  with a simultaneous band, and quantiles read off it;
* :meth:`ReleaseQueries.marginals`: k-way contingency tables over declared domains;
* :meth:`ReleaseQueries.synthetic`: synthetic records over the declared domains.

SQL forms (through ``Curator.sql``; anything else goes to the ordinary SQL path)::

    SELECT DP_CDF(age) FROM visits [WHERE ...]
    SELECT DP_QUANTILES(age, 0.1, 0.5, 0.9) FROM visits [WHERE ...]
    SELECT DP_RANGES(age, (0, 17), (18, 64), (65, 120)) FROM visits [WHERE ...]
    SELECT COUNT(*) FILTER (WHERE age BETWEEN 0 AND 17) AS kids,
           COUNT(*) FILTER (WHERE age BETWEEN 18 AND 64) AS adults FROM visits [WHERE ...]
    SELECT DP_MARGINALS(ward, age) FROM visits         -- all 2-way marginals (k = 2)

**Privacy semantics.** Neighbouring relation: add or remove one privacy unit together with all
its rows (record level: one row). Before counting, each unit's rows are cut to at most
``m = max_rows_per_unit`` (:func:`dpkit.engine.plan.bounding_ctes`: a keyed hash chooses them,
a stable transformation), every value is clamped into the declared bounds (or mapped to its key
in a declared domain; NULL, NaN and keys outside the domain are not counted) and falls into
exactly one cell of a *public* grid. One unit therefore moves the integer histogram ``x`` by at
most ``m`` in L1 norm and at most ``m`` in L2 norm (``sqrt(m)`` if its rows fall in distinct
cells; ``m`` bounds both). The histogram is released through a strategy ``M`` with exact integer
noise calibrated to ``m·Δ₁(M)`` (ε-DP, discrete Laplace) or ``m·Δ₂(M)`` (ρ-zCDP, discrete
Gaussian); everything after the noise is post-processing (:mod:`dpkit.release.mechanism`).

Order of operations (DESIGN invariant 3): validate and plan from public information (grid,
workload, strategy, noise, event) → budget check (refusal spends nothing) → one DuckDB statement
computes the exact histogram → the ledger charges the plan's event once and commits → noise →
:class:`~dpkit.engine.results.Result`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpkit import events as ev
from dpkit import noise as _noise
from dpkit.engine import plan as dplan
from dpkit.engine import sql as dsql
from dpkit.engine.results import Preview, Result
from dpkit.engine.tables import TableMeta, quote_ident

if TYPE_CHECKING:
    from dpkit.release.mechanism import WorkloadPlan

__all__ = ["Axis", "ReleaseQueries", "SyntheticData", "charged_analyst"]

#: integer columns get one cell per integer up to this many values (else ``bins`` cells)
MAX_INTEGER_CELLS = 4096
#: default number of equal cells for ranges / CDFs over a continuous (or very wide) column
DEFAULT_BINS = 1024
#: marginals / synthetic data: integer columns with at most this many values keep one cell each
MARGINAL_INTEGER_CELLS = 64
#: marginals / synthetic data: default number of cells for other numeric columns
MARGINAL_BINS = 16
#: largest product domain for marginals and synthetic data (dense strategies)
MAX_PRODUCT_CELLS = 4096
#: the strategy optimiser runs by default up to this many cells (cached); beyond, a tree or
#: the identity (see each method)
OPTIMIZE_CELLS = 1024
MAX_RANGES = 10_000
#: folder (inside the project) holding optimised strategies
STRATEGY_CACHE = "strategies"

_FUNCS = {"DP_CDF", "DP_RANGES", "DP_MARGINALS", "DP_QUANTILES"}


# ------------------------------------------------------------------------------------ grids


def _num(v: float) -> str:
    """A DuckDB double literal for a finite float (repr is exact)."""
    return f"CAST({float(v)!r} AS DOUBLE)"


def _lit(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return _num(value)
    return "'" + str(value).replace("'", "''") + "'"


def _typed_lit(value: Any, type_: str) -> str:
    """``value`` as a constant of SQL type ``type_`` (no type: the plain literal)."""
    if not type_:
        return _lit(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"CAST('{value!r}' AS {type_})"
    return f"CAST({_lit(value)} AS {type_})"


@dataclass(frozen=True)
class Axis:
    """A public grid over one column: ``size`` cells, each row falls in at most one.

    ``kind``: ``"int"`` (integers ``lo + i·step … lo + (i+1)·step − 1``, clamped into
    ``[lo, hi]``), ``"float"`` (equal cells ``[lo + i·w, lo + (i+1)·w)`` of ``[lo, hi]``, the
    last one closed; values clamped) or ``"keys"`` (the declared domain, in its order).
    """

    column: str
    kind: str
    size: int
    lo: float = 0.0
    hi: float = 0.0
    step: float = 1.0
    keys: tuple[Any, ...] = ()
    key_type: str = ""  # the column's SQL type (keys axes): keys are compared as that type

    def cell_sql(self, ref: str) -> str:
        """SQL for the cell index (0 … size−1) of a row, NULL when the row is not counted.

        Keys are cast to the column's type (as at load, where each key was checked to cast),
        so the comparison never casts the column: an untyped ``WHEN 1`` against a VARCHAR
        column made DuckDB cast every row to INTEGER and fail on one row holding ``'x'``, a
        data-dependent refusal that charged nothing."""
        if self.kind == "keys":
            whens = " ".join(f"WHEN {_typed_lit(k, self.key_type)} THEN {i}"
                             for i, k in enumerate(self.keys))
            return f"(CASE {ref} {whens} ELSE NULL END)"
        v = f"TRY_CAST({ref} AS DOUBLE)"
        clamped = f"LEAST(GREATEST({v}, {_num(self.lo)}), {_num(self.hi)})"
        if self.kind == "int" and self.step == 1:
            idx = f"CAST({clamped} - {_num(self.lo)} AS BIGINT)"
        else:
            idx = (f"LEAST(CAST(FLOOR(({clamped} - {_num(self.lo)}) / {_num(self.step)}) AS "
                   f"BIGINT), {self.size - 1})")
        # NULL must be tested first: DuckDB's GREATEST/LEAST skip NULL arguments
        return f"(CASE WHEN {v} IS NULL OR isnan({v}) THEN NULL ELSE {idx} END)"

    def edges(self) -> np.ndarray:
        """``size + 1`` cell edges (numeric axes): cell ``i`` is ``[e_i, e_{i+1})``; for
        integer axes ``e_{i+1} − 1`` is the last integer of cell ``i``."""
        if self.kind == "keys":
            raise ValueError("a categorical axis has no edges")
        e = self.lo + self.step * np.arange(self.size + 1, dtype=np.float64)
        if self.kind == "int":
            e[-1] = self.hi + 1.0
        else:
            e[-1] = self.hi
        return e

    def labels(self) -> list[Any]:
        if self.kind == "keys":
            return list(self.keys)
        e = self.edges()
        if self.kind == "int":
            if self.step == 1:
                return [int(x) for x in e[:-1]]
            return [f"[{int(a)}, {int(b) - 1}]" for a, b in itertools.pairwise(e)]
        return [f"[{a:g}, {b:g}" + ("]" if i == self.size - 1 else ")")
                for i, (a, b) in enumerate(itertools.pairwise(e))]

    def values(self) -> list[Any]:
        """A representative value per cell (synthetic records): the key, the integer, the
        middle integer of an integer cell, the midpoint of a continuous cell."""
        if self.kind == "keys":
            return list(self.keys)
        e = self.edges()
        if self.kind == "int":
            return [int(a) + (int(b) - int(a) - 1) // 2 for a, b in itertools.pairwise(e)]
        return [float((a + b) / 2.0) for a, b in itertools.pairwise(e)]

    def describe(self) -> str:
        if self.kind == "keys":
            return f"{self.column}: {self.size} declared keys"
        if self.kind == "int":
            unit = ("one cell per integer" if self.step == 1
                    else f"cells of {int(self.step)} integers")
            return f"{self.column}: {self.size} cells over [{self.lo:g}, {self.hi:g}] ({unit})"
        return (f"{self.column}: {self.size} equal cells of width {self.step:g} over "
                f"[{self.lo:g}, {self.hi:g}]")


def _ordered_axis(meta: TableMeta, column: str, *, bins: int | None,
                  bounds: Mapping[str, Any] | None) -> Axis:
    """The grid for ranges / CDFs: numeric, bounded, ordered."""
    col = _column(meta, column)
    if not col.numeric:
        raise dsql.QueryError(
            f"column {col.name!r} of {meta.name!r} has type {col.type}; ranges and CDFs need a "
            f"numeric column with declared bounds"
        )
    return _numeric_axis(meta, col, bins=bins, bounds=bounds, integer_cells=MAX_INTEGER_CELLS,
                         target=DEFAULT_BINS)


def _numeric_axis(meta: TableMeta, col: Any, *, bins: int | None,
                  bounds: Mapping[str, Any] | None, integer_cells: int, target: int) -> Axis:
    """The grid of a numeric column over its bounds: integer columns one cell per integer when
    they hold at most ``bins`` (default ``integer_cells``) integers, else ``bins`` cells
    (default: a round number of integers per cell, at most ``target`` cells); continuous
    columns :func:`_float_axis`."""
    lo, hi = _bounds(meta, col.name, bounds)
    nb = _check_bins(bins)
    if col.cls in ("int", "bool"):
        ilo, ihi = math.ceil(lo), math.floor(hi)
        if ihi < ilo:
            raise dsql.QueryError(f"bounds [{lo:g}, {hi:g}] of {col.name!r} contain no integer")
        n = ihi - ilo + 1
        if n <= (nb if nb is not None else integer_cells):
            return Axis(col.name, "int", n, float(ilo), float(ihi), 1.0)
        step = math.ceil(n / nb) if nb is not None else _nice_int_step(n, target)
        return Axis(col.name, "int", math.ceil(n / step), float(ilo), float(ihi), float(step))
    return _float_axis(col.name, lo, hi, nb, target)


def _nice(x: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= ``x`` (> 0)."""
    e = math.floor(math.log10(x))
    for m in (1.0, 2.0, 5.0, 10.0):
        w = m * 10.0**e
        if w >= x * (1 - 1e-12):
            return w
    return 10.0 ** (e + 1)  # pragma: no cover


def _nice_int_step(n: int, target: int) -> int:
    """A round number of integers per cell giving at most ``target`` cells."""
    return max(1, int(_nice(n / target)))


def _float_axis(name: str, lo: float, hi: float, bins: int | None, target: int) -> Axis:
    """``bins`` equal cells; by default cells of a round width (1, 2, 5 × 10^k) from ``lo``,
    at most ``target`` of them (the last one ends at ``hi``)."""
    if bins is not None:
        return Axis(name, "float", bins, lo, hi, (hi - lo) / bins)
    w = _nice((hi - lo) / target)
    size = max(1, math.ceil((hi - lo) / w - 1e-9))
    return Axis(name, "float", size, lo, hi, w)


def _categorical_axis(meta: TableMeta, column: str, *, bins: int | None,
                      bounds: Mapping[str, Any] | None) -> Axis:
    """The grid for marginals / synthetic data: declared keys, else a coarse numeric grid."""
    col = _column(meta, column)
    if col.name in meta.domains:
        return Axis(col.name, "keys", len(meta.domains[col.name]),
                    keys=tuple(meta.domains[col.name]), key_type=str(col.type))
    if not col.numeric:
        raise dsql.QueryError(
            f"column {col.name!r} of {meta.name!r} has no declared domain; the data owner "
            f"declares its keys with add_table(..., domains={{{col.name!r}: [...]}})"
        )
    return _numeric_axis(meta, col, bins=bins, bounds=bounds,
                         integer_cells=MARGINAL_INTEGER_CELLS, target=MARGINAL_BINS)


def _product_axes(meta: TableMeta, names: Sequence[str], *, bins: int | None,
                  bounds: Mapping[str, Any] | None) -> tuple[list[Axis], int]:
    """The categorical axes of ``names`` and the number of cells of their product, refused
    above MAX_PRODUCT_CELLS (marginals and synthetic data)."""
    axes = [_categorical_axis(meta, c, bins=bins, bounds=bounds) for c in names]
    cells = math.prod(a.size for a in axes)
    if cells > MAX_PRODUCT_CELLS:
        raise dsql.QueryError(
            f"the product domain of {', '.join(names)} has {cells} cells (at most "
            f"{MAX_PRODUCT_CELLS}): use fewer columns, or coarser grids (bins=)")
    return axes, cells


def _column(meta: TableMeta, column: Any) -> Any:
    if not isinstance(column, str):
        raise dsql.QueryError(f"a column is named by a string (got {column!r})")
    try:
        return meta.column(column)
    except ValueError as exc:
        raise dsql.QueryError(str(exc)) from None


def _bounds(meta: TableMeta, column: str, bounds: Mapping[str, Any] | None) -> tuple[float, float]:
    from dpkit.engine.tables import check_bounds

    if bounds:
        for k, pair in bounds.items():
            if str(k).lower() == column.lower():
                try:
                    return check_bounds(pair, column)
                except (TypeError, ValueError) as exc:
                    raise dsql.QueryError(str(exc)) from None
    b = meta.bounds_for(column)
    if b is None:
        raise dsql.QueryError(
            f"column {column!r} of {meta.name!r} has no declared bounds; the data owner declares "
            f"them with add_table(..., bounds={{{column!r}: (low, high)}}) (or pass "
            f"bounds={{{column!r}: (low, high)}} to this query)"
        )
    return b


def _check_bins(bins: Any) -> int | None:
    if bins is None:
        return None
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or not (
        1 <= int(bins) <= MAX_INTEGER_CELLS
    ):
        raise dsql.QueryError(f"bins must be an integer in [1, {MAX_INTEGER_CELLS}] (got {bins!r})")
    return int(bins)


# ------------------------------------------------------------------------------ privacy


@dataclass(frozen=True)
class _Privacy:
    """The privacy target of one release, in dpkit.release's terms."""

    epsilon: float | None
    rho: float | None
    delta: float | None  # with epsilon: Gaussian noise at the largest rho meeting (eps, delta)
    delta_share: float | None  # the delta booked in an 'approx' ledger for Gaussian noise

    @property
    def kwargs(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "rho": self.rho, "delta": self.delta}

    @property
    def gaussian(self) -> bool:
        return self.rho is not None or self.delta is not None


def _privacy(ledger: Any, epsilon: Any, rho: Any, delta: Any) -> _Privacy:
    from dpkit.mechanisms import _validate as v

    cfg = ledger.config
    if rho is not None:
        if epsilon is not None:
            raise dsql.QueryError(
                "give epsilon= (with delta= for Gaussian noise) or rho=, not both")
        try:
            r = v.check_rho(rho)
        except (TypeError, ValueError) as exc:
            raise dsql.QueryError(str(exc)) from None
        share = None
        if cfg.accountant == "approx":
            share = float(delta) if delta is not None else cfg.delta / 10.0
            if not 0.0 < share <= cfg.delta:
                raise dsql.QueryError(
                    f"delta must lie in (0, {cfg.delta:g}] (the project's delta) (got {delta!r})")
        return _Privacy(None, r, None, share)
    if epsilon is None:
        raise dsql.QueryError(
            "give the budget to spend: epsilon= (pure DP, discrete Laplace noise), epsilon= with "
            "delta= (discrete Gaussian noise) or rho= (zCDP)"
        )
    eps = dplan.check_epsilon(epsilon)
    if delta is None:
        return _Privacy(eps, None, None, None)
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (
        0.0 < float(delta) <= cfg.delta
    ):
        raise dsql.QueryError(
            f"delta must lie in (0, {cfg.delta:g}] (the project's delta) for Gaussian noise "
            f"(got {delta!r}); leave it out for pure-DP Laplace noise"
        )
    share = float(delta) if cfg.accountant == "approx" else None
    return _Privacy(eps, None, float(delta), share)


# ------------------------------------------------------------------------------ jobs


@dataclass
class _Job:
    """A planned release: everything decided from public information before data are read."""

    kind: str
    meta: TableMeta
    axes: list[Axis]
    where_sql: str | None
    query: str
    privacy: _Privacy
    event: ev.Event
    level: float
    plan: WorkloadPlan | None = None
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    cell_map: np.ndarray | None = None  # ranges: grid cell -> reduced segment (-1: dropped)

    @property
    def contributions(self) -> int:
        return 1 if self.meta.record_level else int(self.meta.max_rows_per_unit)

    @property
    def cells(self) -> int:
        return int(math.prod(a.size for a in self.axes))


@dataclass
class SyntheticData:
    """Synthetic records released by :meth:`ReleaseQueries.synthetic`, and what they cost.

    ``data``: one array per requested column, in order (values: declared keys, integers, or
    cell midpoints for binned numeric columns); :meth:`to_pandas`, :meth:`write` (Parquet or
    CSV, no pandas needed). Post-processing of a private release: any use of it costs no
    further privacy.
    """

    data: Any
    columns: list[str]
    method: str
    event: ev.Event
    epsilon: float
    delta: float
    ledger_seq: int
    query: str
    level: float
    insecure: bool = False
    notes: list[str] = field(default_factory=list)
    split: list[dict[str, Any]] = field(default_factory=list)
    histogram: np.ndarray | None = None
    remaining: float | None = None

    def __len__(self) -> int:
        return len(self.data[self.columns[0]]) if self.columns else 0

    def to_pandas(self) -> Any:
        """A pandas DataFrame of the records (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - pandas is a test dependency
            raise ImportError("to_pandas() needs pandas: pip install pandas; or use "
                              "write(path) for Parquet/CSV") from exc
        return pd.DataFrame({c: self.data[c] for c in self.columns})

    def write(self, path: str | Path) -> None:
        """Write the records as Parquet (``.parquet``/``.pq``) or CSV (anything else)."""
        from dpkit.engine.results import write_columns

        write_columns({c: self.data[c] for c in self.columns}, path)

    def to_parquet(self, path: str | Path) -> None:
        from dpkit.engine.results import write_columns

        write_columns({c: self.data[c] for c in self.columns}, path, fmt="parquet")

    def to_csv(self, path: str | Path) -> None:
        from dpkit.engine.results import write_columns

        write_columns({c: self.data[c] for c in self.columns}, path, fmt="csv")

    def __repr__(self) -> str:
        flag = " INSECURE (seeded noise)" if self.insecure else ""
        return (f"SyntheticData({len(self.data)} records of {', '.join(self.columns)} by "
                f"{self.method}, epsilon {self.epsilon:.4g}{flag})")


def charged_analyst(own: str, given: object) -> str:
    """The analyst a query is charged to: always the one the curator was opened as (by its
    token, or the owner). A caller-chosen name (the removed ``analyst=``) is refused: it would
    let anyone spend another analyst's budget, or escape their own cap."""
    if given is not None:
        raise TypeError(
            f"analyst= was removed: charges go to the analyst whose token opened the project "
            f"(now {own!r}). Open it as that analyst: dp.Curator.open(path, token=...), or set "
            f"DPKIT_TOKEN (the owner makes tokens with cur.add_analyst / `dpkit analyst add`)"
        )
    return own


# ------------------------------------------------------------------------------ the mixin


class ReleaseQueries:
    """Curator methods that answer query families through :mod:`dpkit.release` strategies.

    Mixed into :class:`~dpkit.engine.curator.Curator`, which provides ``ledger``,
    ``_backend``, ``_lock``, ``_source``, ``analyst`` and ``tables()``.
    """

    if TYPE_CHECKING:
        ledger: Any
        _backend: Any
        _lock: Any
        _source: Any
        analyst: str

        def tables(self) -> dict[str, TableMeta]: ...

    # ------------------------------------------------------------------ public methods

    def ranges(
        self,
        table: str,
        column: str,
        ranges: Sequence[tuple[float, float]],
        *,
        where: str | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        delta: float | None = None,
        strategy: Any = None,
        bins: int | None = None,
        bounds: Mapping[str, Any] | None = None,
        level: float = 0.95,
        accuracy: float | None = None,
        analyst: str | None = None,
    ) -> Result:
        """Counts of rows with ``low <= column <= high`` for every ``(low, high)`` in
        ``ranges``, answered together with correlated noise and charged once.

        **Guarantee.** ε-DP (``epsilon=``), ρ-zCDP (``rho=``) or the Gaussian mechanism at
        (ε, δ) (``epsilon=, delta=``) for add/remove one privacy unit with at most
        ``max_rows_per_unit`` rows (see the module docstring). The grid: integer columns one
        cell per integer (when the bounds hold at most 4096 integers), otherwise ``bins``
        (default 1024) equal cells over the declared bounds; values are clamped into the
        bounds. Ranges must lie inside the bounds; on a binned grid their ends are snapped to
        the nearest cell edges (the snapped ends are the ``low``/``high`` columns, and a note
        says so). The workload is reduced to the segments between range ends (public), and
        answered through ``strategy`` (default: the better of the HDMM-optimised strategy for
        exactly this workload and the identity, cached; a tree above 1024 segments).

        Returns a :class:`~dpkit.engine.results.Result` with one row per range: ``low``,
        ``high``, ``count``, ``count_ci_low``, ``count_ci_high`` (each interval at ``level``
        on its own). ``accuracy=`` (instead of ``epsilon=``; also for :meth:`cdf`,
        :meth:`quantiles`, :meth:`marginals`): the largest CI half-width wanted; the smallest
        epsilon meeting it is found from the plans (no data) and spent.

        >>> res = cur.ranges("visits", "age", [(0, 17), (18, 64), (65, 100)], epsilon=0.5)
        ... # doctest: +SKIP
        """
        who = charged_analyst(self.analyst, analyst)
        job = self._planned(
            lambda **p: self._plan_ranges(table, column, ranges, where=where, strategy=strategy,
                                          bins=bins, bounds=bounds, level=level, query=None,
                                          **p),
            {"epsilon": epsilon, "rho": rho, "delta": delta}, accuracy)
        return self._run(job, who, self._finish_ranges)

    def cdf(
        self,
        table: str,
        column: str,
        *,
        where: str | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        delta: float | None = None,
        strategy: Any = None,
        bins: int | None = None,
        bounds: Mapping[str, Any] | None = None,
        level: float = 0.95,
        accuracy: float | None = None,
        analyst: str | None = None,
    ) -> Result:
        """The cumulative distribution of ``column`` over its declared bounds, with a
        **simultaneous** confidence band (all rows at once at ``level``).

        Same guarantee and grid as :meth:`ranges`; the workload is every prefix of the grid
        (the CDF), answered through ``strategy`` (default: the better of the optimised
        strategy and the identity up to 1024 cells, else the b-ary tree: 16-ary for Laplace,
        binary for Gaussian noise). Post-processing: isotonic fit, band tightened by
        monotonicity (:func:`dpkit.release.cdf_band`).

        One row per cell: ``edge`` (integer grid: the count is of values ``<= edge``;
        continuous grid: of values ``< edge``, the last edge included), ``count`` (cumulative,
        with ``count_ci_low/high``) and ``fraction`` (``count`` over the total, with
        ``fraction_ci_low/high`` from the band).
        """
        who = charged_analyst(self.analyst, analyst)
        job = self._planned(
            lambda **p: self._plan_cdf(table, column, where=where, strategy=strategy, bins=bins,
                                       bounds=bounds, level=level, query=None,
                                       probabilities=None, **p),
            {"epsilon": epsilon, "rho": rho, "delta": delta}, accuracy)
        return self._run(job, who, self._finish_cdf)

    def quantiles(
        self,
        table: str,
        column: str,
        probabilities: Sequence[float],
        *,
        where: str | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        delta: float | None = None,
        strategy: Any = None,
        bins: int | None = None,
        bounds: Mapping[str, Any] | None = None,
        level: float = 0.95,
        accuracy: float | None = None,
        analyst: str | None = None,
    ) -> Result:
        """Any number of quantiles of ``column`` from one private CDF (one charge): rows
        ``probability``, ``quantile`` (interpolated in its cell), ``quantile_ci_low/high``
        (cell edges that contain the true quantile's cell, jointly for all rows at ``level``).
        Same guarantee as :meth:`cdf`."""
        who = charged_analyst(self.analyst, analyst)
        job = self._planned(
            lambda **p: self._plan_cdf(table, column, where=where, strategy=strategy, bins=bins,
                                       bounds=bounds, level=level, query=None,
                                       probabilities=probabilities, **p),
            {"epsilon": epsilon, "rho": rho, "delta": delta}, accuracy)
        return self._run(job, who, self._finish_quantiles)

    def marginals(
        self,
        table: str,
        columns: Sequence[str | Sequence[str]],
        *,
        k: int | None = None,
        where: str | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        delta: float | None = None,
        strategy: Any = None,
        bins: int | None = None,
        bounds: Mapping[str, Any] | None = None,
        level: float = 0.95,
        accuracy: float | None = None,
        analyst: str | None = None,
    ) -> Result:
        """Marginal tables (contingency tables) over declared domains, answered together.

        ``columns``: a list of column names, whose ``k``-way marginals are all released
        (``k`` default ``min(2, len(columns))``), or a list of column tuples naming the
        marginals explicitly (``[("ward",), ("ward", "sex")]``). Categorical columns use their
        declared domain (rows with other values are not counted); numeric columns a grid over
        their bounds (one cell per integer up to 64 integers, else ``bins``, default 16). The
        product domain may hold at most 4096 cells.

        Same guarantee as :meth:`ranges`. All marginals are one workload answered through one
        strategy (default: the better of the HDMM-optimised strategy and the identity up to
        1024 cells, the identity above), so they are mutually consistent (they come from one
        least-squares histogram). One row per cell of each marginal: ``marginal`` (e.g.
        ``"ward x age"``), the columns (``None`` where a column is not in that marginal),
        ``count`` and its interval; the expected RMSE per marginal is in ``split``/``notes``.
        """
        who = charged_analyst(self.analyst, analyst)
        job = self._planned(
            lambda **p: self._plan_marginals(table, columns, k=k, where=where,
                                             strategy=strategy, bins=bins, bounds=bounds,
                                             level=level, query=None, **p),
            {"epsilon": epsilon, "rho": rho, "delta": delta}, accuracy)
        return self._run(job, who, self._finish_marginals)

    def synthetic(
        self,
        table: str,
        columns: Sequence[str],
        *,
        where: str | None = None,
        epsilon: float | None = None,
        rho: float | None = None,
        delta: float | None = None,
        rows: int | None = None,
        method: str = "factorization",
        k: int | None = None,
        rounds: int = 20,
        bins: int | None = None,
        bounds: Mapping[str, Any] | None = None,
        level: float = 0.95,
        analyst: str | None = None,
    ) -> SyntheticData:
        """Synthetic records over the declared domains of ``columns``, charged to the ledger.

        **What it protects.** The records are post-processing of one differentially private
        release of the table's histogram over the public product grid of ``columns`` (each
        unit cut to ``max_rows_per_unit`` rows, values clamped / mapped to their declared
        keys): ε-DP (``epsilon=``) or ρ-zCDP (``rho=``; ``epsilon=, delta=`` converts to the
        largest ρ meeting (ε, δ)) for add/remove one privacy unit. No synthetic record is a
        real row; what they preserve is what the release measured: the ``k``-way marginals
        (default ``k = min(2, len(columns))``), approximately. Relationships with other
        columns, and finer detail than the grid, are not preserved.

        ``method``: ``"factorization"`` (default: all ``k``-way marginals measured through
        one optimised strategy, least-squares histogram, negative cells set to 0, rounded to
        records by largest remainder) or ``"mwem"`` (Hardt-Ligett-McSherry 2012: ``rounds``
        rounds of exponential-mechanism selection + measurement of the worst-answered
        marginal cell, multiplicative weights; 5% of the budget estimates the number of
        records). On these grids (at most 4096 cells) the factorization is the more accurate:
        measured on 6000 rows, 4 wards + 1 empty declared ward, ε = 1, the empty ward got 15
        synthetic records against MWEM's 652 of 4680. ``rows``: the number of records to
        output (default: the private estimate of the number of rows).
        Returns :class:`SyntheticData` (``.to_pandas()``, ``.to_parquet(path)``,
        ``.to_csv(path)``), with the ledger entry's sequence number and cost.
        """
        who = charged_analyst(self.analyst, analyst)
        job = self._plan_synthetic(table, columns, where=where, epsilon=epsilon, rho=rho,
                                   delta=delta, rows=rows, method=method, k=k, rounds=rounds,
                                   bins=bins, bounds=bounds, level=level)
        return self._run(job, who, self._finish_synthetic)

    def preview_release(
        self,
        kind: str,
        table: str,
        *args: Any,
        analyst: str | None = None,
        **kwargs: Any,
    ) -> Preview:
        """Cost and expected accuracy of :meth:`ranges` / :meth:`cdf` / :meth:`quantiles` /
        :meth:`marginals` (``kind``) with the same arguments, without reading data or spending
        anything. ``outputs`` lists the expected RMSE and the largest CI half-width."""
        from dpkit.accounting import BudgetExceeded

        who = charged_analyst(self.analyst, analyst)
        if kind == "ranges":
            job = self._plan_ranges(table, *args, query=None, **kwargs)
        elif kind == "cdf":
            job = self._plan_cdf(table, *args, query=None, probabilities=None, **kwargs)
        elif kind == "quantiles":
            col, probs = args
            job = self._plan_cdf(table, col, query=None, probabilities=probs, **kwargs)
        elif kind == "marginals":
            job = self._plan_marginals(table, *args, query=None, **kwargs)
        else:
            raise dsql.QueryError(
                f"kind must be 'ranges', 'cdf', 'quantiles' or 'marginals' (got {kind!r})")
        spend = self.ledger.spend(who if who in self.ledger.analyst_budgets() else None)
        try:
            cost = self._release_cost(job, who).epsilon
        except BudgetExceeded as exc:
            cost = float(exc.requested.epsilon)
        outputs: list[dict[str, Any]] = []
        assert job.plan is not None
        band = kind in ("cdf", "quantiles")
        lvl = job.level
        if band:
            from dpkit.release.quantiles import band_level

            lvl = band_level(job.level, job.plan.workload.domain_size)
        half = job.plan.halfwidths(lvl)
        rmse = job.plan.expected_rmse
        outputs.append({
            "name": f"{kind} ({job.plan.workload.num_queries} queries)",
            "halfwidth": None if half is None else float(np.max(half)),
            "note": (f"expected RMSE {rmse:.4g} per query; strategy {job.plan.strategy.name}"
                     if rmse is not None else f"strategy {job.plan.strategy.name}")
            + ("; half-width of the simultaneous band (at most)" if band else ""),
        })
        return Preview(query=job.query, epsilon=float(job.privacy.epsilon or 0.0), cost=cost,
                       remaining=spend.remaining, delta=float(job.privacy.delta_share or 0.0),
                       level=job.level, split=self._split(job), outputs=outputs,
                       event=job.event, notes=list(job.notes))

    # ------------------------------------------------------------------ SQL forms

    def _release_sql(self, query: str, **kwargs: Any) -> Any:
        """Answer ``query`` if it is one of the release forms (module docstring); ``None``
        otherwise, so every other statement takes the ordinary SQL path untouched."""
        import sqlglot
        from sqlglot import exp

        if not isinstance(query, str):
            return None
        low = query.lower()
        if "dp_" not in low and "filter" not in low:  # the ordinary path pays no extra parse
            return None
        try:
            statements = [s for s in sqlglot.parse(query, read="duckdb") if s is not None]
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
            return None
        if len(statements) != 1 or not isinstance(statements[0], exp.Select):
            return None
        stmt = statements[0]
        ours = any(isinstance(n, exp.Anonymous) and str(n.name).upper() in _FUNCS
                   for n in stmt.walk())
        filters = [n for n in stmt.expressions if isinstance(n.unalias(), exp.Filter)]
        if not ours and not filters:
            return None
        return self._answer_sql(query, stmt, **kwargs)

    def _answer_sql(self, query: str, stmt: Any, *, epsilon: float | None, rho: float | None,
                    delta: float | None, accuracy: Any, noise: str, level: float,
                    bounds: Mapping[str, Any] | None, analyst: str) -> Any:
        from sqlglot import exp

        allowed = {"expressions", "from", "from_", "where"}
        for key, value in stmt.args.items():
            if key in allowed or value is None or value is False or value == []:
                continue
            raise dsql.QueryError(
                f"a range/CDF/marginal family takes no {key.rstrip('_').upper()} clause; write "
                f"SELECT DP_CDF(col) FROM table [WHERE ...] (run one query per group, with the "
                f"group in WHERE)")
        for node in stmt.walk():
            if isinstance(node, exp.Subquery | exp.Exists | exp.Window | exp.Placeholder
                          | exp.Parameter) or (isinstance(node, exp.Select) and node is not stmt):
                raise dsql.QueryError(
                    "subqueries, window functions and parameters are not allowed in a "
                    "range/CDF/marginal family; write SELECT DP_CDF(col) FROM table [WHERE ...]")
        frm = stmt.args.get("from") or stmt.args.get("from_")
        tbl = frm.this if frm is not None else None
        if not isinstance(tbl, exp.Table) or not isinstance(tbl.this, exp.Identifier) or (
            tbl.args.get("db") or tbl.args.get("catalog") or tbl.args.get("sample")
        ):
            raise dsql.QueryError(
                "FROM must name one registered table, e.g. SELECT DP_CDF(age) FROM visits")
        table = self._table_meta(tbl.name).name
        alias = tbl.alias
        where_node = stmt.args.get("where")
        where = where_node.this.sql(dialect="duckdb") if where_node is not None else None
        where_sql_alias = alias if alias and where is not None else None
        privacy_kw = self._sql_privacy(epsilon=epsilon, rho=rho, delta=delta, noise=noise,
                                       accuracy=accuracy)
        outs = [e.unalias() for e in stmt.expressions]
        names = [e.alias_or_name if isinstance(e, exp.Alias) else "" for e in stmt.expressions]
        common = {"where": where, "level": level, "bounds": bounds, "query": query,
                  "where_alias": where_sql_alias}

        def planned(fn: Callable[..., _Job], **kw: Any) -> _Job:
            return self._planned(lambda **p: fn(**kw, **common, **p), privacy_kw, accuracy)

        if all(isinstance(o, exp.Filter) for o in outs):
            column, pairs = self._filter_family(outs)
            job = planned(self._plan_ranges, table=table, column=column, ranges=pairs,
                          strategy=None, bins=None)
            job.details["names"] = [n or f"range_{i}" for i, n in enumerate(names)]
            return self._run(job, analyst, self._finish_ranges)
        if len(outs) != 1 or not isinstance(outs[0], exp.Anonymous) or str(
                outs[0].name).upper() not in _FUNCS:
            raise dsql.QueryError(
                "a DP_CDF / DP_QUANTILES / DP_RANGES / DP_MARGINALS call must be the only output "
                "(or every output a COUNT(*) FILTER (WHERE col BETWEEN a AND b)); e.g. "
                "SELECT DP_CDF(age) FROM visits")
        fn = outs[0]
        fname = str(fn.name).upper()
        args = list(fn.expressions)
        if fname == "DP_CDF":
            if len(args) not in (1, 2) or not isinstance(args[0], exp.Column):
                raise dsql.QueryError(
                    "write DP_CDF(column) or DP_CDF(column, bins), e.g. DP_CDF(age)")
            bins = int(_number_of(args[1], "DP_CDF bins")) if len(args) == 2 else None
            job = planned(self._plan_cdf, table=table, column=_col_name(args[0], alias),
                          strategy=None, bins=bins, probabilities=None)
            return self._run(job, analyst, self._finish_cdf)
        if fname == "DP_QUANTILES":
            if len(args) < 2 or not isinstance(args[0], exp.Column):
                raise dsql.QueryError(
                    "write DP_QUANTILES(column, p1, p2, ...), e.g. DP_QUANTILES(age, 0.5, 0.9)")
            probs = [_number_of(a, "a quantile probability") for a in args[1:]]
            job = planned(self._plan_cdf, table=table, column=_col_name(args[0], alias),
                          strategy=None, bins=None, probabilities=probs)
            return self._run(job, analyst, self._finish_quantiles)
        if fname == "DP_RANGES":
            if len(args) < 2 or not isinstance(args[0], exp.Column):
                raise dsql.QueryError(
                    "write DP_RANGES(column, (low, high), ...), e.g. DP_RANGES(age, (0, 17), "
                    "(18, 64))")
            pairs = []
            for a in args[1:]:
                if not isinstance(a, exp.Tuple) or len(a.expressions) != 2:
                    raise dsql.QueryError(
                        f"each range of DP_RANGES is a pair (low, high) of numbers (got "
                        f"{a.sql(dialect='duckdb')[:40]})")
                pairs.append((_number_of(a.expressions[0], "a range end"),
                              _number_of(a.expressions[1], "a range end")))
            job = planned(self._plan_ranges, table=table, column=_col_name(args[0], alias),
                          ranges=pairs, strategy=None, bins=None)
            return self._run(job, analyst, self._finish_ranges)
        # DP_MARGINALS(col, col, ... [, k])
        cols: list[str] = []
        kk: int | None = None
        for i, a in enumerate(args):
            if isinstance(a, exp.Column):
                cols.append(_col_name(a, alias))
            elif i == len(args) - 1 and cols:
                kk = int(_number_of(a, "k"))
            else:
                raise dsql.QueryError(
                    "write DP_MARGINALS(col1, col2, ... [, k]), e.g. DP_MARGINALS(ward, age)")
        if not cols:
            raise dsql.QueryError("write DP_MARGINALS(col1, col2, ... [, k])")
        job = planned(self._plan_marginals, table=table, columns=cols, k=kk, strategy=None,
                      bins=None)
        return self._run(job, analyst, self._finish_marginals)

    def _sql_privacy(self, *, epsilon: float | None, rho: float | None, delta: float | None,
                     noise: str, accuracy: Any = None) -> dict[str, Any]:
        kind = str(noise).lower()
        if kind not in (dplan.LAPLACE, dplan.GAUSSIAN):
            raise dsql.QueryError(f"noise must be 'laplace' or 'gaussian' (got {noise!r})")
        if rho is not None:
            return {"epsilon": None, "rho": rho, "delta": delta}
        if kind == dplan.GAUSSIAN:
            cfg = self.ledger.config
            if cfg.delta <= 0:
                raise dsql.QueryError(
                    "Gaussian noise needs a project with delta > 0; use noise='laplace'")
            return {"epsilon": epsilon if accuracy is None else None, "rho": None,
                    "delta": delta if delta is not None else cfg.delta / 10.0}
        return {"epsilon": epsilon, "rho": None, "delta": None}

    @staticmethod
    def _filter_family(outs: list[Any]) -> tuple[str, list[tuple[float, float]]]:
        from sqlglot import exp

        column: str | None = None
        pairs: list[tuple[float, float]] = []
        hint = ("write every output as COUNT(*) FILTER (WHERE col BETWEEN low AND high) over the "
                "same column, with numbers for low and high")
        for o in outs:
            agg, cond = o.this, o.expression
            cond = cond.this if isinstance(cond, exp.Where) else cond
            if not isinstance(agg, exp.Count) or not isinstance(agg.this, exp.Star):
                raise dsql.QueryError(f"only COUNT(*) may carry FILTER here; {hint}")
            if not isinstance(cond, exp.Between) or not isinstance(cond.this, exp.Column):
                raise dsql.QueryError(f"FILTER (WHERE {cond.sql(dialect='duckdb')[:40]}): {hint}")
            name = cond.this.name
            if column is not None and name.lower() != column.lower():
                raise dsql.QueryError(
                    f"a FILTER family counts ranges of one column (got {column!r} and "
                    f"{name!r}); send one query per column")
            column = name
            pairs.append((_number_of(cond.args["low"], "BETWEEN low"),
                          _number_of(cond.args["high"], "BETWEEN high")))
        assert column is not None
        return column, pairs

    # ------------------------------------------------------------------ planning

    def _planned(self, plan_fn: Callable[..., _Job], privacy: dict[str, Any],
                 accuracy: Any) -> _Job:
        """``plan_fn(**privacy)``, or with ``accuracy=``: the plan at the smallest epsilon whose
        largest CI half-width (the band's, for CDFs) is at most ``accuracy`` (data-independent:
        found from the plans alone; ``delta`` given: Gaussian noise at (epsilon, delta))."""
        if accuracy is None:
            return plan_fn(**privacy)
        if privacy.get("epsilon") is not None or privacy.get("rho") is not None:
            raise dsql.QueryError("give epsilon= (or rho=) or accuracy=, not both")
        if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not (
            math.isfinite(accuracy) and accuracy > 0
        ):
            raise dsql.QueryError(
                f"accuracy must be a number > 0: the largest CI half-width wanted (got "
                f"{accuracy!r})")
        target = float(accuracy)
        delta = privacy.get("delta")

        def at(eps: float) -> tuple[_Job, float]:
            job = plan_fn(epsilon=eps, rho=None, delta=delta)
            assert job.plan is not None
            lvl = job.level
            if job.kind in ("cdf", "quantiles"):
                from dpkit.release.quantiles import band_level

                lvl = band_level(job.level, job.plan.workload.domain_size)
            half = job.plan.halfwidths(lvl)
            if half is None:
                raise dsql.QueryError("accuracy= needs at most 8192 cells; give epsilon=")
            return job, float(np.max(half))

        lo, hi = 1e-4, dplan.MAX_QUERY_EPSILON
        best, width = at(hi)
        if width > target:
            raise dsql.QueryError(
                f"accuracy {target:g} cannot be reached even at epsilon {hi:g} (half-width "
                f"{width:.4g}); relax it")
        for _ in range(40):
            if hi / lo < 1.0 + 1e-3:
                break
            mid = math.sqrt(lo * hi)
            job, width = at(mid)
            if width <= target:
                best, hi = job, mid
            else:
                lo = mid
        best.notes.append(f"accuracy {target:g}: epsilon {hi:.4g} is the smallest (to 0.1%) "
                          f"whose largest CI half-width meets it")
        return best

    def _table_meta(self, table: Any) -> TableMeta:
        catalog = self.tables()
        if not isinstance(table, str):
            raise dsql.QueryError(f"name the table by a string (got {table!r})")
        meta = catalog.get(table)
        if meta is None:
            folded = [m for n, m in catalog.items() if n.lower() == table.lower()]
            meta = folded[0] if len(folded) == 1 else None
        if meta is None:
            known = ", ".join(sorted(catalog)) or "(none yet)"
            raise dsql.QueryError(f"unknown table {table!r}; registered tables: {known}")
        if meta.public:
            raise dsql.QueryError(
                f"{meta.name!r} is a public table (no privacy, nothing to release): query it "
                f"directly")
        return meta

    def _where(self, meta: TableMeta, where: str | None, alias: str | None = None) -> str | None:
        """Validate ``where`` with the curator's own SQL front end; DuckDB text over the alias
        ``"__t"``, or None."""
        if where is None:
            return None
        if not isinstance(where, str) or not where.strip():
            raise dsql.QueryError("where= must be a SQL condition, e.g. \"ward = 'A'\"")
        frm = quote_ident(meta.name) + (f" AS {quote_ident(alias)}" if alias else "")
        spec = dsql.parse_query(f"SELECT COUNT(*) FROM {frm} WHERE {where}", self.tables())
        if (spec.joins or spec.group_by or spec.having is not None or spec.order
                or spec.limit is not None or spec.offset is not None or len(spec.aggs) != 1
                or spec.where is None or spec.table != meta.name):
            raise dsql.QueryError(
                f"where= must be one condition on the columns of {meta.name!r} (got {where!r})")
        w = spec.where.sql(dialect="duckdb")
        return f"COALESCE(TRY({w}), FALSE)" if spec.where_risky else f"({w})"

    def _new_job(self, kind: str, meta: TableMeta, axes: list[Axis], *, where: str | None,
                 where_alias: str | None, epsilon: Any, rho: Any, delta: Any, level: Any,
                 query: str | None, default_query: str) -> _Job:
        from dpkit.mechanisms import _validate as v

        try:
            lvl = v.check_level(level)
        except (TypeError, ValueError) as exc:
            raise dsql.QueryError(str(exc)) from None
        privacy = _privacy(self.ledger, epsilon, rho, delta)
        where_sql = self._where(meta, where, where_alias)
        text = query if query is not None else default_query + (
            f" WHERE {where}" if where is not None else "")
        return _Job(kind=kind, meta=meta, axes=axes, where_sql=where_sql, query=text,
                    privacy=privacy, event=ev.NoOp(), level=lvl)

    def _strategy_cache(self) -> Path | None:
        """Optimised strategies are public (they depend only on the workload): kept on disk in
        the project folder so that later processes (the CLI) skip the optimisation."""
        path = getattr(self, "path", None)
        return Path(path) / STRATEGY_CACHE if path is not None else None

    def _attach_plan(self, job: _Job, workload: Any, strategy: Any) -> None:
        from dpkit.release import plan_workload

        try:
            plan = plan_workload(workload, strategy, contributions=job.contributions,
                                 cache_dir=self._strategy_cache(), **job.privacy.kwargs)
        except (TypeError, ValueError) as exc:
            raise dsql.QueryError(f"{exc} (nothing charged)") from None
        job.plan = plan
        job.event = plan.event
        job.details["release"] = _jsonable(plan.summary())

    def _plan_ranges(self, table: str, column: str, ranges: Any, *, where: str | None = None,
                     epsilon: Any = None, rho: Any = None, delta: Any = None,
                     strategy: Any = None, bins: int | None = None,
                     bounds: Mapping[str, Any] | None = None, level: Any = 0.95,
                     query: str | None, where_alias: str | None = None) -> _Job:
        from dpkit.release import workloads

        meta = self._table_meta(table)
        axis = _ordered_axis(meta, column, bins=bins, bounds=bounds)
        pairs = _check_ranges(ranges, axis)
        cells_lo, cells_hi, snapped = _snap(pairs, axis)
        text = (f"SELECT DP_RANGES({axis.column}, "
                + ", ".join(f"({a:g}, {b:g})" for a, b in pairs)
                + f") FROM {meta.name}")
        job = self._new_job("ranges", meta, [axis], where=where, where_alias=where_alias,
                            epsilon=epsilon, rho=rho, delta=delta, level=level, query=query,
                            default_query=text)
        # public domain reduction: only the segments between range ends matter
        brk = np.unique(np.concatenate([cells_lo, cells_hi + 1]))
        seg_of_cell = np.searchsorted(brk, np.arange(axis.size), side="right") - 1
        covered = np.zeros(brk.size, dtype=bool)
        for a, b in zip(cells_lo, cells_hi, strict=True):
            covered[seg_of_cell[a]: seg_of_cell[b] + 1] = True
        seg_index = np.cumsum(covered) - 1
        cell_map = np.where((seg_of_cell >= 0) & covered[np.clip(seg_of_cell, 0, None)],
                            seg_index[np.clip(seg_of_cell, 0, None)], -1)
        n_seg = int(covered.sum())
        lo_r = cell_map[cells_lo]
        hi_r = cell_map[cells_hi]
        W = workloads.ranges(list(zip(lo_r.tolist(), hi_r.tolist(), strict=True)), n_seg)
        if strategy is None and n_seg > OPTIMIZE_CELLS:
            strategy = "tree"
        self._attach_plan(job, W, strategy)
        job.cell_map = cell_map
        edges = axis.edges()
        job.details.update({"grid": axis.describe(), "segments": n_seg,
                            "requested": [list(p) for p in pairs]})
        job.details["low"] = [float(edges[a]) for a in cells_lo]
        job.details["high"] = [float(edges[b + 1] - 1) if axis.kind == "int"
                               else float(edges[b + 1]) for b in cells_hi]
        job.notes.append(f"grid {axis.describe()}; the {len(pairs)} ranges need {n_seg} "
                         f"segments (public domain reduction)")
        if snapped:
            job.notes.append(
                f"range ends snapped to the nearest cell edges ({snapped} of {len(pairs)} "
                f"ranges changed): the low/high columns are the ranges actually counted"
                + (" ([low, high), the last cell closed)" if axis.kind == "float" else ""))
        return job

    def _plan_cdf(self, table: str, column: str, *, where: str | None = None,
                  epsilon: Any = None, rho: Any = None, delta: Any = None,
                  strategy: Any = None, bins: int | None = None,
                  bounds: Mapping[str, Any] | None = None, level: Any = 0.95,
                  query: str | None, probabilities: Any, where_alias: str | None = None) -> _Job:
        from dpkit.release import workloads

        meta = self._table_meta(table)
        axis = _ordered_axis(meta, column, bins=bins, bounds=bounds)
        probs: list[float] | None = None
        if probabilities is not None:
            try:
                probs = [float(p) for p in probabilities]
            except (TypeError, ValueError):
                raise dsql.QueryError(
                    f"probabilities must be numbers in [0, 1] (got {probabilities!r})") from None
            if not probs or any(not (0.0 <= p <= 1.0) for p in probs):
                raise dsql.QueryError(
                    f"probabilities must be numbers in [0, 1] (got {probabilities!r})")
        if probs is None:
            text = f"SELECT DP_CDF({axis.column}) FROM {meta.name}"
        else:
            text = (f"SELECT DP_QUANTILES({axis.column}, {', '.join(f'{p:g}' for p in probs)}) "
                    f"FROM {meta.name}")
        job = self._new_job("quantiles" if probs else "cdf", meta, [axis], where=where,
                            where_alias=where_alias, epsilon=epsilon, rho=rho, delta=delta,
                            level=level, query=query, default_query=text)
        if strategy is None and axis.size > OPTIMIZE_CELLS:
            strategy = "tree"
        self._attach_plan(job, workloads.prefix(axis.size), strategy)
        job.details.update({"grid": axis.describe()})
        if probs is not None:
            job.details["probabilities"] = probs
        job.notes.append(f"grid {axis.describe()}; band simultaneous over all {axis.size} "
                         f"prefixes at level {job.level:g}")
        return job

    def _plan_marginals(self, table: str, columns: Any, *, k: int | None = None,
                        where: str | None = None, epsilon: Any = None, rho: Any = None,
                        delta: Any = None, strategy: Any = None, bins: int | None = None,
                        bounds: Mapping[str, Any] | None = None, level: Any = 0.95,
                        query: str | None, where_alias: str | None = None) -> _Job:
        from dpkit.release import workloads

        meta = self._table_meta(table)
        names, sets = _marginal_sets(meta, columns, k)
        axes, cells = _product_axes(meta, names, bins=bins, bounds=bounds)
        text = (f"SELECT DP_MARGINALS({', '.join(names)}"
                + (f", {k}" if k is not None else "") + f") FROM {meta.name}")
        if query is None and k is None and any(len(s) != len(sets[0]) for s in sets):
            text = (f"MARGINALS {meta.name} "
                    + "; ".join(" x ".join(names[i] for i in s) for s in sets))
        job = self._new_job("marginals", meta, axes, where=where, where_alias=where_alias,
                            epsilon=epsilon, rho=rho, delta=delta, level=level, query=query,
                            default_query=text)
        W = workloads.marginals(tuple(a.size for a in axes), sets)
        if strategy is None and cells > OPTIMIZE_CELLS:
            strategy = "identity"
        self._attach_plan(job, W, strategy)
        job.details.update({"grid": [a.describe() for a in axes],
                            "marginals": [[names[i] for i in s] for s in sets]})
        job.notes.append("grids: " + "; ".join(a.describe() for a in axes))
        return job

    def _plan_synthetic(self, table: str, columns: Any, *, where: str | None, epsilon: Any,
                        rho: Any, delta: Any, rows: int | None, method: str, k: int | None,
                        rounds: int, bins: int | None, bounds: Mapping[str, Any] | None,
                        level: Any) -> _Job:
        from dpkit.accounting import zcdp
        from dpkit.release import mwem_event, workloads

        meta = self._table_meta(table)
        if isinstance(columns, str):
            columns = [c.strip() for c in columns.split(",") if c.strip()]
        cols = list(columns or [])
        if not cols or not all(isinstance(c, str) for c in cols):
            raise dsql.QueryError("columns must be a list of column names, e.g. ['ward', 'age']")
        names, sets = _marginal_sets(meta, cols, k)
        axes, cells = _product_axes(meta, names, bins=bins, bounds=bounds)
        if method not in ("mwem", "factorization"):
            raise dsql.QueryError(f"method must be 'mwem' or 'factorization' (got {method!r})")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)
                                 or not 1 <= rows <= 100_000_000):
            raise dsql.QueryError(f"rows must be an integer in [1, 1e8] (got {rows!r})")
        text = (f"SYNTHETIC {meta.name} ({', '.join(names)}) method={method}"
                + (f" k={k}" if k is not None else ""))
        job = self._new_job("synthetic", meta, axes, where=where, where_alias=None,
                            epsilon=epsilon, rho=rho, delta=delta, level=level, query=None,
                            default_query=text)
        W = workloads.marginals(tuple(a.size for a in axes), sets)
        job.details.update({"grid": [a.describe() for a in axes], "method": method,
                            "marginals": [[names[i] for i in s] for s in sets], "rows": rows})
        if method == "factorization":
            self._attach_plan(job, W, None if cells <= OPTIMIZE_CELLS else "identity")
        else:
            p = job.privacy
            rho_m = p.rho
            if p.delta is not None:
                assert p.epsilon is not None
                rho_m = zcdp.epsilon_to_rho(p.epsilon, p.delta)
            try:
                r = int(rounds)
                job.event = mwem_event(W, epsilon=p.epsilon if rho_m is None else None,
                                       rho=rho_m, rounds=r, contributions=job.contributions)
            except (TypeError, ValueError) as exc:
                raise dsql.QueryError(f"{exc} (nothing charged)") from None
            job.details.update({"rounds": r, "mwem_rho": rho_m})
            job.details["workload"] = W
        return job

    # ------------------------------------------------------------------ execution

    def _release_cost(self, job: _Job, who: str, *, check_only: bool = False) -> Any:
        from dpkit.accounting import BudgetExceeded, UnsupportedEvent

        try:
            if check_only:
                return self.ledger.check(job.event, analyst=who,
                                         delta_share=job.privacy.delta_share)
            return self.ledger.cost(job.event, analyst=who, delta_share=job.privacy.delta_share)
        except UnsupportedEvent as exc:
            raise dsql.QueryError(
                f"the project's accountant ({self.ledger.config.accountant}) cannot pay for this "
                f"release: {exc}. Use epsilon= (Laplace noise), or a project with an 'approx' "
                f"or 'zcdp' accountant") from None
        except BudgetExceeded:
            raise
        except (ValueError, ArithmeticError) as exc:
            raise dsql.QueryError(
                f"the project's accountant ({self.ledger.config.accountant}) failed on this "
                f"release's event: {str(exc).splitlines()[0]}. Nothing was charged") from None

    def _run(self, job: _Job, who: str, finish: Callable[..., Any]) -> Any:
        with self._lock:
            self._release_cost(job, who, check_only=True)  # early refusal, nothing read
            x = self._histogram(job)
            details = {k: v for k, v in job.details.items() if k != "workload"}
            details.update({"kind": job.kind, "level": job.level, "table": job.meta.name,
                            "contributions": job.contributions})
            entry = self.ledger.charge(job.event, analyst=who, query=job.query,
                                       delta_share=job.privacy.delta_share,
                                       details=_jsonable(details))
            # ---- from here on the charge is durable: noise, then the answer
            spend = self.ledger.spend(who if who in self.ledger.analyst_budgets() else None)
            return finish(job, x, entry, spend.remaining)

    def _unit_totals(self, meta: TableMeta) -> str | None:
        """The hidden per-unit row-total column stored at load time, when there is one: units
        whose total is within the cap skip the bounding work (the output is unchanged)."""
        import inspect

        name_of = getattr(dplan, "unit_rows_column_name", None)
        if name_of is None or meta.storage != "copy" or meta.privacy_unit is None:
            return None
        if "total_col" not in inspect.signature(dplan.bounding_ctes).parameters:
            return None
        name = str(name_of(str(meta.privacy_unit)))
        return name if name in self._backend.fixed_columns(meta.stored_name) else None

    def _histogram(self, job: _Job) -> np.ndarray:
        """The exact integer histogram over the job's product grid (never leaves the engine)."""
        from dpkit.engine.backend_duckdb import private_read_errors, relation_name

        meta = job.meta
        alias = quote_ident(dsql.PRIVATE_ALIAS)
        cells = [f"{a.cell_sql(f'{alias}.{quote_ident(a.column)}')} AS __c{i}"
                 for i, a in enumerate(job.axes)]
        cnames = [f"__c{i}" for i in range(len(job.axes))]
        proj = list(cells)
        total_col = None
        if not meta.record_level:
            proj.insert(0, f"{alias}.{quote_ident(str(meta.privacy_unit))} AS __u")
            total_col = self._unit_totals(meta)
            if total_col is not None:
                proj.append(f"{alias}.{quote_ident(total_col)} AS __nt")
        conds = [job.where_sql] if job.where_sql else []
        rel = meta.relation or relation_name(meta.name, False)
        inner = (f"SELECT {', '.join(proj)} FROM {rel} AS {alias}"
                 + (f" WHERE {' AND '.join(conds)}" if conds else ""))
        keep = " AND ".join(f"{c} IS NOT NULL" for c in cnames)
        ctes = [f"__src0 AS ({inner})", f"__src AS (SELECT * FROM __src0 WHERE {keep})"]
        current = "__src"
        if not meta.record_level:
            seed = int(_noise.uniform_int(2**63 - 1, 1, source=self._source)[0])
            extra = {"total_col": "__nt"} if total_col is not None else {}
            bound, current = dplan.bounding_ctes(
                current, ["__u", *cnames], [], m=int(meta.max_rows_per_unit),
                seed_lit=f"CAST({seed} AS UBIGINT)", **extra)
            ctes.extend(bound)
        cols = ", ".join(cnames)
        text = (f"WITH {', '.join(ctes)} SELECT {cols}, COUNT(*) AS __n FROM {current} "
                f"GROUP BY {cols}")
        with private_read_errors("release"):
            keys, out = self._backend.run(text, cnames, ["__n"])
        shape = tuple(a.size for a in job.axes)
        x = np.zeros(shape, dtype=np.int64)
        for key, n in zip(keys, out["__n"], strict=True):
            x[tuple(int(k) for k in key)] += int(n)
        return x.reshape(-1)

    # ------------------------------------------------------------------ results

    def _split(self, job: _Job, epsilon_cost: float | None = None) -> list[dict[str, Any]]:
        p = job.privacy
        entry: dict[str, Any] = {
            "measurement": f"{job.kind}: histogram over {job.cells} cells of "
                           f"{', '.join(a.column for a in job.axes)}",
            "epsilon": p.epsilon if p.epsilon is not None else (epsilon_cost or 0.0),
            "rho": job.plan.noise.rho if job.plan is not None and p.gaussian else p.rho,
            "delta": p.delta_share or 0.0,
            "contributions": job.contributions,
        }
        if job.plan is not None:
            s = job.plan.summary()
            entry.update({
                "mechanism": f"factorization mechanism: strategy {s['strategy']}, discrete "
                             f"{'Gaussian' if s['noise'] == 'gaussian' else 'Laplace'} noise",
                "sensitivity": job.contributions,
                "strategy_sensitivity": s["sensitivity"],
                "strategy": s["strategy"],
                "workload": s["workload"],
                "queries": s["queries"],
                "expected_rmse": s["expected_rmse"],
                "noise_parameter": s["noise_parameter"],
            })
        else:
            entry.update({"mechanism": "MWEM (exponential mechanism + "
                                       f"{'Gaussian' if p.gaussian else 'Laplace'} measurements)",
                          "sensitivity": job.contributions})
        return [entry]

    def _result(self, job: _Job, entry: Any, remaining: float, columns: list[str],
                data: dict[str, Any], kinds: dict[str, str], notes: list[str]) -> Result:
        eps_cost = float(entry.view["epsilon_cost"])
        return Result(
            columns=columns, data={c: np.asarray(data[c]) for c in columns}, kinds=kinds,
            query=job.query, event=job.event, epsilon=eps_cost,
            delta=float(entry.view.get("delta_cost") or 0.0), level=job.level,
            split=self._split(job, eps_cost),
            insecure=bool(self._source is not None and self._source.insecure),
            ledger_seq=entry.seq, notes=notes, remaining=remaining)

    def _finish_ranges(self, job: _Job, x: np.ndarray, entry: Any, remaining: float) -> Result:
        assert job.plan is not None and job.cell_map is not None
        keep = job.cell_map >= 0
        xr = np.bincount(job.cell_map[keep], weights=x[keep],
                         minlength=job.plan.workload.domain_size).astype(np.int64)
        rel = job.plan.answer(xr, level=job.level, source=self._source)
        assert rel.ci is not None
        low, high = rel.ci
        columns = ["low", "high", "count", "count_ci_low", "count_ci_high"]
        data: dict[str, Any] = {"low": np.array(job.details["low"]),
                                "high": np.array(job.details["high"]), "count": rel.value,
                                "count_ci_low": low, "count_ci_high": high}
        kinds = {"low": "group", "high": "group", "count": "value", "count_ci_low": "ci_low",
                 "count_ci_high": "ci_high"}
        if "names" in job.details:
            columns.insert(0, "name")
            data["name"] = np.array(job.details["names"], dtype=object)
            kinds["name"] = "group"
        notes = [*job.notes, _rmse_note(job)]
        return self._result(job, entry, remaining, columns, data, kinds, notes)

    def _cdf_release(self, job: _Job, x: np.ndarray) -> Any:
        from dpkit.release.quantiles import band_level, cdf_band

        assert job.plan is not None
        n = x.size
        raw = job.plan.answer(x, level=band_level(job.level, n), source=self._source)
        return cdf_band(raw, job.level)

    def _finish_cdf(self, job: _Job, x: np.ndarray, entry: Any, remaining: float) -> Result:
        c = self._cdf_release(job, x)
        axis = job.axes[0]
        e = axis.edges()
        edge = (e[1:] - 1.0) if axis.kind == "int" else e[1:]
        F = c.value
        assert c.ci is not None
        lo, hi = c.ci
        tot_lo, tot_hi = max(lo[-1], 0.0), hi[-1]
        frac = F / F[-1] if F[-1] > 0 else np.zeros_like(F)
        f_lo = np.clip(lo / tot_hi, 0.0, 1.0) if tot_hi > 0 else np.zeros_like(F)
        f_hi = np.clip(hi / tot_lo, 0.0, 1.0) if tot_lo > 0 else np.ones_like(F)
        columns = ["edge", "count", "count_ci_low", "count_ci_high", "fraction",
                   "fraction_ci_low", "fraction_ci_high"]
        data = {"edge": edge, "count": F, "count_ci_low": lo, "count_ci_high": hi,
                "fraction": frac, "fraction_ci_low": f_lo, "fraction_ci_high": f_hi}
        kinds = {"edge": "group", "count": "value", "count_ci_low": "ci_low",
                 "count_ci_high": "ci_high", "fraction": "value", "fraction_ci_low": "ci_low",
                 "fraction_ci_high": "ci_high"}
        sem = ("count of values <= edge" if axis.kind == "int"
               else "count of values < edge (the last edge included)")
        notes = [*job.notes, sem, _rmse_note(job)]
        return self._result(job, entry, remaining, columns, data, kinds, notes)

    def _finish_quantiles(self, job: _Job, x: np.ndarray, entry: Any,
                          remaining: float) -> Result:
        from dpkit.release.quantiles import quantiles_from_cdf

        c = self._cdf_release(job, x)
        axis = job.axes[0]
        q = quantiles_from_cdf(c, job.details["probabilities"], edges=axis.edges())
        assert q.ci is not None
        columns = ["probability", "quantile", "quantile_ci_low", "quantile_ci_high"]
        data = {"probability": np.array(job.details["probabilities"]), "quantile": q.value,
                "quantile_ci_low": q.ci[0], "quantile_ci_high": q.ci[1]}
        kinds = {"probability": "group", "quantile": "value", "quantile_ci_low": "ci_low",
                 "quantile_ci_high": "ci_high"}
        notes = [*job.notes, "intervals: cell edges holding the true quantile's cell, jointly "
                             "for all probabilities"]
        return self._result(job, entry, remaining, columns, data, kinds, notes)

    def _finish_marginals(self, job: _Job, x: np.ndarray, entry: Any,
                          remaining: float) -> Result:
        assert job.plan is not None
        rel = job.plan.answer(x, level=job.level, source=self._source)
        assert rel.ci is not None
        names = [a.column for a in job.axes]
        W = job.plan.workload
        sets = W.attribute_sets  # type: ignore[attr-defined]
        labels = [a.labels() for a in job.axes]
        rows_m: list[str] = []
        per_col: dict[str, list[Any]] = {n: [] for n in names}
        rmse_notes = []
        std = rel.details.get("query_std")
        start = 0
        for s in sets:
            size = math.prod(job.axes[i].size for i in s)
            for idx in itertools.product(*[range(job.axes[i].size) for i in s]):
                rows_m.append(" x ".join(names[i] for i in s) or "total")
                pos = dict(zip(s, idx, strict=True))
                for i, n in enumerate(names):
                    per_col[n].append(labels[i][pos[i]] if i in pos else None)
            if std is not None:
                part = std[start:start + size]
                rmse_notes.append(f"{' x '.join(names[i] for i in s) or 'total'}: expected RMSE "
                                  f"{math.sqrt(float(np.mean(part ** 2))):.4g}")
            start += size
        out_names = {n: (n if n not in ("marginal", "count") else f"{n}_value") for n in names}
        columns = ["marginal", *[out_names[n] for n in names], "count", "count_ci_low",
                   "count_ci_high"]
        data: dict[str, Any] = {"marginal": np.array(rows_m, dtype=object), "count": rel.value,
                                "count_ci_low": rel.ci[0], "count_ci_high": rel.ci[1]}
        kinds = {"marginal": "group", "count": "value", "count_ci_low": "ci_low",
                 "count_ci_high": "ci_high"}
        for n in names:
            data[out_names[n]] = np.array(per_col[n], dtype=object)
            kinds[out_names[n]] = "group"
        notes = [*job.notes, *rmse_notes]
        return self._result(job, entry, remaining, columns, data, kinds, notes)

    def _finish_synthetic(self, job: _Job, x: np.ndarray, entry: Any,
                          remaining: float) -> SyntheticData:
        from dpkit.release import mwem, synthetic_records

        p = job.privacy
        rows = job.details.get("rows")
        if job.plan is not None:
            rel = job.plan.answer(x, level=job.level, source=self._source)
            hist = np.maximum(np.asarray(rel.details["x_hat"], dtype=np.float64), 0.0)
            notes = [*job.notes, _rmse_note(job)]
        else:
            rho_m = job.details.get("mwem_rho")
            rel = mwem(x, job.details["workload"],
                       epsilon=p.epsilon if rho_m is None else None, rho=rho_m,
                       rounds=int(job.details["rounds"]), contributions=job.contributions,
                       source=self._source)
            if rel.event != job.event:  # pragma: no cover - guards the planning above
                raise RuntimeError("MWEM ran with another event than the one charged")
            hist = np.asarray(rel.value, dtype=np.float64)
            notes = [*job.notes, f"MWEM: {job.details['rounds']} rounds, estimated "
                                 f"{float(rel.details['total']):.1f} records"]
        counts = synthetic_records(hist, rows)
        cells = np.repeat(np.arange(counts.size), counts)
        order = _noise.permutation(cells.size, source=self._source) if cells.size else cells
        cells = cells[order]
        idx = np.unravel_index(cells, tuple(a.size for a in job.axes)) if cells.size else [
            np.zeros(0, dtype=np.int64) for _ in job.axes]
        frame: dict[str, np.ndarray] = {}
        for a, ii in zip(job.axes, idx, strict=True):
            vals = a.values()
            if a.kind == "keys":
                keys = np.empty(len(vals), dtype=object)
                keys[:] = list(vals)
                frame[a.column] = keys[ii]
            else:
                frame[a.column] = np.asarray(vals)[ii] if len(ii) else np.zeros(0)
        return SyntheticData(
            data=frame, columns=[a.column for a in job.axes], method=str(job.details["method"]),
            event=job.event, epsilon=float(entry.view["epsilon_cost"]),
            delta=float(entry.view.get("delta_cost") or 0.0), ledger_seq=entry.seq,
            query=job.query, level=job.level,
            insecure=bool(self._source is not None and self._source.insecure), notes=notes,
            split=self._split(job, float(entry.view["epsilon_cost"])), histogram=hist,
            remaining=remaining)


# ------------------------------------------------------------------------------ helpers


def _rmse_note(job: _Job) -> str:
    assert job.plan is not None
    rmse = job.plan.expected_rmse
    s = job.plan.strategy.name
    return (f"strategy {s}; expected RMSE {rmse:.4g} per query" if rmse is not None
            else f"strategy {s}")


def _number_of(node: Any, what: str) -> float:
    from sqlglot import exp

    neg = False
    while isinstance(node, exp.Neg | exp.Paren):
        if isinstance(node, exp.Neg):
            neg = not neg
        node = node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        raise dsql.QueryError(
            f"{what} must be a number written inline (got {node.sql(dialect='duckdb')[:40]})")
    try:
        value = float(node.this)
    except ValueError:
        raise dsql.QueryError(f"{what} must be a number (got {node.this!r})") from None
    if not math.isfinite(value):
        raise dsql.QueryError(f"{what} must be finite (got {node.this!r})")
    return -value if neg else value


def _col_name(node: Any, alias: str | None) -> str:
    """The column's name; a qualifier must be the FROM table's alias (or its name)."""
    qual = node.table
    if qual and alias and qual.lower() != alias.lower():
        raise dsql.QueryError(f"unknown table or alias {qual!r} in {node.sql()}; the query "
                              f"reads {alias!r}")
    return str(node.name)


def _check_ranges(ranges: Any, axis: Axis) -> list[tuple[float, float]]:
    if isinstance(ranges, (str, bytes)) or not isinstance(ranges, Sequence | np.ndarray):
        raise dsql.QueryError(
            "ranges must be a list of (low, high) pairs, e.g. [(0, 17), (18, 64)]")
    if not 1 <= len(ranges) <= MAX_RANGES:
        raise dsql.QueryError(f"give between 1 and {MAX_RANGES} ranges (got {len(ranges)})")
    out = []
    for i, r in enumerate(ranges):
        try:
            a, b = r
            a, b = float(a), float(b)
        except (TypeError, ValueError):
            raise dsql.QueryError(
                f"range {i} must be a pair (low, high) of numbers (got {r!r})") from None
        if not (math.isfinite(a) and math.isfinite(b)):
            raise dsql.QueryError(f"range {i} = {r!r} must have finite ends")
        if a > b:
            raise dsql.QueryError(f"range {i} = ({a:g}, {b:g}) has low > high; swap them")
        if a < axis.lo or b > axis.hi:
            raise dsql.QueryError(
                f"range {i} = ({a:g}, {b:g}) extends beyond the bounds [{axis.lo:g}, "
                f"{axis.hi:g}] of {axis.column!r}; values are clamped into the bounds, so ask "
                f"for ({max(a, axis.lo):g}, {min(b, axis.hi):g}) (the end cells include the "
                f"clamped values)")
        if axis.kind == "int" and math.floor(b) < math.ceil(a):
            raise dsql.QueryError(f"range {i} = ({a:g}, {b:g}) contains no integer of "
                                  f"{axis.column!r}")
        out.append((a, b))
    return out


def _snap(pairs: list[tuple[float, float]], axis: Axis) -> tuple[np.ndarray, np.ndarray, int]:
    """First and last cell of every range on the grid, and how many ranges were snapped."""
    lo_c, hi_c, snapped = [], [], 0
    for a, b in pairs:
        if axis.kind == "int":
            ia, ib = math.ceil(a), math.floor(b)
            s = round((ia - axis.lo) / axis.step)
            t = round((ib + 1 - axis.lo) / axis.step) - 1
            s, t = min(max(s, 0), axis.size - 1), min(max(t, 0), axis.size - 1)
            t = max(t, s)
            exact_lo = axis.lo + s * axis.step
            exact_hi = min(axis.lo + (t + 1) * axis.step - 1, axis.hi)
            changed = exact_lo != ia or exact_hi != ib
        else:
            s = round((a - axis.lo) / axis.step)
            t = round((b - axis.lo) / axis.step) - 1
            s, t = min(max(s, 0), axis.size - 1), min(max(t, 0), axis.size - 1)
            t = max(t, s)
            e = axis.edges()
            changed = not (math.isclose(e[s], a, abs_tol=1e-12 * max(1.0, abs(a)))
                           and math.isclose(e[t + 1], b, abs_tol=1e-12 * max(1.0, abs(b))))
        snapped += int(changed)
        lo_c.append(s)
        hi_c.append(t)
    return np.array(lo_c, dtype=np.int64), np.array(hi_c, dtype=np.int64), snapped


def _marginal_sets(meta: TableMeta, columns: Any,
                   k: int | None) -> tuple[list[str], list[tuple[int, ...]]]:
    """Column names (resolved, in first-seen order) and marginals as index tuples."""
    if isinstance(columns, str):
        columns = [c.strip() for c in columns.split(",") if c.strip()]
    if isinstance(columns, (bytes,)) or not isinstance(columns, Sequence) or not columns:
        raise dsql.QueryError(
            "columns must be a list of column names (all k-way marginals) or of column tuples "
            "(explicit marginals), e.g. ['ward', 'age'] or [('ward',), ('ward', 'age')]")
    names: list[str] = []

    def idx(c: Any) -> int:
        name = _column(meta, c).name
        if name not in names:
            names.append(name)
        return names.index(name)

    if all(isinstance(c, str) for c in columns):
        for c in columns:
            idx(c)
        d = len(names)
        kk = min(2, d) if k is None else k
        if isinstance(kk, bool) or not isinstance(kk, int) or not 1 <= kk <= d:
            raise dsql.QueryError(f"k must be an integer in [1, {d}] (got {k!r})")
        sets = list(itertools.combinations(range(d), kk))
        return names, sets
    if k is not None:
        raise dsql.QueryError("give k= with a list of column names, not with explicit tuples")
    sets_out: list[tuple[int, ...]] = []
    for t in columns:
        group = [t] if isinstance(t, str) else list(t)
        if not group or not all(isinstance(c, str) for c in group):
            raise dsql.QueryError(f"each marginal is a tuple of column names (got {t!r})")
        s = tuple(sorted({idx(c) for c in group}))
        if s not in sets_out:
            sets_out.append(s)
    return names, sets_out


def _jsonable(obj: Any) -> Any:
    """JSON-ready copies for the ledger (numpy scalars to Python; NaN/inf to None)."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)
