"""Interval arithmetic: the range of an expression from the ranges of its inputs.

Two uses, one rule (every operation maps boxes to intervals that contain its image):

* **Rows** (:func:`derive`): an aggregate over an expression (``SUM(price * qty)``, ``AVG(CASE
  WHEN age > 65 THEN cost ELSE 0 END)``, FILTER) needs the range ``[lo, hi]`` of the
  expression's value on any row, for its clamp and sensitivity. Each column in a value position
  is clamped to its bounds (the query's ``bounds=`` or the declared ones) *before* the
  expression is evaluated, so the value lies in the interval computed here from those bounds;
  the aggregate then clamps the value to ``[lo, hi]`` once more, which makes the sensitivity
  exact even where floating-point rounding of the expression could step outside by an ulp.
  The whole expression runs under DuckDB's ``TRY`` (a row on which it fails counts as missing,
  like a NULL), so no row can make the statement fail. What cannot be bounded is refused with
  the reason: a column without bounds, a division by something that may be 0, a function
  without an interval rule.
* **Outputs** (:func:`output_interval`): arithmetic and scalar functions over noisy aggregates
  (``SUM(a) / SUM(b)``, ``POWER(AVG(x), 2)``, ``SQRT(VAR(x))``, ``ROUND(AVG(x), 1)``) get an
  interval from the intervals of the aggregates they use. When the ``k`` aggregates' intervals
  each cover their true values with probability ``>= 1 - α/k``, all of them cover at once with
  probability ``>= 1 - α`` (union bound), and then the interval computed here contains the
  expression of the true values: coverage ``>= 1 - α`` (post-processing, no privacy cost).

Everything here is a function of public things (the query, the bounds, the noisy values).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlglot
from sqlglot import exp

from dpkit.engine.plan.fixed import clamp_sql, double_lit
from dpkit.engine.plan.model import PlanError

__all__ = ["Derived", "derive", "output_interval"]

Bounds = Callable[[str], "tuple[float, float] | None"]  # column -> bounds or None
Kind = Callable[[str], str]  # column -> type class (int, float, decimal, bool, text, ...)
Total = Callable[[exp.Expr], bool]  # whether a condition is proved unable to fail on a row

_PREDICATES = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
               exp.NullSafeNEQ, exp.And, exp.Or, exp.Not, exp.Xor, exp.Is, exp.In, exp.Between,
               exp.Like, exp.ILike, exp.RegexpLike, exp.Glob, exp.IsNan, exp.IsInf)
_EMPTY = (math.inf, -math.inf)  # the range of NULL: no value


@dataclass(frozen=True)
class Derived:
    """An expression's value per row: its SQL (never raises) and its range."""

    sql: str
    lo: float
    hi: float
    columns: tuple[tuple[str, float, float], ...]  # value-position columns and their bounds


class _Rows:
    """One derivation: the bounds and kinds of the columns, and what it used."""

    def __init__(self, bounds: Bounds, kind: Kind, label: str, total: Total) -> None:
        self.bounds, self.kind, self.label, self.total = bounds, kind, label, total
        self.used: dict[str, tuple[float, float]] = {}
        self.risky = False  # some part not proved unable to fail: evaluate under TRY

    def condition(self, node: exp.Expr) -> str:
        """A condition's SQL (its columns as stored); notes whether it is proved total."""
        if not self.total(node):
            self.risky = True
        return node.sql(dialect="duckdb")

    def refuse(self, why: str) -> PlanError:
        return PlanError(f"{self.label}: {why}; nothing was charged")

    def column(self, node: exp.Column) -> tuple[float, float, str]:
        name, cls = node.name, self.kind(node.name)
        b = self.bounds(name)
        if b is None and cls == "bool":
            b = (0.0, 1.0)
        if cls not in ("int", "float", "decimal", "bool"):
            raise self.refuse(f"column {name!r} is not a number; use it in a condition "
                              f"(CASE WHEN {name} = ... THEN 1 ELSE 0 END) instead")
        if b is None:
            raise self.refuse(
                f"column {name!r} has no bounds, so the expression's range cannot be derived; "
                f"the data owner declares them (add_table(..., bounds={{'{name}': (low, "
                f"high)}})) or pass bounds={{'{name}': (low, high)}} with the query")
        self.used[name] = b
        return b[0], b[1], clamp_sql(node.sql(dialect="duckdb"), b[0], b[1], cls)


def _shown(node: exp.Expr | None, width: int = 60) -> str:
    """``node`` as the analyst wrote it (columns without the internal table alias)."""
    if node is None:
        return ""
    out = node.copy()
    for c in out.find_all(exp.Column):
        c.set("table", None)
    return out.sql(dialect="duckdb")[:width]


