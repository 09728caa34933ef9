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
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from dpkit.engine.spec import QueryError
from dpkit.engine.tables import FIXED_PREFIX, Column, quote_ident

__all__ = ["KEYS_SCHEMA", "DuckBackend", "columnar_type", "dry_run_errors", "key_table_relation",
           "load_table", "private_read_errors"]

_SCHEMAS = {"private": "priv", "public": "pub"}
_ALIAS = "dpdata"
# hidden schema of the declared-domain key tables: no user table can be named into it (user
# tables live in priv/pub, and analysts cannot name a schema)
KEYS_SCHEMA = "__dpkeys"
_KEY_COLUMN = "k"
# in-memory database (per query connection) of empty tables shaped like the real ones, where
# statements are dry-run before anything is charged
_SHADOW = "__dpshadow"


def _settings(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET enable_progress_bar=false")
    con.execute("SET error_on_division_by_zero=false")


def _string_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def relation_name(name: str, public: bool) -> str:
    schema = _SCHEMAS["public" if public else "private"]
    return f"{quote_ident(_ALIAS)}.{schema}.{quote_ident(name)}"


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
def private_read_errors(what: str) -> Iterator[None]:
    """Turn DuckDB errors of a statement over private rows into :class:`QueryError` (nothing is
    charged either way). Errors raised while binding the statement, before any row is read,
    are data-independent and quoted; any other error could depend on the data (a value that
    fails a cast), so it is reported without detail. ``what``: "query" or "release"."""
    try:
        yield
    except (duckdb.BinderException, duckdb.ParserException, duckdb.CatalogException) as exc:
        raise QueryError(
            f"DuckDB cannot run this {what}: {str(exc).splitlines()[0]} (nothing charged)"
        ) from None
    except duckdb.Error:
        raise QueryError(
            f"the {what} failed while reading the data (nothing was charged); simplify the "
            "WHERE clause (explicit casts, plain comparisons)"
        ) from None

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


def _key_parts(keys: Sequence[Any]) -> list[tuple[Any, str]]:
    """The keys as Arrow columns, one per kind, each read the way its SQL literal would be.

    ``plan.literal_sql`` writes a key as ``CAST(<literal> AS <type>)``: a bool as TRUE/FALSE,
    an int as an integer literal, a float as its ``repr``, anything else as a string. Here the
    same values are cast from BOOLEAN, BIGINT (ints beyond int64: their decimal text) and
    VARCHAR (strings; floats as their ``repr``, which DuckDB reads correctly rounded), so
    every key gets the value the literal would give.
    """
    import pyarrow as pa

    if all(type(v) is str for v in keys):
        return [(pa.table({"v": pa.array(keys, pa.string())}), "text")]
    if all(type(v) is int for v in keys):
        try:
            return [(pa.table({"v": pa.array(keys, pa.int64())}), "int")]
        except (OverflowError, pa.ArrowInvalid):
            pass
    bools: list[bool] = []
    ints: list[int] = []
    texts: list[str] = []
    for v in keys:
        if isinstance(v, bool):
            bools.append(v)
        elif isinstance(v, int) and -(2**63) <= v < 2**63:
            ints.append(v)
        elif isinstance(v, float):
            texts.append(repr(v))
        else:
            texts.append(str(v))
    parts: list[tuple[Any, str]] = []
    if bools:
        parts.append((pa.table({"v": pa.array(bools, pa.bool_())}), "bool"))
    if ints:
        parts.append((pa.table({"v": pa.array(ints, pa.int64())}), "int"))
    if texts:
        parts.append((pa.table({"v": pa.array(texts, pa.string())}), "text"))
    return parts


def _store_domain(con: duckdb.DuckDBPyConnection, *, column: str, type_: str,
                  keys: Sequence[Any], target: str | None, table: str | None = None) -> None:
    """Cast ``keys`` to the column's type (``type_``) and check them; store them as ``target``.

    Refuses (ValueError) a key that cannot be read as the column's type and keys that become
    equal in it (``1.0`` and ``1`` in an INTEGER column): such a key would be measured twice.
    ``target=None`` (views) only checks. ``table`` (the loaded relation): the keys are also
    compared with the column's own equality, which its type name does not show (a VARCHAR
    ``COLLATE NOCASE`` column makes 'a' and 'A' one group, joined to both keys).
    """
    parts = _key_parts(keys)
    names = [f"__dp_keys{j}" for j in range(len(parts))]
    for nm, (tbl, _) in zip(names, parts, strict=True):
        con.register(nm, tbl)
    try:
        sel = " UNION ALL ".join(
            f"SELECT CAST(v AS {type_}) AS {_KEY_COLUMN} FROM {nm}" for nm in names)
        try:
            if target is not None:
                con.execute(f"CREATE TABLE {target} AS {sel}")
                src = target
            else:
                con.execute(f"CREATE TEMP TABLE __dp_keycheck AS {sel}")
                src = "__dp_keycheck"
        except duckdb.ConversionException as exc:
            raise ValueError(
                f"domain of {column!r} ({type_}): a key cannot be read as {type_} "
                f"({str(exc).splitlines()[0]}); list values of the column's type"
            ) from None
        try:
            dup = con.execute(
                f"SELECT {_KEY_COLUMN}, COUNT(*) FROM {src} GROUP BY {_KEY_COLUMN} "
                f"HAVING COUNT(*) > 1 ORDER BY {_KEY_COLUMN} LIMIT 3").fetchall()
            if not dup and table is not None and type_.upper() == "VARCHAR":
                # a UNION with the (empty) column takes the column's collation
                col = quote_ident(column)
                dup = con.execute(
                    f"SELECT MIN(v), COUNT(*) FROM (SELECT {col} AS v FROM {table} WHERE FALSE "
                    f"UNION ALL SELECT {_KEY_COLUMN} FROM {src}) GROUP BY v "
                    f"HAVING COUNT(*) > 1 LIMIT 3").fetchall()
            nulls = con.execute(
                f"SELECT COUNT(*) FROM {src} WHERE {_KEY_COLUMN} IS NULL").fetchall()[0][0]
        finally:
            if target is None:
                con.execute("DROP TABLE __dp_keycheck")
        if nulls:
            raise ValueError(f"domain of {column!r} ({type_}) has keys that are NULL as "
                             f"{type_}; list only real values")
        if dup:
            shown = ", ".join(f"{k!r} ({n} times)" for k, n in dup)
            raise ValueError(
                f"domain of {column!r} ({type_}) lists keys that are equal as {type_}: "
                f"{shown}; list each key once (each key's group is measured once)"
            )
    finally:
        for nm in names:
            with contextlib.suppress(duckdb.Error):
                con.unregister(nm)


def _source_sql(con: duckdb.DuckDBPyConnection, source: Any,
                source_table: str | None) -> tuple[str, str, Callable[[], object]]:
    """SQL for a relation over ``source``, its storage kind hint, and a cleanup callback
    (its return value, e.g. the connection from ``con.execute``, is ignored)."""
    cleanup: Callable[[], object] = lambda: None  # noqa: E731
    if isinstance(source, (str, Path)):
        text = str(source)
        if "::" in text and not Path(text).exists():
            text, source_table = text.rsplit("::", 1)
        path = Path(text).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"source file {path} does not exist")
        p = _string_literal(str(path.resolve()))
        suffixes = [s.lower() for s in path.suffixes]
        if any(s in (".csv", ".tsv", ".txt") for s in suffixes):
            header = con.execute(f"SELECT * FROM read_csv_auto({p}, header=false, "
                                 f"all_varchar=true) LIMIT 1").fetchall()
            check_case_distinct([str(v) for v in header[0]] if header else [])
            return f"read_csv_auto({p})", "file", cleanup
        if any(s in (".parquet", ".pq") for s in suffixes):
            check_case_distinct([str(r[0]) for r in con.execute(
                f"SELECT name FROM parquet_schema({p}) WHERE num_children IS NULL OR "
                f"num_children = 0").fetchall()])
            return f"read_parquet({p})", "file", cleanup
        if any(s in (".json", ".jsonl", ".ndjson") for s in suffixes):
            return f"read_json_auto({p})", "file", cleanup
        if any(s in (".duckdb", ".db", ".ddb") for s in suffixes):
            con.execute(f"ATTACH {p} AS __dp_src (READ_ONLY)")
            cleanup = lambda: con.execute("DETACH __dp_src")  # noqa: E731
            tables = [r[0] for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = '__dp_src' "
                "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = '__dp_src' "
                "AND NOT internal").fetchall()]
            if source_table is None:
                if len(tables) != 1:
                    cleanup()
                    raise ValueError(
                        f"{path} holds {len(tables)} tables ({', '.join(tables) or 'none'}); name "
                        f"one with source_table=... (or 'file.duckdb::table' on the command line)"
                    )
                source_table = tables[0]
            if source_table not in tables:
                cleanup()
                raise ValueError(
                    f"{path} has no table {source_table!r}; it has {', '.join(tables) or 'none'}"
                )
            return f"__dp_src.{quote_ident(source_table)}", "database", cleanup
        raise ValueError(
            f"cannot tell the format of {path} from its name; use .csv, .parquet, .json or a "
            f".duckdb database"
        )
    # in-memory frames: dicts of numpy columns, pandas, polars, pyarrow, DuckDB relations
    mod = type(source).__module__.split(".")[0]
    obj = source
    if isinstance(source, Mapping):
        import numpy as np

        obj = {}
        for k, v in source.items():
            arr = np.asarray(v)
            if arr.dtype.kind == "M" and np.datetime_data(arr.dtype)[0] in ("D", "W", "M", "Y"):
                arr = arr.astype("datetime64[us]")  # DuckDB reads s/ms/us/ns resolutions
            obj[str(k)] = arr
        lengths = {len(v) for v in obj.values()}
        if not obj or len(lengths) != 1:
            raise ValueError(
                "a dict source needs columns of equal length (got lengths "
                f"{sorted(lengths)})"
            )
    elif mod == "polars":
        obj = source.to_arrow()
    elif isinstance(source, duckdb.DuckDBPyRelation):
        obj = source.arrow()
    elif mod not in ("pandas", "pyarrow", "numpy"):
        raise TypeError(
            f"cannot load a {type(source).__name__}; pass a path (CSV, Parquet, JSON, DuckDB) or "
            f"a pandas / polars DataFrame or a pyarrow Table"
        )
    found: Any = obj if isinstance(obj, Mapping) else (
        getattr(obj, "columns", None) if hasattr(obj, "columns")
        else getattr(obj, "column_names", None))
    names = list(found) if found is not None else []
    check_case_distinct([str(n) for n in names])
    con.register("__dp_frame", obj)
    cleanup = lambda: con.unregister("__dp_frame")  # noqa: E731
    return "__dp_frame", "frame", cleanup


