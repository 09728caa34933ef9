"""DuckDB, in process: where the rows live and where the one statement per query runs.

The project's rows are in ``data.duckdb`` (schema ``priv`` for private tables, ``pub`` for public
ones; schema ``__dpkeys`` holds the declared domains of copied private tables, one hidden key
table per column, see :func:`load_table`). Queries run on an in-memory connection that
ATTACHes that file READ_ONLY, so many processes can answer queries at once; loading a table
opens the file read-write for the duration of the load (DuckDB allows one writer process at a
time, and none while readers are attached).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb

from dpkit.engine.duckdb_sources import (
    check_complete,
    loaded_columns,
    source_sql,
    store_domain,
    string_literal,
    truncate_text,
)
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import FIXED_PREFIX, Column, TableMeta, quote_ident
from dpkit.noise import trace as _trace

__all__ = ["KEYS_SCHEMA", "DuckBackend", "columnar_type", "drop_orphans", "dry_run_errors",
           "key_table_relation", "load_table", "table_relation"]

_SCHEMAS = {"private": "priv", "public": "pub"}
_ALIAS = "dpdata"
# hidden schema of the declared-domain key tables: no user table can be named into it (user
# tables live in priv/pub, and analysts cannot name a schema)
KEYS_SCHEMA = "__dpkeys"
# in-memory database (per query connection) of empty tables shaped like the real ones, where
# statements are dry-run before anything is charged
_SHADOW = "__dpshadow"


def _settings(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET enable_progress_bar=false")
    con.execute("SET error_on_division_by_zero=false")


def relation_name(name: str, public: bool) -> str:
    schema = _SCHEMAS["public" if public else "private"]
    return f"{quote_ident(_ALIAS)}.{schema}.{quote_ident(name)}"


def table_relation(meta: TableMeta) -> str:
    """The relation holding a registered table's rows now: the one its ledger row names (a
    fresh one per load, see :func:`load_table`'s ``physical``)."""
    return meta.relation or relation_name(meta.stored_name, meta.public)


# DuckDB key types whose Arrow export reads back (to_pylist) as the same Python values as
# fetchall: integers up to 64 bits, strings, booleans, floats, dates, naive timestamps, decimals
COLUMNAR_TYPES = frozenset({
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
    "INT", "INT1", "INT2", "INT4", "INT8", "BOOLEAN", "BOOL", "VARCHAR", "TEXT", "STRING",
    "DOUBLE", "FLOAT", "REAL", "FLOAT4", "FLOAT8", "DATE", "TIMESTAMP", "DECIMAL", "NUMERIC",
})


def columnar_type(duck_type: str) -> bool:
    """Whether a key of this DuckDB type can come back through :meth:`DuckBackend.run_columns`."""
    return duck_type.upper().split("(")[0].strip() in COLUMNAR_TYPES


