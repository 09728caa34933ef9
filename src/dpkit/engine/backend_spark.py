"""Apache Spark, for tables that outgrow one machine: the same plans, run where the rows are.

A Spark table's rows live in Parquet (a copy the curator writes once at load, like DuckDB's
copied tables: rows appended to the source later change nothing; :mod:`dpkit.engine.spark_load`
writes it and declares it in each session); DuckDB holds an EMPTY table of the same columns
and types, so everything before the charge (typing, the dry run over empty shadow tables, the
declared keys) runs exactly as for a DuckDB table and reads no row. A query's statement is
compiled ``portable`` (:mod:`dpkit.engine.plan.portable`), transpiled to Spark SQL
(:mod:`dpkit.engine.spark_sql`) with the relation names swapped for Spark views here,
analysed by Spark before the charge (errors there spend nothing), and run after it. Only the
aggregates come back to the driver; noise and the ledger stay there
(:mod:`dpkit.engine.charge`). Public DuckDB tables a statement joins are shipped to Spark
(:func:`ship_public`).

pyspark is imported inside the functions that need it (the ``[spark]`` extra): ``import
dpkit`` never starts a JVM. Queries run in a session of their own (``spark.newSession()``:
the user's SparkContext, its own SQL settings) with ANSI mode off, so that a division by zero
is NULL as in DuckDB (the compiled statement is total: it raises on no row).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from dpkit.engine.backend_duckdb import DuckBackend, table_relation
from dpkit.engine.spark_load import (
    DUCK_TO_SPARK,
    SPARK,
    bucket_count,
    drop_spark_orphans,
    load_spark_table,
    local_session,
    read_copy,
)
from dpkit.engine.spark_sql import exact_rounds, to_spark_sql
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import TableMeta, quote_ident
from dpkit.noise import trace as _trace

# The copy and its loading live in spark_load, the statement's Spark text in spark_sql; the
# names callers knew here stay importable from here.
__all__ = ["ENGINES", "PUBLIC_KEYS_MAX", "PUBLIC_MAX_ROWS", "SPARK", "SparkBackend", "backend_for",
           "bucket_count", "check_engine", "check_on_spark", "drop_spark_orphans", "exact_rounds",
           "load_spark_table", "local_session", "ship_public", "to_spark_sql"]


class SparkBackend(DuckBackend):
    """DuckDB for everything public and before the charge; Spark for the rows of Spark tables.

    ``spark``: a SparkSession, or a function returning one (called on first use: a local
    session by default)."""

    def __init__(self, db_path: Path, spark: Any = None) -> None:
        super().__init__(db_path)
        self._spark_arg = spark
        self._session: Any = None
        self._views: dict[tuple[str, str], str] = {}  # (schema, physical) -> Spark view
        self._frames: dict[str, Any] = {}  # Spark text -> its analysed DataFrame
        self._texts: dict[str, str] = {}  # DuckDB text -> its Spark text (views only grow)
        self._public: dict[tuple[str, str], TableMeta] = {}  # public tables seen, by relation
        self._shipped: dict[tuple[str, str], str] = {}  # public relation -> its Spark view
        self._cached: dict[str, Any] = {}  # public table name -> its shipped, cached rows
        self._spark_lock = threading.Lock()

    def portable(self, meta: TableMeta) -> bool:
        return meta.storage == SPARK

    def session(self) -> Any:
        """The query session (refused when Spark is missing or stopped: nothing charged yet
        when this is asked before the charge)."""
        with self._spark_lock:
            if self._session is None:
                arg = self._spark_arg
                base = arg() if callable(arg) else (arg if arg is not None else local_session())
                self._session = base.newSession()
                self._session.conf.set("spark.sql.ansi.enabled", "false")
            if _stopped(self._session):
                raise QueryError("the Spark session has been stopped; give the curator a live "
                                 "one (Curator.open(path, spark=session)); nothing charged")
            return self._session

    def register(self, tables: Mapping[str, TableMeta]) -> None:
        """Make a Spark view of each Spark table in ``tables`` (once per session; a public
        one loaded with ``engine="spark"`` too: the statements that read it, public look-ups
        included, then run on Spark); note the DuckDB public tables, shipped to Spark when a
        statement first reads them (:meth:`to_spark`)."""
        for meta in tables.values():
            if meta.public and meta.storage != SPARK:
                t = exp.to_table(table_relation(meta), dialect="duckdb")
                self._public.setdefault((t.db, t.name), meta)
                continue
            if meta.storage != SPARK:
                continue
            key = ("pub" if meta.public else "priv", meta.stored_name)
            if key not in self._views:
                view = f"dpkit_{'spub_' if meta.public else ''}{meta.stored_name}"
                read_copy(self.session(), meta.source, view)
                self._views[key] = view

    def _public_view(self, key: tuple[str, str]) -> str | None:
        """The Spark view of a public DuckDB table (its rows shipped once per registration: a
        new load is a new stored name); None for a relation that is not a public table.
        Shipping a table again after a reload releases the cached rows of its former load."""
        view = self._shipped.get(key)
        if view is None and key in self._public:
            meta = self._public[key]
            session = self.session()
            old = self._cached.pop(meta.name, None)
            if old is not None:
                with contextlib.suppress(Exception):
                    old.unpersist()
            view = f"dpkit_pub_{key[1]}"
            self._cached[meta.name] = ship_public(session, self, meta, view)
            self._shipped[key] = view
        return view

    def to_spark(self, text: str, *, public: bool = False) -> str | None:
        """``text`` (DuckDB SQL) as Spark SQL over the views; None if it reads no Spark table
        (``public``: also a text that reads public tables only, as :meth:`query_keys` asks).
        The public tables it joins are shipped to Spark on first use (refused above
        :data:`PUBLIC_MAX_ROWS` rows: a ``QueryError``, before the charge when asked by
        :meth:`check`)."""
        if not public and (not self._views or not any(p in text for _, p in self._views)):
            return None
        done = self._texts.get(text)
        if done is not None:  # asked before the charge (check) and again to read (run)
            return done
        tree = sqlglot.parse_one(text, read="duckdb")
        tables = list(tree.find_all(exp.Table))
        if not public and not any((t.db, t.name) in self._views for t in tables):
            return None
        for t in tables:
            view = self._views.get((t.db, t.name)) or self._public_view((t.db, t.name))
            if view is not None:
                t.replace(exp.to_table(view).as_(t.alias_or_name) if t.alias else
                          exp.to_table(view))
            elif public and t.db:  # stored, but not on Spark (a CTE's name has no schema)
                return None
        out = to_spark_sql(tree)
        if not public:  # the read routes a cached text to Spark: statements' texts only
            if len(self._texts) >= 64:
                self._texts.clear()
            self._texts[text] = out
        return out

    def query_keys(self, text: str) -> list[tuple[Any, ...]] | None:
        """The public keys ``text`` gives (a statement's key CTEs over public tables, in
        order), read by Spark from the same views the statement reads (a DuckDB public table
        is shipped, once per registration), so that keys and groups compare alike (Spark's
        equality, no DuckDB collation). None above :data:`PUBLIC_KEYS_MAX` keys, or when
        ``text`` reads something Spark has no view of: the statement then joins them."""
        spark_text = self.to_spark(f"{text} LIMIT {PUBLIC_KEYS_MAX + 1}", public=True)
        if spark_text is None:
            return None
        try:
            keys = self._collect(spark_text)
        except QueryError:
            raise
        except Exception as exc:  # before the charge: refused, like check's analysis
            raise _refusal(exc) from None
        return keys if len(keys) <= PUBLIC_KEYS_MAX else None

    def check(self, text: str, tables: Mapping[str, TableMeta]) -> None:
        """Before the charge: Spark analyses the statement (no row read), so that a statement
        Spark cannot run is refused for free."""
        self.register(tables)
        spark_text = self.to_spark(text)
        if spark_text is None:
            return
        _trace.statement("spark", "check", spark_text)
        try:
            df = self.session().sql(spark_text)
        except QueryError:
            raise
        except Exception as exc:
            raise _refusal(exc) from None
        if len(self._frames) >= 64:
            self._frames.clear()
        self._frames[spark_text] = df

    def _collect(self, spark_text: str) -> list[tuple[Any, ...]]:
        _trace.statement("spark", "collect", spark_text)
        df = self._frames.pop(spark_text, None)
        if df is None:
            df = self.session().sql(spark_text)
        return [tuple(r) for r in df.collect()]

    def run(self, text: str, group_cols: Sequence[str],
            measure_cols: Sequence[str]) -> tuple[list[tuple[Any, ...]], dict[str, list[Any]]]:
        spark_text = self.to_spark(text)
        if spark_text is None:
            return super().run(text, group_cols, measure_cols)
        rows = self._collect(spark_text)
        ng = len(group_cols)
        keys = [tuple(r[:ng]) for r in rows]
        cols = {c: [_integral(r[ng + j]) for r in rows] for j, c in enumerate(measure_cols)}
        return keys, cols

    def run_rows(self, text: str, *, keep: Callable[[tuple[Any, ...]], bool] | None = None,
                 chunk: int = 4096) -> tuple[list[tuple[Any, ...]], int]:
        spark_text = self.to_spark(text)
        if spark_text is None:
            return super().run_rows(text, keep=keep, chunk=chunk)
        rows = [tuple(_integral(v) for v in r) for r in self._collect(spark_text)]
        kept = [r for r in rows if keep is None or keep(r)]
        return kept, len(rows) - len(kept)

    def run_numpy(self, text: str) -> dict[str, Any]:
        """Rows as one array per column (``fit``'s bounded, encoded rows: what the model
        trains on, collected to the driver; integral decimals as ints, others as floats)."""
        spark_text = self.to_spark(text)
        if spark_text is None:
            return super().run_numpy(text)
        import numpy as np

        _trace.statement("spark", "collect_numpy", spark_text)
        df = self._frames.pop(spark_text, None)
        if df is None:
            df = self.session().sql(spark_text)
        rows = df.collect()
        return {c: np.asarray([_numeric(r[i]) for r in rows]) for i, c in enumerate(df.columns)}

    def run_columns(self, text: str, group_cols: Sequence[str], measure_cols: Sequence[str],
                    ) -> tuple[int, list[Any], dict[str, Any], dict[str, Any]]:
        if self.to_spark(text) is None:
            return super().run_columns(text, group_cols, measure_cols)
        import numpy as np

        keys, cols = self.run(text, group_cols, measure_cols)
        key_cols = []
        for i in range(len(group_cols)):
            arr = np.empty(len(keys), dtype=object)
            arr[:] = [k[i] for k in keys]
            key_cols.append(arr)
        return len(keys), key_cols, dict(cols), {}

    def query_public(self, text: str) -> list[tuple[Any, ...]]:
        spark_text = self.to_spark(text)
        if spark_text is None:
            return super().query_public(text)
        return self._collect(spark_text)

    def close(self) -> None:
        super().close()
        with contextlib.suppress(Exception):
            self._frames.clear()

    def release(self) -> None:
        """Unpersist the shipped public tables' rows and drop their views. Spark's cache
        belongs to the SparkContext, shared by every session of the application (the user's
        own included), so without this a closed project's lookups stayed in executor memory
        until the application stopped. Not in :meth:`close`: that runs at every
        ``add_table``, and a lookup shipped once serves until its table is loaded again
        (:meth:`_public_view` releases the former load's rows then)."""
        session = self._session
        with self._spark_lock:
            cached, shipped = list(self._cached.values()), list(self._shipped.values())
            self._cached.clear()
            self._shipped.clear()
        for df in cached:
            with contextlib.suppress(Exception):  # a stopped session has nothing to free
                df.unpersist()
        if session is not None and not _stopped(session):
            for view in shipped:
                with contextlib.suppress(Exception):
                    session.catalog.dropTempView(view)


# A public table joined with a Spark table is shipped to Spark as rows held by the driver
# (a local relation, sent with the tasks): lookup tables are small. Above this many rows it is
# refused; aggregate or filter it to the keys the query needs first.
PUBLIC_MAX_ROWS = 100_000
# A public key set (a GROUP BY over a public table's column) up to this many keys is read to
# the driver once per registration and each query's groups filled from it there (the keys
# are the answer's rows anyway); above, the statement joins them in Spark.
PUBLIC_KEYS_MAX = 100_000


def ship_public(spark: Any, duck: DuckBackend, meta: TableMeta, view: str) -> Any:
    """Copy public table ``meta``'s rows from DuckDB to a Spark temporary view ``view`` (the
    same columns, types and values: doubles, decimals, dates and strings travel exactly), and
    return its DataFrame. Refused, with a ``QueryError`` and nothing shipped, above
    :data:`PUBLIC_MAX_ROWS` rows or for a column type Spark has no twin of. Public data: no
    privacy question here.

    The rows are cached on Spark and counted once here: a DataFrame made from the driver's
    rows is otherwise decoded again at every scan (a statement scans a lookup twice when its
    column is a group key), and Spark knows no size for it, so it broadcast the *private*
    side of the JOIN; cached, its size is known and the lookup is broadcast
    (docs/scale.md)."""
    fields = []
    for c in meta.columns:
        t = c.type.upper()
        spark_type = t.lower() if t.startswith("DECIMAL") else DUCK_TO_SPARK.get(t)
        if spark_type is None:
            raise QueryError(f"public table {meta.name!r}: column {c.name!r} has type {c.type}, "
                             f"which cannot be shipped to Spark; load the table with that "
                             f"column cast to a number, string, boolean, date or timestamp "
                             f"(nothing charged)")
        fields.append(f"`{c.name.replace('`', '``')}` {spark_type}")
    relation = table_relation(meta)
    n = DuckBackend.query_public(duck, f"SELECT COUNT(*) FROM {relation}")[0][0]
    if n > PUBLIC_MAX_ROWS:
        raise QueryError(f"public table {meta.name!r} has {n} rows; a public table joined with "
                         f"a Spark table is shipped to Spark and may hold at most "
                         f"{PUBLIC_MAX_ROWS}. Load it on Spark (add_public_table(..., "
                         f"engine='spark'): no limit there), or only the rows and columns the "
                         f"query needs (nothing charged)")
    cols = ", ".join(quote_ident(c.name) for c in meta.columns)
    rows = DuckBackend.query_public(duck, f"SELECT {cols} FROM {relation}")
    df = spark.createDataFrame(rows, schema=", ".join(fields)).cache()
    df.count()  # materialised now, before the charge: its size is known to the planner
    df.createOrReplaceTempView(view)
    return df


def _refusal(exc: Exception) -> QueryError:
    """What Spark said when it could not run a statement before the charge."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return QueryError(f"Spark cannot run this query: {first} (nothing charged)")


def _integral(v: Any) -> Any:
    """A DECIMAL(38, 0) sum as the Python int DuckDB's HUGEINT gives."""
    if isinstance(v, Decimal) and v == v.to_integral_value():
        return int(v)
    return v


def _numeric(v: Any) -> Any:
    """A Spark DECIMAL as DuckDB's numpy fetch gives it: an int, or a float."""
    v = _integral(v)
    return float(v) if isinstance(v, Decimal) else v


def _stopped(session: Any) -> bool:
    try:
        return bool(session.sparkContext._jsc.sc().isStopped())
    except Exception:  # a session whose JVM is gone
        return True


ENGINES = ("duckdb", SPARK)


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)} (got {engine!r})")
    return engine


def backend_for(db_path: Path, *, engine: str, spark: Any, tables: Mapping[str, TableMeta],
                ) -> DuckBackend:
    """DuckDB alone, or Spark beside it when asked for (``engine="spark"`` or a session given)
    or when a registered table lives on Spark (a local session is started on first use)."""
    if (check_engine(engine) == SPARK or spark is not None
            or any(m.storage == SPARK for m in tables.values())):
        return SparkBackend(db_path, spark)
    return DuckBackend(db_path)


def check_on_spark(backend: DuckBackend, meta: TableMeta, texts: Sequence[str]) -> None:
    """Before the charge, for a Spark table: Spark analyses each statement (DuckDB SQL over
    ``meta``'s relation; no row read), so that what Spark cannot run, a stopped session or a
    project opened without Spark is refused with nothing charged. Other tables: nothing."""
    if meta.storage != SPARK:
        return
    if not isinstance(backend, SparkBackend):
        raise QueryError(f"table {meta.name!r} is on Spark; open the project with a Spark "
                         f"session: Curator.open(path, spark=session) (nothing charged)")
    for text in texts:
        backend.check(text, {meta.name: meta})
