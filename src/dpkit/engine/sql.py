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
from collections.abc import Mapping

import sqlglot
from sqlglot import exp

from dpkit.engine import aggexpr
from dpkit.engine.derived_keys import restrict_keys
from dpkit.engine.scope import Scope, from_clause
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
from dpkit.engine.sql_aggs import agg_from
from dpkit.engine.sql_groups import group_by, is_column
from dpkit.engine.sql_scalar import (
    ANON_ALLOWED,
    ARITH,
    ATOMS,
    COMPARE,
    LOGIC,
    SCALAR_FUNCS,
    check_scalar,
)
from dpkit.engine.tables import TableMeta

# the spec's names stay reachable as dsql.X for the planner and the tests
__all__ = ["AVG", "COUNT", "COUNT_COL", "COUNT_DISTINCT", "COUNT_UNITS", "EXPR_SOURCE",
           "MAX_QUANTILE", "MIN_QUANTILE", "NUMERIC_AGGS", "PRIVATE_ALIAS", "QUANTILE", "STDDEV",
           "STDDEV_POP", "SUM", "VAR",
           "VAR_POP", "AggCall", "GroupKey", "JoinSpec", "Output", "QueryError", "QuerySpec",
           "parse_query", "to_duckdb", "where_sql"]



# --------------------------------------------------------------------------- scalar allowlist

_TOP = re.compile(r"^\s*SELECT\s+(DISTINCT\s+)?TOP\s", re.IGNORECASE)


def _statements(text: str, dialect: str) -> list[exp.Expr]:
    """The statements of ``text`` read in ``dialect`` (T-SQL's ``SELECT TOP n`` is also read
    when the dialect is DuckDB's, which has no TOP)."""
    try:
        return [s for s in sqlglot.parse(text, read=dialect) if s is not None]
    except sqlglot.errors.ParseError as exc:
        if dialect == "duckdb" and _TOP.match(text):
            return _statements(text, "tsql")
        raise QueryError(parse_error(exc, text)) from None
    except sqlglot.errors.TokenError as exc:
        raise QueryError(f"cannot parse the SQL: {exc}") from None


def parse_error(exc: sqlglot.errors.ParseError, text: str) -> str:
    """sqlglot's refusal as an analyst reads it: where (the text up to the token it stopped
    at), what, and for a misspelt first word that a query starts with SELECT. The first walk's
    typo read "Invalid expression / Unexpected token. Line 1, Col: 12." and nothing more."""
    err = exc.errors[0] if exc.errors else {}
    what = re.sub(r"<class '(?:\w+\.)*(\w+)'>", r"\1",
                  str(err.get("description") or str(exc).splitlines()[0]))
    msg = f"cannot parse the SQL: {what}"
    if err.get("highlight"):
        near = f"{err.get('start_context', '')}{err['highlight']}".strip()
        msg += f", at {err['highlight']!r} in {near!r} (line {err.get('line')}, column " \
               f"{err.get('col')})"
    first = text.split()[0] if text.strip() else "("
    if first.upper() not in ("SELECT", "WITH", "FROM", "VALUES", "TABLE") \
            and not first.startswith("("):
        msg += f". A query starts with SELECT (it starts with {first!r})"
    return msg


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
    keys, derived = group_by(stmt, scope, private)
    spec = _select(text, stmt, scope, private, joins, keys, derived)
    restrict_keys(stmt.args["where"].this if stmt.args.get("where") else None, keys, scope)
    return spec


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
        if not is_column(scope, n):
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
            call = agg_from(n, scope, private)
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
            if isinstance(n, LOGIC + COMPARE + ARITH + ATOMS + (exp.Is, exp.In,
                                                                    exp.Between)):
                return n
            if isinstance(n, SCALAR_FUNCS):
                return n
            if isinstance(n, exp.Anonymous) and n.name.lower() in ANON_ALLOWED:
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
        call = agg_from(node, scope, private)
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
        where_expr, risky = check_scalar(where_node.this, scope, "WHERE", columns_used)

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
    opts = node.args.get("limit_options")
    if opts is not None and (opts.args.get("percent") or opts.args.get("with_ties")):
        # both were dropped: LIMIT 10 PERCENT answered as LIMIT 10
        raise QueryError(f"{key.upper()} ... PERCENT / WITH TIES is not supported; give a number "
                         f"of rows")
    value = node.args.get("expression") or node.this
    if not isinstance(value, exp.Literal) or value.is_string:
        raise QueryError(f"{key.upper()} takes a whole number")
    number = float(value.this)
    if not math.isfinite(number):  # LIMIT 1e400: int() of inf raised OverflowError
        raise QueryError(f"{key.upper()} takes a whole number (got {value.this})")
    n = int(number)
    if n < 0:
        raise QueryError(f"{key.upper()} must be >= 0")
    return n

