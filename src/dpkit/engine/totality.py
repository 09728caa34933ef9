"""Which row-level conditions cannot fail while rows are read.

A filter that raises an error on some value (``CAST(name AS INTEGER) = 1``, ``WHERE text_col``,
an overflowing product) would make the *outcome* of a query (an answer or an error) depend on
whether one person's row exists: an oracle that no noise covers. The curator therefore never
lets a row-level error escape. A condition is evaluated as written only when it is *proved*
total here from the declared column types alone; every other condition is evaluated under
DuckDB's ``TRY(...)`` (an error on a row becomes NULL) and ``COALESCE(..., FALSE)`` (a NULL
condition drops the row). Errors in constants (``CAST('x' AS INTEGER)``) do not depend on rows:
they surface when the statement is dry-run over empty tables, before anything is charged. Not
so a constant converted to a comparison's common type, which DuckDB casts when the first row is
compared: a numeric constant is part of a proof only when any two such fit one DECIMAL with
room for every integer column's values (at most 18 digits; FINDINGS.md M2), a text against a
DATE or TIMESTAMP column only when it is a real day (and time) the column's type holds (M3).

The proof is deliberately small: comparisons, ranges, ``IN`` lists, ``LIKE`` and ``IS NULL``
between a column and constants (or two columns of the same kind) that DuckDB evaluates without
converting a stored value in a way that can fail. ``TRY`` costs about twice the filter's time
(measured: 25 ms -> 48 ms for ``age > 65`` over 10M rows), so the common filters stay fast.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

from sqlglot import exp

from dpkit.engine.tables import type_class

__all__ = ["is_total", "text_against_number", "total_condition_sql"]

# integer types whose values any comparison with a numeric constant or another of these widens
# without overflow (HUGEINT/UHUGEINT against a DECIMAL constant may not fit DECIMAL(38))
_PLAIN_INTS = frozenset({
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
    "INT", "INT1", "INT2", "INT4", "INT8", "SHORT", "LONG", "SIGNED",
})
_PLAIN_TEXT = frozenset({"VARCHAR", "TEXT", "STRING", "CHAR", "BPCHAR"})
_PLAIN_TEMPORAL = frozenset({"DATE", "TIMESTAMP", "DATETIME"})
_COMPARE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)

ColumnType = Callable[[exp.Column], str]


def _kind(node: exp.Expression, column_type: ColumnType) -> str | None:
    """The kind of a simple operand: 'int', 'float', 'text', 'bool', 'date', 'timestamp' for
    a column (None for kinds whose comparisons may convert stored values), 'num', 'str',
    'datestr', 'tsstr', 'boolean', 'null' for a constant; None for anything else."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        t = column_type(node).upper()
        base = t.split("(")[0].strip()
        if base in _PLAIN_INTS:
            return "int"
        if type_class(t) == "float":
            return "float"
        if base in _PLAIN_TEXT:
            return "text"
        if base in ("BOOLEAN", "BOOL"):
            return "bool"
        if base == "DATE":
            return "date"
        if base in _PLAIN_TEMPORAL:
            return "timestamp"
        return None
    if isinstance(node, exp.Null):
        return "null"
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Neg):
        inner = _kind(node.this, column_type)
        return "num" if inner == "num" else None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return _text_kind(str(node.this))
        return "num" if _fits_any_decimal(str(node.this)) else None
    return None


_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?")


def _text_kind(text: str) -> str:
    """'datestr' for a text every DATE and TIMESTAMP comparison reads (YYYY-MM-DD of a real
    day, ±infinity), 'tsstr' for one a TIMESTAMP comparison reads (with a time of day), 'str'
    otherwise. DuckDB casts the text when the first row is compared, not when the statement
    binds: a text that is no date fails on rows only (FINDINGS.md M3: ``day IN ('x')``)."""
    if text in ("infinity", "-infinity"):
        return "datestr"
    try:
        if _DATE_TEXT.fullmatch(text):
            datetime.date.fromisoformat(text)
            return "datestr"
        if _TIMESTAMP_TEXT.fullmatch(text):
            datetime.datetime.fromisoformat(text)
            return "tsstr"
    except ValueError:
        pass
    return "str"


def _fits_any_decimal(text: str) -> bool:
    """Whether a numeric constant keeps every comparison it enters total: DuckDB compares an
    integer column with a list of constants (IN, BETWEEN) in their common type, a DECIMAL(38, s)
    when one has a fraction, and casts each constant to it when the first row is compared, not
    when the statement binds: a constant that does not fit fails on rows only (FINDINGS.md M2:
    ``i IN (<39 digits>, -0.0)`` in DECIMAL(38,1)). At most 18 digits each (integer part plus
    fraction), any two fit DECIMAL(36, 18); an exponent makes a DOUBLE, which holds them all."""
    if "e" in text.lower():
        return True
    whole, _, fraction = text.lstrip("+-").partition(".")
    return len(whole.lstrip("0")) + len(fraction) <= 18  # the fraction's zeros are its scale


