"""Fixed-point arithmetic: real values as integers on a grid of width ``2^-f``, and their SQL.

Sums release integers ``round(clamp(x)·2^f)``. Multiplying by a power of two is exact in
floating point and rounding is monotone, so every row's integer lies *exactly* within the bound
derived from the clamp (no floating-point sum attack, Casacuberta et al. 2022). The finest grid
``F`` depends on the bounds only (:func:`row_exponent`), so the integers can be materialised at
load (:func:`fixed_column_name`); a query asking for a coarser grid ``f`` shifts them right by
``F - f`` (:func:`shift_round`). Everything here is a function of public parameters.
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

from dpkit.engine.tables import FIXED_PREFIX

# Per-row fixed-point magnitude: at most 2**32 (sums of 2**30 rows stay in int64) and small
# enough that the noise scale in grid units stays below the samplers' limits.
ROW_BITS = 32
MAX_GRID_SCALE_BITS = 38
# A shift by this many bits sends every row integer (|v| <= 2^32) to 0.
SHIFT_ZERO = 34


def fixed_point_exponent(magnitude: float, l1_rows: int, epsilon_share: float) -> int:
    """``f`` so that ``magnitude·2^f <= 2^32`` and the grid noise scale stays below 2^38.

    Depends only on public parameters (bounds, contribution bound, the budget share).
    """
    if magnitude <= 0:
        return 0
    top = math.floor(ROW_BITS - math.log2(magnitude))
    # noise scale in grid units ≈ l1_rows · magnitude · 2^f / ε  <= 2^38
    cap = math.floor(MAX_GRID_SCALE_BITS - math.log2(l1_rows * magnitude / epsilon_share))
    f = min(top, cap)
    return max(min(f, 1000), -1000)


def round_half_away(x: Fraction) -> int:
    """Round to the nearest integer, halves away from zero (DuckDB's ``round`` on DOUBLE)."""
    n = math.floor(abs(x) + Fraction(1, 2))
    return n if x >= 0 else -n


def row_exponent(lo: float, hi: float) -> int:
    """``F``: the finest fixed-point exponent for values in ``[lo, hi]`` (``|x|·2^F <= 2^32``).

    Depends on the bounds only, so the integer column ``round(clamp(x)·2^F)`` can be computed once
    when a table is loaded (see :func:`fixed_column_name`); a query whose budget share asks for a
    coarser grid ``f < F`` shifts those integers right by ``F - f`` (see :func:`shift_round`).
    """
    magnitude = max(abs(lo), abs(hi))
    if magnitude <= 0:
        return 0
    return max(min(math.floor(ROW_BITS - math.log2(magnitude)), 1000), -1000)


def shift_round(v: int, d: int) -> int:
    """``floor((v + 2^(d-1)) / 2^d)``: ``v·2^-d`` rounded half up; monotone in ``v``.

    The SQL compiled for sums applies exactly this to every row's integer (``>>`` on BIGINT is an
    arithmetic shift in DuckDB); for ``|v| <= 2^32`` and ``d >= 34`` it is 0.
    """
    if d <= 0:
        return v
    if d >= SHIFT_ZERO:
        return 0
    return (v + (1 << (d - 1))) >> d


def fixed_column_name(column: str, lo: float, hi: float) -> str:
    """Name of the hidden, materialised column ``round(clamp(column, lo, hi)·2^F)`` (BIGINT).

    The name is a hash of the column, the exact bounds and ``F``: a column computed for other
    bounds can never be mistaken for this one, so changed bounds can never use stale integers
    (the stale-truncation-bound bug of OpenDP #2949 cannot happen by construction).
    """
    tag = f"{column}\x00{float(lo).hex()}\x00{float(hi).hex()}\x00{row_exponent(lo, hi)}"
    return FIXED_PREFIX + hashlib.sha256(tag.encode()).hexdigest()[:24]


def unit_rows_column_name(unit: str) -> str:
    """Name of the hidden column holding, on every row, its unit's row count in the table.

    Computed once at load (``COUNT(*) OVER (PARTITION BY unit)``); a query without joins keeps
    every row of a unit whose *total* is at most ``m`` without any per-unit work, because its
    rows after ``WHERE`` are a subset of its rows in the table. Named after the unit column so a
    reload with another privacy unit can never reuse it.
    """
    return FIXED_PREFIX + "n_" + hashlib.sha256(unit.encode()).hexdigest()[:21]


def fixed_column_sql(col_sql: str, lo: float, hi: float, cls: str) -> str:
    """SQL for ``round(clamp(col)·2^F)`` as BIGINT (NULL for NULL/NaN), ``F = row_exponent``."""
    x = clamp_sql(col_sql, lo, hi, cls)
    return f"CAST(round({x} * {pow2_lit(row_exponent(lo, hi))}) AS BIGINT)"


def grid_bound(magnitude: float, f: int) -> int:
    """``ceil(magnitude·2^f)``, at least 1: the per-row integer bound on a grid of width 2^-f."""
    return max(1, math.ceil(math.ldexp(magnitude, f)))


def double_lit(value: float) -> str:
    """A float as a typed DuckDB literal (``repr`` round-trips the exact double)."""
    return f"CAST({float(value)!r} AS DOUBLE)"


def pow2_lit(f: int) -> str:
    """``2^f`` as a DuckDB DOUBLE literal (exact: a power of two)."""
    return double_lit(math.ldexp(1.0, f))


def clamp_sql(col: str, lo: float, hi: float, cls: str) -> str:
    """``col`` clamped into [lo, hi] as DOUBLE; NULL and NaN give NULL (they are ignored).

    ``greatest``/``least`` alone would turn NULL into a bound (DuckDB skips NULL arguments), and
    NaN compares above every number, hence the CASE.
    """
    x = f"CAST({col} AS DOUBLE)"  # a no-op for DOUBLE columns
    nan = f" AND NOT isnan({x})" if cls == "float" else ""
    return (f"(CASE WHEN {x} <= {double_lit(hi)} THEN greatest({x}, {double_lit(lo)}) "
            f"WHEN {x} > {double_lit(hi)}{nan} THEN {double_lit(hi)} END)")

