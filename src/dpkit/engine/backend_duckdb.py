"""DuckDB, in process: where the rows live and where the one statement per query runs.

The project's rows are in ``data.duckdb`` (schema ``priv`` for private tables, ``pub`` for public
ones). Queries run on an in-memory connection that ATTACHes that file READ_ONLY, so many
processes can answer queries at once; loading a table opens the file read-write for the duration
of the load (DuckDB allows one writer process at a time, and none while readers are attached).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from dpkit.engine.plan import FIXED_PREFIX
from dpkit.engine.tables import Column, quote_ident

__all__ = ["DuckBackend", "load_table"]

_SCHEMAS = {"private": "priv", "public": "pub"}
_ALIAS = "dpdata"


def _settings(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET enable_progress_bar=false")
    con.execute("SET error_on_division_by_zero=false")


def _string_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def relation_name(name: str, public: bool) -> str:
    schema = _SCHEMAS["public" if public else "private"]
    return f"{quote_ident(_ALIAS)}.{schema}.{quote_ident(name)}"


def _source_sql(con: duckdb.DuckDBPyConnection, source: Any,
                source_table: str | None) -> tuple[str, str, Callable[[], None]]:
    """SQL for a relation over ``source``, its storage kind hint, and a cleanup callback."""
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
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
            return f"read_csv_auto({p})", "file", cleanup
        if any(s in (".parquet", ".pq") for s in suffixes):
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
    con.register("__dp_frame", obj)
    cleanup = lambda: con.unregister("__dp_frame")  # noqa: E731
    return "__dp_frame", "frame", cleanup


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
) -> tuple[list[Column], str, str]:
    """Load ``source`` into ``db_path`` as ``name`` (replacing it), in one DuckDB transaction.

    ``validate(columns, rows)`` runs before the commit; if it raises, nothing is kept.
    ``fixed()`` (called after ``validate``, copied tables only) lists hidden columns to
    materialise as ``(name, SQL expression over the table's columns)``: the clamped fixed-point
    integers for the declared bounds, computed here once instead of in every query. They are
    recomputed on every load, bounds included, in the same transaction as the rows.
    Returns (columns, storage, relation).
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
                    con.execute(f"CREATE TABLE {target} AS SELECT * FROM {rel_sql}")
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
                rows = int(con.execute(f"SELECT COUNT(*) FROM {target}").fetchone()[0])
                validate(columns, rows)
                extra = list(fixed()) if fixed is not None and copy else []
                if extra:
                    cols_sql = ", ".join(f"{expr} AS {quote_ident(n)}" for n, expr in extra)
                    con.execute(f"CREATE OR REPLACE TABLE {target} AS SELECT *, {cols_sql} "
                                f"FROM {target}")
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

    def bind(self, text: str) -> None:
        """Bind and optimise without running (errors here cannot depend on the data)."""
        with self._lock:
            self._connect().execute("EXPLAIN " + text)

    def run(self, text: str, group_cols: Sequence[str],
            measure_cols: Sequence[str]) -> tuple[list[tuple[Any, ...]], dict[str, list[Any]]]:
        with self._lock:
            cur = self._connect().execute(text)
            rows = cur.fetchall()
        ng = len(group_cols)
        keys = [tuple(r[:ng]) for r in rows]
        cols = {c: [r[ng + j] for r in rows] for j, c in enumerate(measure_cols)}
        return keys, cols

    def query_public(self, text: str) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._connect().execute(text).fetchall()
