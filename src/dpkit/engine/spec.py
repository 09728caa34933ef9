"""What a query asks, as data: the spec the SQL front end produces and the planner reads.

:class:`QuerySpec` is built from the query text and the declared schema only
(:func:`dpkit.engine.sql.parse_query`); nothing in it depends on a row. :class:`QueryError` is
the one refusal type of the engine: its message says what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from dpkit.engine.totality import total_condition_sql

__all__ = ["DIAGNOSTICS_OFF", "DROP_UNIT_ON", "REPLACE_ON", "AggCall", "GroupKey", "JoinSpec",
           "Output", "QueryError", "QuerySpec", "respell", "where_sql"]


class QueryError(ValueError):
    """The curator refuses this query; nothing was charged. The message says what to write."""


#: How the engine's texts (a preview's note, a refusal) name the switch that turns the answer
#: diagnostics off: the Python API's spelling, the engine's own front. A front end where the
#: switch is spelled otherwise (the CLI's ``--no-diagnostics``, the service's request field,
#: the console's checkbox) rewrites it with :func:`respell`: the engine never learns which
#: front end asked, and the text stays a function of public things.
DIAGNOSTICS_OFF = "diagnostics=False"
#: The table loader's keywords its refusals name, respelled the same way (the third first-hour
#: walk: ``dpkit add-table`` and ``POST /v1/tables`` said *pass replace=True*)
REPLACE_ON = "replace=True"
DROP_UNIT_ON = "drop_privacy_unit=True"


def respell(text: str, diagnostics_off: str,
            keywords: Mapping[str, str] | None = None) -> str:
    """``text`` with :data:`DIAGNOSTICS_OFF` spelled as a front end's user turns it off, and
    each Python spelling in ``keywords`` (:data:`REPLACE_ON` ...) as the front end's."""
    text = text.replace(DIAGNOSTICS_OFF, diagnostics_off)
    for python, front in (keywords or {}).items():
        text = text.replace(python, front)
    return text


# Aggregate function kinds
COUNT = "count"  # COUNT(*)
COUNT_COL = "count_col"  # COUNT(col): non-NULL values
COUNT_UNITS = "count_units"  # COUNT(DISTINCT privacy unit)
COUNT_DISTINCT = "count_distinct"  # COUNT(DISTINCT col), col not the privacy unit
SUM = "sum"
AVG = "avg"
VAR = "var"  # sample variance (n - 1); for DP purposes n is noisy, we report S2/n - mean^2
VAR_POP = "var_pop"
STDDEV = "stddev"
STDDEV_POP = "stddev_pop"
QUANTILE = "quantile"

NUMERIC_AGGS = {SUM, AVG, VAR, VAR_POP, STDDEV, STDDEV_POP, QUANTILE}
MIN_QUANTILE = 0.01  # MIN/MAX are released as these extreme quantiles (see docs/curator.md)
MAX_QUANTILE = 0.99
# AggCall.source of an aggregate over an expression (engine/aggexpr.py): its column is a name
# made from the expression's text, the expression itself is AggCall.expr
EXPR_SOURCE = "__e"


@dataclass(frozen=True)
class AggCall:
    """One aggregate the analyst asked for (before it is split into noisy measurements)."""

    func: str
    source: str | None  # scope alias of the column's table ("" for the private table)
    column: str | None
    q: float | None = None
    label: str = ""  # as the analyst would write it, e.g. "AVG(age)"
    default_name: str = ""  # output column name when no alias is given
    # for source EXPR_SOURCE: the value expression as DuckDB text over resolved columns
    # (__t."col"); a FILTER is a CASE WHEN in it. Bounds are derived at planning.
    expr: str = ""

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.func, self.source, self.column, self.q)


@dataclass
class Output:
    name: str
    kind: str  # "group" | "agg" | "expr"
    index: int | None = None  # group or aggregate index
    expr: exp.Expression | None = None  # for "expr": over __g{i} / __a{i}


@dataclass(frozen=True)
class JoinSpec:
    table: str  # a public table
    alias: str
    kind: str  # "inner" | "left"
    on: tuple[tuple[str, str], ...]  # (private-side column, public-side column) pairs


@dataclass
class GroupKey:
    source: str  # "__t" = private table, else the public table's alias ("" for derived keys)
    column: str  # the column, or the derived key's name (its alias or its SQL text)
    type: str
    # a derived key (GROUP BY CASE / floor bins / date_trunc, see engine/derived_keys.py): its
    # DuckDB text over the query's column references, never raising on a row
    expr: str | None = None
    # public keys from the query alone: a derived key's domain, or the constants of
    # ``WHERE key IN (...)`` / ``key = c`` (intersected with a declared domain); None: the
    # declared domain, or private partition selection
    domain: tuple[Any, ...] | None = None
    exhaustive: bool = False  # every row's key lies in ``domain`` (CASE): no row is dropped


@dataclass
class QuerySpec:
    text: str
    table: str
    alias: str
    joins: list[JoinSpec]
    where: exp.Expression | None  # columns as __t."col" / <alias>."col"
    where_risky: bool
    group_by: list[GroupKey]
    aggs: list[AggCall]
    outputs: list[Output]
    having: exp.Expression | None
    order: list[tuple[exp.Expression, bool]]
    limit: int | None
    offset: int | None
    columns_used: set[tuple[str, str]] = field(default_factory=set)
    # per ORDER BY term: the index of the aggregate it orders by when the term is exactly one
    # aggregate (directly, by output alias or by position), else None; the planner uses it to
    # choose top-k groups with a noisy-max mechanism (ORDER BY <agg> LIMIT k)
    order_aggs: list[int | None] = field(default_factory=list)

    @property
    def postprocess(self) -> bool:
        return (
            self.having is not None
            or bool(self.order)
            or self.limit is not None
            or self.offset is not None
            or any(o.kind == "expr" for o in self.outputs)
        )


PRIVATE_ALIAS = "__t"


def where_sql(spec: QuerySpec) -> str | None:
    """The WHERE condition as DuckDB text that never raises on a row (see
    :mod:`dpkit.engine.totality`), or None."""
    if spec.where is None:
        return None
    return total_condition_sql(spec.where, not spec.where_risky)