def _union(*ivs: tuple[float, float]) -> tuple[float, float]:
    return min(i[0] for i in ivs), max(i[1] for i in ivs)


def _mul(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if a == _EMPTY or b == _EMPTY:
        return _EMPTY
    p = [x * y for x in a for y in b]
    if any(math.isnan(v) for v in p):  # 0 * inf: no finite range
        return -math.inf, math.inf
    return min(p), max(p)


def _constant(node: exp.Expr) -> float | None:
    node = node.unnest()
    if isinstance(node, exp.Neg):
        v = _constant(node.this)
        return None if v is None else -v
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    return None


def _iv(node: exp.Expr, rows: _Rows) -> tuple[float, float, str]:
    """``(lo, hi, sql)`` of a value-position node. Every value is a DOUBLE computed from
    clamped columns and constants; DOUBLE arithmetic in DuckDB does not raise (overflow gives
    inf), and with every intermediate range finite it cannot even overflow; a part whose range
    is not finite marks the expression risky (evaluated under TRY)."""
    lo, hi, sql = _iv_node(node, rows)
    if (lo, hi) != _EMPTY and not (math.isfinite(lo) and math.isfinite(hi)):
        rows.risky = True
    return lo, hi, sql


def _iv_node(node: exp.Expr, rows: _Rows) -> tuple[float, float, str]:
    """The dispatch of :func:`_iv`."""
    if isinstance(node, exp.Paren):
        lo, hi, s = _iv(node.this, rows)
        return lo, hi, f"({s})"
    if isinstance(node, exp.Literal) and not node.is_string:
        v = float(node.this)
        return v, v, double_lit(v)
    if isinstance(node, exp.Null):
        return *_EMPTY, "NULL"
    if isinstance(node, exp.Boolean):
        v = 1.0 if node.this else 0.0
        return v, v, double_lit(v)
    if isinstance(node, exp.Column):
        return rows.column(node)
    if isinstance(node, _PREDICATES):
        # a condition in a value position is 0 or 1 (NULL stays NULL); its columns are raw
        return 0.0, 1.0, f"CAST(({rows.condition(node)}) AS DOUBLE)"
    for rule in (_arith, _branches, _functions):
        got = rule(node, rows)
        if got is not None:
            return got
    raise rows.refuse(f"{_shown(node)} has no interval rule inside an "
                      f"aggregate; use + - * /, ABS, LEAST, GREATEST, ROUND, FLOOR, CEIL, "
                      f"SQRT, POWER(x, n), CASE, COALESCE or a condition")


def _arith(node: exp.Expr, rows: _Rows) -> tuple[float, float, str] | None:
    if isinstance(node, exp.Neg):
        lo, hi, s = _iv(node.this, rows)
        return -hi, -lo, f"(-{s})"
    if not isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div):
        return None
    alo, ahi, a = _iv(node.this, rows)
    blo, bhi, b = _iv(node.expression, rows)
    if isinstance(node, exp.Add):
        return alo + blo, ahi + bhi, f"({a} + {b})"
    if isinstance(node, exp.Sub):
        return alo - bhi, ahi - blo, f"({a} - {b})"
    if isinstance(node, exp.Mul):
        return *_mul((alo, ahi), (blo, bhi)), f"({a} * {b})"
    if blo <= 0.0 <= bhi:
        raise rows.refuse(
            f"the divisor {_shown(node.expression, 40)} may be 0 (its range is "
            f"[{blo:g}, {bhi:g}]); divide by a constant or by a column whose bounds exclude 0, "
            f"or compute the ratio of two aggregates instead (SUM(a) / SUM(b))")
    lo, hi = _mul((alo, ahi), (1.0 / bhi, 1.0 / blo))
    return lo, hi, f"({a} / {b})"


