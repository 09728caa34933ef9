"""SQL front end: parse with sqlglot, refuse anything that could reveal a row, resolve names.

Only aggregates leave the curator. :func:`parse_query` accepts one ``SELECT`` over one private
table (optionally joined with public lookup tables) whose output is built from

* aggregates: ``COUNT(*)``, ``COUNT(col)``, ``COUNT(DISTINCT col)``, ``SUM``, ``AVG``,
  ``VAR``/``VARIANCE``/``VAR_SAMP``/``VAR_POP``, ``STDDEV``/``STDDEV_SAMP``/``STDDEV_POP``,
  ``MEDIAN``, ``QUANTILE(col, q)``/``QUANTILE_CONT``/``PERCENTILE_CONT``, ``MIN``, ``MAX``, over
  a column or an expression of the private table's columns, optionally with ``FILTER (WHERE
  ...)`` (:mod:`dpkit.engine.aggexpr`; the expression's range is derived at planning);
* ``GROUP BY`` columns (public keys when the column has a declared domain or comes from a public
  table, or when ``WHERE col IN (...)`` names them; otherwise the groups are selected
  privately), and expressions of columns (``CASE``, bins, ``date_trunc``; their keys are
  derived in :mod:`dpkit.engine.derived_keys`), by alias or position too; a SELECT of keys
  alone (or ``SELECT DISTINCT`` keys) releases the keys;
* arithmetic over those (evaluated after the noise, on the noisy values).

``WHERE`` may use any column with a fixed list of scalar functions; ``HAVING``, ``ORDER BY`` and
``LIMIT`` act on the noisy results (post-processing, free), except ``ORDER BY <COUNT/SUM>
LIMIT k`` over groups, whose ``k`` groups the planner chooses by noisy max before measuring
them (``QuerySpec.order_aggs`` names the ordering aggregate). Everything else is refused by a
:class:`QueryError` whose message says what to write instead: raw columns, ``SELECT *``,
``DISTINCT`` with aggregates, subqueries, CTEs, window functions, set operations, table
functions, sampling, parameters, joins between private tables, unknown tables, columns and
functions. T-SQL's ``SELECT TOP n`` is read too; other dialects go through :func:`to_duckdb`.

The result is a :class:`QuerySpec`: names resolved against the table metadata, casts turned
into ``TRY_CAST``, and a flag saying whether the filter could raise a data-dependent error (then
the planner wraps it in DuckDB's ``TRY``, so an error can never tell the analyst anything about a
row: a row on which the filter fails is simply not selected).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import replace as dc_replace

import sqlglot
from sqlglot import exp

from dpkit.engine import aggexpr
from dpkit.engine.derived_keys import derived_key, restrict_keys
from dpkit.engine.scope import Scope, col_ref, from_clause
from dpkit.engine.spec import (
    AVG,
    COUNT,
    COUNT_COL,
    COUNT_DISTINCT,
    COUNT_UNITS,
    EXPR_SOURCE,
    MAX_QUANTILE,
    MIN_QUANTILE,
    NUMERIC_AGGS,
    PRIVATE_ALIAS,
    QUANTILE,
    STDDEV,
    STDDEV_POP,
    SUM,
    VAR,
    VAR_POP,
    AggCall,
    GroupKey,
    JoinSpec,
    Output,
    QueryError,
    QuerySpec,
    where_sql,
)
from dpkit.engine.tables import TableMeta, type_class
from dpkit.engine.totality import is_total

# the spec's names stay reachable as dsql.X for the planner and the tests
__all__ = ["AVG", "COUNT", "COUNT_COL", "COUNT_DISTINCT", "COUNT_UNITS", "EXPR_SOURCE",
           "MAX_QUANTILE", "MIN_QUANTILE", "NUMERIC_AGGS", "PRIVATE_ALIAS", "QUANTILE", "STDDEV",
           "STDDEV_POP", "SUM", "VAR",
           "VAR_POP", "AggCall", "GroupKey", "JoinSpec", "Output", "QueryError", "QuerySpec",
           "parse_query", "to_duckdb", "where_sql"]



# --------------------------------------------------------------------------- scalar allowlist

_LOGIC = (exp.And, exp.Or, exp.Not, exp.Paren, exp.Xor)
_COMPARE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
_PRED = (exp.Is, exp.In, exp.Between, exp.Like, exp.ILike, exp.RegexpLike, exp.Glob)
_ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Neg)
_ATOMS = (exp.Literal, exp.Boolean, exp.Null, exp.Tuple, exp.DataType, exp.Interval, exp.Var,
          exp.Identifier, exp.Column)
# the functions a row condition may use; whether a condition can fail on a row is decided by
# the totality proof (engine/totality.py), not by this list
_SCALAR_FUNCS: tuple[type[exp.Expression], ...] = (
    exp.Lower, exp.Upper, exp.Length, exp.Trim, exp.Coalesce, exp.IsNan, exp.IsInf, exp.TryCast,
    exp.Case, exp.If, exp.StartsWith, exp.Abs, exp.Year, exp.Month, exp.Day, exp.Nullif,
    exp.Greatest, exp.Least, exp.Sign, exp.Cast, exp.Substring, exp.Concat, exp.DPipe,
    exp.StrPosition, exp.Round, exp.Floor, exp.Ceil, exp.Sqrt, exp.Ln, exp.Log, exp.Pow, exp.Exp,
    exp.Extract, exp.TimestampTrunc, exp.DateTrunc, exp.DayOfWeek, exp.DayOfYear,
    exp.DayOfMonth, exp.Quarter, exp.Week, exp.Left, exp.Right, exp.Hour, exp.Minute,
    exp.Second, exp.DateAdd, exp.DateSub, exp.DateDiff, exp.CurrentDate, exp.Date, exp.Replace,
    exp.Contains, exp.Reverse,
)
_ANON_ALLOWED = {
    "isfinite", "ends_with", "suffix", "prefix", "contains", "strlen", "date_part", "datepart",
    "dayofweek", "dayofmonth", "weekday", "hour", "minute", "second", "ltrim", "rtrim",
    "regexp_matches", "starts_with", "least", "greatest", "ifnull", "trunc",
}


def _allowed_function_list() -> str:
    names = sorted({c.__name__.upper() for c in _SCALAR_FUNCS} | {
        n.upper() for n in _ANON_ALLOWED})
    return ", ".join(names)


# --------------------------------------------------------------------------- parsing


_TOP = re.compile(r"^\s*SELECT\s+(DISTINCT\s+)?TOP\s", re.IGNORECASE)


def _statements(text: str, dialect: str) -> list[exp.Expr]:
    """The statements of ``text`` read in ``dialect`` (T-SQL's ``SELECT TOP n`` is also read
    when the dialect is DuckDB's, which has no TOP)."""
    try:
        return [s for s in sqlglot.parse(text, read=dialect) if s is not None]
    except sqlglot.errors.ParseError as exc:
        if dialect == "duckdb" and _TOP.match(text):
            return _statements(text, "tsql")
        first = str(exc).splitlines()[0]
        raise QueryError(f"cannot parse the SQL: {first}") from None
    except sqlglot.errors.TokenError as exc:
        raise QueryError(f"cannot parse the SQL: {exc}") from None


def to_duckdb(text: str, dialect: str | None) -> str:
    """``text`` written in another SQL dialect sqlglot reads (``"tsql"``, ``"postgres"``,
    ``"bigquery"``, ...) as DuckDB SQL; DuckDB's own text is returned unchanged."""
    if dialect is None:
        return text
    if not isinstance(dialect, str) or dialect.lower() not in DIALECTS:
        raise QueryError(f"unknown SQL dialect {dialect!r}; one of {', '.join(DIALECTS)}")
    if dialect.lower() == "duckdb":
        return text
    if not isinstance(text, str) or not text.strip():
        raise QueryError("the query is empty; write e.g. SELECT COUNT(*) FROM <table>")
    return "; ".join(s.sql(dialect="duckdb") for s in _statements(text, dialect.lower()))


DIALECTS = ("athena", "bigquery", "clickhouse", "databricks", "duckdb", "hive", "mysql",
            "oracle", "postgres", "presto", "redshift", "snowflake", "spark", "sqlite",
            "trino", "tsql")


def _distinct_as_group_by(stmt: exp.Select) -> None:
    """``SELECT DISTINCT a, b FROM t`` (no aggregate, no GROUP BY) is ``SELECT a, b FROM t
    GROUP BY a, b``: the keys, declared or selected privately."""
    distinct = stmt.args.get("distinct")
    if not distinct or distinct.args.get("on") or stmt.args.get("group") or any(
            s.find(exp.AggFunc) is not None or isinstance(s.unalias(), exp.Star)
            for s in stmt.expressions):
        return
    stmt.set("distinct", None)
    stmt.set("group", exp.Group(expressions=[s.unalias().copy() for s in stmt.expressions]))


def parse_query(
    text: str,
    catalog: Mapping[str, TableMeta],
    dialect: str = "duckdb",
) -> QuerySpec:
    """Parse and validate ``text`` against the registered tables; return the resolved spec."""
    if not isinstance(text, str) or not text.strip():
        raise QueryError("the query is empty; write e.g. SELECT COUNT(*) FROM <table>")
    statements = _statements(text, dialect)
    if len(statements) != 1:
        raise QueryError(
            f"send exactly one SELECT statement (got {len(statements)}); split the work into "
            f"separate queries"
        )
    stmt = statements[0]
    if isinstance(stmt, exp.Select):
        _distinct_as_group_by(stmt)
    if isinstance(stmt, exp.Union | exp.Intersect | exp.Except):
        raise QueryError(
            "UNION/INTERSECT/EXCEPT are not allowed; run each SELECT as its own query and "
            "combine the noisy answers afterwards"
        )
    if not isinstance(stmt, exp.Select):
        raise QueryError(
            f"only SELECT queries are answered (got {stmt.key.upper()}); the curator never "
            f"changes data"
        )
    reasons = {
        "with_": "common table expressions (WITH) are not allowed; put the filter in WHERE",
        "distinct": "SELECT DISTINCT reveals which values exist; write SELECT col, COUNT(*) "
                    "FROM t GROUP BY col instead",
        "qualify": "QUALIFY uses window functions over rows; not allowed",
        "windows": "window functions work on rows; use GROUP BY with aggregates",
        "into": "SELECT INTO is not allowed",
        "sample": "sampling is not allowed; ask for the aggregate over the whole table",
        "laterals": "LATERAL is not allowed",
        "pivots": "PIVOT is not allowed; use GROUP BY",
    }
    allowed = {"expressions", "from_", "from", "joins", "where", "group", "having", "order",
               "limit", "offset"}
    for key, value in stmt.args.items():
        if key in allowed or value is None or value is False or value == []:
            continue
        why = reasons.get(key, f"the {key.rstrip('_').upper()} clause is not supported")
        raise QueryError(why)
    for node in stmt.walk():
        if isinstance(node, exp.Placeholder | exp.Parameter):
            raise QueryError("query parameters ($1, ?) are not supported; write the value inline")
        if isinstance(node, exp.Window):
            raise QueryError(
                f"window functions ({node.sql(dialect='duckdb')[:60]}) work on individual rows; "
                f"use aggregates with GROUP BY instead"
            )
        if isinstance(node, exp.Subquery | exp.Exists) or (
            isinstance(node, exp.Select) and node is not stmt
        ):
            raise QueryError(
                "subqueries are not allowed (they can reveal rows); write the condition directly "
                "in WHERE, or run two queries"
            )
    scope, private, joins = from_clause(stmt, catalog)
    group_by, derived = _group_by(stmt, scope, private)
    spec = _select(text, stmt, scope, private, joins, group_by, derived)
    restrict_keys(stmt.args["where"].this if stmt.args.get("where") else None, group_by, scope)
    return spec


def _check_key_readable(col: str, type_: str) -> None:
    """Refuse GROUP BY keys that DuckDB cannot hand to Python in this environment.

    Keys are read before the charge; DuckDB converts TIMESTAMP WITH TIME ZONE values with the
    ``pytz`` module, so without it the query fails exactly when the selected rows hold a
    non-NULL time (whether one person's value is NULL would be told for free). The refusal
    depends only on the column's type and the installed modules.
    """
    import importlib.util

    t = type_.upper()
    if ("WITH TIME ZONE" in t or t.startswith(("TIMESTAMPTZ", "TIMETZ"))) and \
            importlib.util.find_spec("pytz") is None:
        raise QueryError(
            f"GROUP BY {col} ({type_}) needs the 'pytz' module to read time-zone keys (pip "
            f"install pytz), or group by a column of type TIMESTAMP or DATE"
        )
    # INTERVAL keys beyond 999999999 days (or nested values holding them) overflow Python's
    # timedelta: whether the read fails would depend on the values
    if t.startswith(("INTERVAL", "STRUCT", "MAP", "UNION")) or t.endswith("]"):
        raise QueryError(
            f"GROUP BY {col} ({type_}): keys of this type cannot always be read back; group by "
            f"a column of a plain type (text, number, date, timestamp)"
        )


def _is_column(scope: Scope, col: exp.Column) -> bool:
    """Whether an unqualified name is a column of some table in the query."""
    for meta in scope.tables.values():
        try:
            if meta.find(col.name) is not None:
                return True
        except ValueError:
            return True  # ambiguous within a table: it names a column (resolve says which)
    return False


def _group_by(stmt: exp.Select, scope: Scope, private: TableMeta
              ) -> tuple[list[GroupKey], list[tuple[exp.Expr, int]]]:
    """The GROUP BY keys, and each derived key's expression with its key index (so that the
    SELECT list, HAVING and ORDER BY can name it)."""
    group = stmt.args.get("group")
    if group is None:
        return [], []
    if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets"):
        raise QueryError("ROLLUP/CUBE/GROUPING SETS are not supported; run one query per grouping")
    keys: list[GroupKey] = []
    derived: list[tuple[exp.Expr, int]] = []
    select_items = stmt.expressions
    for item in group.expressions:
        node, label = _group_item(item, select_items, scope)
        if not isinstance(node, exp.Column):
            _derived_group_key(node, label, scope, private, keys, derived)
            continue
        internal, col, type_ = scope.resolve(node)
        if internal == PRIVATE_ALIAS and private.privacy_unit and col == private.privacy_unit:
            raise QueryError(
                f"GROUP BY the privacy unit {col!r} would give one group per person; group by a "
                f"coarser column"
            )
        if any(k.source == internal and k.column == col and k.expr is None for k in keys):
            continue
        _check_key_readable(col, type_)
        keys.append(GroupKey(source=internal, column=col, type=type_))
    return keys, derived


def _group_item(item: exp.Expression, select_items: list[exp.Expression], scope: Scope
                ) -> tuple[exp.Expr, str]:
    """What one GROUP BY item groups by (a position or an output alias resolved to its
    expression; a table column wins over an alias, as in DuckDB), and the key's name."""
    node: exp.Expr = item.unnest()  # GROUP BY (ward) is GROUP BY ward
    if isinstance(node, exp.Literal) and not node.is_string:
        pos = int(node.this)
        if not 1 <= pos <= len(select_items):
            raise QueryError(f"GROUP BY {pos}: the SELECT list has {len(select_items)} items")
        chosen = select_items[pos - 1]
        node = chosen.unalias()
        if isinstance(chosen, exp.Alias):
            return node, chosen.alias
    elif isinstance(node, exp.Column) and not node.table and not _is_column(scope, node):
        for s in select_items:
            if isinstance(s, exp.Alias) and s.alias.lower() == node.name.lower():
                return s.this, s.alias
    else:
        for s in select_items:  # the same expression with an alias in the SELECT list
            if isinstance(s, exp.Alias) and s.this == node:
                return node, s.alias
    return node, node.sql(dialect="duckdb")[:60]


def _derived_group_key(node: exp.Expr, label: str, scope: Scope, private: TableMeta,
                       keys: list[GroupKey], derived: list[tuple[exp.Expr, int]]) -> None:
    if node.find(exp.AggFunc) is not None:
        raise QueryError(f"GROUP BY {label}: a group key cannot hold an aggregate")
    if isinstance(node, exp.Literal | exp.Null | exp.Boolean):
        raise QueryError(f"GROUP BY {label}: group by columns or expressions of columns")
    if any(n == node for n, _ in derived):
        return
    used: set[tuple[str, str]] = set()
    key = derived_key(node, label, scope, private,
                      lambda n: _check_scalar(n, scope, "GROUP BY", used)[0])  # type: ignore[arg-type]
    if any(s == PRIVATE_ALIAS and c == private.privacy_unit for s, c in used) and \
            private.privacy_unit and key.domain is None:
        raise QueryError(
            f"GROUP BY {label} computes keys from the privacy unit {private.privacy_unit!r} "
            f"without a public domain; group by a CASE with constant results instead"
        )
    derived.append((node, len(keys)))
    keys.append(key)


def _agg_from(node: exp.Expr, scope: Scope, private: TableMeta) -> AggCall | None:
    """An AggCall for an aggregate node, or None if ``node`` is not an aggregate; an
    aggregate over an expression (or with FILTER) carries it (engine/aggexpr.py)."""
    if isinstance(node, exp.Filter):
        call = _agg_from(aggexpr.filtered_aggregate(node), scope, private)
        if call is None:
            raise QueryError(f"FILTER (WHERE ...) follows an aggregate (got "
                             f"{node.sql(dialect='duckdb')[:60]})")
        return dc_replace(call, label=node.sql(dialect="duckdb"),
                          default_name=call.default_name.split("_")[0] + "_filtered")
    made: dict[str, tuple[str, str]] = {}
    counted = aggexpr.conditional_count(node)
    call = _agg_call(counted, scope, private, made)
    if call is not None and counted is not node:  # SUM(CASE WHEN c THEN 1 ELSE 0 END)
        call = dc_replace(call, label=node.sql(dialect="duckdb"), default_name="sum_expr")
    return None if call is None else aggexpr.with_expression(call, made)


ColumnArg = Callable[[exp.Expr | None, str], tuple[str, str, str]]


def _agg_call(node: exp.Expr, scope: Scope, private: TableMeta,
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
                arg, fname, lambda n: _check_scalar(n, scope, where, set())[0],  # type: ignore[arg-type]
                made)
        return scope.resolve(arg)

    if isinstance(node, exp.WithinGroup):
        inner = node.this
        order = node.expression
        if isinstance(inner, exp.PercentileCont | exp.PercentileDisc) and isinstance(
            order, exp.Order
        ) and len(order.expressions) == 1:
            q = _quantile_value(inner.this, "PERCENTILE_CONT")
            internal, col, type_ = column_arg(order.expressions[0].this, "PERCENTILE_CONT")
            return _numeric_agg(QUANTILE, internal, col, type_, q, private)
        raise QueryError(f"unsupported aggregate {node.sql(dialect='duckdb')}")
    if isinstance(node, exp.Count):
        return _count_call(node, column_arg, private)
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
            agg = _numeric_agg(func, internal, col, type_, fixed_q, private)
            if cls in (exp.Min, exp.Max):
                agg = AggCall(agg.func, agg.source, agg.column, agg.q,
                              label=f"{fname}({col})", default_name=f"{fname.lower()}_{col}")
            if cls is exp.Median:
                agg = AggCall(agg.func, agg.source, agg.column, agg.q,
                              label=f"MEDIAN({col})", default_name=f"median_{col}")
            return agg
    if isinstance(node, exp.Quantile | exp.PercentileCont | exp.PercentileDisc):
        q_node = node.args.get("quantile") or node.args.get("expression")
        q = _quantile_value(q_node, "QUANTILE")
        internal, col, type_ = column_arg(node.this, "QUANTILE")
        return _numeric_agg(QUANTILE, internal, col, type_, q, private)
    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        aliases = {"var": VAR, "var_samp": VAR, "variance": VAR, "var_pop": VAR_POP,
                   "stddev": STDDEV, "stddev_samp": STDDEV, "stddev_pop": STDDEV_POP,
                   "std": STDDEV}
        if name in aliases:
            if len(node.expressions) != 1:
                raise QueryError(f"{name.upper()} takes one column")
            internal, col, type_ = column_arg(node.expressions[0], name.upper())
            return _numeric_agg(aliases[name], internal, col, type_, None, private)
        if name in ("quantile", "quantile_cont", "quantile_disc", "percentile"):
            if len(node.expressions) != 2:
                raise QueryError(f"{name.upper()}(column, q) takes a column and a number in [0, 1]")
            internal, col, type_ = column_arg(node.expressions[0], name.upper())
            q = _quantile_value(node.expressions[1], name.upper())
            return _numeric_agg(QUANTILE, internal, col, type_, q, private)
    if isinstance(node, exp.AggFunc):
        raise QueryError(
            f"aggregate {node.sql(dialect='duckdb')} is not supported; available: COUNT(*), "
            f"COUNT(col), COUNT(DISTINCT col), SUM, AVG, VAR, STDDEV, MEDIAN, "
            f"QUANTILE(col, q), MIN, MAX"
        )
    return None


def _count_call(node: exp.Count, column_arg: ColumnArg, private: TableMeta) -> AggCall:
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


def _quantile_value(node: exp.Expression | None, fname: str) -> float:
    if isinstance(node, exp.Neg):
        raise QueryError(f"{fname}: the quantile must lie in [0, 1]")
    if not isinstance(node, exp.Literal) or node.is_string:
        raise QueryError(f"{fname}: give the quantile as one number in [0, 1], e.g. 0.9")
    q = float(node.this)
    if not 0.0 <= q <= 1.0 or math.isnan(q):
        raise QueryError(f"{fname}: the quantile must lie in [0, 1] (got {q:g})")
    return q


def _numeric_agg(func: str, internal: str, col: str, type_: str, q: float | None,
                 private: TableMeta) -> AggCall:
    if internal not in (PRIVATE_ALIAS, EXPR_SOURCE):
        raise QueryError(
            f"{func.upper()}({col}): aggregates must use columns of the private table "
            f"{private.name!r}; {col!r} comes from a public table"
        )
    if type_class(type_) not in ("int", "float", "decimal", "bool"):
        raise QueryError(
            f"{func.upper()}({col}): column {col!r} has type {type_}, not a number; numeric "
            f"aggregates need a numeric column (COUNT works on any column)"
        )
    names = {SUM: "SUM", AVG: "AVG", VAR: "VAR", VAR_POP: "VAR_POP", STDDEV: "STDDEV",
             STDDEV_POP: "STDDEV_POP", QUANTILE: "QUANTILE"}
    if func == QUANTILE:
        label = f"QUANTILE({col}, {q:g})"
        default = f"q{_qname(q)}_{col}"
    else:
        label = f"{names[func]}({col})"
        default = f"{func}_{col}"
    return AggCall(func, internal, col, q, label=label, default_name=default)


def _qname(q: float | None) -> str:
    assert q is not None
    text = f"{q * 100:g}".replace(".", "_")
    return text


def _check_scalar(
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
        if isinstance(n, _LOGIC + _COMPARE + _PRED + _ATOMS + _SCALAR_FUNCS + _ARITH):
            if isinstance(n, exp.In) and n.args.get("query"):
                raise QueryError("IN (SELECT ...) is not allowed; list the values: IN ('a', 'b')")
            return n
        if isinstance(n, exp.Anonymous):
            if n.name.lower() not in _ANON_ALLOWED:
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
    return out, not is_total(node, lambda c: scope.resolve(c)[2])


def _select(text: str, stmt: exp.Select, scope: Scope, private: TableMeta,
            joins: list[JoinSpec], group_by: list[GroupKey],
            derived: list[tuple[exp.Expr, int]] | None = None) -> QuerySpec:
    columns_used: set[tuple[str, str]] = set()
    derived = derived or []
    aggs: list[AggCall] = []

    def agg_index(call: AggCall) -> int:
        for i, a in enumerate(aggs):
            if a.key == call.key:
                return i
        aggs.append(call)
        return len(aggs) - 1

    def group_index(internal: str, col: str) -> int | None:
        for i, k in enumerate(group_by):
            if k.source == internal and k.column == col and k.expr is None:
                return i
        return None

    def _names_group_column(n: exp.Column) -> bool:
        """In HAVING a table column in GROUP BY wins over an output alias (as in DuckDB)."""
        if not _is_column(scope, n):
            return False
        internal, col, _ = scope.resolve(n)
        return group_index(internal, col) is not None

    def rewrite_post(node: exp.Expression, where: str,
                     aliases: list[Output] | None = None) -> exp.Expression:
        """Rewrite an output/HAVING/ORDER expression over __g{i} and __a{i}; in HAVING and
        ORDER BY a bare name may also be an output alias (as in DuckDB)."""
        by_name = {o.name.lower(): o for o in aliases or []}

        def visit(n: exp.Expression) -> exp.Expression:
            gd = next((gi for d, gi in derived if d == n), None)
            if gd is not None:  # a derived group key, written out again
                return exp.column(f"__g{gd}")
            if isinstance(n, exp.Column) and not n.table and n.name.lower() in by_name and \
                    not (where == "HAVING" and _names_group_column(n)):
                o = by_name[n.name.lower()]
                if o.kind == "agg":
                    return exp.column(f"__a{o.index}")
                if o.kind == "group":
                    return exp.column(f"__g{o.index}")
                assert o.expr is not None
                return exp.paren(o.expr.copy())
            call = _agg_from(n, scope, private)
            if call is not None:
                if call.source == PRIVATE_ALIAS and call.column:
                    columns_used.add((PRIVATE_ALIAS, call.column))
                columns_used.update(aggexpr.expr_columns(call))
                return exp.column(f"__a{agg_index(call)}")
            if isinstance(n, exp.Column):
                internal, col, _ = scope.resolve(n)
                gi = group_index(internal, col)
                if gi is None:
                    raise QueryError(
                        f"column {col!r} in {where} is neither aggregated nor in GROUP BY: only "
                        f"aggregates leave the curator. Write COUNT/SUM/AVG(...) of it, or add "
                        f"it to GROUP BY"
                    )
                return exp.column(f"__g{gi}")
            if isinstance(n, exp.Star):
                raise QueryError(
                    "SELECT * would reveal rows; ask for aggregates, e.g. SELECT COUNT(*) FROM t"
                )
            if isinstance(n, _LOGIC + _COMPARE + _ARITH + _ATOMS + (exp.Is, exp.In,
                                                                    exp.Between)):
                return n
            if isinstance(n, _SCALAR_FUNCS):
                return n
            if isinstance(n, exp.Anonymous) and n.name.lower() in _ANON_ALLOWED:
                return n
            raise QueryError(
                f"{n.sql(dialect='duckdb')[:60]} is not allowed in {where}; use aggregates, "
                f"group columns, numbers and arithmetic"
            )

        # Aggregates are rewritten as whole nodes: transform visits parents before children.
        return node.copy().transform(visit)

    outputs: list[Output] = []
    used_names: set[str] = set()

    def unique(name: str) -> str:
        base, k = name, 2
        while name.lower() in used_names:
            name = f"{base}_{k}"
            k += 1
        used_names.add(name.lower())
        return name

    for item in stmt.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.unalias()
        if isinstance(node, exp.Star):
            raise QueryError(
                "SELECT * would reveal rows; ask for aggregates, e.g. SELECT COUNT(*) FROM "
                f"{private.name}"
            )
        gd = next((gi for d, gi in derived if d == node), None)
        if gd is not None:  # a derived group key (CASE ... END AS band)
            outputs.append(Output(unique(alias or group_by[gd].column), "group", gd))
            continue
        if isinstance(node, exp.Column):
            internal, col, _ = scope.resolve(node)
            gi = group_index(internal, col)
            if gi is None:
                raise QueryError(
                    f"column {col!r} is neither aggregated nor in GROUP BY: only aggregates leave "
                    f"the curator. Write COUNT/SUM/AVG({col}), or GROUP BY {col}"
                )
            outputs.append(Output(unique(alias or col), "group", gi))
            continue
        call = _agg_from(node, scope, private)
        if call is not None:
            if call.source == PRIVATE_ALIAS and call.column:
                columns_used.add((PRIVATE_ALIAS, call.column))
            columns_used.update(aggexpr.expr_columns(call))
            ai = agg_index(call)
            outputs.append(Output(unique(alias or call.default_name), "agg", ai))
            continue
        expr = rewrite_post(node, "SELECT")
        if not any(isinstance(n, exp.Column) and n.name.startswith("__a")
                   for n in expr.walk()) and not alias:
            alias = "expr"
        outputs.append(Output(unique(alias or node.sql(dialect="duckdb")[:40]), "expr",
                              expr=expr))
    if not aggs and not (group_by and all(o.kind == "group" for o in outputs)):
        raise QueryError(
            "the query has no aggregate; only aggregates leave the curator. Add e.g. COUNT(*)"
        )

    where_node = stmt.args.get("where")
    where_expr: exp.Expression | None = None
    risky = False
    if where_node is not None:
        where_expr, risky = _check_scalar(where_node.this, scope, "WHERE", columns_used)

    having_expr = None
    if stmt.args.get("having") is not None:
        having_expr = rewrite_post(stmt.args["having"].this, "HAVING", outputs)
    order: list[tuple[exp.Expression, bool]] = []
    order_aggs: list[int | None] = []

    def agg_of(out: Output) -> int | None:
        return out.index if out.kind == "agg" else None

    if stmt.args.get("order") is not None:
        for o in stmt.args["order"].expressions:
            target = o.this
            if isinstance(target, exp.Literal) and not target.is_string:
                pos = int(target.this)
                if not 1 <= pos <= len(outputs):
                    raise QueryError(f"ORDER BY {pos}: the SELECT list has {len(outputs)} items")
                order.append((exp.column(outputs[pos - 1].name, quoted=True),
                              bool(o.args.get("desc"))))
                order_aggs.append(agg_of(outputs[pos - 1]))
                continue
            if isinstance(target, exp.Column) and not target.table:
                hit = [x for x in outputs if x.name.lower() == target.name.lower()]
                if hit:
                    order.append((exp.column(hit[0].name, quoted=True), bool(o.args.get("desc"))))
                    order_aggs.append(agg_of(hit[0]))
                    continue
            rewritten = rewrite_post(target, "ORDER BY", outputs)
            order.append((rewritten, bool(o.args.get("desc"))))
            name = rewritten.name if isinstance(rewritten, exp.Column) else ""
            order_aggs.append(int(name[3:]) if name.startswith("__a") and name[3:].isdigit()
                              else None)
    limit = _int_clause(stmt, "limit")
    if limit == 0:
        raise QueryError("LIMIT 0 asks for no rows: nothing to answer, nothing charged; drop it "
                         "or ask for at least one row")
    offset = _int_clause(stmt, "offset")
    alias = next((k for k, v in scope.user_alias.items() if v == PRIVATE_ALIAS), private.name)
    return QuerySpec(
        text=text,
        table=private.name,
        alias=alias,
        joins=joins,
        where=where_expr,
        where_risky=risky,
        group_by=group_by,
        aggs=aggs,
        outputs=outputs,
        having=having_expr,
        order=order,
        limit=limit,
        offset=offset,
        columns_used=columns_used,
        order_aggs=order_aggs,
    )


def _int_clause(stmt: exp.Select, key: str) -> int | None:
    node = stmt.args.get(key)
    if node is None:
        return None
    value = node.args.get("expression") or node.this
    if not isinstance(value, exp.Literal) or value.is_string:
        raise QueryError(f"{key.upper()} takes a whole number")
    n = int(float(value.this))
    if n < 0:
        raise QueryError(f"{key.upper()} must be >= 0")
    return n

