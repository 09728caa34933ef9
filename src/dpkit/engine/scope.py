"""The tables of one query: FROM, its public JOINs, and how column names resolve.

Only the declarations are read: which tables exist and are private or public, their columns and
types. A join is kept only where it compares keys without a conversion that could fail on a
stored value (see :func:`check_join_types`), and only INNER and LEFT joins on equalities are
answered.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from dpkit.engine.spec import PRIVATE_ALIAS, JoinSpec, QueryError
from dpkit.engine.tables import TableMeta, type_class

__all__ = ["Scope", "check_join_types", "col_ref", "from_clause", "table_name"]


class Scope:
    """The tables of one query: the private table (alias ``__t``) and public joins."""

    def __init__(self) -> None:
        self.tables: dict[str, TableMeta] = {}  # internal alias -> meta
        self.user_alias: dict[str, str] = {}  # user alias or table name (lower) -> internal

    def add(self, internal: str, meta: TableMeta, user_names: list[str]) -> None:
        self.tables[internal] = meta
        # a table aliased by its own name (FROM t AS t) is one name, not two
        for n in dict.fromkeys(x.lower() for x in user_names if x):
            if n:
                if n.lower() in self.user_alias:
                    raise QueryError(f"table alias {n!r} is used twice; give each table its own")
                self.user_alias[n.lower()] = internal

    def resolve(self, col: exp.Column) -> tuple[str, str, str]:
        """(internal alias, column name, column type); errors name the tables searched."""
        if col.args.get("catalog") or col.args.get("db"):
            raise QueryError(f"write columns as table.column or column (got {col.sql()})")
        name = col.name
        qual = col.table
        if qual:
            internal = self.user_alias.get(qual.lower())
            if internal is None:
                raise QueryError(
                    f"unknown table or alias {qual!r} in {col.sql()}; the query uses "
                    f"{', '.join(sorted(self.user_alias))}"
                )
            try:
                c = self.tables[internal].column(name)
            except ValueError as exc:
                raise QueryError(str(exc)) from None
            return internal, c.name, c.type
        hits = []
        for internal, meta in self.tables.items():
            try:
                found = meta.find(name)
            except ValueError as exc:
                raise QueryError(str(exc)) from None
            if found is not None:
                hits.append((internal, found.name, found.type))
        if not hits:
            if len(self.tables) == 1:
                (meta,) = self.tables.values()
                try:
                    meta.column(name)  # raises with suggestions
                except ValueError as exc:
                    raise QueryError(str(exc)) from None
            raise QueryError(
                f"no table in this query has a column {name!r} (tables: "
                f"{', '.join(m.name for m in self.tables.values())})"
            )
        if len(hits) > 1:
            raise QueryError(
                f"column {name!r} exists in several joined tables; qualify it, e.g. "
                f"{self._user_name(hits[0][0])}.{name}"
            )
        return hits[0]

    def _user_name(self, internal: str) -> str:
        for k, v in self.user_alias.items():
            if v == internal:
                return k
        return internal


def col_ref(internal: str, column: str) -> exp.Column:
    return exp.Column(this=exp.to_identifier(column, quoted=True),
                      table=exp.to_identifier(internal, quoted=True))


def table_name(node: exp.Expression, catalog: Mapping[str, TableMeta]) -> tuple[TableMeta, str]:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise QueryError(
            "FROM must name a registered table (table functions such as read_csv(...) and "
            "subqueries are not allowed); the data owner registers files with add_table"
        )
    if node.args.get("db") or node.args.get("catalog"):
        raise QueryError(f"write the table name without a schema (got {node.sql()})")
    if node.args.get("sample"):
        raise QueryError("sampling (TABLESAMPLE) is not allowed; ask for the whole-table aggregate")
    if node.args.get("pivots"):  # it was ignored: the aggregate ran over the plain table
        raise QueryError("PIVOT/UNPIVOT is not allowed; use GROUP BY over the table")
    # anything else written after the name (AT (VERSION => 1), ONLY, hints) was ignored too
    extra = sorted(k.upper() for k, v in node.args.items()
                   if k not in ("this", "alias", "db", "catalog") and v is not None
                   and v is not False and v != [])
    if extra:
        raise QueryError(f"{', '.join(extra)} after a table name is not supported; write "
                         f"FROM <table> [AS alias]")
    name = node.name
    meta = catalog.get(name)
    if meta is None:
        folded = [m for k, m in catalog.items() if k.lower() == name.lower()]
        if len(folded) == 1:
            meta = folded[0]
    if meta is None:
        known = ", ".join(sorted(catalog)) or "(none yet: the data owner adds them with add_table)"
        raise QueryError(f"unknown table {name!r}; registered tables: {known}")
    alias = node.alias
    return meta, alias


_JOIN_NUMERIC = frozenset({"int", "float", "decimal"})


def check_join_types(meta: TableMeta, col: str, jmeta: TableMeta, jcol: str) -> None:
    """Refuse join keys that DuckDB could only compare by casting values that may fail.

    Comparing, say, a VARCHAR private column with an INTEGER public one casts every private
    value while rows are read; one value like ``'x'`` then raises, and whether the query fails
    would depend on the private data (``WHERE unit = 'carol'`` asks about one person, for free).
    Only keys of the same type class (any numeric types together) are joined; the check reads
    the declarations only.
    """

    t1, t2 = meta.column(col).type, jmeta.column(jcol).type
    c1, c2 = type_class(t1), type_class(t2)
    b1, b2 = (t.upper().split("(")[0].strip() for t in (t1, t2))
    if c1 in _JOIN_NUMERIC and c2 in _JOIN_NUMERIC:
        # integers and floats compare by widening; a DECIMAL against an integer or another
        # DECIMAL is cast to a common DECIMAL(<=38) that a large value can overflow (BIGINT
        # vs DECIMAL(38,20) fails on 10^18), so only identical DECIMAL types are joined
        same = "decimal" not in (c1, c2) or "float" in (c1, c2) or (
            c1 == c2 and t1.upper().replace(" ", "") == t2.upper().replace(" ", ""))
    elif c1 == c2 == "string":
        same = (b1 == "UUID") == (b2 == "UUID")  # VARCHAR -> UUID parses (and can fail)
    else:
        same = t1.upper() == t2.upper()  # e.g. DATE vs TIME fails per row; TIMESTAMP vs TZ
    if not same:
        raise QueryError(
            f"join keys {meta.name}.{col} ({t1}) and {jmeta.name}.{jcol} ({t2}) have different "
            f"types; comparing them would cast the private values, which can fail on some rows. "
            f"Give the public table's {jcol!r} the type {t1} (or the private column the public "
            f"one's type) when loading it"
        )


def _join_kind(join: exp.Join, meta: TableMeta, jmeta: TableMeta) -> str:
    """``"inner"`` or ``"left"`` for a join with a public table; every other form refused."""
    method = str(join.args.get("method") or "").upper()
    extra = sorted(k.upper() for k, v in join.args.items()
                   if v and k not in ("this", "on", "side", "kind", "method", "using",
                                      "pivots"))
    if method or extra:
        raise QueryError(
            f"{method or ' '.join(extra)} JOIN is not supported (it would not join on "
            f"equal keys); write INNER JOIN or LEFT JOIN {jmeta.name} ON a.col = b.col"
        )
    if not jmeta.public:
        raise QueryError(
            f"joins between private tables ({meta.name!r} and {jmeta.name!r}) are refused: "
            f"a person's rows in both could not be bounded together. Join a public lookup "
            f"table instead, or ask the data owner to register one combined table with a "
            f"single privacy unit"
        )
    if jmeta.storage == "spark" and meta.storage != "spark":  # TableMeta.storage's Spark value
        # its DuckDB twin is empty: the join would silently match nothing
        raise QueryError(
            f"public table {jmeta.name!r} is on Spark and {meta.name!r} on DuckDB; a query "
            f"runs on one engine. Load {jmeta.name!r} again with engine='duckdb' (public "
            f"tables there are shipped to Spark when joined), or {meta.name!r} with "
            f"engine='spark' (nothing charged)")
    side = (join.args.get("side") or "").lower()
    kind = (join.args.get("kind") or "").lower()
    if side == "left" and kind in ("", "outer"):
        jkind = "left"
    elif side == "" and kind in ("", "inner"):
        jkind = "inner"
    else:
        raise QueryError(
            f"only INNER and LEFT joins with a public table are supported (got "
            f"{(side + ' ' + kind).strip().upper()} JOIN)"
        )
    if join.args.get("using"):
        raise QueryError(
            "write the join condition with ON a.col = b.col (USING is not supported)"
        )
    return jkind


def _add_joined(scope: Scope, internal: str, jmeta: TableMeta, jalias: str | None) -> None:
    if jalias and jmeta.name.lower() in scope.user_alias:
        # the same public table again under another alias: only the aliases name it
        scope.add(internal, jmeta, [jalias])
        return
    if not jalias and jmeta.name.lower() in scope.user_alias:
        raise QueryError(
            f"table {jmeta.name!r} appears twice in FROM/JOIN; give each occurrence "
            f"its own alias (JOIN {jmeta.name} AS a ... JOIN {jmeta.name} AS b)"
        )
    scope.add(internal, jmeta, [jalias, jmeta.name] if jalias else [jmeta.name])


def _on_pairs(join: exp.Join, scope: Scope, internal: str, meta: TableMeta,
              jmeta: TableMeta) -> tuple[tuple[str, str], ...]:
    """(private column, public column) for each equality of the ON condition."""
    on = join.args.get("on")
    if on is None:
        raise QueryError(f"JOIN {jmeta.name} needs an ON condition (a.col = b.col)")
    pairs: list[tuple[str, str]] = []
    conds = list(on.flatten()) if isinstance(on, exp.And) else [on]
    for cond in conds:
        cond = cond.unnest()
        if not (isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column)
                and isinstance(cond.expression, exp.Column)):
            raise QueryError(
                f"join conditions must be equalities of columns joined by AND, e.g. "
                f"v.ward = w.ward (got {cond.sql(dialect='duckdb')})"
            )
        a = scope.resolve(cond.this)
        b = scope.resolve(cond.expression)
        if a[0] == internal and b[0] == PRIVATE_ALIAS:
            a, b = b, a
        if a[0] != PRIVATE_ALIAS or b[0] != internal:
            raise QueryError(
                f"each join condition must compare a column of the private table with a "
                f"column of {jmeta.name!r} (got {cond.sql(dialect='duckdb')})"
            )
        check_join_types(meta, a[1], jmeta, b[1])
        pairs.append((a[1], b[1]))
    return tuple(pairs)


def from_clause(
    stmt: exp.Select, catalog: Mapping[str, TableMeta]
) -> tuple[Scope, TableMeta, list[JoinSpec]]:
    """The private table of FROM, the public tables it joins, and the names they go by."""
    frm = stmt.args.get("from_") or stmt.args.get("from")
    if frm is None:
        raise QueryError("the query has no FROM clause; write SELECT ... FROM <table>")
    if frm.expressions:
        raise QueryError("list one table in FROM and JOIN public tables explicitly")
    meta, alias = table_name(frm.this, catalog)
    if meta.public:
        raise QueryError(
            f"table {meta.name!r} is public (it holds no private data); the curator answers "
            f"queries over a private table — put the private table first in FROM"
        )
    scope = Scope()
    scope.add(PRIVATE_ALIAS, meta, [alias, meta.name] if alias else [meta.name])
    joins: list[JoinSpec] = []
    for i, join in enumerate(stmt.args.get("joins") or []):
        jmeta, jalias = table_name(join.this, catalog)
        jkind = _join_kind(join, meta, jmeta)
        internal = f"__p{i}"
        _add_joined(scope, internal, jmeta, jalias)
        pairs = _on_pairs(join, scope, internal, meta, jmeta)
        joins.append(JoinSpec(table=jmeta.name, alias=internal, kind=jkind, on=pairs))
    return scope, meta, joins