def _branches(node: exp.Expr, rows: _Rows) -> tuple[float, float, str] | None:
    if isinstance(node, exp.Case):
        if node.this is not None:
            raise rows.refuse("write CASE WHEN <condition> THEN ... (not CASE <value> WHEN)")
        parts: list[tuple[float, float]] = []
        text = "CASE"
        for branch in node.args.get("ifs") or []:
            lo, hi, s = _iv(branch.args["true"], rows)
            parts.append((lo, hi))
            text += f" WHEN ({rows.condition(branch.this)}) THEN {s}"
        default = node.args.get("default")
        if default is not None:
            lo, hi, s = _iv(default, rows)
            parts.append((lo, hi))
            text += f" ELSE {s}"
        return *_union(*parts), text + " END"
    if isinstance(node, exp.If):
        lo1, hi1, s1 = _iv(node.args["true"], rows)
        false = node.args.get("false")
        lo2, hi2, s2 = _iv(false, rows) if false is not None else (*_EMPTY, "NULL")
        return (*_union((lo1, hi1), (lo2, hi2)),
                f"CASE WHEN ({rows.condition(node.this)}) THEN {s1} ELSE {s2} END")
    if isinstance(node, exp.Coalesce | exp.Least | exp.Greatest):
        args = [node.this, *(node.expressions or [])]
        got = [_iv(a, rows) for a in args]
        ivs = [(g[0], g[1]) for g in got if (g[0], g[1]) != _EMPTY] or [_EMPTY]
        name = {exp.Coalesce: "COALESCE", exp.Least: "LEAST", exp.Greatest: "GREATEST"}[
            type(node)]
        text = f"{name}({', '.join(g[2] for g in got)})"
        # LEAST/GREATEST skip NULL arguments: any argument may be the result
        return *_union(*ivs), text
    return None


def _functions(node: exp.Expr, rows: _Rows) -> tuple[float, float, str] | None:
    if isinstance(node, exp.Cast | exp.TryCast):
        lo, hi, s = _iv(node.this, rows)
        to = node.args["to"].sql(dialect="duckdb")
        if not node.args["to"].is_type(*exp.DataType.NUMERIC_TYPES):
            raise rows.refuse(f"CAST to {to} inside an aggregate: cast to a number type")
        # a conversion to an integer type rounds: within [floor(lo), ceil(hi)]
        return math.floor(lo), math.ceil(hi), f"TRY_CAST({s} AS {to})"
    if isinstance(node, exp.Abs):
        lo, hi, s = _iv(node.this, rows)
        low = 0.0 if lo <= 0.0 <= hi else min(abs(lo), abs(hi))
        return low, max(abs(lo), abs(hi)), f"abs({s})"
    if isinstance(node, exp.Floor | exp.Ceil | exp.Round):
        lo, hi, s = _iv(node.this, rows)
        digits = node.args.get("decimals")
        d = _constant(digits) if digits is not None else 0.0
        if d is None or d != int(d):
            raise rows.refuse("ROUND(x, d) takes a whole number of digits d")
        step = 10.0 ** -int(d)
        name = type(node).__name__.upper()
        arg = f", {int(d)}" if digits is not None else ""
        # monotone; the result is within one step of the value
        return lo - step, hi + step, f"{name}({s}{arg})"
    if isinstance(node, exp.Sqrt):
        lo, hi, s = _iv(node.this, rows)
        if lo < 0:
            raise rows.refuse(f"SQRT of a value that may be negative (range [{lo:g}, "
                              f"{hi:g}]); take SQRT(GREATEST(x, 0)) or declare bounds >= 0")
        return math.sqrt(lo), math.sqrt(hi), f"sqrt({s})"
    if isinstance(node, exp.Pow):
        n = _constant(node.expression)
        if n is None or n != int(n) or not 0 <= n <= 16:
            raise rows.refuse("POWER(x, n) inside an aggregate takes a whole n in [0, 16]")
        lo, hi, s = _iv(node.this, rows)
        k = int(n)
        ends = (lo**k, hi**k)
        low = 0.0 if (k % 2 == 0 and lo <= 0.0 <= hi) else min(ends)
        return low, max(ends), f"pow({s}, {k})"
    return None


def derive(text: str, *, bounds: Bounds, kind: Kind, label: str,
           total: Total = lambda node: False) -> Derived:
    """The per-row SQL and range of the expression ``text`` (DuckDB, columns ``__t."col"``).

    ``bounds(col)``: the column's clamp or None; ``kind(col)``: its type class; ``total``:
    whether a condition in it is proved unable to fail (:func:`dpkit.engine.totality.is_total`).
    The SQL runs as written when every condition is proved total and every intermediate range
    is finite, else under ``TRY``. Raises :class:`PlanError` with the reason (and what to write
    instead) when no finite range can be derived.
    """
    rows = _Rows(bounds, kind, label, total)
    node = sqlglot.parse_one(text, read="duckdb")
    lo, hi, sql = _iv(node, rows)
    if (lo, hi) == _EMPTY:
        lo = hi = 0.0
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise rows.refuse(f"the derived range [{lo:g}, {hi:g}] is not finite; use smaller "
                          f"bounds or constants")
    cols = tuple((c, b[0], b[1]) for c, b in rows.used.items())
    value = f"CAST(({sql}) AS DOUBLE)"
    return Derived(sql=f"TRY({value})" if rows.risky else value, lo=float(lo), hi=float(hi),
                   columns=cols)


