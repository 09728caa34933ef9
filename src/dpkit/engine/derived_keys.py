"""Group keys computed from columns: their SQL, their type and, where it follows from the query
and the declarations alone, their public domain.

``GROUP BY CASE ... END``, ``GROUP BY floor(age / 10) * 10``, ``GROUP BY date_trunc('month',
d)`` (directly, by SELECT alias or by position) group rows by a value computed per row. The
keys released must be a function of public things, so each form gets a domain here from the
query text and the declarations only, never from a row:

* ``CASE`` with constant results: the branch values in order, then the ``ELSE`` value, or NULL
  when there is no ``ELSE`` (a row that matches no branch has the key NULL). Every row's key is
  in this domain by construction, so no row is dropped.
* bins of a numeric column with declared bounds ``(lo, hi)``: ``floor(col / w) * w`` gives the
  multiples ``k·w``, ``floor(col / w)`` and ``floor(col)`` the integers ``k``, and ``col // w``
  (integer columns: DuckDB truncates) the integer quotients, for every ``k`` between the
  images of ``lo`` and ``hi`` (each form is monotone in ``col``). Rows outside fall out, as
  rows outside any declared domain do.
* ``date_trunc(unit, col)`` of a column with a declared domain: the truncated domain values
  (dates outside Python's years 1-9999 have the key NULL, as for a plain date key).

Anything else is still a group key, typed ``VARCHAR``: its groups are selected privately, as
for an undeclared column (the preview states the delta). The key's SQL never raises on a row:
``CASE`` conditions are proved total (:mod:`dpkit.engine.totality`) or run under ``TRY``, and
the other forms are evaluated under ``TRY`` (an error becomes the key NULL).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from dpkit.engine.scope import Scope
from dpkit.engine.spec import PRIVATE_ALIAS, GroupKey, QueryError
from dpkit.engine.tables import TableMeta, type_class
from dpkit.engine.totality import is_total, total_condition_sql

__all__ = ["MAX_BINS", "derived_key", "restrict_keys"]

MAX_BINS = 1_000_000  # a wider range needs a wider bin; the planner caps the groups again
Resolve = Callable[[exp.Expr], exp.Expr]  # columns -> refs, casts made TRY_CAST


def derived_key(node: exp.Expr, label: str, scope: Scope, private: TableMeta,
                resolve: Resolve) -> GroupKey:
    """The group key of the expression ``node`` (not a bare column), named ``label``."""
    node = _unparen(node)
    if isinstance(node, exp.Case):
        key = _case_key(node, label, scope, resolve)
        if key is not None:
            return key
    binned = _bin_key(node, label, scope, private, resolve)
    if binned is not None:
        return binned
    dated = _date_key(node, label, scope, private, resolve)
    if dated is not None:
        return dated
    sql = f"TRY(CAST(({resolve(node).sql(dialect='duckdb')}) AS VARCHAR))"
    return GroupKey(source="", column=label, type="VARCHAR", expr=sql)


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _constant(node: exp.Expr | None) -> tuple[bool, Any]:
    """(is a constant, its Python value) for a literal, a negated number, TRUE/FALSE, NULL."""
    if node is None or isinstance(node, exp.Null):
        return True, None
    node = _unparen(node)
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    if isinstance(node, exp.Neg):
        ok, v = _constant(node.this)
        return (ok and isinstance(v, (int, float)) and not isinstance(v, bool)), (
            -v if ok and isinstance(v, (int, float)) else None)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return True, str(node.this)
        text = str(node.this)
        try:
            return True, int(text)
        except ValueError:
            return True, float(text)
    return False, None


def _values_type(values: list[Any]) -> str | None:
    """The one DuckDB type of a CASE's results, or None when they mix kinds."""
    real = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in real):
        return "BOOLEAN" if real else "VARCHAR"
    if all(isinstance(v, str) for v in real):
        return "VARCHAR"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in real):
        return "BIGINT"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in real):
        return "DOUBLE"
    return None


def _lit(value: Any, type_: str) -> str:
    if value is None:
        return f"CAST(NULL AS {type_})"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return f"CAST({value!r} AS {type_})"
    return f"CAST({exp.Literal.string(str(value)).sql(dialect='duckdb')} AS {type_})"