def check_case_distinct(names: Sequence[str]) -> None:
    """Refuse column names equal but for case: DuckDB's names are case-insensitive, so it
    would rename one (``x`` -> ``x_1``) and ``x`` in a query or a declaration would then name
    the other column (bounds attached to the wrong values)."""
    seen: dict[str, str] = {}
    for n in names:
        other = seen.setdefault(n.lower(), n)
        if other != n:
            raise ValueError(
                f"the source has columns {other!r} and {n!r}, which differ only by case; "
                f"column names are case-insensitive here, so rename one before loading"
            )


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
) -> tuple[list[Column], str, str]:
    """Load ``source`` into ``db_path`` as ``name`` (replacing it), in one DuckDB transaction.

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
    estimate of how far each is. Returns (columns, storage, relation).
    """
    try:
        con = duckdb.connect(str(db_path))
    except duckdb.IOException as exc:
        raise RuntimeError(
            f"cannot open {db_path} for writing: {str(exc).splitlines()[0]}. Another process "
            f"(an open Curator) is reading it; close it and retry"
        ) from None
    try:
        _settings(con)
        if progress is not None:  # DuckDB tracks a statement's progress only with this on
            con.execute("SET enable_progress_bar=true")
            con.execute("SET enable_progress_bar_print=false")
            con.execute("SET progress_bar_time=0")
        rel_sql, kind, cleanup = _source_sql(con, source, source_table)
        try:
            schema = _SCHEMAS["public" if public else "private"]
            target = f"{schema}.{quote_ident(name)}"
            if not copy and kind != "file":
                raise ValueError(
                    "copy=False works for CSV/Parquet/JSON files only (a view over the file); "
                    "frames and databases are copied"
                )
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                for other in _SCHEMAS.values():
                    if other != schema:
                        con.execute(f"CREATE SCHEMA IF NOT EXISTS {other}")
                        con.execute(f"DROP TABLE IF EXISTS {other}.{quote_ident(name)}")
                        con.execute(f"DROP VIEW IF EXISTS {other}.{quote_ident(name)}")
                con.execute(f"DROP TABLE IF EXISTS {target}")
                con.execute(f"DROP VIEW IF EXISTS {target}")
                if copy:
                    _run_tracked(con, f"CREATE TABLE {target} AS SELECT * FROM {rel_sql}",
                                 "copying rows", progress)
                    _drop_collations(con, target)
                else:
                    con.execute(f"CREATE VIEW {target} AS SELECT * FROM {rel_sql}")
                desc = con.execute(f"DESCRIBE SELECT * FROM {target}").fetchall()
                columns = [Column(str(r[0]), str(r[1])) for r in desc]
                for c in columns:
                    if c.name.lower().startswith(FIXED_PREFIX):
                        raise ValueError(
                            f"column {c.name!r} starts with {FIXED_PREFIX!r}, reserved for the "
                            f"curator's hidden columns; rename it"
                        )
                count_row = con.execute(f"SELECT COUNT(*) FROM {target}").fetchone()
                assert count_row is not None  # an aggregate without GROUP BY: always one row
                rows = int(count_row[0])
                validate(columns, rows)
                if not_null is not None:
                    _check_complete(con, target, columns, not_null())
                extra = list(fixed()) if fixed is not None and copy else []
                if extra:
                    cols_sql = ", ".join(f"{expr} AS {quote_ident(n)}" for n, expr in extra)
                    _run_tracked(con, f"CREATE OR REPLACE TABLE {target} AS SELECT *, "
                                      f"{cols_sql} FROM {target}",
                                 "clamped values and unit totals", progress)
                _replace_key_tables(con, name, columns, list(domains()) if domains else [],
                                    store=copy and not public, table=target)
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
    return columns, ("copy" if copy else "view"), relation_name(name, public)


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


