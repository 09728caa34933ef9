"""A Python query builder that compiles to the same SQL (and therefore the same plan).

>>> q = QueryBuilder(None, "visits").where("age >= 18").group_by("ward").count().avg("age")
>>> for part in q.to_sql().split(" FROM "):
...     print(part)
SELECT "ward", COUNT(*) AS "count", AVG("age") AS "avg_age"
"visits" WHERE age >= 18 GROUP BY "ward"

Identifiers are quoted by sqlglot, so a column name can never inject SQL; ``where`` and
``having`` take SQL expression text and go through the same validation as :meth:`Curator.sql`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlglot
from sqlglot import exp

from dpkit.engine.sql import QueryError

__all__ = ["QueryBuilder"]


def _col(name: str) -> exp.Column:
    if not isinstance(name, str) or not name:
        raise QueryError(f"column names are non-empty strings (got {name!r})")
    return exp.Column(this=exp.to_identifier(name, quoted=True))


def _expr(text: str, what: str) -> exp.Expr:
    if not isinstance(text, str) or not text.strip():
        raise QueryError(f"{what} takes a SQL expression as text, e.g. \"age >= 18\"")
    try:
        return sqlglot.parse_one(text, read="duckdb", into=exp.Condition)
    except sqlglot.errors.ParseError as exc:
        raise QueryError(f"cannot parse {what} {text!r}: {str(exc).splitlines()[0]}") from None


def _value(v: Any) -> exp.Expr:
    if isinstance(v, bool):
        return exp.Boolean(this=v)
    if isinstance(v, (int, float)):
        return exp.Literal.number(v)
    if isinstance(v, str):
        return exp.Literal.string(v)
    raise QueryError(f"where_in values are numbers, strings or booleans (got {v!r})")


class QueryBuilder:
    """Immutable-style builder: each method returns a new builder.

    ``cur.table("visits").where("age >= 18").group_by("ward").count().sum("cost")
    .run(epsilon=0.5)`` is ``cur.sql("SELECT ward, COUNT(*), SUM(cost) FROM visits WHERE age >=
    18 GROUP BY ward", epsilon=0.5)``.
    """

    def __init__(self, curator: Any, table: str) -> None:
        self._curator = curator
        self._table = table
        self._where: list[exp.Expr] = []
        self._groups: list[str] = []
        self._derived: dict[str, exp.Expr] = {}  # derived group key name -> its expression
        self._aggs: list[exp.Expr] = []
        self._having: list[exp.Expr] = []
        self._order: list[tuple[str, bool]] = []
        self._limit: int | None = None
        self._names: set[str] = set()
        self._weights: dict[str, float] = {}

    def _copy(self) -> QueryBuilder:
        q = QueryBuilder(self._curator, self._table)
        q._where = list(self._where)
        q._groups = list(self._groups)
        q._derived = dict(self._derived)
        q._aggs = list(self._aggs)
        q._having = list(self._having)
        q._order = list(self._order)
        q._limit = self._limit
        q._names = set(self._names)
        q._weights = dict(self._weights)
        return q

    # ------------------------------------------------------------------ clauses

    def where(self, condition: str) -> QueryBuilder:
        q = self._copy()
        q._where.append(_expr(condition, "where"))
        return q

    def group_by(self, *columns: str) -> QueryBuilder:
        q = self._copy()
        for c in columns:
            _col(c)
            q._groups.append(c)
        return q

    def group_by_expr(self, expression: str, *, alias: str) -> QueryBuilder:
        """Group by a value computed per row, output as ``alias``: ``CASE WHEN age < 18 THEN
        'child' ELSE 'adult' END``, ``floor(age / 10) * 10``, ``date_trunc('month', d)`` (see
        docs/curator.md for which of them have public keys and which are selected privately).
        """
        _col(alias)
        if alias in self._groups or alias in self._names:
            raise QueryError(f"output name {alias!r} is used twice; choose another alias")
        q = self._copy()
        q._derived[alias] = _expr(expression, "group_by_expr")
        q._groups.append(alias)
        return q

    def where_in(self, column: str, values: list[Any]) -> QueryBuilder:
        """``WHERE column IN (values)``: on a GROUP BY column the values are also its public
        keys (an undeclared column then needs no private partition selection)."""
        if isinstance(values, (str, bytes)) or not values:
            raise QueryError(f"where_in takes a non-empty list of values (got {values!r})")
        cond = exp.In(this=_col(column), expressions=[_value(v) for v in values])
        q = self._copy()
        q._where.append(cond)
        return q

    def having(self, condition: str) -> QueryBuilder:
        q = self._copy()
        q._having.append(_expr(condition, "having"))
        return q

    def order_by(self, output: str, *, desc: bool = False) -> QueryBuilder:
        q = self._copy()
        q._order.append((output, desc))
        return q

    def limit(self, n: int) -> QueryBuilder:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise QueryError(f"limit takes a whole number >= 0 (got {n!r})")
        q = self._copy()
        q._limit = n
        return q

    def top_k(self, k: int, *, by: str = "count", largest: bool = True) -> QueryBuilder:
        """The ``k`` groups with the largest (``largest=False``: smallest) ``by`` output.

        Compiles to ``ORDER BY by DESC LIMIT k``: when ``by`` names a COUNT or SUM output the
        curator chooses the groups by noisy max (``k`` rounds of the exponential mechanism,
        one more share of the budget) and measures only their values; for other outputs every
        group's noisy value is sorted (post-processing). See :meth:`Curator.sql`.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise QueryError(f"top_k takes a whole number k >= 1 (got {k!r})")
        return self.order_by(by, desc=largest).limit(k)

    def weights(self, weights: Mapping[str, float] | None = None,
                **by_name: float) -> QueryBuilder:
        """Split the budget by these weights per output name (``.weights(n=1, avg_age=3)``);
        passed as ``weights=`` to :meth:`Curator.sql` / :meth:`Curator.preview` by
        :meth:`run` and :meth:`preview`. Unnamed outputs weigh 1."""
        merged = dict(weights or {})
        merged.update(by_name)
        if not merged:
            raise QueryError("weights() needs at least one output name, e.g. .weights(n=2)")
        q = self._copy()
        q._weights = {**self._weights, **merged}
        return q

    # ------------------------------------------------------------------ aggregates

    def _agg(self, node: exp.Expr, name: str, alias: str | None,
             filter: str | None = None) -> QueryBuilder:
        if filter is not None:  # AGG(...) FILTER (WHERE <filter>)
            node = exp.Filter(this=node, expression=exp.Where(this=_expr(filter, "filter")))
        q = self._copy()
        out = alias or name
        if out in q._names:
            raise QueryError(f"output name {out!r} is used twice; pass alias=...")
        q._names.add(out)
        q._aggs.append(exp.alias_(node, exp.to_identifier(out, quoted=True)))
        return q

    def count(self, column: str | None = None, *, alias: str | None = None,
              filter: str | None = None) -> QueryBuilder:
        """COUNT(*) or COUNT(column); ``filter="age > 65"`` counts only the rows where it
        holds (``COUNT(*) FILTER (WHERE age > 65)``)."""
        if column is None:
            return self._agg(exp.Count(this=exp.Star()), "count", alias, filter)
        return self._agg(exp.Count(this=_col(column)), f"count_{column}", alias, filter)

    def count_distinct(self, column: str, *, alias: str | None = None,
                       filter: str | None = None) -> QueryBuilder:
        """COUNT(DISTINCT column): the number of people for the privacy unit, else the number
        of distinct values (sensitivity ``max_rows_per_unit``)."""
        node = exp.Count(this=exp.Distinct(expressions=[_col(column)]))
        return self._agg(node, f"count_distinct_{column}", alias, filter)

    def sum(self, column: str, *, alias: str | None = None,
            filter: str | None = None) -> QueryBuilder:
        return self._agg(exp.Sum(this=_col(column)), f"sum_{column}", alias, filter)

    def avg(self, column: str, *, alias: str | None = None,
            filter: str | None = None) -> QueryBuilder:
        return self._agg(exp.Avg(this=_col(column)), f"avg_{column}", alias, filter)

    def expr(self, text: str, *, alias: str) -> QueryBuilder:
        """An output written in SQL: an aggregate over an expression (``"SUM(price * qty)"``)
        or arithmetic over aggregates (``"SUM(cost) / COUNT(*)"``), checked as in
        :meth:`Curator.sql`."""
        if not isinstance(text, str) or not text.strip():
            raise QueryError("expr takes SQL text, e.g. expr(\"SUM(cost) / COUNT(*)\", "
                             "alias=\"per_row\")")
        try:
            node = sqlglot.parse_one(text, read="duckdb")
        except sqlglot.errors.ParseError as exc:
            raise QueryError(f"cannot parse {text!r}: {str(exc).splitlines()[0]}") from None
        return self._agg(node, alias, alias)

    mean = avg

    def var(self, column: str, *, alias: str | None = None) -> QueryBuilder:
        return self._agg(exp.Variance(this=_col(column)), f"var_{column}", alias)

    def stddev(self, column: str, *, alias: str | None = None) -> QueryBuilder:
        return self._agg(exp.Stddev(this=_col(column)), f"stddev_{column}", alias)

    def median(self, column: str, *, alias: str | None = None) -> QueryBuilder:
        return self._agg(exp.Median(this=_col(column)), f"median_{column}", alias)

    def quantile(self, column: str, q: float, *, alias: str | None = None) -> QueryBuilder:
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1:
            raise QueryError(f"quantile q must lie in [0, 1] (got {q!r})")
        node = exp.Anonymous(this="quantile", expressions=[_col(column),
                                                          exp.Literal.number(float(q))])
        name = f"q{f'{q * 100:g}'.replace('.', '_')}_{column}"
        return self._agg(node, name, alias)

    def min(self, column: str, *, alias: str | None = None) -> QueryBuilder:
        return self._agg(exp.Min(this=_col(column)), f"min_{column}", alias)

    def max(self, column: str, *, alias: str | None = None) -> QueryBuilder:
        return self._agg(exp.Max(this=_col(column)), f"max_{column}", alias)

    # ------------------------------------------------------------------ compile and run

    def _key(self, name: str) -> exp.Expr:
        if name in self._derived:
            return exp.alias_(self._derived[name].copy(), exp.to_identifier(name, quoted=True))
        return _col(name)

    def to_sql(self) -> str:
        if not self._aggs and not self._groups:
            raise QueryError("add at least one aggregate: .count(), .sum('col'), ...")
        select = exp.select(*[self._key(g) for g in self._groups], *self._aggs).from_(
            exp.Table(this=exp.to_identifier(self._table, quoted=True)))
        for w in self._where:
            select = select.where(w)
        if self._groups:
            # derived keys by position: an alias in GROUP BY would lose to a column of its name
            select = select.group_by(*[
                exp.Literal.number(i + 1) if g in self._derived else _col(g)
                for i, g in enumerate(self._groups)])
        for h in self._having:
            select = select.having(h)
        for name, desc in self._order:
            select = select.order_by(exp.Ordered(this=_col(name), desc=desc))
        if self._limit is not None:
            select = select.limit(self._limit)
        return select.sql(dialect="duckdb")

    def run(self, **kwargs: Any) -> Any:
        """Run with :meth:`Curator.sql` (same keyword arguments: epsilon=, accuracy=, ...)."""
        if self._curator is None:
            raise QueryError("this builder has no curator; use cur.table(name)")
        return self._curator.sql(self.to_sql(), **self._with_weights(kwargs))

    def preview(self, **kwargs: Any) -> Any:
        """Cost and expected error with :meth:`Curator.preview` (spends nothing)."""
        if self._curator is None:
            raise QueryError("this builder has no curator; use cur.table(name)")
        return self._curator.preview(self.to_sql(), **self._with_weights(kwargs))

    def _with_weights(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self._weights:
            if kwargs.get("weights") is not None:
                raise QueryError("give weights with .weights(...) or run(weights=...), not both")
            kwargs = {**kwargs, "weights": dict(self._weights)}
        return kwargs

    def __repr__(self) -> str:
        try:
            return f"QueryBuilder({self.to_sql()!r})"
        except QueryError:
            return f"QueryBuilder(table={self._table!r}, no aggregates yet)"
