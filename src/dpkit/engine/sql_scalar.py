"""Scalar expressions in the SQL front end: which functions and operators a query may use, each
column resolved in scope and typed (see :mod:`dpkit.engine.sql`).
"""

from __future__ import annotations

from sqlglot import exp

from dpkit.engine.scope import Scope, col_ref
from dpkit.engine.spec import (
    QueryError,
)
from dpkit.engine.tables import from_text_file
from dpkit.engine.totality import is_total, text_against_number

# the spec's names stay reachable as dsql.X for the planner and the tests

__all__ = ["ANON_ALLOWED", "ARITH", "ATOMS", "COMPARE", "LOGIC", "PRED", "SCALAR_FUNCS",
           "check_scalar"]

LOGIC = (exp.And, exp.Or, exp.Not, exp.Paren, exp.Xor)
COMPARE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
PRED = (exp.Is, exp.In, exp.Between, exp.Like, exp.ILike, exp.RegexpLike, exp.Glob)
ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Neg)
ATOMS = (exp.Literal, exp.Boolean, exp.Null, exp.Tuple, exp.DataType, exp.Interval, exp.Var,
          exp.Identifier, exp.Column)
# the functions a row condition may use; whether a condition can fail on a row is decided by
# the totality proof (engine/totality.py), not by this list
SCALAR_FUNCS: tuple[type[exp.Expression], ...] = (
    exp.Lower, exp.Upper, exp.Length, exp.Trim, exp.Coalesce, exp.IsNan, exp.IsInf, exp.TryCast,
    exp.Case, exp.If, exp.StartsWith, exp.Abs, exp.Year, exp.Month, exp.Day, exp.Nullif,
    exp.Greatest, exp.Least, exp.Sign, exp.Cast, exp.Substring, exp.Concat, exp.DPipe,
    exp.StrPosition, exp.Round, exp.Floor, exp.Ceil, exp.Sqrt, exp.Ln, exp.Log, exp.Pow, exp.Exp,
    exp.Extract, exp.TimestampTrunc, exp.DateTrunc, exp.DayOfWeek, exp.DayOfYear,
    exp.DayOfMonth, exp.Quarter, exp.Week, exp.Left, exp.Right, exp.Hour, exp.Minute,
    exp.Second, exp.DateAdd, exp.DateSub, exp.DateDiff, exp.CurrentDate, exp.Date, exp.Replace,
    exp.Contains, exp.Reverse,
)
ANON_ALLOWED = {
    "isfinite", "ends_with", "suffix", "prefix", "contains", "strlen", "date_part", "datepart",
    "dayofweek", "dayofmonth", "weekday", "hour", "minute", "second", "ltrim", "rtrim",
    "regexp_matches", "starts_with", "least", "greatest", "ifnull", "trunc",
}


def _allowed_function_list() -> str:
    names = sorted({c.__name__.upper() for c in SCALAR_FUNCS} | {
        n.upper() for n in ANON_ALLOWED})
    return ", ".join(names)


# --------------------------------------------------------------------------- parsing


def _check_replace(n: exp.Replace, where: str) -> None:
    """REPLACE may not lengthen a string: nested, each lengthening one multiplies the text
    it matches (eight REPLACEs of 'zoe' by ten copies turn one row's 'zoe' into 3*10^8
    characters), so the query's time and memory would say whether some row holds the
    pattern (measured: 16 ms without such a row, 2.7 s with one; FINDINGS.md F2). With
    constant strings and a replacement no longer than the pattern, every string keeps at
    most its length and the work stays linear in the rows' text."""
    pattern, repl = n.args.get("expression"), n.args.get("replacement")
    if not (isinstance(pattern, exp.Literal) and pattern.is_string and pattern.this
            and isinstance(repl, exp.Literal) and repl.is_string
            and len(repl.this) <= len(pattern.this)):
        raise QueryError(
            f"REPLACE ({n.sql(dialect='duckdb')[:60]}) in {where} takes constant strings and a "
            f"replacement no longer than the text it replaces (a longer one multiplies a row's "
            f"text: its time would reveal whether some row holds it); compare with LIKE, "
            f"CONTAINS or = instead"
        )


def check_scalar(
    node: exp.Expression, scope: Scope, where: str, columns_used: set[tuple[str, str]]
) -> tuple[exp.Expression, bool]:
    """Validate a row-level condition; return it with columns resolved and casts of stored
    values made non-raising (TRY_CAST), plus whether it must run under TRY (not proved total
    by :func:`dpkit.engine.totality.is_total`)."""

    def visit(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.AggFunc):
            raise QueryError(
                f"aggregate {n.sql(dialect='duckdb')} in {where}: filter on aggregates with "
                f"HAVING (on the noisy results)"
            )
        if isinstance(n, exp.Star):
            raise QueryError(f"* is not allowed in {where}")
        if isinstance(n, exp.Column):
            internal, col, _ = scope.resolve(n)
            columns_used.add((internal, col))
            return col_ref(internal, col)
        if isinstance(n, exp.Cast) and not isinstance(n, exp.TryCast):
            if isinstance(n.this, exp.Literal | exp.Null):
                return n  # a constant conversion: checked when the statement is dry-run
            # transform does not descend into a replaced node: resolve the operand here
            return exp.TryCast(this=n.this.transform(visit), to=n.args["to"])
        if isinstance(n, exp.Replace):
            _check_replace(n, where)
        if isinstance(n, LOGIC + COMPARE + PRED + ATOMS + SCALAR_FUNCS + ARITH):
            if isinstance(n, exp.In) and n.args.get("query"):
                raise QueryError("IN (SELECT ...) is not allowed; list the values: IN ('a', 'b')")
            return n
        if isinstance(n, exp.Anonymous):
            if n.name.lower() not in ANON_ALLOWED:
                raise QueryError(
                    f"function {n.name}() is not allowed in {where}; allowed functions: "
                    f"{_allowed_function_list()}"
                )
            return n
        raise QueryError(
            f"{type(n).__name__.upper()} ({n.sql(dialect='duckdb')[:60]}) is not allowed in "
            f"{where}; allowed functions: {_allowed_function_list()}"
        )

    out = node.copy().transform(visit)
    found = text_against_number(node, lambda c: scope.resolve(c)[2])
    if found is not None and _read_from_text_file(scope, found):
        text = found.name
        raise QueryError(
            f"{where} compares the text column {text!r} with a number; compare it with text "
            f"({text} = '12'), or, if it holds numbers, have the owner declare its type when "
            f"adding the table (--types {text}=BIGINT, types={{{text!r}: 'BIGINT'}}): a CSV or "
            f"JSON column without a declared type (nor bounds) is read as VARCHAR")
    return out, not is_total(node, lambda c: scope.resolve(c)[2])


def _read_from_text_file(scope: Scope, column: exp.Column) -> bool:
    """Whether ``column`` belongs to a table loaded from a CSV/JSON file
    (:func:`~dpkit.engine.tables.from_text_file`). A frame's text column compared with a
    number stays a TRY comparison."""
    return from_text_file(scope.tables[scope.resolve(column)[0]])
