"""A query grammar over a table's declared schema, biased towards row-dependent failures.

Every rule here uses public things only (declared columns and types, privacy unit, bounds,
domains, public tables): the queries are what any analyst may send. The WHERE grammar
deliberately includes the constructs that made DuckDB fail on some rows only (issue 12):
implicit casts (text as a boolean, ``CASE x WHEN``, ``IN`` / ``BETWEEN`` / ``COALESCE`` /
``NULLIF`` across types), casts of columns and of constants, arithmetic that overflows
(INTEGER, BIGINT, HUGEINT, DECIMAL), math domain errors and date arithmetic. For Spark
(FINDINGS.md H1, H3): a column as its own LIKE / regex pattern (a row's value then chooses the
regular expression; the extreme text ``'a\\b('`` is a bad LIKE escape and an unclosed group
there) and ``+ INTERVAL 290000 YEAR``, which overflows Spark's microseconds past ~2270 AD only
(and DuckDB's past ~4250 AD; it was 1,000,000 years, which overflowed on every row).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from dpkit.attacks.side_channels.draw import Draw
from dpkit.attacks.side_channels.forms import (
    filter_pairs,
    lazy_constants,
    ranges_pairs,
    sql_form,
)
from dpkit.attacks.side_channels.query import Query
from dpkit.engine.tables import Column, TableMeta, quote_ident

__all__ = ["DRAWN_FAMILIES", "EPSILONS", "FAMILIES", "Grammar", "with_options"]

# mostly ordinary budgets, and the extremes that broke the engine (5e-324 overflowed)
EPSILONS = (0.05, 0.1, 0.2, 0.5, 1.0)
EXTREME_EPSILONS = (5e-324, 1e-300, 1e3)
HUGE_LIMIT = "1000000000000000000"
# aggregate SQL three times as often as each release family (a family may be named twice to
# weigh it more); the release families are the slow ones (a CDF plans a strategy per query)
FAMILIES = ("sql", "sql", "sql", "filter", "dp_cdf", "cdf", "synthetic", "fit")
#: every family a caller may ask for: the default draw plus the release families in their
#: Python form (the service answers quantiles and marginals on their own routes)
DRAWN_FAMILIES = (*dict.fromkeys(FAMILIES), "ranges", "quantiles", "marginals")

_BINS = (8, 16, 16, None)  # None: the default grid (up to 1024 cells, slower)
# quantiles' probabilities: the ends, a median, several at once, one out of [0, 1] (refused)
_PROBABILITIES = ((0.5,), (0.1, 0.5, 0.9), (0.0, 1.0), (0.25, 0.75), (1.5,))
_NUM_LITERALS = ("0", "1", "-1", "2.5", "-0.0", "1e308", "CAST('nan' AS DOUBLE)",
                 "CAST('inf' AS DOUBLE)", "9223372036854775807",
                 "170141183460469231731687303715884105727", "NULL")
_STR_LITERALS = ("'a'", "''", "'true'", "'x'", "'1'", "'1e400'", "'Ω'", "'2020-01-01'")
# DECIMAL(p, s) targets are refused in WHERE (public, no leak), so none here
_CAST_TARGETS = ("INTEGER", "BIGINT", "DOUBLE", "DATE", "BOOLEAN", "HUGEINT",
                 "TIMESTAMP", "UTINYINT")
_OVERFLOW_CONST = {"INTEGER": "2147483647", "BIGINT": "9223372036854775807",
                   "HUGEINT": "170141183460469231731687303715884105727"}


@dataclass(frozen=True)
class _Ref:
    sql: str
    col: Column


class Grammar:
    """Random queries over ``table`` (a private :class:`TableMeta`) and ``public`` tables.

    >>> from dpkit.engine.tables import Column, TableMeta
    >>> meta = TableMeta("t", (Column("u", "BIGINT"), Column("x", "DOUBLE")),
    ...                  privacy_unit="u", bounds={"x": (0.0, 10.0)})
    >>> Grammar(meta, []).query(Draw(1)).table
    't'
    """

    def __init__(self, table: TableMeta, public: Sequence[TableMeta], *,
                 families: Sequence[str] = FAMILIES) -> None:
        if table.public:
            raise ValueError(f"table {table.name!r} is public; fuzz a private table")
        self.table = table
        self.public = [p for p in public if p.columns]
        # aliases that name no table (an alias equal to a table's name is refused)
        names = {table.name.lower(), *(p.name.lower() for p in self.public)}
        self.t = next(a for a in ("t", "t1", "t2", "t3") if a not in names)
        self.p = next(a for a in ("p", "p1", "p2", "p3") if a not in names)
        self.families = tuple(families)
        self.cols = [c for c in table.columns if not c.name.startswith("__")]
        self.bounded = [c for c in self.cols if table.bounds_for(c.name) is not None
                        and c.numeric]
        self.keys = [c for c in self.cols if c.name != table.privacy_unit]

    # ------------------------------------------------------------------ helpers

    def _ref(self, col: Column, alias: str) -> _Ref:
        return _Ref(f"{alias}.{quote_ident(col.name)}" if alias else quote_ident(col.name), col)

    def _of(self, d: Draw, cls: Sequence[str], alias: str) -> _Ref | None:
        hits = [c for c in self.cols if c.cls in cls]
        return self._ref(d.pick(hits), alias) if hits else None

    def _any(self, d: Draw, alias: str) -> _Ref:
        return self._ref(d.pick(self.cols), alias)

    def _literal(self, d: Draw, col: Column) -> str:
        b = self.table.bounds.get(col.name)
        dom = self.table.domains.get(col.name)
        if dom and d.chance(1, 2):
            v = d.pick(dom)
            return repr(v) if not isinstance(v, str) else "'" + v.replace("'", "''") + "'"
        if col.numeric:
            if b is not None and d.chance(1, 2):
                return repr(d.pick(b))
            return d.pick(_NUM_LITERALS)
        if col.cls == "temporal":
            return d.pick(("DATE '2020-01-01'", "'2020-06-01'", "'infinity'", "NULL",
                           "TIMESTAMP '1970-01-01 00:00:00'"))
        return d.pick(_STR_LITERALS)

    # ------------------------------------------------------------------ WHERE atoms

    def _atom(self, d: Draw, alias: str, tags: list[str], depth: int = 0) -> str:
        rules: list[tuple[str, Callable[[Draw, str, list[str]], str | None]]] = [
            ("compare", self._compare), ("text_as_bool", self._text_bool),
            ("case", self._case), ("nullif_coalesce", self._nullif), ("cast", self._cast),
            ("overflow", self._overflow), ("like", self._like), ("in", self._in),
            ("between", self._between), ("is_null", self._is_null), ("date", self._date),
            ("math", self._math), ("string_fn", self._string_fn),
            ("cross_type", self._cross_type),
        ]
        if depth < 1:
            rules.append(("bool_ops", lambda dd, a, t: self._bool_ops(dd, a, t, depth)))
        for _ in range(8):
            name, rule = d.pick(rules)
            out = rule(d, alias, tags)
            if out is not None:
                tags.append(name)
                return out
        return "TRUE"

    def _compare(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._any(d, alias)
        op = d.pick(("=", "<>", "<", ">=", "IS DISTINCT FROM"))
        return f"{r.sql} {op} {self._literal(d, r.col)}"

    def _text_bool(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._of(d, ("string",), alias)
        if r is None:
            return None
        return d.pick((r.sql, f"NOT {r.sql}", f"{r.sql} AND TRUE", f"{r.sql} OR FALSE"))

    def _case(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._any(d, alias)
        when = d.pick(("1", "'a'", "TRUE", "DATE '2020-01-01'", "2.5"))
        form = d.below(4)
        if form == 0:
            return f"CASE {r.sql} WHEN {when} THEN TRUE ELSE FALSE END"
        if form == 1:
            return f"CASE {r.sql} WHEN {when} THEN 1 ELSE 0 END = 1"
        const = d.pick(("'x'", "'1e400'", "'abc'", "''"))
        target = d.pick(("INTEGER", "DOUBLE", "DATE", "BOOLEAN"))
        cond = self._compare(d, alias, tags)
        if form == 2:
            return f"CASE WHEN {cond} THEN CAST({const} AS {target}) ELSE NULL END IS NULL"
        return f"CASE WHEN {cond} THEN 1 ELSE CAST({const} AS {target}) END IS NOT NULL"

    def _nullif(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._any(d, alias)
        other = d.pick(("1", "'a'", "0.5", "DATE '2020-01-01'", "TRUE"))
        if d.chance(1, 2):
            return f"NULLIF({r.sql}, {other}) IS NULL"
        return f"COALESCE({r.sql}, {other}) = {other}"

    def _cast(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._any(d, alias)
        target = d.pick(_CAST_TARGETS)
        fn = "TRY_CAST" if d.chance(1, 5) else "CAST"
        return f"{fn}({r.sql} AS {target}) IS NOT NULL"

    def _overflow(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._of(d, ("int", "decimal", "float"), alias)
        if r is None:
            return None
        other = self._of(d, ("int", "decimal"), alias) or r
        base = r.col.type.upper().split("(")[0]
        big = _OVERFLOW_CONST.get(base, d.pick(tuple(_OVERFLOW_CONST.values())))
        return d.pick((
            f"{r.sql} * {r.sql} > 0", f"{r.sql} + {other.sql} > 0", f"{r.sql} * {big} > 0",
            f"{r.sql} + {big} > 0", f"ABS({r.sql}) > 0", f"-{r.sql} < 0",
            f"{r.sql} * 1.5 > 0", f"1 / {r.sql} > 0", f"{r.sql} % 0 = 0",
            f"{r.sql} // 0 = 0", f"CAST({r.sql} AS HUGEINT) * {big} > 0",
        ))

    def _like(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._of(d, ("string",), alias) or self._any(d, alias)
        op = d.pick(("LIKE", "ILIKE", "NOT LIKE", "regexp_matches"))
        pattern = d.pick(("'a%'", "'%1'", "'_'", "'%'", r.sql, "'%a%a%b'"))  # r.sql: see top
        return (f"regexp_matches({r.sql}, {pattern})" if op == "regexp_matches"
                else f"{r.sql} {op} {pattern}")

    def _in(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._any(d, alias)
        items = ", ".join(self._literal(d, r.col) for _ in range(1 + d.below(3)))
        if d.chance(1, 2):  # mixed types: an implicit cast of the column or of the items
            items += ", " + d.pick(("'x'", "1", "DATE '2020-01-01'", "TRUE"))
        return f"{r.sql} {d.pick(('IN', 'NOT IN'))} ({items})"

    def _between(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._any(d, alias)
        return f"{r.sql} BETWEEN {self._literal(d, r.col)} AND {self._literal(d, r.col)}"

    def _is_null(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._any(d, alias)
        return f"{r.sql} IS {d.pick(('', 'NOT '))}NULL"

    def _date(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._of(d, ("temporal",), alias) or self._of(d, ("string",), alias)
        if r is None:
            return None
        return d.pick((
            f"YEAR({r.sql}) = 2020", f"MONTH({r.sql}) > 6", f"date_part('year', {r.sql}) > 2000",
            f"{r.sql} + INTERVAL 1 DAY > DATE '2020-01-01'",
            f"{r.sql} + INTERVAL 290000 YEAR > DATE '2020-01-01'",  # see the top
            f"DATE_TRUNC('month', {r.sql}) = DATE '2020-01-01'", f"{r.sql} > '2020-01-01'",
            f"DATEDIFF('day', {r.sql}, DATE '2020-01-01') > 0",
        ))

    def _math(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._of(d, ("int", "float", "decimal"), alias)
        if r is None:
            return None
        return d.pick((f"SQRT({r.sql}) > 1", f"LN({r.sql}) > 0", f"POW({r.sql}, 400) > 0",
                       f"EXP({r.sql}) > 1", f"ROUND({r.sql}, 2) = 0", f"FLOOR({r.sql}) > 0",
                       f"LOG({r.sql}) < 1", f"ISNAN({r.sql})", f"ISINF({r.sql})"))

    def _string_fn(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        r = self._of(d, ("string",), alias) or self._any(d, alias)
        return d.pick((f"LENGTH({r.sql}) > 1", f"LOWER({r.sql}) = 'x'",
                       f"CAST(SUBSTRING({r.sql}, 1, 1) AS INTEGER) = 1",
                       f"STARTS_WITH({r.sql}, 'a')", f"CONCAT({r.sql}, 'z') = 'az'",
                       # F2: a lengthening REPLACE is refused, a shrinking one answered
                       f"REPLACE({r.sql}, 'a', '') = 'x'",
                       f"LENGTH(REPLACE(REPLACE({r.sql}, 'a', 'aaaa'), 'a', 'aaaa')) > 1"))

    def _cross_type(self, d: Draw, alias: str, tags: list[str]) -> str | None:
        a, b = self._any(d, alias), self._any(d, alias)
        if a.col.cls == b.col.cls:
            op, lit = d.pick((">", "=", "<")), d.pick(("5", "'x'"))
            return f"{a.sql} {op} {lit}"
        return f"{a.sql} {d.pick(('=', '<', '>'))} {b.sql}"

    def _bool_ops(self, d: Draw, alias: str, tags: list[str], depth: int) -> str | None:
        x = self._atom(d, alias, tags, depth + 1)
        y = self._atom(d, alias, tags, depth + 1)
        return d.pick((f"({x}) OR ({y})", f"NOT ({x})", f"({x}) AND NOT ({y})"))

    def where(self, d: Draw, alias: str, tags: list[str]) -> tuple[str, ...]:
        n = d.pick((0, 1, 1, 1, 2, 2, 3))
        atoms = tuple(self._atom(d, alias, tags) for _ in range(n))
        return _guarded(self, atoms, alias, tags)

    # ------------------------------------------------------------------ whole queries

    def _params(self, d: Draw) -> tuple[float, str, float | None]:
        eps = d.pick(EXTREME_EPSILONS) if d.chance(1, 25) else d.pick(EPSILONS)
        if d.chance(1, 8):
            return eps, "gaussian", d.pick((None, 1e-6))
        return eps, "laplace", None

    def query(self, d: Draw) -> Query:
        """One random query (a family, then its parts)."""
        family = d.pick(self.families)
        eps, noise, delta = self._params(d)
        tags: list[str] = [family]
        for make in (_cdf, _release, _synthetic, _fit, _sql_form, _filter):
            if (q := make(self, d, family, eps, tags)) is not None:
                return q
        return self._aggregate(d, eps, noise, delta, tags)

    def _aggregate(self, d: Draw, eps: float, noise: str, delta: float | None,
                   tags: list[str]) -> Query:
        join, on = "", ""
        alias, t, pa = self.t, self.t, self.p
        group: list[str] = []
        key: Column | None = None
        if self.public and d.chance(1, 4):
            p = d.pick(self.public)
            pc = d.pick(p.columns)
            mine = d.pick(self.keys or self.cols)
            tags.append("join_match" if pc.cls == mine.cls else "join_mismatch")
            join = f" JOIN {quote_ident(p.name)} AS {pa}"
            on = f" ON {t}.{quote_ident(mine.name)} = {pa}.{quote_ident(pc.name)}"
            if d.chance(1, 2):
                group.append(f"{pa}.{quote_ident(d.pick(p.columns).name)}")
        elif self.keys and d.chance(3, 5):
            key = d.pick(self.keys)
            tags.append("group_declared" if key.name in self.table.domains
                        else "group_undeclared")
            group.append(f"{t}.{quote_ident(key.name)}")
        aggs = ["COUNT(*) AS n"]
        for i in range(d.below(3)):
            aggs.append(self._agg(d, tags) + f" AS a{i}")
        having = order = limit = ""
        if group:
            if d.chance(1, 6):
                having = f"COUNT(*) > {d.pick((0, 2, 10))}"
                tags.append("having")
            if d.chance(1, 2):
                order = "n DESC" if d.chance(1, 2) else "{key}"
                if d.chance(2, 3):
                    limit = d.pick(("0", "1", "3", HUGE_LIMIT))
                    tags.append("limit_huge" if limit == HUGE_LIMIT else "limit")
        weights: tuple[tuple[str, float], ...] = ()
        if len(aggs) > 1 and d.chance(1, 6):
            weights = (("n", float(d.pick((1, 3, 100)))),)
        where = self.where(d, alias, tags)
        # the forms of issue 14 (derived keys, WHERE on keys, key-only, TOP) are drawn from a
        # stream of their own, so that the main stream (and every seed's queries) stays as it was
        x = Draw(zlib.crc32(repr((group, aggs, having, order, limit, where, eps)).encode()))
        shown, by, extra = self._group_forms(x, key, group, tags)
        key_only = bool(by) and not having and x.chance(1, 8)
        if key_only:
            aggs, order = [], "" if order == "n DESC" else order
            tags.append("key_only")
        top = f"TOP {x.pick((1, 3))} " if by and not limit and x.chance(1, 10) else ""
        select = ", ".join(shown + aggs)
        if key_only and not top and not order and x.chance(1, 2):  # DISTINCT k: GROUP BY k
            select, by = "DISTINCT " + select, []
        text = (f"SELECT {top}{select} FROM {quote_ident(self.table.name)} AS {t}{join}{on}"
                f"{{where}}")
        if by:
            text += " GROUP BY " + ", ".join(by)
            if having:
                text += f" HAVING {having}"
            elif x.chance(1, 8):  # on the key itself: the grouped column, not an alias
                text += f" HAVING {by[0]} IS NOT NULL"
                tags.append("having_key")
            if top:
                order = order or "{key}"
                tags.append("top")
            if order:
                text += " ORDER BY " + order.replace("{key}", by[0])
            if limit:
                text += f" LIMIT {limit}"
        return Query("sql", self.table.name, text=text, where=where + extra, epsilon=eps,
                     noise=noise, delta=delta, weights=weights,
                     noisy_rows=bool(having) or (order == "n DESC" and bool(limit or top)),
                     noisy_order=order == "n DESC", tags=tuple(tags))

    def _group_forms(self, x: Draw, key: Column | None, group: list[str], tags: list[str]
                     ) -> tuple[list[str], list[str], tuple[str, ...]]:
        """(SELECT items, GROUP BY terms, extra WHERE conjuncts): the plain key, a WHERE
        restriction of it to constants, or a derived key."""
        if key is None:
            return list(group), list(group), ()
        if x.chance(1, 4):
            shown, by = self._derived_key(x, self.t, tags)
            return shown, by, ()
        if x.chance(1, 4):  # WHERE key IN (constants): the constants become the keys
            tags.append("where_keys")
            return list(group), list(group), (self._in_keys(x, key, self.t),)
        return list(group), list(group), ()

    def _in_keys(self, d: Draw, k: Column, t: str) -> str:
        items = ", ".join(dict.fromkeys(self._literal(d, k) for _ in range(1 + d.below(3))))
        op = d.pick(("IN", "IN", "=")) if "," not in items else "IN"
        return f"{t}.{quote_ident(k.name)} {op} ({items})"

    def _derived_key(self, d: Draw, t: str, tags: list[str]) -> tuple[list[str], list[str]]:
        """A GROUP BY expression (CASE, bins, date_trunc, or one without public keys), shown as
        ``g`` and grouped by alias, by position or written out again."""
        k = self._ref(d.pick(self.keys), t)
        cond = self._compare(d, t, tags)
        forms = [f"CASE WHEN {cond} THEN 'a' WHEN {k.sql} IS NULL THEN 'b' END",
                 f"CASE WHEN {cond} THEN 1 ELSE 2 END", f"lower(CAST({k.sql} AS VARCHAR))"]
        if k.col.cls in ("int", "float", "decimal"):
            forms += [f"floor({k.sql} / 10) * 10", f"floor({k.sql})", f"floor({k.sql} / 2.5)"]
        if k.col.cls == "int":
            forms.append(f"{k.sql} // 7")
        if k.col.cls == "temporal":
            forms.append(f"date_trunc('{d.pick(('month', 'year', 'day'))}', {k.sql})")
        expr = d.pick(forms)
        tags.append("derived_" + expr.split("(")[0].split(" ")[0].lower())
        by = d.pick(("g", "1", expr))
        return [f"{expr} AS g"], [by]

    def _agg(self, d: Draw, tags: list[str]) -> str:
        unit = self.table.privacy_unit
        options = ["COUNT(*)"]
        if unit is not None:
            options.append(f"COUNT(DISTINCT {self.t}.{quote_ident(unit)})")
        options.append(f"COUNT({self.t}.{quote_ident(d.pick(self.cols).name)})")
        if self.bounded:
            c = f"{self.t}.{quote_ident(d.pick(self.bounded).name)}"
            options += [f"SUM({c})", f"AVG({c})", f"VAR({c})", f"STDDEV({c})", f"MEDIAN({c})",
                        f"QUANTILE({c}, 0.9)", f"MIN({c})", f"MAX({c})", f"SUM({c})"]
            # aggregates over expressions, FILTER, ratios of aggregates (issue 14): the
            # conditions are WHERE atoms, biased towards row-dependent failures
            cond = self._atom(d, self.t, tags)
            options += [f"SUM({c} * 2 - 1)", f"AVG(ABS({c}) + LEAST({c}, 1))",
                        f"AVG(CASE WHEN {cond} THEN {c} ELSE 0 END)",
                        f"SUM({c}) FILTER (WHERE {cond})", f"COUNT(*) FILTER (WHERE {cond})",
                        f"SUM(CASE WHEN {cond} THEN 1 ELSE 0 END)", f"SUM({c} / {c})",
                        f"SUM({c}) / COUNT(*)", f"POWER(AVG({c}), 2)"]
        options.append(f"COUNT(DISTINCT {self.t}.{quote_ident(d.pick(self.cols).name)})")
        out = d.pick(options)
        tags.append("agg_" + out.split("(")[0].lower())
        return out


def _release(g: Grammar, d: Draw, family: str, eps: float, tags: list[str]) -> Query | None:
    """A ranges, quantiles or marginals release (``cur.ranges`` / ``cur.quantiles`` /
    ``cur.marginals``, the service's ``/v1/release/quantiles`` and ``/v1/release/marginals``;
    the service has no ranges route); None for another family."""
    name = g.table.name
    if family == "ranges" and g.bounded:
        col = d.pick(g.bounded)
        lo, hi = g.table.bounds_for(col.name) or (0.0, 1.0)
        where = g.where(d, "", tags)
        return Query("ranges", name, where=where, column=col.name,
                     ranges=ranges_pairs(d, lo, hi, tags), epsilon=eps, bins=d.pick(_BINS),
                     tags=tuple(tags))
    if family == "quantiles" and g.bounded:
        return Query("quantiles", name, where=g.where(d, "", tags),
                     column=d.pick(g.bounded).name, probabilities=d.pick(_PROBABILITIES),
                     epsilon=eps, bins=d.pick(_BINS), tags=tuple(tags))
    cols = [c for c in g.cols if c.name in g.table.domains] + g.bounded
    if family != "marginals" or not cols:
        return None
    pick = tuple(dict.fromkeys(d.pick(cols).name for _ in range(d.pick((1, 2, 3)))))
    return Query("marginals", name, where=g.where(d, "", tags), columns=pick,
                 k=d.pick((None, None, 1, 2)), epsilon=eps, bins=d.pick(_BINS),
                 tags=tuple(tags))


def _synthetic(g: Grammar, d: Draw, family: str, eps: float, tags: list[str]) -> Query | None:
    """``cur.synthetic(table, columns, where=..., method=..., rows=...)`` over declared columns
    (None when there are none): the default method, MST (the many-column path, 2-4 columns),
    and, drawn from a stream of their own so that the main stream (every seed's other queries)
    stays as it was, ``factorization`` or ``mwem`` named (its other release families) and a
    fixed number of records (``rows=``, public: then the records' number is compared), and
    MWEM's ``rounds=`` (the service has no such field: it refuses the request, 422)."""
    cols = [c for c in g.cols if c.name in g.table.domains] + g.bounded
    if family != "synthetic" or not cols:
        return None
    method = d.pick(("", "", "mst"))
    many = 4 if method == "mst" else 2
    pick = tuple(dict.fromkeys(d.pick(cols).name for _ in range(many)))
    where = g.where(d, "", tags)
    x = Draw(zlib.crc32(repr(("synthetic", method, pick, where, eps)).encode()))
    method = method or x.pick(("", "", "factorization", "mwem"))
    rows = x.pick((None, None, 1, 40, 300))
    # MWEM's rounds (after every other draw of the stream: those queries stay as they were);
    # 0 is refused, before anything is read
    rounds = x.pick((None, 1, 3, 0)) if method == "mwem" else None
    tags += [f"synthetic_{method}"] * bool(method) + ["synthetic_rows"] * (rows is not None)
    tags += [f"mwem_rounds_{rounds}"] * (rounds is not None)
    return Query("synthetic", g.table.name, where=where, columns=pick, epsilon=eps,
                 method=method, rows=rows, rounds=rounds, tags=tuple(tags))


def with_options(q: Query, d: Draw) -> Query:
    """``q`` with request options now and then: an accuracy target (the epsilon calibrated
    from the plan, public), another level, the bounding diagnostics off (a different split);
    a fit keeps its own."""
    if q.family == "fit" or not d.chance(1, 2):
        return q
    accuracy = d.pick((None, None, 5.0, 0.5)) if q.family != "synthetic" else None
    level = d.pick((None, 0.9, 0.99)) if q.family != "synthetic" else None
    return replace(q, accuracy=accuracy, level=level, diagnostics=d.chance(1, 2),
                   tags=(*q.tags, "options"))


def _cdf(g: Grammar, d: Draw, family: str, eps: float, tags: list[str]) -> Query | None:
    """``cur.cdf(table, column, where=...)``, or, one time in three, the ranges release in its
    Python form over the same column, drawn from a stream of its own (the main stream, every
    seed's other queries, as it was)."""
    if family != "cdf" or not g.bounded:
        return None
    q = Query("cdf", g.table.name, where=g.where(d, "", tags),
              column=d.pick(g.bounded).name, epsilon=eps, bins=d.pick(_BINS),
              tags=tuple(tags))
    x = Draw(zlib.crc32(repr(("ranges", q.column, q.where, q.bins, eps)).encode()))
    if not x.chance(1, 3):
        return q
    lo, hi = g.table.bounds_for(q.column) or (0.0, 1.0)
    pairs = ranges_pairs(x, lo, hi, tags)
    return replace(q, family="ranges", ranges=pairs, tags=(*tags, "ranges"))


def _sql_form(g: Grammar, d: Draw, family: str, eps: float, tags: list[str]) -> Query | None:
    """A release family's SQL form (``DP_CDF``, ``DP_QUANTILES``, ``DP_RANGES``,
    ``DP_MARGINALS``), now and then in another spelling (:func:`forms.sql_form`)."""
    if family != "dp_cdf" or not g.bounded:
        return None
    name = g.table.name
    c = quote_ident(d.pick(g.bounded).name)
    bins = d.pick(_BINS)
    form = d.pick((f"DP_CDF({c}{'' if bins is None else f', {bins}'})",
                   f"DP_QUANTILES({c}, 0.5)"))
    lo, hi = g.table.bounds_for(d.pick(g.bounded).name) or (0.0, 1.0)
    if d.chance(1, 3) and lo is not None:
        mid = (lo + hi) / 2
        form = f"DP_RANGES({c}, ({lo!r}, {mid!r}), ({mid!r}, {hi!r}))"
    keyed = [x for x in g.cols if x.name in g.table.domains]
    if keyed and d.chance(1, 4):  # one consistent set of marginal tables
        pair = dict.fromkeys((d.pick(keyed).name, d.pick(g.bounded).name))
        form = f"DP_MARGINALS({', '.join(quote_ident(x) for x in pair)})"
    where = g.where(d, "", tags)  # drawn here as before: the rest reads none
    form = sql_form(form, c, lo, hi, (where, eps), tags)
    return Query("sql", name, text=f"SELECT {form} FROM {quote_ident(name)}{{where}}",
                 where=where, epsilon=eps, tags=tuple(tags))


def _filter(g: Grammar, d: Draw, family: str, eps: float, tags: list[str]) -> Query | None:
    """``COUNT(*) FILTER (WHERE c BETWEEN a AND b)`` outputs over one column (the ranges
    release's other SQL form), their pairs from :func:`forms.filter_pairs`."""
    if family != "filter" or not g.bounded:
        return None
    name = g.table.name
    col = d.pick(g.bounded)
    c = quote_ident(col.name)
    lo, hi = g.table.bounds_for(col.name) or (0.0, 1.0)
    mid = (lo + hi) / 2 if d.chance(7, 8) else hi + 1e6  # beyond the bounds: refused
    where = g.where(d, "", tags)  # drawn here as before: the rest reads none
    pairs = filter_pairs(lo, hi, mid, (where, eps, c), tags)
    outs = ", ".join(f"COUNT(*) FILTER (WHERE {c} BETWEEN {a!r} AND {b!r}) AS m{i}"
                     for i, (a, b) in enumerate(pairs))
    return Query("sql", name, text=f"SELECT {outs} FROM {quote_ident(name)}{{where}}",
                 where=where, epsilon=eps, tags=tuple(tags))


def _fit(g: Grammar, d: Draw, family: str, eps: float, tags: list[str]) -> Query | None:
    """``cur.fit(model, "SELECT features, label FROM t ...", label=...)``: a label with a
    declared domain or bounds, declared features, now and then an undeclared one (refused)."""
    from dpkit.attacks.side_channels.query import MODELS

    if family != "fit":
        return None
    declared = [c for c in g.cols if c.name in g.table.domains] + g.bounded
    declared = [c for c in declared if c.name != g.table.privacy_unit]
    if len(declared) < 2:
        return None
    model = d.pick(tuple(MODELS))
    labels = [c for c in declared if (c.name in g.table.domains) == MODELS[model][1]]
    if not labels:
        return None
    label = d.pick(labels)
    feats = [c for c in declared if c.name != label.name]
    pick = list(dict.fromkeys(d.pick(feats).name for _ in range(3)))
    if d.chance(1, 10):
        pick.append(d.pick(g.cols).name)  # maybe undeclared: refused, public
    tags += [f"fit_{model}"]
    cols = ", ".join(quote_ident(c) for c in [*pick, label.name])
    return Query("fit", g.table.name,
                 text=f"SELECT {cols} FROM {quote_ident(g.table.name)}{{where}}",
                 where=g.where(d, "", tags), label=label.name, model=model,
                 epsilon=eps, tags=tuple(tags))


def _guarded(g: Grammar, atoms: tuple[str, ...], alias: str, tags: list[str]) -> tuple[str, ...]:
    """Now and then one atom behind a guard that only a neighbour's rows pass (a value
    beyond the declared bounds, or NULL): ``(age > 120) AND (atom)``. DuckDB evaluates an
    AND lazily, so an atom that fails on any row it sees (a constant cast on the first row
    compared, FINDINGS.md M2) then fails on D' only, where it failed on both before. Drawn
    from a stream of its own: the main stream (every seed's queries) stays as it was."""
    if not atoms:
        return atoms
    x = Draw(zlib.crc32(repr(("guard", atoms)).encode()))
    if not x.chance(1, 4):
        return atoms
    i = x.below(len(atoms))
    guards = [f"{g._ref(c, alias).sql} IS NULL" for c in g.cols
              if c.name not in g.table.not_null and c.name != g.table.privacy_unit]
    for c in g.bounded:
        lo, hi = g.table.bounds_for(c.name) or (0.0, 0.0)
        ref = g._ref(c, alias).sql
        guards += [f"{ref} > {hi!r}", f"{ref} < {lo!r}"]
    if not guards:
        return atoms
    tags.append("guarded")
    guard, atom = x.pick(guards), atoms[i]
    lazy = lazy_constants([(g._ref(c, alias).sql, c.cls) for c in g.cols
                           if c.name != g.table.privacy_unit])
    if lazy and x.chance(1, 3):  # drawn last: the other guarded atoms stay as they were
        atom = x.pick(lazy)
        tags.append("lazy_constant")
    return (*atoms[:i], f"({guard}) AND ({atom})", *atoms[i + 1:])
