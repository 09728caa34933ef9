"""DuckDB, in process: where the one statement per query runs, over the project's rows.

The project's rows are in ``data.duckdb`` (schemas and relation names:
:mod:`dpkit.engine.duckdb_layout`; loading and cleaning up: :mod:`dpkit.engine.duckdb_load`).
Queries run on an in-memory connection that ATTACHes that file READ_ONLY, so many processes can
answer queries at once; loading a table opens the file read-write for the duration of the load
(DuckDB allows one writer process at a time, and none while readers are attached).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb

from dpkit.engine.duckdb_layout import (
    ALIAS,
    KEYS_SCHEMA,
    SCHEMAS,
    collated_in,
    key_table_relation,
    relation_name,
    settings,
    table_relation,
)
from dpkit.engine.duckdb_load import drop_orphans, init_database, load_table
from dpkit.engine.duckdb_sources import string_literal
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import FIXED_PREFIX, quote_ident
from dpkit.noise import trace as _trace

# the loader's and the layout's names stay importable from here, where callers found them
__all__ = ["KEYS_SCHEMA", "DuckBackend", "columnar_type", "drop_orphans", "dry_run_errors",
           "init_database", "key_table_relation", "load_table", "relation_name",
           "table_relation"]

# in-memory database (per query connection) of empty tables shaped like the real ones, where
# statements are dry-run before anything is charged
_SHADOW = "__dpshadow"


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
            settings(con)
            try:
                con.execute(f"ATTACH {string_literal(str(self.db_path))} AS {ALIAS} (READ_ONLY)")
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
                    [ALIAS, SCHEMAS["private"], name, FIXED_PREFIX],
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
                    "schema_name = ? AND table_name = ?", [ALIAS, SCHEMAS["private"], name],
                ).fetchall()
                self._collated[name] = collated_in(str(rows[0][0])) if rows else frozenset()
            return self._collated[name]

    def key_tables(self) -> frozenset[str]:
        """Names of the hidden key tables (declared domains) in the project's file (cached
        while attached, like :meth:`fixed_columns`)."""
        with self._lock:
            if self._keys is None:
                rows = self._connect().execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND "
                    "schema_name = ?", [ALIAS, KEYS_SCHEMA]).fetchall()
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