def _case_key(node: exp.Case, label: str, scope: Scope, resolve: Resolve) -> GroupKey | None:
    """A CASE with constant results: its domain is its results (NULL when no ELSE)."""
    subject = node.this
    whens: list[tuple[exp.Expr, Any]] = []
    for branch in node.args.get("ifs") or []:
        ok, value = _constant(branch.args.get("true"))
        if not ok:
            return None
        cond = branch.this
        if subject is not None:
            cond = exp.EQ(this=subject.copy(), expression=cond.copy())
        whens.append((cond, value))
    ok, default = _constant(node.args.get("default"))
    if not ok or not whens:
        return None
    type_ = _values_type([v for _, v in whens] + [default])
    if type_ is None:
        raise QueryError(
            f"GROUP BY {label}: the CASE branches give values of different kinds; give every "
            f"branch a value of one kind (all text, all numbers or all TRUE/FALSE)"
        )
    column_type = _column_type(scope)
    parts = []
    for cond, value in whens:
        check = total_condition_sql(resolve(cond),  # type: ignore[arg-type]  # sqlglot 30: Expr
                                    is_total(cond, column_type))  # type: ignore[arg-type]
        parts.append(f"WHEN {check} THEN {_lit(value, type_)}")
    sql = f"(CASE {' '.join(parts)} ELSE {_lit(default, type_)} END)"
    values = [float(v) if type_ == "DOUBLE" and v is not None else v
              for v in [*(v for _, v in whens), default]]
    domain = tuple(dict.fromkeys(values))
    return GroupKey(source="", column=label, type=type_, expr=sql, domain=domain,
                    exhaustive=True)


def _column_type(scope: Scope) -> Callable[[exp.Column], str]:
    return lambda c: scope.resolve(c)[2]


def _number(node: exp.Expr | None) -> float | int | None:
    ok, v = _constant(node)
    if ok and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return v
    return None


def _bin_form(node: exp.Expr) -> tuple[str, exp.Expr, float | int] | None:
    """``(form, column node, width)`` for floor(c / w) * w ("mul"), floor(c / w) and floor(c)
    ("floor"), c // w ("intdiv")."""
    if isinstance(node, exp.Mul):
        for a, b in ((node.this, node.expression), (node.expression, node.this)):
            inner = _bin_form(_unparen(a))
            w = _number(b)
            if inner is not None and inner[0] == "floor" and w is not None and w == inner[2]:
                return "mul", inner[1], w
        return None
    if isinstance(node, exp.Floor) and not node.args.get("decimals"):
        arg = _unparen(node.this)
        if isinstance(arg, exp.Div):
            w = _number(arg.expression)
            return ("floor", _unparen(arg.this), w) if w is not None else None
        return "floor", arg, 1
    if isinstance(node, exp.IntDiv):
        w = _number(node.expression)
        return ("intdiv", _unparen(node.this), w) if w is not None else None
    return None


def _bin_key(node: exp.Expr, label: str, scope: Scope, private: TableMeta,
             resolve: Resolve) -> GroupKey | None:
    form = _bin_form(node)
    if form is None:
        return None
    kind, col, w = form
    if not isinstance(col, exp.Column):
        return None
    internal, name, ctype = scope.resolve(col)
    cls = type_class(ctype)
    if cls not in ("int", "float", "decimal") or (kind == "intdiv" and cls != "int"):
        return None
    if w <= 0:
        raise QueryError(f"GROUP BY {label}: the bin width must be > 0 (got {w:g})")
    ints = cls == "int" and isinstance(w, int)
    type_ = "BIGINT" if ints or kind != "mul" else "DOUBLE"
    sql = f"CAST(({resolve(node).sql(dialect='duckdb')}) AS {type_})"
    if not _bins_total(kind, ctype, w, type_):
        sql = f"TRY({sql})"  # TRY costs about as much as the key itself: only where needed
    bounds = private.bounds_for(name) if internal == PRIVATE_ALIAS else None
    domain = None if bounds is None else _bins(kind, bounds, w, cls == "int", type_, label)
    return GroupKey(source="", column=label, type=type_, expr=sql, domain=domain)


