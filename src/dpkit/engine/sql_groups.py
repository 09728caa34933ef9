"""GROUP BY in the SQL front end: raw columns, derived keys (CASE, bins, date_trunc), aliases and
positions, each typed against the declarations before any row is read (see :mod:`dpkit.engine.sql`).
"""

from __future__ import annotations

from sqlglot import exp

from dpkit.engine.derived_keys import derived_key
from dpkit.engine.scope import Scope
from dpkit.engine.spec import (
    PRIVATE_ALIAS,
    GroupKey,
    QueryError,
)
from dpkit.engine.sql_scalar import check_scalar
from dpkit.engine.tables import TableMeta

# the spec's names stay reachable as dsql.X for the planner and the tests

__all__ = ["check_key_readable", "derived_group_key", "group_by", "group_item", "is_column"]


def check_key_readable(col: str, type_: str) -> None:
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


def is_column(scope: Scope, col: exp.Column) -> bool:
    """Whether an unqualified name is a column of some table in the query."""
    for meta in scope.tables.values():
        try:
            if meta.find(col.name) is not None:
                return True
        except ValueError:
            return True  # ambiguous within a table: it names a column (resolve says which)
    return False


def group_by(stmt: exp.Select, scope: Scope, private: TableMeta
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
        node, label = group_item(item, select_items, scope)
        if not isinstance(node, exp.Column):
            derived_group_key(node, label, scope, private, keys, derived)
            continue
        internal, col, type_ = scope.resolve(node)
        if internal == PRIVATE_ALIAS and private.privacy_unit and col == private.privacy_unit:
            raise QueryError(
                f"GROUP BY the privacy unit {col!r} would give one group per person; group by a "
                f"coarser column"
            )
        if any(k.source == internal and k.column == col and k.expr is None for k in keys):
            continue
        check_key_readable(col, type_)
        keys.append(GroupKey(source=internal, column=col, type=type_))
    return keys, derived


def group_item(item: exp.Expression, select_items: list[exp.Expression], scope: Scope
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
    elif isinstance(node, exp.Column) and not node.table and not is_column(scope, node):
        for s in select_items:
            if isinstance(s, exp.Alias) and s.alias.lower() == node.name.lower():
                return s.this, s.alias
    else:
        for s in select_items:  # the same expression with an alias in the SELECT list
            if isinstance(s, exp.Alias) and s.this == node:
                return node, s.alias
    return node, node.sql(dialect="duckdb")[:60]


def derived_group_key(node: exp.Expr, label: str, scope: Scope, private: TableMeta,
                       keys: list[GroupKey], derived: list[tuple[exp.Expr, int]]) -> None:
    if node.find(exp.AggFunc) is not None:
        raise QueryError(f"GROUP BY {label}: a group key cannot hold an aggregate")
    if isinstance(node, exp.Literal | exp.Null | exp.Boolean):
        raise QueryError(f"GROUP BY {label}: group by columns or expressions of columns")
    if any(n == node for n, _ in derived):
        return
    used: set[tuple[str, str]] = set()
    key = derived_key(node, label, scope, private,
                      lambda n: check_scalar(n, scope, "GROUP BY", used)[0])  # type: ignore[arg-type]
    if any(s == PRIVATE_ALIAS and c == private.privacy_unit for s, c in used) and \
            private.privacy_unit and key.domain is None:
        raise QueryError(
            f"GROUP BY {label} computes keys from the privacy unit {private.privacy_unit!r} "
            f"without a public domain; group by a CASE with constant results instead"
        )
    derived.append((node, len(keys)))
    keys.append(key)