# ------------------------------------------------------------------ outputs (noisy values)

Box = tuple[np.ndarray, np.ndarray]


def output_interval(node: exp.Expr, boxes: dict[str, Box]) -> Box | None:
    """Per group, an interval for the output expression ``node`` (over ``__a{i}`` / ``__g{i}``
    columns) from the intervals ``boxes[name] = (low, high)`` of its inputs; None when some
    part has no interval rule (the output then has no interval)."""
    try:
        with np.errstate(all="ignore"):
            return _box(node, boxes)
    except _NoRuleError:
        return None


class _NoRuleError(Exception):
    pass


def _box(node: exp.Expr, boxes: dict[str, Box]) -> Box:
    if isinstance(node, exp.Paren):
        return _box(node.this, boxes)
    if isinstance(node, exp.Column) and node.name in boxes:
        return boxes[node.name]
    c = _constant(node)
    if c is not None:
        return np.asarray(c), np.asarray(c)
    if isinstance(node, exp.Neg):
        lo, hi = _box(node.this, boxes)
        return -hi, -lo
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div):
        (alo, ahi), (blo, bhi) = _box(node.this, boxes), _box(node.expression, boxes)
        if isinstance(node, exp.Add):
            return alo + blo, ahi + bhi
        if isinstance(node, exp.Sub):
            return alo - bhi, ahi - blo
        if isinstance(node, exp.Div):
            zero = (blo <= 0) & (bhi >= 0)  # the divisor's interval holds 0: unbounded
            blo, bhi = 1.0 / np.where(zero, 1.0, bhi), 1.0 / np.where(zero, 1.0, blo)
            lo, hi = _vmul(alo, ahi, blo, bhi)
            return np.where(zero, -np.inf, lo), np.where(zero, np.inf, hi)
        return _vmul(alo, ahi, blo, bhi)
    return _box_functions(node, boxes)


def _vmul(alo: np.ndarray, ahi: np.ndarray, blo: np.ndarray, bhi: np.ndarray) -> Box:
    p = np.stack(np.broadcast_arrays(alo * blo, alo * bhi, ahi * blo, ahi * bhi))
    return np.nanmin(p, axis=0), np.nanmax(p, axis=0)


def _box_functions(node: exp.Expr, boxes: dict[str, Box]) -> Box:
    monotone: dict[type[exp.Expr], Any] = {exp.Sqrt: np.sqrt, exp.Ln: np.log,
                                           exp.Exp: np.exp, exp.Floor: np.floor,
                                           exp.Ceil: np.ceil}
    if type(node) in monotone:
        lo, hi = _box(node.this, boxes)
        f = monotone[type(node)]
        if isinstance(node, exp.Sqrt | exp.Ln):  # defined for x >= 0 (> 0): clip the low end
            lo = np.maximum(lo, 0.0)
            hi = np.maximum(hi, 0.0)
        return f(lo), f(hi)
    if isinstance(node, exp.Round):
        lo, hi = _box(node.this, boxes)
        digits = node.args.get("decimals")
        d = _constant(digits) if digits is not None else 0.0
        if d is None:
            raise _NoRuleError
        scale = 10.0 ** int(d)  # any rounding to d digits lies between these
        return np.floor(lo * scale) / scale, np.ceil(hi * scale) / scale
    if isinstance(node, exp.Abs):
        lo, hi = _box(node.this, boxes)
        cross = (lo <= 0) & (hi >= 0)
        return np.where(cross, 0.0, np.minimum(abs(lo), abs(hi))), np.maximum(abs(lo), abs(hi))
    if isinstance(node, exp.Pow):
        n = _constant(node.expression)
        if n is None or n != int(n) or n < 0:
            raise _NoRuleError
        lo, hi = _box(node.this, boxes)
        a, b = lo ** int(n), hi ** int(n)
        low = np.minimum(a, b)
        if int(n) % 2 == 0:
            low = np.where((lo <= 0) & (hi >= 0), 0.0, low)
        return low, np.maximum(a, b)
    if isinstance(node, exp.Least | exp.Greatest):
        parts = [_box(a, boxes) for a in [node.this, *(node.expressions or [])]]
        pick: Any = np.minimum if isinstance(node, exp.Least) else np.maximum
        lo, hi = parts[0]
        for plo, phi in parts[1:]:
            lo, hi = pick(lo, plo), pick(hi, phi)
        return lo, hi
    if isinstance(node, exp.Cast | exp.TryCast) and node.args["to"].is_type(
            *exp.DataType.REAL_TYPES):
        return _box(node.this, boxes)
    raise _NoRuleError