_SMALL_INTS = frozenset({"TINYINT", "SMALLINT", "INTEGER", "INT", "INT1", "INT2", "INT4",
                         "UTINYINT", "USMALLINT", "UINTEGER", "SHORT", "SIGNED"})


def _bins_total(kind: str, ctype: str, w: float | int, type_: str) -> bool:
    """Whether a bin key cannot fail on any value of the column: for a small integer column
    (|x| < 2^32) and 2^-29 <= w < 2^31, ``x / w`` stays below 2^61 and ``floor(x / w) * w``
    within ``|x| + w``, inside BIGINT; ``x // w`` (w > 0) never overflows; a DOUBLE key of a
    float column is IEEE arithmetic (inf and NaN, never an error)."""
    base = ctype.upper().split("(")[0].strip()
    if base in _SMALL_INTS:
        return kind == "intdiv" or 2.0**-29 <= abs(w) < 2**31
    return type_ == "DOUBLE" and kind == "mul" and type_class(ctype) == "float"


def _bins(kind: str, bounds: tuple[float, float], w: float | int, int_col: bool, type_: str,
          label: str) -> tuple[Any, ...]:
    lo, hi = bounds
    if int_col:
        lo, hi = float(math.ceil(lo)), float(math.floor(hi))
    if kind == "intdiv":  # DuckDB's integer // truncates toward zero
        first, last = math.trunc(lo / w), math.trunc(hi / w)
    else:
        first, last = math.floor(lo / w), math.floor(hi / w)
    n = last - first + 1
    if n > MAX_BINS:
        raise QueryError(
            f"GROUP BY {label}: the declared range {bounds[0]:g}..{bounds[1]:g} gives {n} bins "
            f"(at most {MAX_BINS}); use a wider bin"
        )
    if kind != "mul":
        return tuple(range(first, last + 1))
    if type_ == "BIGINT":
        return tuple(int(k * w) for k in range(first, last + 1))
    return tuple(float(k) * float(w) for k in range(first, last + 1))


_DATE_UNITS = ("year", "quarter", "month", "week", "day")


