"""Group keys in the statement: declared keys as typed literals, each group's key as one
canonical value, the public key set's CTEs, and whether the driver may fill the keys.

A released key set is public (declared domains, a public table's column): these pieces write
it into the statement, or say when it may instead be read once and matched on the driver
(:func:`can_fill_keys`), where a key's equality must be the engine's equality.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from dpkit.engine import sql as dsql
from dpkit.engine.plan.model import Plan
from dpkit.engine.tables import quote_ident, type_class

__all__ = ["FILL_MAX_KEYS", "FILL_TYPES", "KEY_COL", "PUBLIC_FILL_TYPES", "can_fill_keys",
           "canonical_key_sql", "key_ctes_sql", "literal_sql"]

KEY_COL = '"k"'  # the key column of a hidden key table (duckdb_sources.KEY_COLUMN)


def literal_sql(value: Any, type_: str) -> str:
    """A declared key as a typed DuckDB literal: ``CAST(<literal> AS <type>)``."""
    if value is None:  # a CASE without ELSE has the key NULL
        lit = "NULL"
    elif isinstance(value, bool):
        lit = "TRUE" if value else "FALSE"
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        lit = repr(value) if isinstance(value, int) else repr(float(value))
    else:
        lit = exp.Literal.string(str(value)).sql(dialect="duckdb")
    return f"CAST({lit} AS {type_})"


def canonical_key_sql(ref: str, type_: str, portable: bool = False) -> str:
    """A group key as one value per group, exactly as Python reads it back.

    Two keys DuckDB keeps apart but Python would merge or mangle would make the released keys
    depend on one unit's row: ``-0.0`` and ``0.0`` become ``0.0``; a DATE or TIMESTAMP outside
    Python's years 1-9999 (``'infinity'`` reads back as 9999-12-31, year 294247 as a string)
    groups with NULL. ``portable``: without DuckDB's ``isfinite`` (Spark has no infinite
    dates; DuckDB's infinities fall outside the BETWEEN anyway).
    """
    base = type_.upper().split("(")[0].strip()
    fin = "" if portable else f"isfinite({ref}) AND "
    if type_class(type_) == "float":
        return f"(CASE WHEN {ref} = 0 THEN CAST(0 AS {type_}) ELSE {ref} END)"
    if base == "DATE":
        return (f"(CASE WHEN {fin}{ref} BETWEEN DATE '0001-01-01' AND "
                f"DATE '9999-12-31' THEN {ref} END)")
    if base.startswith("TIMESTAMP") or base == "DATETIME":
        return (f"(CASE WHEN {fin}{ref} BETWEEN TIMESTAMP '0001-01-01' AND "
                f"TIMESTAMP '9999-12-31 23:59:59.999999' THEN {ref} END)")
    return ref


def key_ctes_sql(plan: Plan, key_rel: dict[int, str], relations: dict[str, str]) -> list[str]:
    """CTEs ``__k{i}`` (the public keys of GROUP BY column i) and ``__keys`` (their product)."""
    spec = plan.spec
    key_ctes: list[str] = []
    for i, (kind, values) in enumerate(plan.key_sources):
        k = spec.group_by[i]
        if kind == "domain" and i in key_rel:
            key_ctes.append(f"__k{i} AS (SELECT {KEY_COL} AS __g{i} FROM {key_rel[i]})")
        elif kind == "domain":
            rows = ", ".join(f"({literal_sql(v, k.type)})" for v in values)
            key_ctes.append(f"__k{i} AS (SELECT * FROM (VALUES {rows}) AS __v(__g{i}))")
        else:
            join = next(j for j in spec.joins if j.alias == k.source)
            key_ctes.append(
                f"__k{i} AS (SELECT DISTINCT {quote_ident(k.column)} AS __g{i} FROM "
                f"{relations[join.table]} WHERE {quote_ident(k.column)} IS NOT NULL)"
            )
    cross = " CROSS JOIN ".join(f"__k{i}" for i in range(len(plan.key_sources)))
    key_ctes.append(f"__keys AS (SELECT * FROM {cross})")
    return key_ctes


# Group-column types whose DuckDB equality is Python's equality on the values fetchall gives
# (no NaN, no collations, no values Python cannot hold): the key fill may match them in Python.
FILL_TYPES = frozenset({
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "BOOLEAN", "VARCHAR",
})
# ... and, for a key set read by the statement's own engine (Spark: its keys and its groups
# are both Spark's values, collected alike), floats, dates and timestamps: dates and
# timestamps compare in Python as in the engine; a float's -0.0 is 0.0 in Python as in the
# engine's `=`, and NaN, which the engines' `=` matches to NaN but Python's does not, is
# matched as one key by the fill (read.fill_declared_keys' ``match``).
PUBLIC_FILL_TYPES = FILL_TYPES | frozenset({"FLOAT", "REAL", "DOUBLE", "DATE", "TIMESTAMP"})
FILL_MAX_KEYS = 256  # above this, the LEFT JOIN in DuckDB is as cheap as the Python fill


def can_fill_keys(plan: Plan, collated: frozenset[str] | set[str] = frozenset(), *,
                  public: bool = False) -> bool:
    """Whether the declared keys of a public GROUP BY can be filled in Python (few keys, all
    from declared domains, of types compared alike by DuckDB and Python). ``collated``: the
    private table's columns with a collation (``VARCHAR COLLATE NOCASE`` from a DuckDB source;
    the type name does not show it): DuckDB's equality on them is not Python's, so they keep
    the join. ``public``: a public table's keys too (kind ``"public"``), for a caller that
    reads them with the statement's engine and caps their number (known once read); the
    types of :data:`PUBLIC_FILL_TYPES` then qualify too."""
    kinds = ("domain", "public") if public else ("domain",)
    types = PUBLIC_FILL_TYPES if public else FILL_TYPES
    return (plan.group_mode == "public" and bool(plan.spec.group_by)
            and (len(plan.keys) <= FILL_MAX_KEYS if plan.keys is not None else public)
            and all(kind in kinds for kind, _ in plan.key_sources)
            and all(k.type.upper() in types for k in plan.spec.group_by)
            and not any(k.source == dsql.PRIVATE_ALIAS and k.column in collated
                        for k in plan.spec.group_by))
