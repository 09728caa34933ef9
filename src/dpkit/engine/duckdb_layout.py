"""Where a project's rows sit in ``data.duckdb``: schemas, relation names, connection settings.

Schema ``priv`` holds private tables, ``pub`` public ones, ``__dpkeys`` the declared domains of
copied private tables (one hidden key table per column). A query connection ATTACHes the file
as :data:`ALIAS`, so every relation a statement names is ``dpdata.<schema>.<name>``. Both the
loader (:mod:`dpkit.engine.duckdb_load`) and the query backend
(:mod:`dpkit.engine.backend_duckdb`) name relations through this module only.
"""

from __future__ import annotations

import duckdb

from dpkit.engine.tables import TableMeta, quote_ident

__all__ = ["ALIAS", "KEYS_SCHEMA", "SCHEMAS", "AllColumns", "collated_in", "key_table_relation",
           "relation_name", "settings", "table_relation"]

SCHEMAS = {"private": "priv", "public": "pub"}
ALIAS = "dpdata"
# hidden schema of the declared-domain key tables: no user table can be named into it (user
# tables live in priv/pub, and analysts cannot name a schema)
KEYS_SCHEMA = "__dpkeys"


def settings(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET enable_progress_bar=false")
    con.execute("SET error_on_division_by_zero=false")


def relation_name(name: str, public: bool) -> str:
    schema = SCHEMAS["public" if public else "private"]
    return f"{quote_ident(ALIAS)}.{schema}.{quote_ident(name)}"


def table_relation(meta: TableMeta) -> str:
    """The relation holding a registered table's rows now: the one its ledger row names (a
    fresh one per load, see :func:`~dpkit.engine.duckdb_load.load_table`'s ``physical``)."""
    return meta.relation or relation_name(meta.stored_name, meta.public)


def key_table_relation(table_name: str) -> str:
    """The relation (as the query connection sees it) of hidden key table ``table_name``."""
    return f"{quote_ident(ALIAS)}.{quote_ident(KEYS_SCHEMA)}.{quote_ident(table_name)}"


class AllColumns(frozenset[str]):
    """Contains every name (an unparsable CREATE statement: assume any column is collated)."""

    def __contains__(self, item: object) -> bool:
        return True


def collated_in(create_sql: str) -> frozenset[str]:
    """Names of the columns a ``CREATE TABLE`` statement gives a collation."""
    if "collate" not in create_sql.lower():
        return frozenset()
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(create_sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return AllColumns()
    return frozenset(
        cd.name for cd in tree.find_all(exp.ColumnDef)
        if any(isinstance(c.args.get("kind"), exp.CollateColumnConstraint)
               for c in cd.args.get("constraints") or [])
    )