def _trunc(value: Any, unit: str, as_date: bool) -> Any:
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value)
    if isinstance(value, _dt.datetime):
        d = value
    elif isinstance(value, _dt.date):
        d = _dt.datetime(value.year, value.month, value.day)
    else:
        raise ValueError(value)
    if unit == "year":
        d = d.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    elif unit == "quarter":
        d = d.replace(month=3 * ((d.month - 1) // 3) + 1, day=1, hour=0, minute=0, second=0,
                      microsecond=0)
    elif unit == "month":
        d = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    elif unit == "week":
        d = (d - _dt.timedelta(days=d.weekday())).replace(hour=0, minute=0, second=0,
                                                          microsecond=0)
    elif unit == "day":
        d = d.replace(hour=0, minute=0, second=0, microsecond=0)
    elif unit == "hour":
        d = d.replace(minute=0, second=0, microsecond=0)
    else:
        raise ValueError(unit)
    return d.date().isoformat() if as_date else d.isoformat(sep=" ")


def _date_key(node: exp.Expr, label: str, scope: Scope, private: TableMeta,
              resolve: Resolve) -> GroupKey | None:
    if not isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        return None
    col, unit_node = _unparen(node.this), node.args.get("unit")
    unit = (unit_node.name if unit_node is not None else "").lower()
    if not isinstance(col, exp.Column) or unit not in (*_DATE_UNITS, "hour"):
        return None
    internal, name, ctype = scope.resolve(col)
    base = ctype.upper().split("(")[0].strip()
    if base not in ("DATE", "TIMESTAMP", "DATETIME"):
        return None
    as_date = base == "DATE" and unit in _DATE_UNITS
    type_ = "DATE" if as_date else "TIMESTAMP"
    # date_trunc fails outside the TIMESTAMP range (a DATE in year 5877642); a guard on
    # Python's years (outside them keys group as NULL anyway) keeps it total without TRY,
    # whose row-by-row fallback takes ~15x longer once one row fails (2M rows: 0.2 s -> 3.5 s)
    ref = resolve(col).sql(dialect="duckdb")
    lo, hi = (("DATE '0001-01-01'", "DATE '9999-12-31'") if base == "DATE" else
              ("TIMESTAMP '0001-01-01'", "TIMESTAMP '9999-12-31 23:59:59.999999'"))
    sql = (f"(CASE WHEN {ref} BETWEEN {lo} AND {hi} THEN CAST(date_trunc('{unit}', {ref}) "
           f"AS {type_}) END)")
    declared = private.domains.get(name) if internal == PRIVATE_ALIAS else None
    span = private.date_ranges.get(name) if internal == PRIVATE_ALIAS else None
    domain = None
    if declared is not None:
        try:
            domain = tuple(dict.fromkeys(_trunc(v, unit, as_date) for v in declared))
        except (ValueError, TypeError, OverflowError):
            domain = None  # a declared value Python cannot read: select the groups privately
    elif span is not None:
        domain = _date_bins(span, unit, as_date)
    return GroupKey(source="", column=label, type=type_, expr=sql, domain=domain)


MAX_DATE_BINS = 100_000


def _date_bins(span: tuple[str, str], unit: str, as_date: bool) -> tuple[Any, ...] | None:
    """Every ``unit`` bin that meets the declared range, in order: public keys from public
    declarations alone. Over :data:`MAX_DATE_BINS` (an hourly key over 12 years) the groups
    are selected privately instead, as for an undeclared column."""
    first = _dt.datetime.fromisoformat(_trunc(span[0], unit, False))
    last = _dt.datetime.fromisoformat(span[1])
    out: list[Any] = []
    d = first
    while d <= last:
        out.append(d.date().isoformat() if as_date else d.isoformat(sep=" "))
        if len(out) > MAX_DATE_BINS:
            return None
        d = _next_bin(d, unit)
    return tuple(out)


def _next_bin(d: _dt.datetime, unit: str) -> _dt.datetime:
    if unit in ("year", "quarter", "month"):
        months = {"year": 12, "quarter": 3, "month": 1}[unit]
        m = d.month - 1 + months
        return d.replace(year=d.year + m // 12, month=m % 12 + 1)
    return d + {"week": _dt.timedelta(days=7), "day": _dt.timedelta(days=1),
                "hour": _dt.timedelta(hours=1)}[unit]


def restrict_keys(where: exp.Expr | None, keys: list[GroupKey], scope: Scope) -> None:
    """``WHERE key = c`` / ``key IN (c, ...)``, AND-ed at the top of WHERE: the constants are a
    public domain of that (bare column) key. OR / NOT forms leave it unrestricted."""
    if where is None:
        return
    for conj in _conjuncts(where):
        found = _key_constants(conj, scope)
        if found is None:
            continue
        (internal, name), values = found
        for k in keys:
            if k.expr is None and k.source == internal and k.column == name:
                kind = type_class(k.type)
                if kind == "string" and k.type.upper() not in ("VARCHAR", "TEXT", "STRING"):
                    continue  # ENUM, UUID: a constant outside the type fails when it binds
                if not all(_fits(v, kind) for v in values):
                    continue  # a constant converted per row: leave the key as declared
                vals = tuple(dict.fromkeys(float(v) if kind == "float" else v for v in values))
                k.domain = vals if k.domain is None else tuple(
                    v for v in k.domain if v in set(vals))


def _fits(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    node = _unparen(node)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _key_constants(node: exp.Expr, scope: Scope
                   ) -> tuple[tuple[str, str], list[Any]] | None:
    """((table alias, column), constants) for ``col = c``, ``c = col``, ``col IN (c, ...)``."""
    if isinstance(node, exp.EQ):
        for a, b in ((node.this, node.expression), (node.expression, node.this)):
            a = _unparen(a)
            ok, v = _constant(b)
            if isinstance(a, exp.Column) and ok and v is not None:
                internal, name, _ = scope.resolve(a)
                return (internal, name), [v]
        return None
    if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
        a = _unparen(node.this)
        if not isinstance(a, exp.Column) or not node.expressions:
            return None
        values = []
        for e in node.expressions:
            ok, v = _constant(e)
            if not ok:
                return None
            if v is not None:  # x IN (NULL) is never true
                values.append(v)
        internal, name, _ = scope.resolve(a)
        return (internal, name), values
    return None