def arrow_result(con: duckdb.DuckDBPyConnection, text: str) -> Any:
    """Run ``text`` and return its whole result as an Arrow table.

    ``execute`` then Arrow, not ``con.sql(text).to_arrow_table()``: the relation API binds the
    statement twice (measured: twice the time for a statement with many literals), while the
    copy DuckDB warns about here costs a few ms for a million rows.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
        return con.execute(text).to_arrow_table()



@contextlib.contextmanager
def dry_run_errors(what: str) -> Iterator[None]:
    """Turn DuckDB errors of a dry run over empty shadow tables into :class:`QueryError`.

    No private row exists there, so the error depends on the query and the schema only and is
    quoted in full; nothing has been charged yet."""
    try:
        yield
    except duckdb.Error as exc:
        raise QueryError(
            f"DuckDB cannot run this {what}: {str(exc).splitlines()[0]} (nothing charged)"
        ) from None


def key_table_relation(table_name: str) -> str:
    """The relation (as the query connection sees it) of hidden key table ``table_name``."""
    return f"{quote_ident(_ALIAS)}.{quote_ident(KEYS_SCHEMA)}.{quote_ident(table_name)}"


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
    many characters (:func:`truncate_text`). Returns (columns, storage, relation).
    """
    con = _open_for_load(db_path)
    try:
        _settings(con)
        if progress is not None:
            _track_progress(con)
        rel_sql, kind, cleanup = source_sql(con, source, source_table)
        try:
            schema = _SCHEMAS["public" if public else "private"]
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
        raise ValueError(f"cannot load {name!r}: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    return columns, ("copy" if copy else "view"), relation_name(physical or name, public)


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
    for other in _SCHEMAS.values():
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
        wanted = {(_SCHEMAS["public" if pub else "private"], n) for pub, n in keep}
        wanted |= {(KEYS_SCHEMA, k) for k in keep_keys}
        rows = con.execute(
            "SELECT schema_name, table_name, 'TABLE' FROM duckdb_tables() WHERE database_name = "
            "current_database() UNION ALL SELECT schema_name, view_name, 'VIEW' FROM "
            "duckdb_views() WHERE database_name = current_database() AND NOT internal"
        ).fetchall()
        for schema, table, kind in rows:
            if schema in (*_SCHEMAS.values(), KEYS_SCHEMA) and (schema, table) not in wanted:
                con.execute(f"DROP {kind} {quote_ident(schema)}.{quote_ident(str(table))}")
                dropped.append(f"{schema}.{table}")
        con.execute("COMMIT")
    except duckdb.Error as exc:
        raise RuntimeError(f"cannot clean up {db_path}: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    return dropped


class _AllColumns(frozenset[str]):
    """Contains every name (an unparsable CREATE statement: assume any column is collated)."""

    def __contains__(self, item: object) -> bool:
        return True


def _collated_in(create_sql: str) -> frozenset[str]:
    """Names of the columns a ``CREATE TABLE`` statement gives a collation."""
    if "collate" not in create_sql.lower():
        return frozenset()
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(create_sql, read="duckdb")
    except sqlglot.errors.ParseError:
        return _AllColumns()
    return frozenset(
        cd.name for cd in tree.find_all(exp.ColumnDef)
        if any(isinstance(c.args.get("kind"), exp.CollateColumnConstraint)
               for c in cd.args.get("constraints") or [])
    )


def _drop_collations(con: duckdb.DuckDBPyConnection, target: str) -> None:
    """Store collated columns (``VARCHAR COLLATE NOCASE`` from a DuckDB source) as plain
    VARCHAR, values unchanged, with a warning: the curator compares keys exactly, and under a
    collation DuckDB would show a group under whichever spelling it met first (a spelling that
    depends on one unit's rows)."""
    schema, _, table = target.partition(".")
    rows = con.execute("SELECT sql FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = ? AND table_name = ?",
                       [schema, table.strip('"').replace('""', '"')]).fetchall()
    collated = _collated_in(str(rows[0][0])) if rows else frozenset()
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
        for schema in _SCHEMAS.values():
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    finally:
        con.close()


class DuckBackend:
    """Runs compiled statements against the project's data, read-only."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()
        self._fixed: dict[str, frozenset[str]] = {}
        self._collated: dict[str, frozenset[str]] = {}
        self._keys: frozenset[str] | None = None
        self._shadows: dict[str, str] = {}  # relation -> its empty shadow (dry runs)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            con = duckdb.connect()
            _settings(con)
            try:
                con.execute(f"ATTACH {string_literal(str(self.db_path))} AS {_ALIAS} (READ_ONLY)")
            except duckdb.Error as exc:
                con.close()
                raise RuntimeError(
                    f"cannot open the project's data {self.db_path}: {str(exc).splitlines()[0]}"
                ) from None
            self._con = con
        return self._con

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None
            self._fixed = {}
            self._collated = {}
            self._keys = None
            self._shadows = {}

    def fixed_columns(self, name: str) -> frozenset[str]:
        """The hidden fixed-point columns of private table ``name`` (cached while attached:
        the file cannot be written while this connection holds it)."""
        with self._lock:
            if name not in self._fixed:
                rows = self._connect().execute(
                    "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND "
                    "schema_name = ? AND table_name = ? AND starts_with(column_name, ?)",
                    [_ALIAS, _SCHEMAS["private"], name, FIXED_PREFIX],
                ).fetchall()
                self._fixed[name] = frozenset(str(r[0]) for r in rows)
            return self._fixed[name]

    def collated_columns(self, name: str) -> frozenset[str]:
        """The columns of private table ``name`` declared with a collation (``VARCHAR COLLATE
        NOCASE``, kept from a DuckDB source; type names do not show it), read from the table's
        CREATE statement (cached while attached, like :meth:`fixed_columns`). If that statement
        cannot be parsed, every column counts as collated."""
        with self._lock:
            if name not in self._collated:
                rows = self._connect().execute(
                    "SELECT sql FROM duckdb_tables() WHERE database_name = ? AND "
                    "schema_name = ? AND table_name = ?", [_ALIAS, _SCHEMAS["private"], name],
                ).fetchall()
                self._collated[name] = _collated_in(str(rows[0][0])) if rows else frozenset()
            return self._collated[name]

    def key_tables(self) -> frozenset[str]:
        """Names of the hidden key tables (declared domains) in the project's file (cached
        while attached, like :meth:`fixed_columns`)."""
        with self._lock:
            if self._keys is None:
                rows = self._connect().execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND "
                    "schema_name = ?", [_ALIAS, KEYS_SCHEMA]).fetchall()
                self._keys = frozenset(str(r[0]) for r in rows)
            return self._keys

    def shadow(self, relation: str) -> str:
        """An empty table with the columns and types of ``relation``, for dry runs.

        Created once per connection in an in-memory database attached beside the data (a
        reload closes the connection, so a shadow never outlives its table's schema). Only the
        schema is read (``DESCRIBE`` binds the relation; no row is scanned)."""
        with self._lock:
            hit = self._shadows.get(relation)
            if hit is not None:
                return hit
            con = self._traced("shadow", relation)
            if not self._shadows:
                con.execute(f"ATTACH ':memory:' AS {_SHADOW}")
            cols = con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()
            name = f"{_SHADOW}.main.{quote_ident(f's{len(self._shadows)}')}"
            con.execute(f"CREATE TABLE {name} ("
                        + ", ".join(f"{quote_ident(str(c[0]))} {c[1]}" for c in cols) + ")")
            self._shadows[relation] = name
            return name

    def _traced(self, method: str, text: str) -> duckdb.DuckDBPyConnection:
        _trace.statement("duckdb", method, text)  # the work trace (off: one None check)
        return self._connect()

    @contextlib.contextmanager
    def scratch(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The query connection, held, for post-processing noisy tables in its in-memory
        catalog (no second database; callers drop what they create)."""
        with self._lock:
            yield self._connect()

    def dry_run(self, text: str) -> None:
        """Run a statement compiled over :meth:`shadow` relations (no private row exists
        there): every error it raises comes from the query and the schema alone."""
        with self._lock:
            self._traced("dry_run", text).execute(text).fetchall()

    def run(self, text: str, group_cols: Sequence[str],
            measure_cols: Sequence[str]) -> tuple[list[tuple[Any, ...]], dict[str, list[Any]]]:
        with self._lock:
            cur = self._traced("run", text).execute(text)
            rows = cur.fetchall()
        ng = len(group_cols)
        keys = [tuple(r[:ng]) for r in rows]
        cols = {c: [r[ng + j] for r in rows] for j, c in enumerate(measure_cols)}
        return keys, cols

    def run_numpy(self, text: str) -> dict[str, Any]:
        """The result as one numpy array per column (DuckDB's own conversion, no Python object
        per cell for numbers): for reads of many rows, e.g. a model's training rows."""
        with self._lock:
            return dict(self._traced("run_numpy", text).execute(text).fetchnumpy())

    def run_rows(self, text: str, *, keep: Callable[[tuple[Any, ...]], bool] | None = None,
                 chunk: int = 4096) -> tuple[list[tuple[Any, ...]], int]:
        """The result's rows for which ``keep`` holds, read in chunks (so many unwanted rows are
        never all held at once), and how many were left out."""
        kept: list[tuple[Any, ...]] = []
        dropped = 0
        with self._lock:
            cur = self._traced("run_rows", text).execute(text)
            while rows := cur.fetchmany(chunk):
                if keep is None:
                    kept.extend(rows)
                    continue
                for r in rows:
                    if keep(r):
                        kept.append(r)
                    else:
                        dropped += 1
        return kept, dropped

    def run_columns(self, text: str, group_cols: Sequence[str], measure_cols: Sequence[str],
                    ) -> tuple[int, list[Any], dict[str, Any], dict[str, Any]]:
        """Like :meth:`run`, column by column through Arrow (no Python object per cell).

        Returns ``(rows, key columns, measure columns, NULL masks)``. Key columns are object
        arrays of the Python values :meth:`run` gives for the types in :data:`COLUMNAR_TYPES`
        (callers use :meth:`run` for other key types). Integer measure columns (COUNT, and SUM
        as HUGEINT when it fits in int64) are int64 arrays with NULL read as 0 and their NULL
        mask in the third dict; other columns (maps of quantile histograms, sums beyond int64)
        are lists of the Python values :meth:`run` gives.
        """
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        with self._lock:
            table = arrow_result(self._traced("run_columns", text), text)
        n = table.num_rows
        keys: list[Any] = []
        for c in group_cols:
            arr = np.empty(n, dtype=object)
            arr[:] = table.column(c).to_pylist()
            keys.append(arr)
        cols: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for c in measure_cols:
            col = table.column(c)
            t = col.type
            ints = None
            if pa.types.is_integer(t) and t.bit_width <= 64 and not (
                    pa.types.is_unsigned_integer(t) and t.bit_width == 64):
                ints = col
            elif pa.types.is_decimal(t) and t.scale == 0:
                try:
                    ints = pc.cast(col, pa.int64())  # safe cast: raises if it does not fit
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    ints = None
            if ints is not None:
                mask = ints.is_null().to_numpy(zero_copy_only=False) if ints.null_count else None
                cols[c] = pc.fill_null(ints, 0).to_numpy().astype(np.int64, copy=False)
                nulls[c] = mask
                continue
            vals = col.to_pylist()
            if pa.types.is_decimal(t) and t.scale == 0:
                vals = [None if v is None else int(v) for v in vals]  # HUGEINT, as run() has
            elif pa.types.is_map(t):
                vals = [None if v is None else dict(v) for v in vals]
            cols[c] = vals
        return n, keys, cols, nulls

    def query_public(self, text: str) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._traced("query_public", text).execute(text).fetchall()
