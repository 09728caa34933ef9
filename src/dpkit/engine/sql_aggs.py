"""Aggregates in the SQL front end: COUNT/SUM/AVG/VAR/STDDEV/quantiles over columns or expressions,
FILTER, COUNT(DISTINCT), each typed against the declarations (see :mod:`dpkit.engine.sql`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace as dc_replace

from sqlglot import exp

from dpkit.engine import aggexpr
from dpkit.engine.scope import Scope
from dpkit.engine.spec import (
    AVG,
    COUNT,
    COUNT_COL,
    COUNT_DISTINCT,
    COUNT_UNITS,
    EXPR_SOURCE,
    MAX_QUANTILE,
    MIN_QUANTILE,
    PRIVATE_ALIAS,
    QUANTILE,
    STDDEV,
    STDDEV_POP,
    SUM,
    VAR,
    VAR_POP,
    AggCall,
    QueryError,
)
from dpkit.engine.sql_scalar import check_scalar
from dpkit.engine.tables import TableMeta, from_text_file, type_class

# the spec's names stay reachable as dsql.X for the planner and the tests

__all__ = ["ColumnArg", "agg_call", "agg_from", "count_call", "numeric_agg", "qname",
           "quantile_value"]


def agg_from(node: exp.Expr, scope: Scope, private: TableMeta) -> AggCall | None:
    """An AggCall for an aggregate node, or None if ``node`` is not an aggregate; an
    aggregate over an expression (or with FILTER) carries it (engine/aggexpr.py)."""
    if isinstance(node, exp.Filter):
        call = agg_from(aggexpr.filtered_aggregate(node), scope, private)
        if call is None:
            raise QueryError(f"FILTER (WHERE ...) follows an aggregate (got "
                             f"{node.sql(dialect='duckdb')[:60]})")
        return dc_replace(call, label=node.sql(dialect="duckdb"),
                          default_name=call.default_name.split("_")[0] + "_filtered")
    made: dict[str, tuple[str, str]] = {}
    counted = aggexpr.conditional_count(node)
    call = agg_call(counted, scope, private, made)
    if call is not None and counted is not node:  # SUM(CASE WHEN c THEN 1 ELSE 0 END)
        call = dc_replace(call, label=node.sql(dialect="duckdb"), default_name="sum_expr")
    return None if call is None else aggexpr.with_expression(call, made)


ColumnArg = Callable[[exp.Expr | None, str], tuple[str, str, str]]


def agg_call(node: exp.Expr, scope: Scope, private: TableMeta,
              made: dict[str, tuple[str, str]]) -> AggCall | None:
    def column_arg(arg: exp.Expr | None, fname: str) -> tuple[str, str, str]:
        if isinstance(arg, exp.Distinct):
            raise QueryError(
                f"{fname}(DISTINCT ...) is not supported; only COUNT(DISTINCT col) is"
            )
        if arg is None or isinstance(arg, exp.Star):
            raise QueryError(f"{fname}() takes a column or an expression of columns")
        if not isinstance(arg, exp.Column):
            where = f"{fname}(...)"
            return aggexpr.expression_arg(  # sqlglot 30 types nodes as Expr
                arg, fname, lambda n: check_scalar(n, scope, where, set())[0],  # type: ignore[arg-type]
                made)
        return scope.resolve(arg)

    if isinstance(node, exp.WithinGroup):
        inner = node.this
        order = node.expression
        if isinstance(inner, exp.PercentileCont | exp.PercentileDisc) and isinstance(
            order, exp.Order
        ) and len(order.expressions) == 1:
            q = quantile_value(inner.this, "PERCENTILE_CONT")
            internal, col, type_ = column_arg(order.expressions[0].this, "PERCENTILE_CONT")
            return numeric_agg(QUANTILE, internal, col, type_, q, private)
        raise QueryError(f"unsupported aggregate {node.sql(dialect='duckdb')}")
    if isinstance(node, exp.Count):
        return count_call(node, column_arg, private)
    simple: dict[type[exp.Expression], str] = {
        exp.Sum: SUM, exp.Avg: AVG, exp.Variance: VAR, exp.VariancePop: VAR_POP,
        exp.Stddev: STDDEV, exp.StddevSamp: STDDEV, exp.StddevPop: STDDEV_POP,
        exp.Median: QUANTILE, exp.Min: QUANTILE, exp.Max: QUANTILE,
    }
    for cls, func in simple.items():
        if type(node) is cls:
            fname = cls.__name__.upper()
            internal, col, type_ = column_arg(node.this, fname)
            fixed_q: float | None = None  # the quantile MEDIAN/MIN/MAX stand for; None otherwise
            if cls is exp.Median:
                fixed_q = 0.5
            elif cls is exp.Min:
                fixed_q = MIN_QUANTILE
            elif cls is exp.Max:
                fixed_q = MAX_QUANTILE
            agg = numeric_agg(func, internal, col, type_, fixed_q, private)
            if cls in (exp.Min, exp.Max):
                agg = AggCall(agg.func, agg.source, agg.column, agg.q,
                              label=f"{fname}({col})", default_name=f"{fname.lower()}_{col}")
            if cls is exp.Median:
                agg = AggCall(agg.func, agg.source, agg.column, agg.q,
                              label=f"MEDIAN({col})", default_name=f"median_{col}")
            return agg
    if isinstance(node, exp.Quantile | exp.PercentileCont | exp.PercentileDisc):
        q_node = node.args.get("quantile") or node.args.get("expression")
        q = quantile_value(q_node, "QUANTILE")
        internal, col, type_ = column_arg(node.this, "QUANTILE")
        return numeric_agg(QUANTILE, internal, col, type_, q, private)
    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        aliases = {"var": VAR, "var_samp": VAR, "variance": VAR, "var_pop": VAR_POP,
                   "stddev": STDDEV, "stddev_samp": STDDEV, "stddev_pop": STDDEV_POP,
                   "std": STDDEV}
        if name in aliases:
            if len(node.expressions) != 1:
                raise QueryError(f"{name.upper()} takes one column")
            internal, col, type_ = column_arg(node.expressions[0], name.upper())
            return numeric_agg(aliases[name], internal, col, type_, None, private)
        if name in ("quantile", "quantile_cont", "quantile_disc", "percentile"):
            if len(node.expressions) != 2:
                raise QueryError(f"{name.upper()}(column, q) takes a column and a number in [0, 1]")
            internal, col, type_ = column_arg(node.expressions[0], name.upper())
            q = quantile_value(node.expressions[1], name.upper())
            return numeric_agg(QUANTILE, internal, col, type_, q, private)
    if isinstance(node, exp.AggFunc):
        raise QueryError(
            f"aggregate {node.sql(dialect='duckdb')} is not supported; available: COUNT(*), "
            f"COUNT(col), COUNT(DISTINCT col), SUM, AVG, VAR, STDDEV, MEDIAN, "
            f"QUANTILE(col, q), MIN, MAX"
        )
    return None


def count_call(node: exp.Count, column_arg: ColumnArg, private: TableMeta) -> AggCall:
    """COUNT(*), COUNT(x), COUNT(DISTINCT <privacy unit>) and COUNT(DISTINCT x)."""
    arg = node.this
    if isinstance(arg, exp.Star) or (isinstance(arg, exp.Literal) and not arg.is_string):
        return AggCall(COUNT, None, None, label="COUNT(*)", default_name="count")
    if isinstance(arg, exp.Distinct):
        cols = arg.expressions
        if len(cols) != 1:
            raise QueryError("COUNT(DISTINCT ...) takes one column or expression")
        internal, col, _ = column_arg(cols[0], "COUNT")
        if internal == PRIVATE_ALIAS and col == private.privacy_unit:
            return AggCall(COUNT_UNITS, PRIVATE_ALIAS, col, label=f"COUNT(DISTINCT {col})",
                           default_name=f"count_distinct_{col}")
        # each kept row adds at most one distinct value: sensitivity max_rows_per_unit
        return AggCall(COUNT_DISTINCT, internal, col, label=f"COUNT(DISTINCT {col})",
                       default_name=f"count_distinct_{col}")
    internal, col, _ = column_arg(arg, "COUNT")
    return AggCall(COUNT_COL, internal, col, label=f"COUNT({col})", default_name=f"count_{col}")


def quantile_value(node: exp.Expression | None, fname: str) -> float:
    if isinstance(node, exp.Neg):
        raise QueryError(f"{fname}: the quantile must lie in [0, 1]")
    if not isinstance(node, exp.Literal) or node.is_string:
        raise QueryError(f"{fname}: give the quantile as one number in [0, 1], e.g. 0.9")
    q = float(node.this)
    if not 0.0 <= q <= 1.0 or math.isnan(q):
        raise QueryError(f"{fname}: the quantile must lie in [0, 1] (got {q:g})")
    return q


def numeric_agg(func: str, internal: str, col: str, type_: str, q: float | None,
                 private: TableMeta) -> AggCall:
    if internal not in (PRIVATE_ALIAS, EXPR_SOURCE):
        raise QueryError(
            f"{func.upper()}({col}): aggregates must use columns of the private table "
            f"{private.name!r}; {col!r} comes from a public table"
        )
    if type_class(type_) not in ("int", "float", "decimal", "bool"):
        raise QueryError(
            f"{func.upper()}({col}): column {col!r} has type {type_}, not a number; numeric "
            f"aggregates need a numeric column (COUNT works on any column)" + (
                f". A CSV/JSON column without declared bounds or type is read as VARCHAR: "
                f"ask the owner for dpkit add-table ... --bounds {col}=LOW:HIGH --replace "
                f"(read as DOUBLE) or --types {col}=BIGINT"
                if from_text_file(private) and type_.upper() == "VARCHAR" else "")
        )
    names = {SUM: "SUM", AVG: "AVG", VAR: "VAR", VAR_POP: "VAR_POP", STDDEV: "STDDEV",
             STDDEV_POP: "STDDEV_POP", QUANTILE: "QUANTILE"}
    if func == QUANTILE:
        label = f"QUANTILE({col}, {q:g})"
        default = f"q{qname(q)}_{col}"
    else:
        label = f"{names[func]}({col})"
        default = f"{func}_{col}"
    return AggCall(func, internal, col, q, label=label, default_name=default)


def qname(q: float | None) -> str:
    assert q is not None
    text = f"{q * 100:g}".replace(".", "_")
    return text