# which column kinds compare with which constant or column kinds without a failing conversion
_WITH_CONSTANT = {
    "int": {"num", "null"},
    "float": {"num", "null"},
    "text": {"str", "datestr", "tsstr", "null"},
    "bool": {"boolean", "null"},
    # a DATE column against a timestamp text compares as TIMESTAMP: a far date fails (M3)
    "date": {"datestr", "null"},
    "timestamp": {"datestr", "tsstr", "null"},
}
_WITH_COLUMN = {
    "int": {"int", "float"},
    "float": {"int", "float"},
    "text": {"text"},
    "bool": {"bool"},
}


def _comparable(a: str | None, b: str | None, same_type: bool) -> bool:
    if a is None or b is None:
        return False
    if a in _WITH_CONSTANT and b in _WITH_CONSTANT:  # two columns
        return (b in _WITH_COLUMN.get(a, set())
                or (a == b and a in ("date", "timestamp") and same_type))
    if a in _WITH_CONSTANT:
        return b in _WITH_CONSTANT[a]
    if b in _WITH_CONSTANT:
        return a in _WITH_CONSTANT[b]
    return True  # two constants: evaluated when the statement binds


def _same_type(a: exp.Expression, b: exp.Expression, column_type: ColumnType) -> bool:
    x, y = a.unnest(), b.unnest()
    return (isinstance(x, exp.Column) and isinstance(y, exp.Column)
            and column_type(x).upper() == column_type(y).upper())


def text_against_number(node: exp.Expression, column_type: ColumnType) -> exp.Column | None:
    """The first text column that ``node`` compares with a number (``code = 12``, ``code IN
    (1, 2)``, ``code BETWEEN 1 AND 9``), or None. Such a comparison converts each stored value
    (an error on ``'A12'``, made NULL under TRY): with a CSV/JSON column left VARCHAR because
    its type was not declared (FINDINGS.md L3), the owner's fix is a declared type."""
    for n in node.find_all(*_COMPARE, exp.In, exp.Between):
        if isinstance(n, exp.In):
            pairs = [(n.this, v) for v in n.expressions]
        elif isinstance(n, exp.Between):
            pairs = [(n.this, n.args["low"]), (n.this, n.args["high"])]
        else:
            pairs = [(n.this, n.expression), (n.expression, n.this)]
        for a, b in pairs:
            col = a.unnest()
            if (isinstance(col, exp.Column) and _kind(col, column_type) == "text"
                    and _kind(b, column_type) == "num"):
                return col
    return None


def is_total(node: exp.Expression, column_type: ColumnType) -> bool:
    """True when the boolean condition ``node`` cannot raise an error on any row.

    ``column_type`` gives a column's declared DuckDB type. False means "not proved", never
    "will fail": such a condition is evaluated under ``TRY``.
    """
    node = node.unnest()  # type: ignore[assignment]  # sqlglot 30 types it as Expr
    if isinstance(node, exp.And | exp.Or | exp.Xor):
        return is_total(node.this, column_type) and is_total(node.expression, column_type)
    if isinstance(node, exp.Not):
        return is_total(node.this, column_type)
    if isinstance(node, exp.Boolean | exp.Null):
        return True
    if isinstance(node, exp.Column):
        return _kind(node, column_type) == "bool"
    if isinstance(node, _COMPARE):
        a, b = node.this, node.expression
        return _comparable(_kind(a, column_type), _kind(b, column_type),
                           _same_type(a, b, column_type))
    if isinstance(node, exp.Is):
        kind = _kind(node.this, column_type)
        if isinstance(node.expression, exp.Null):
            return kind is not None
        # IS TRUE / IS FALSE converts a non-boolean value to BOOLEAN (which can fail)
        return isinstance(node.expression, exp.Boolean) and kind in ("bool", "boolean", "null")
    if isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            return False
        ka = _kind(node.this, column_type)
        return bool(node.expressions) and all(
            _comparable(ka, _kind(v, column_type), False) for v in node.expressions)
    if isinstance(node, exp.Between):
        ka = _kind(node.this, column_type)
        return all(_comparable(ka, _kind(node.args[k], column_type), False)
                   for k in ("low", "high"))
    if isinstance(node, exp.Like | exp.ILike):
        return (not node.args.get("escape") and _kind(node.this, column_type) == "text"
                and _kind(node.expression, column_type) in ("str", "datestr", "tsstr"))
    if isinstance(node, exp.IsNan | exp.IsInf):
        return _kind(node.this, column_type) == "float"
    return False


def total_condition_sql(condition: exp.Expression, total: bool) -> str:
    """DuckDB text of a row condition that never raises: as written when proved total, else
    under TRY, with a failed or NULL condition dropping the row."""
    text = condition.sql(dialect="duckdb")
    # the CAST is the conversion DuckDB would make of a non-boolean condition, now under TRY
    return f"({text})" if total else f"COALESCE(TRY(CAST(({text}) AS BOOLEAN)), FALSE)"
