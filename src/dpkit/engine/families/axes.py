"""Public grids for the release families: one :class:`Axis` per column, each row in one cell.

Every grid is built from public information only (the declared bounds and domains, or bounds
given with the query): ranges and CDFs need an ordered numeric grid (:func:`ordered_axis`),
marginals and synthetic data a coarse one per column (:func:`categorical_axis`), whose product
is capped at :data:`MAX_PRODUCT_CELLS` (:func:`product_axes`). A row whose value is NULL, NaN or
outside a declared domain falls in no cell; numeric values are clamped into the bounds, so one
privacy unit's row moves exactly one cell count by one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit.engine.spec import QueryError
from dpkit.engine.tables import Column, TableMeta, check_bounds

__all__ = [
    "DEFAULT_BINS",
    "GRIDS",
    "LOG_SPAN",
    "MARGINAL_BINS",
    "MARGINAL_INTEGER_CELLS",
    "MAX_INTEGER_CELLS",
    "MAX_PRODUCT_CELLS",
    "Axis",
    "categorical_axis",
    "column_of",
    "log_grid_wanted",
    "ordered_axis",
    "product_axes",
]

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
#: the grids an ordered axis may take: equal cells, log-scale cells, or chosen by the range
GRIDS = ("linear", "log", "auto")
#: ``grid="auto"`` takes log-scale cells when the declared range spans this ratio of
#: magnitudes (four orders): below it equal cells resolve the upper tail as finely
LOG_SPAN = 1e4


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
    last one closed; values clamped), ``"log"`` (equal cells of ``T(x) = sign(x)·ln(1 +
    |x|/scale)`` over ``[T(lo), T(hi)]``, ``step`` their width in ``T``: geometric cells
    above ``scale``, nearly equal ones below, mirrored for negative values; values clamped)
    or ``"keys"`` (the declared domain, in its order).
    """

    column: str
    kind: str
    size: int
    lo: float = 0.0
    hi: float = 0.0
    step: float = 1.0
    keys: tuple[Any, ...] = ()
    key_type: str = ""  # the column's SQL type (keys axes): keys are compared as that type
    scale: float = 0.0  # log axes: where cells stop growing geometrically (public: the range)

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
        if self.kind == "log":
            t = f"(SIGN({clamped}) * LN(1 + ABS({clamped}) / {_num(self.scale)}))"
            # GREATEST: the value at lo must not round into cell -1 (LN in SQL vs numpy)
            idx = (f"LEAST(GREATEST(CAST(FLOOR(({t} - {_num(self._t0)}) / {_num(self.step)}) "
                   f"AS BIGINT), 0), {self.size - 1})")
        elif self.kind == "int" and self.step == 1:
            idx = f"CAST({clamped} - {_num(self.lo)} AS BIGINT)"
        else:
            idx = (f"LEAST(CAST(FLOOR(({clamped} - {_num(self.lo)}) / {_num(self.step)}) AS "
                   f"BIGINT), {self.size - 1})")
        # NULL must be tested first: DuckDB's GREATEST/LEAST skip NULL arguments
        return f"(CASE WHEN {v} IS NULL OR isnan({v}) THEN NULL ELSE {idx} END)"

    def outside_sql(self, ref: str) -> str:
        """SQL true when the row's value is not counted as it is: NULL, NaN, a key outside
        the domain (in no cell), or a number outside ``[lo, hi]`` (clamped into an end cell);
        the rows the diagnostics count (:mod:`.diagnostics`)."""
        if self.kind == "keys":
            return f"({self.cell_sql(ref)} IS NULL)"
        v = f"TRY_CAST({ref} AS DOUBLE)"
        return (f"({v} IS NULL OR isnan({v}) OR {v} < {_num(self.lo)} OR "
                f"{v} > {_num(self.hi)})")

    def edges(self) -> np.ndarray:
        """``size + 1`` cell edges (numeric axes): cell ``i`` is ``[e_i, e_{i+1})``; for
        integer axes ``e_{i+1} − 1`` is the last integer of cell ``i``."""
        if self.kind == "keys":
            raise ValueError("a categorical axis has no edges")
        if self.kind == "log":
            t = self._t0 + self.step * np.arange(self.size + 1, dtype=np.float64)
            e = np.sign(t) * self.scale * np.expm1(np.abs(t))
            e[0], e[-1] = self.lo, self.hi
            return np.maximum.accumulate(e)  # monotone whatever the rounding
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
        if self.kind == "log":
            return (f"{self.column}: {self.size} log-scale cells over [{self.lo:g}, "
                    f"{self.hi:g}] (each {100 * math.expm1(self.step):.3g}% wider than the "
                    f"one before above {self.scale:g}, about {self.scale * self.step:.3g} "
                    f"wide below)")
        return (f"{self.column}: {self.size} equal cells of width {self.step:g} over "
                f"[{self.lo:g}, {self.hi:g}]")

    @property
    def _t0(self) -> float:
        """``T(lo)`` of a log axis (where cell 0 starts in the transformed scale)."""
        return _log_t(self.lo, self.scale)


def _log_t(x: float, scale: float) -> float:
    """``T(x) = sign(x)·ln(1 + |x|/scale)``: the symmetric log transform of log axes."""
    return math.copysign(math.log1p(abs(x) / scale), x) if x else 0.0


