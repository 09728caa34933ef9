"""Aggregates over expressions and FILTER clauses, in the SQL front end (text -> AggCall).

``SUM(price * qty)``, ``AVG(CASE WHEN age > 65 THEN cost ELSE 0 END)``, ``COUNT(*) FILTER
(WHERE ward = 'A')``, ``SUM(cost) FILTER (WHERE age < 18)``: the aggregate's argument is an
expression over columns of the private table. Here it is only resolved and typed (names
checked, casts of stored values made non-raising, functions from the scalar allow-list); it
becomes an :class:`~dpkit.engine.spec.AggCall` whose ``source`` is
:data:`~dpkit.engine.spec.EXPR_SOURCE`, whose ``column`` is a name made from the expression's
text, and whose ``expr`` is the expression as DuckDB text. A FILTER is rewritten into the
argument: ``AGG(x) FILTER (WHERE c)`` is ``AGG(CASE WHEN c THEN x END)`` and ``COUNT(*) FILTER
(WHERE c)`` is ``COUNT(CASE WHEN c THEN 1 END)`` (rows where ``c`` is not true count as
missing, as in SQL).

The planner (:mod:`dpkit.engine.plan.intervals`) derives the expression's range from the
declared bounds by interval arithmetic (refusing what it cannot bound, before anything is
charged) and the compiled statement evaluates it under ``TRY`` over clamped columns, so no row
can make it fail.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import sqlglot
from sqlglot import exp

from dpkit.engine.spec import EXPR_SOURCE, PRIVATE_ALIAS, AggCall, QueryError

__all__ = ["conditional_count", "expr_columns", "expression_arg", "filtered_aggregate",
           "with_expression"]

Resolve = Callable[[exp.Expr], exp.Expr]


def expression_arg(arg: exp.Expr, fname: str, resolve: Resolve,
                   made: dict[str, tuple[str, str]]) -> tuple[str, str, str]:
    """``(EXPR_SOURCE, name, "DOUBLE")`` for an aggregate's expression argument.

    ``resolve`` turns the expression into DuckDB form (columns as ``__t."col"``, checked against
    the scalar allow-list); ``made`` collects ``name -> (sql, as written)`` for
    :func:`with_expression`.
    """
    if any(isinstance(n, exp.AggFunc) for n in arg.walk()):
        raise QueryError(
            f"{fname}({arg.sql(dialect='duckdb')[:60]}): an aggregate inside an aggregate is "
            f"not allowed; write the outer arithmetic over the aggregates instead, e.g. "
            f"SUM(a) / SUM(b)")
    resolved = resolve(arg)
    for col in resolved.find_all(exp.Column):
        if col.table != PRIVATE_ALIAS:
            raise QueryError(
                f"{fname}({arg.sql(dialect='duckdb')[:60]}): column {col.name!r} comes from a "
                f"public table; expressions inside aggregates use columns of the private table")
    text = resolved.sql(dialect="duckdb")
    name = "e" + hashlib.sha256(text.encode()).hexdigest()[:12]
    made[name] = (text, arg.sql(dialect="duckdb"))
    return EXPR_SOURCE, name, "DOUBLE"


def with_expression(call: AggCall, made: dict[str, tuple[str, str]]) -> AggCall:
    """``call`` with its expression text attached and its label written as the analyst did."""
    if call.source != EXPR_SOURCE or call.column not in made:
        return call
    assert call.column is not None
    text, shown = made[call.column]
    return AggCall(call.func, call.source, call.column, call.q,
                   label=call.label.replace(call.column, shown),
                   default_name=call.default_name.replace(f"_{call.column}", "_expr"),
                   expr=text)


def filtered_aggregate(node: exp.Filter) -> exp.Expr:
    """``AGG(x) FILTER (WHERE c)`` as ``AGG(CASE WHEN c THEN x END)``; ``COUNT(*)`` counts
    ``CASE WHEN c THEN 1 END``."""
    agg = node.this
    where = node.expression
    cond = where.this if isinstance(where, exp.Where) else where
    if not isinstance(agg, exp.AggFunc) and not isinstance(agg, exp.Anonymous):
        raise QueryError(f"FILTER (WHERE ...) follows an aggregate (got "
                         f"{node.sql(dialect='duckdb')[:60]})")

    def case(value: exp.Expr) -> exp.Expr:
        return exp.Case(ifs=[exp.If(this=exp.paren(cond.copy()), true=value.copy())])

    out = agg.copy()
    if isinstance(agg, exp.Count):
        arg = agg.this
        if isinstance(arg, exp.Star) or (isinstance(arg, exp.Literal) and not arg.is_string):
            out.set("this", case(exp.Literal.number(1)))
        elif isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
            out.set("this", exp.Distinct(expressions=[case(arg.expressions[0])]))
        else:
            out.set("this", case(arg))
        return out
    if isinstance(agg, exp.Anonymous):
        if not agg.expressions:
            raise QueryError(f"{agg.name}() takes a column")
        args = list(agg.expressions)
        args[0] = case(args[0])
        out.set("expressions", args)
        return out
    if agg.this is None or isinstance(agg, exp.WithinGroup):
        raise QueryError(f"FILTER is not supported on {agg.sql(dialect='duckdb')[:60]}; put "
                         f"the condition in WHERE")
    out.set("this", case(agg.this))
    return out


def expr_columns(call: AggCall) -> set[tuple[str, str]]:
    """The ``(alias, column)`` pairs an expression aggregate reads."""
    if not call.expr:
        return set()
    node = sqlglot.parse_one(call.expr, read="duckdb")
    return {(c.table, c.name) for c in node.find_all(exp.Column)}


def conditional_count(node: exp.Expr) -> exp.Expr:
    """``SUM(CASE WHEN c THEN 1 ELSE 0 END)`` (or ``SUM(IF(c, 1, 0))``, without the ELSE too) as
    ``COUNT(CASE WHEN c THEN 1 END)``: the same number, measured as a count (integer noise,
    sensitivity ``max_rows_per_unit``); anything else unchanged."""
    if not isinstance(node, exp.Sum):
        return node
    arg = node.this.unnest() if node.this is not None else None
    if isinstance(arg, exp.Case) and arg.this is None and len(arg.args.get("ifs") or []) == 1:
        cond, one = arg.args["ifs"][0].this, arg.args["ifs"][0].args.get("true")
        zero = arg.args.get("default")
    elif isinstance(arg, exp.If):
        cond, one, zero = arg.this, arg.args.get("true"), arg.args.get("false")
    else:
        return node
    if _number(one) != 1.0 or (zero is not None and _number(zero) != 0.0):
        return node
    return exp.Count(this=exp.Case(ifs=[exp.If(this=exp.paren(cond.copy()),
                                               true=exp.Literal.number(1))]))


def _number(node: exp.Expr | None) -> float | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    return None
