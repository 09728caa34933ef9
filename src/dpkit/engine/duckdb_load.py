"""Writing a project's rows into ``data.duckdb``: one transaction per load, orphans dropped later.

Loading a table opens the file read-write for the duration of the load (DuckDB allows one writer
process at a time, and none while readers are attached): the rows are copied (or a view made),
checked, given their hidden fixed-point columns and key tables, and committed together or not at
all (:func:`load_table`). Relations no ledger row names any more are dropped by
:func:`drop_orphans`. Names and schemas: :mod:`dpkit.engine.duckdb_layout`.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import duckdb

from dpkit.engine.duckdb_layout import (
    KEYS_SCHEMA,
    SCHEMAS,
    collated_in,
    relation_name,
    settings,
)
from dpkit.engine.duckdb_sources import (
    ColumnTypes,
    check_complete,
    loaded_columns,
    source_sql,
    store_domain,
    truncate_text,
)
from dpkit.engine.tables import Column, quote_ident

__all__ = ["drop_orphans", "init_database", "load_table"]


def load_table(
    db_path: Path,
    name: str,
    source: Any,
    *,
    public: bool,
    copy: bool,
    source_table: str | None,
    validate: Callable[[list[Column], int], None],
    fixed: Callable[[], Sequence[tuple[str, str]]] | None = None,
    domains: Callable[[], Sequence[tuple[str, str, Sequence[Any]]]] | None = None,
    not_null: Callable[[], Sequence[str]] | None = None,
    progress: Callable[[str, float], None] | None = None,
    physical: str | None = None,
    text_limit: int | None = None,
    column_types: ColumnTypes | None = None,
) -> tuple[list[Column], str, str]:
    """Load ``source`` into ``db_path`` as ``name`` (replacing it), in one DuckDB transaction.

    ``physical`` (the curator always gives one): store the rows under this fresh relation name
    and leave every other relation alone, including the one holding ``name`` now; the ledger
    row naming ``physical`` is what switches queries to it, so a crash before that row leaves
    the old rows in force with the old declarations, and :func:`drop_orphans` removes the
    unnamed relation later. Without it, the relation ``name`` is replaced in place.

    ``validate(columns, rows)`` runs before the commit; if it raises, nothing is kept.
    ``fixed()`` (called after ``validate``, copied tables only) lists hidden columns to
    materialise as ``(name, SQL expression over the table's columns)``: the clamped fixed-point
    integers for the declared bounds, computed here once instead of in every query. They are
    recomputed on every load, bounds included, in the same transaction as the rows.
    ``domains()`` (called after ``validate``) lists ``(column, key table name, keys)``: each
    declared domain is cast to the column's type and checked (keys that cannot be read as that
    type, or that coincide in it, are refused); for a copied private table it is stored as the
    hidden table ``__dpkeys.<key table name>`` (one column ``k``), in the same transaction, and
    the key tables of earlier loads of ``name`` are dropped. ``not_null()`` (called after
    ``validate``) lists columns declared complete: a NULL (or NaN) in one of them refuses the
    load. ``progress(step, fraction)`` (optional) is called about ten times a second while the
    long statements run (copying the rows, computing the hidden columns), with DuckDB's own
    estimate of how far each is. ``text_limit``: a private copy's text values are cut to that
    many characters (:func:`truncate_text`). ``column_types(names)``: the types a CSV/JSON
    source's columns are read as (:func:`~dpkit.engine.duckdb_sources.source_sql`). Returns
    (columns, storage, relation).
    """
    con = _open_for_load(db_path)
    try:
        settings(con)
        if progress is not None:
            _track_progress(con)
        rel_sql, kind, cleanup = source_sql(con, source, source_table, column_types)
        try:
            schema = SCHEMAS["public" if public else "private"]
            target = f"{schema}.{quote_ident(physical or name)}"
            if not copy and kind != "file":
                raise ValueError("copy=False works for CSV/Parquet/JSON paths only (a view over "
                                 "the file); frames, databases and opened files are copied")
            con.execute("BEGIN TRANSACTION")
            try:
                _clear_target(con, schema, name, target, in_place=physical is None)
                if copy:
                    _run_tracked(con, f"CREATE TABLE {target} AS SELECT * FROM {rel_sql}",
                                 "copying rows", progress)
                    _drop_collations(con, target)  # not in a helper: warns at stacklevel=4
                else:
                    con.execute(f"CREATE VIEW {target} AS SELECT * FROM {rel_sql}")
                columns = loaded_columns(con, target)
                if copy and not public:
                    truncate_text(con, target, columns, text_limit)
                validate(columns, _row_count(con, target))
                if not_null is not None:
                    check_complete(con, target, columns, not_null())
                if fixed is not None and copy:
                    _add_hidden_columns(con, target, list(fixed()), progress)
                _replace_key_tables(con, name, columns, list(domains()) if domains else [],
                                    store=copy and not public, table=target,
                                    drop_old=physical is None)
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
        finally:
            with contextlib.suppress(duckdb.Error):
                cleanup()
    except duckdb.Error as exc:
        raise ValueError(f"cannot load {name!r}: {_load_error(str(exc), column_types)}"
                         ) from None
    finally:
        con.close()
    return columns, ("copy" if copy else "view"), relation_name(physical or name, public)


def _load_error(message: str, column_types: ColumnTypes | None) -> str:
    """DuckDB's first line; for a CSV/JSON value that does not convert to its column's type
    (the owner's message: the owner sees the rows), the column and where its type came from."""
    first = message.splitlines()[0]
    if column_types is None or not any(w in first.lower() for w in ("cast", "conversion")):
        return first
    col = re.search(r'converting column "([^"]*)"', message)
    where = f"column {col[1]!r}" if col else "a column"
    return (f"{first}; {where} is read as its declared type (types=, else DOUBLE with bounds, "
            f"the domain keys' type, else VARCHAR): declare the type its values have")


def _open_for_load(db_path: Path) -> duckdb.DuckDBPyConnection:
    """The project's rows, opened read-write (refused while another process has them open)."""
    try:
        return duckdb.connect(str(db_path))
    except duckdb.IOException as exc:
        raise RuntimeError(f"cannot open {db_path} for writing: {str(exc).splitlines()[0]}. "
                           f"Another process (an open Curator) is reading it; close it and "
                           f"retry") from None


def _track_progress(con: duckdb.DuckDBPyConnection) -> None:
    """DuckDB tracks a statement's progress only with its progress bar on (printing nothing)."""
    con.execute("SET enable_progress_bar=true")
    con.execute("SET enable_progress_bar_print=false")
    con.execute("SET progress_bar_time=0")


def _clear_target(con: duckdb.DuckDBPyConnection, schema: str, name: str, target: str, *,
                  in_place: bool) -> None:
    """Make both schemas and free ``target``; ``in_place`` (no fresh physical name): also drop
    ``name`` from the other schema (a table that changes between public and private)."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    for other in SCHEMAS.values():
        if other != schema:
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {other}")
            if in_place:
                con.execute(f"DROP TABLE IF EXISTS {other}.{quote_ident(name)}")
                con.execute(f"DROP VIEW IF EXISTS {other}.{quote_ident(name)}")
    con.execute(f"DROP TABLE IF EXISTS {target}")
    con.execute(f"DROP VIEW IF EXISTS {target}")


def _row_count(con: duckdb.DuckDBPyConnection, target: str) -> int:
    return int(con.execute(f"SELECT COUNT(*) FROM {target}").fetchall()[0][0])  # one row


def _add_hidden_columns(con: duckdb.DuckDBPyConnection, target: str,
                        extra: Sequence[tuple[str, str]],
                        progress: Callable[[str, float], None] | None) -> None:
    """Materialise the hidden columns ``(name, SQL expression)`` (clamped fixed-point values,
    unit totals) once, in the load's transaction, instead of in every query."""
    if not extra:
        return
    cols_sql = ", ".join(f"{expr} AS {quote_ident(n)}" for n, expr in extra)
    _run_tracked(con, f"CREATE OR REPLACE TABLE {target} AS SELECT *, "
                      f"{cols_sql} FROM {target}",
                 "clamped values and unit totals", progress)


def drop_orphans(db_path: Path, keep: Collection[tuple[bool, str]],
                 keep_keys: Collection[str]) -> list[str]:
    """Drop the relations no registered table names: ``keep`` holds ``(public, stored name)``
    of every table in force, ``keep_keys`` the key tables they use. Left behind by a replace
    (the old version) or by a load that crashed before its ledger row (the new one). Returns
    what was dropped. The caller must hold the project's load lock. RuntimeError when the
    file cannot be written now (another process reads it)."""
    dropped: list[str] = []
    try:
        con = duckdb.connect(str(db_path))
    except duckdb.Error as exc:
        raise RuntimeError(f"cannot clean up {db_path} now: {str(exc).splitlines()[0]}") from None
    try:
        con.execute("BEGIN TRANSACTION")
        wanted = {(SCHEMAS["public" if pub else "private"], n) for pub, n in keep}
        wanted |= {(KEYS_SCHEMA, k) for k in keep_keys}
        rows = con.execute(
            "SELECT schema_name, table_name, 'TABLE' FROM duckdb_tables() WHERE database_name = "
            "current_database() UNION ALL SELECT schema_name, view_name, 'VIEW' FROM "
            "duckdb_views() WHERE database_name = current_database() AND NOT internal"
        ).fetchall()
        for schema, table, kind in rows:
            if schema in (*SCHEMAS.values(), KEYS_SCHEMA) and (schema, table) not in wanted:
                con.execute(f"DROP {kind} {quote_ident(schema)}.{quote_ident(str(table))}")
                dropped.append(f"{schema}.{table}")
        con.execute("COMMIT")
    except duckdb.Error as exc:
        raise RuntimeError(f"cannot clean up {db_path}: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    return dropped


def _drop_collations(con: duckdb.DuckDBPyConnection, target: str) -> None:
    """Store collated columns (``VARCHAR COLLATE NOCASE`` from a DuckDB source) as plain
    VARCHAR, values unchanged, with a warning: the curator compares keys exactly, and under a
    collation DuckDB would show a group under whichever spelling it met first (a spelling that
    depends on one unit's rows)."""
    schema, _, table = target.partition(".")
    rows = con.execute("SELECT sql FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = ? AND table_name = ?",
                       [schema, table.strip('"').replace('""', '"')]).fetchall()
    collated = collated_in(str(rows[0][0])) if rows else frozenset()
    if not collated:
        return
    described = con.execute(f"DESCRIBE SELECT * FROM {target}").fetchall()
    names = [str(r[0]) for r in described if str(r[1]) == "VARCHAR" and str(r[0]) in collated]
    if not names:
        return
    plain = ", ".join(f"decode(encode({quote_ident(c)})) AS {quote_ident(c)}" for c in names)
    con.execute(f"CREATE OR REPLACE TABLE {target} AS SELECT * REPLACE ({plain}) FROM {target}")
    import warnings

    warnings.warn(
        f"column(s) {', '.join(names)} had a collation in the source; dpkit stores them as plain "
        f"VARCHAR and compares values exactly ('a' and 'A' are different keys). Normalise them "
        f"in the source (e.g. lower(col)) if such spellings mean the same thing",
        UserWarning, stacklevel=4,
    )


def _run_tracked(con: duckdb.DuckDBPyConnection, sql: str, step: str,
                 progress: Callable[[str, float], None] | None) -> None:
    """Run one statement; with ``progress``, in a worker thread while this one reports DuckDB's
    progress estimate (an interrupt here interrupts the statement, which then fails and the
    load's transaction rolls back)."""
    if progress is None:
        con.execute(sql)
        return
    failure: list[BaseException] = []

    def work() -> None:
        try:
            con.execute(sql)
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)

    worker = threading.Thread(target=work, name="dpkit-load", daemon=True)
    progress(step, 0.0)
    worker.start()
    try:
        while True:
            worker.join(0.1)
            if not worker.is_alive():
                break
            done = con.query_progress()
            if done >= 0:
                progress(step, min(done, 100.0) / 100.0)
    except BaseException:
        con.interrupt()
        worker.join()
        raise
    if failure:
        raise failure[0]
    progress(step, 1.0)


def _replace_key_tables(con: duckdb.DuckDBPyConnection, name: str, columns: Sequence[Column],
                        domains: Sequence[tuple[str, str, Sequence[Any]]], *,
                        store: bool, table: str | None = None, drop_old: bool = True) -> None:
    """Drop the key tables of earlier loads of ``name`` (``drop_old``; else only a key table of
    the same name, whose content is the same since the name hashes it); check (and, ``store``,
    save) the new domains (see :func:`load_table`)."""
    ks = quote_ident(KEYS_SCHEMA)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {ks}")
    mine = re.compile(re.escape(name) + r"__[0-9a-f]{32}")
    same = {t for _, t, _ in domains}
    for (old,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ?", [KEYS_SCHEMA]).fetchall():
        if mine.fullmatch(str(old)) and (drop_old or (store and str(old) in same)):
            con.execute(f"DROP TABLE {ks}.{quote_ident(str(old))}")
    types = {c.name: c.type for c in columns}
    for column, table_name, keys in domains:
        if not mine.fullmatch(table_name):
            raise ValueError(f"internal error: key table name {table_name!r} for {name!r}")
        store_domain(con, column=column, type_=types[column], keys=keys,
                      target=f"{ks}.{quote_ident(table_name)}" if store else None,
                      table=table)


def init_database(db_path: Path) -> None:
    con = duckdb.connect(str(db_path))
    try:
        for schema in SCHEMAS.values():
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    finally:
        con.close()