def _check_complete(con: duckdb.DuckDBPyConnection, target: str, columns: Sequence[Column],
                    names: Sequence[str]) -> None:
    """Refuse the load when a column declared complete (``not_null``) holds NULL or NaN (the
    data owner's check: the message goes to the owner, who sees the data anyway)."""
    types = {c.name: c for c in columns}
    for name in names:
        col = quote_ident(name)
        missing = f"{col} IS NULL"
        if types[name].cls == "float":
            missing += f" OR isnan({col})"
        count_row = con.execute(f"SELECT COUNT(*) FROM {target} WHERE {missing}").fetchone()
        assert count_row is not None  # an aggregate without GROUP BY: always one row
        n = int(count_row[0])
        if n:
            raise ValueError(
                f"column {name!r} is declared not_null, but {n} row(s) hold NULL"
                + (" or NaN" if types[name].cls == "float" else "")
                + "; drop it from not_null, or fill or drop those rows in the source"
            )


def _replace_key_tables(con: duckdb.DuckDBPyConnection, name: str, columns: Sequence[Column],
                        domains: Sequence[tuple[str, str, Sequence[Any]]], *,
                        store: bool, table: str | None = None) -> None:
    """Drop the key tables of earlier loads of ``name``; check (and, ``store``, save) the new
    domains (see :func:`load_table`)."""
    ks = quote_ident(KEYS_SCHEMA)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {ks}")
    mine = re.compile(re.escape(name) + r"__[0-9a-f]{32}")
    for (old,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ?", [KEYS_SCHEMA]).fetchall():
        if mine.fullmatch(str(old)):
            con.execute(f"DROP TABLE {ks}.{quote_ident(str(old))}")
    types = {c.name: c.type for c in columns}
    for column, table_name, keys in domains:
        if not mine.fullmatch(table_name):
            raise ValueError(f"internal error: key table name {table_name!r} for {name!r}")
        _store_domain(con, column=column, type_=types[column], keys=keys,
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
                con.execute(f"ATTACH {_string_literal(str(self.db_path))} AS {_ALIAS} (READ_ONLY)")
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

    def bind(self, text: str) -> None:
        """Bind and optimise without running (errors here cannot depend on the data)."""
        with self._lock:
            self._connect().execute("EXPLAIN " + text)

    def shadow(self, relation: str) -> str:
        """An empty table with the columns and types of ``relation``, for dry runs.

        Created once per connection in an in-memory database attached beside the data (a
        reload closes the connection, so a shadow never outlives its table's schema). Only the
        schema is read (``DESCRIBE`` binds the relation; no row is scanned)."""
        with self._lock:
            hit = self._shadows.get(relation)
            if hit is not None:
                return hit
            con = self._connect()
            if not self._shadows:
                con.execute(f"ATTACH ':memory:' AS {_SHADOW}")
            cols = con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()
            name = f"{_SHADOW}.main.{quote_ident(f's{len(self._shadows)}')}"
            con.execute(f"CREATE TABLE {name} ("
                        + ", ".join(f"{quote_ident(str(c[0]))} {c[1]}" for c in cols) + ")")
            self._shadows[relation] = name
            return name

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
            self._connect().execute(text).fetchall()

    def run(self, text: str, group_cols: Sequence[str],
            measure_cols: Sequence[str]) -> tuple[list[tuple[Any, ...]], dict[str, list[Any]]]:
        with self._lock:
            cur = self._connect().execute(text)
            rows = cur.fetchall()
        ng = len(group_cols)
        keys = [tuple(r[:ng]) for r in rows]
        cols = {c: [r[ng + j] for r in rows] for j, c in enumerate(measure_cols)}
        return keys, cols

    def run_rows(self, text: str, *, keep: Callable[[tuple[Any, ...]], bool] | None = None,
                 chunk: int = 4096) -> tuple[list[tuple[Any, ...]], int]:
        """The result's rows for which ``keep`` holds, read in chunks (so many unwanted rows are
        never all held at once), and how many were left out."""
        kept: list[tuple[Any, ...]] = []
        dropped = 0
        with self._lock:
            cur = self._connect().execute(text)
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
            table = arrow_result(self._connect(), text)
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
            return self._connect().execute(text).fetchall()