def log_grid_wanted(lo: float, hi: float) -> bool:
    """``grid="auto"``: whether the range ``[lo, hi]`` spans :data:`LOG_SPAN` or more, as
    the ratio of the largest magnitude it reaches to the smallest (magnitudes below 1
    counted as 1; a range holding 0 reaches magnitude 0). A rule on the declared (public)
    range only: ``[0, 99999]`` (capital gains) and ``[-1e6, 1e6]`` take log cells, ``[0,
    120]`` (ages) and ``[1000, 5000]`` equal ones."""
    big = max(abs(lo), abs(hi))
    small = 0.0 if lo <= 0.0 <= hi else min(abs(lo), abs(hi))
    return big / max(small, 1.0) >= LOG_SPAN


def _log_axis(name: str, lo: float, hi: float, bins: int | None, integer: bool) -> Axis:
    """``bins`` (default :data:`DEFAULT_BINS`) log-scale cells over ``[lo, hi]``, with
    ``scale`` = the largest magnitude over :data:`LOG_SPAN` (at least 1 for an integer
    column), so every log grid resolves about four orders of magnitude below its largest
    value. Near 0 an integer column's cells may still be narrower than one integer (``[0,
    99999]``: scale 10, the first cells ~0.09 wide), and those hold no value: resolution
    spent, never privacy (the grid reads only public things)."""
    size = bins if bins is not None else DEFAULT_BINS
    big = max(abs(lo), abs(hi))
    scale = max(big / LOG_SPAN, 1.0 if integer else 0.0)
    if scale <= 0.0:  # the range [0, 0]: one value, any grid holds it
        scale = 1.0
    step = (_log_t(hi, scale) - _log_t(lo, scale)) / size
    if not step > 0.0:
        return _float_axis(name, lo, hi, bins, DEFAULT_BINS)
    return Axis(name, "log", size, lo, hi, step, scale=scale)


def ordered_axis(meta: TableMeta, column: Any, *, bins: int | None,
                 bounds: Mapping[str, Any] | None, grid: str = "linear") -> Axis:
    """The grid for ranges / CDFs: numeric, bounded, ordered. ``grid``: ``"linear"`` (equal
    cells, one per integer where they fit), ``"log"`` (log-scale cells, :func:`_log_axis`)
    or ``"auto"`` (log-scale when :func:`log_grid_wanted` says so of the range). All three
    read only public things: the declared (or given) bounds, the column's type, ``bins``."""
    col = column_of(meta, column)
    if not col.numeric:
        raise QueryError(
            f"column {col.name!r} of {meta.name!r} has type {col.type}; ranges and CDFs need a "
            f"numeric column with declared bounds"
        )
    if grid not in GRIDS:
        raise QueryError(f"grid must be one of {', '.join(GRIDS)} (got {grid!r})")
    if grid != "linear":
        lo, hi = _bounds(meta, col.name, bounds)
        if grid == "log" or log_grid_wanted(lo, hi):
            return _log_axis(col.name, lo, hi, _check_bins(bins), col.cls in ("int", "bool"))
    return _numeric_axis(meta, col, bins=bins, bounds=bounds, integer_cells=MAX_INTEGER_CELLS,
                         target=DEFAULT_BINS)


def _numeric_axis(meta: TableMeta, col: Column, *, bins: int | None,
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
            raise QueryError(f"bounds [{lo:g}, {hi:g}] of {col.name!r} contain no integer")
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


def categorical_axis(meta: TableMeta, column: Any, *, bins: int | None,
                     bounds: Mapping[str, Any] | None) -> Axis:
    """The grid for marginals / synthetic data: declared keys, else a coarse numeric grid."""
    col = column_of(meta, column)
    if col.name in meta.domains:
        return Axis(col.name, "keys", len(meta.domains[col.name]),
                    keys=tuple(meta.domains[col.name]), key_type=str(col.type))
    if not col.numeric:
        raise QueryError(
            f"column {col.name!r} of {meta.name!r} has no declared domain; the data owner "
            f"declares its keys with add_table(..., domains={{{col.name!r}: [...]}})"
        )
    return _numeric_axis(meta, col, bins=bins, bounds=bounds,
                         integer_cells=MARGINAL_INTEGER_CELLS, target=MARGINAL_BINS)


def product_axes(meta: TableMeta, names: Sequence[str], *, bins: int | None,
                 bounds: Mapping[str, Any] | None) -> tuple[list[Axis], int]:
    """The categorical axes of ``names`` and the number of cells of their product, refused
    above MAX_PRODUCT_CELLS (marginals and synthetic data)."""
    axes = [categorical_axis(meta, c, bins=bins, bounds=bounds) for c in names]
    cells = math.prod(a.size for a in axes)
    if cells > MAX_PRODUCT_CELLS:
        raise QueryError(
            f"the product domain of {', '.join(names)} has {cells} cells (at most "
            f"{MAX_PRODUCT_CELLS}): use fewer columns, or coarser grids (bins=)")
    return axes, cells


def column_of(meta: TableMeta, column: Any) -> Column:
    """The declared column named ``column`` (a string), or a refusal naming the columns."""
    if not isinstance(column, str):
        raise QueryError(f"a column is named by a string (got {column!r})")
    try:
        return meta.column(column)
    except ValueError as exc:
        raise QueryError(str(exc)) from None


def _bounds(meta: TableMeta, column: str, bounds: Mapping[str, Any] | None) -> tuple[float, float]:
    if bounds:
        for k, pair in bounds.items():
            if str(k).lower() == column.lower():
                try:
                    return check_bounds(pair, column)
                except (TypeError, ValueError) as exc:
                    raise QueryError(str(exc)) from None
    b = meta.bounds_for(column)
    if b is None:
        raise QueryError(
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
        raise QueryError(f"bins must be an integer in [1, {MAX_INTEGER_CELLS}] (got {bins!r})")
    return int(bins)
