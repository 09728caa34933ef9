"""Apache Spark, for tables that outgrow one machine: the same plans, run where the rows are.

A Spark table's rows live in Parquet (a copy the curator writes once at load, like DuckDB's
copied tables: rows appended to the source later change nothing); DuckDB holds an EMPTY table
of the same columns and types, so everything before the charge (typing, the dry run over
empty shadow tables, the declared keys) runs exactly as for a DuckDB table and reads no row.
A query's statement is compiled ``portable`` (:mod:`dpkit.engine.plan.portable`), transpiled
to Spark SQL by sqlglot with the relation names swapped for Spark temporary views, analysed by
Spark before the charge (errors there spend nothing), and run after it. Only the aggregates
come back to the driver; noise and the ledger stay there (:mod:`dpkit.engine.charge`).

pyspark is imported inside the functions that need it (the ``[spark]`` extra): ``import
dpkit`` never starts a JVM. Queries run in a session of their own (``spark.newSession()``:
the user's SparkContext, its own SQL settings) with ANSI mode off, so that a division by zero
is NULL as in DuckDB (the compiled statement is total: it raises on no row).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

from dpkit.engine.backend_duckdb import DuckBackend, relation_name, table_relation
from dpkit.engine.duckdb_sources import store_domain
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import FIXED_PREFIX, Column, TableMeta, quote_ident
from dpkit.noise import trace as _trace

__all__ = ["ENGINES", "PUBLIC_MAX_ROWS", "SPARK", "SparkBackend", "backend_for", "check_engine",
           "check_on_spark", "drop_spark_orphans", "exact_rounds", "exact_sums", "hex_casts",
           "load_spark_table", "local_session", "ship_public", "spark_columns", "to_spark_sql",
           "write_bucketed"]

SPARK = "spark"  # TableMeta.storage of a Spark table
_MISSING = ("pyspark is not installed: pip install 'dpkit[spark]' (pyspark needs Java 17+); "
            "nothing was charged")

# Spark SQL type (simpleString) -> the DuckDB type the curator types queries with
_TYPES = {"tinyint": "TINYINT", "smallint": "SMALLINT", "int": "INTEGER", "bigint": "BIGINT",
          "float": "FLOAT", "double": "DOUBLE", "string": "VARCHAR", "boolean": "BOOLEAN",
          "date": "DATE", "timestamp_ntz": "TIMESTAMP"}


def local_session() -> Any:
    """A local Spark session (``local[2]``, no UI, 4 shuffle partitions), for one machine."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise QueryError(_MISSING) from None
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # the catalog (bucketed copies are declared there) keeps its empty warehouse folder in
    # the temporary directory, not in the working directory
    warehouse = Path(tempfile.gettempdir()) / "dpkit-spark-warehouse"
    return (SparkSession.builder.master("local[2]").appName("dpkit")
            .config("spark.sql.warehouse.dir", str(warehouse))
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4").getOrCreate())


def spark_columns(schema: Any) -> list[Column]:
    """A Spark schema as the curator's columns (DuckDB types); refuses what has no twin."""
    out = []
    for f in schema.fields:
        t = f.dataType.simpleString()
        if t.startswith("decimal"):
            duck = t.upper()
        elif t in _TYPES:
            duck = _TYPES[t]
        elif t == "timestamp":
            raise ValueError(f"column {f.name!r} is a Spark TIMESTAMP (with the session's time "
                             f"zone); cast it to timestamp_ntz or to a date first")
        else:
            raise ValueError(f"column {f.name!r} has Spark type {t}, which dpkit cannot query "
                             f"on Spark; cast it to a number, string, boolean or date first")
        if f.name.lower().startswith(FIXED_PREFIX):
            raise ValueError(f"column {f.name!r} starts with {FIXED_PREFIX!r}, reserved for the "
                             f"curator's hidden columns; rename it")
        out.append(Column(f.name, duck))
    return out


def _read_source(spark: Any, source: Any) -> Any:
    """A Spark DataFrame of ``source``: a DataFrame, or a Parquet / CSV path."""
    if hasattr(source, "sparkSession") and hasattr(source, "schema"):
        return source
    if isinstance(source, (str, Path)):
        p = str(source)
        if p.lower().endswith((".csv", ".csv.gz", ".tsv")):
            return spark.read.csv(p, header=True, inferSchema=True)
        return spark.read.parquet(p)
    raise ValueError(f"a Spark table's source is a Spark DataFrame or a Parquet/CSV path (got "
                     f"{type(source).__name__}); load other sources with engine='duckdb'")


def load_spark_table(db_path: Path, spark: Any, name: str, source: Any, *, directory: Path,
                     physical: str, validate: Callable[[list[Column], int], None],
                     domains: Callable[[], Sequence[tuple[str, str, Sequence[Any]]]],
                     not_null: Callable[[], Sequence[str]],
                     unit: str | None = None,
                     public: bool = False) -> tuple[list[Column], str, str]:
    """Copy ``source`` to Parquet under ``directory/physical`` and give DuckDB an empty table of
    its columns (``priv.<physical>``, or ``pub.<physical>`` for a ``public`` lookup table, for
    typing and dry runs). ``validate(columns, rows)``, the declared domains (checked against
    the column types) and ``not_null`` (counted in Spark) run before anything is kept. With a
    privacy ``unit``, the copy is bucketed by it (:func:`write_bucketed`). Returns (columns,
    storage ``"spark"``, DuckDB relation)."""
    df = _read_source(spark, source)
    columns = spark_columns(df.schema)
    target = directory / physical
    directory.mkdir(parents=True, exist_ok=True)
    # the unit as the copy spells it (a name that matches no column is refused by validate)
    by = next((c.name for c in columns if unit is not None and c.name.lower() == unit.lower()),
              None)
    try:
        if by is None:
            df.write.mode("overwrite").parquet(str(target))
        else:
            write_bucketed(spark, df, target, by, physical)
        df = spark.read.parquet(str(target))
        validate(columns, int(df.count()))
        _check_complete(df, columns, not_null())
        _schema_table(db_path, physical, columns, domains(), schema="pub" if public else "priv")
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return columns, SPARK, relation_name(physical, public)


_BUCKETS = "_dpkit_buckets"  # in a bucketed copy's folder: "<unit>\t<buckets>" (Spark skips _*)


def write_bucketed(spark: Any, df: Any, target: Path, unit: str, physical: str) -> None:
    """Write ``df`` to ``target`` as Parquet bucketed by ``unit`` (Spark's bucket layout: one
    file per bucket, a row's bucket a hash of its unit), as many buckets as the session's
    ``spark.sql.shuffle.partitions``. A query's windows partitioned by the unit then need no
    shuffle of the rows (``EXPLAIN``: no ``Exchange hashpartitioning`` on the unit). Bucket
    information lives in Spark's catalog only, so the table written here is dropped from it
    at once (an external table: its files stay) and :meth:`SparkBackend.register` declares
    it again in each query session from the note this writes beside the files."""
    buckets = max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
    table = f"dpkit_load_{physical}"
    try:
        (df.repartition(buckets, unit).write.mode("overwrite").bucketBy(buckets, unit)
         .option("path", str(target)).saveAsTable(table))
    finally:
        with contextlib.suppress(Exception):
            spark.sql(f"DROP TABLE IF EXISTS {table}")
    with contextlib.suppress(OSError):  # a path Python cannot write: the copy reads as plain
        (target / _BUCKETS).write_text(f"{unit}\t{buckets}\n")


def _bucket_spec(source: str) -> tuple[str, int] | None:
    """The (unit, buckets) of a copy written by :func:`write_bucketed`, else None."""
    note = Path(source) / _BUCKETS
    try:
        unit, buckets = note.read_text().strip().split("\t")
    except (OSError, ValueError):  # not bucketed (or not on a local path: read as plain)
        return None
    return unit, int(buckets)


def _check_complete(df: Any, columns: Sequence[Column], names: Sequence[str]) -> None:
    """Refuse a NULL (or NaN) in a column declared ``not_null`` (one Spark job)."""
    if not names:
        return
    from pyspark.sql import functions as fn

    cls = {c.name: c.cls for c in columns}
    counts = df.agg(*[
        fn.sum((fn.col(n).isNull() | (fn.isnan(fn.col(n)) if cls[n] == "float" else
                                      fn.lit(False))).cast("long")).alias(f"c{i}")
        for i, n in enumerate(names)]).collect()[0]
    for i, n in enumerate(names):
        if counts[f"c{i}"]:
            raise ValueError(f"column {n!r} is declared not_null, but {counts[f'c{i}']} row(s) "
                             f"hold NULL or NaN; drop it from not_null, or fix those rows")


def _schema_table(db_path: Path, physical: str, columns: Sequence[Column],
                  domains: Sequence[tuple[str, str, Sequence[Any]]], *,
                  schema: str = "priv") -> None:
    """DuckDB's empty twin of a Spark table (its columns and types), domains checked."""
    con = duckdb.connect(str(db_path))
    try:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        cols = ", ".join(f"{quote_ident(c.name)} {c.type}" for c in columns)
        con.execute(f"CREATE OR REPLACE TABLE {schema}.{quote_ident(physical)} ({cols})")
        types = {c.name: c.type for c in columns}
        for column, _, keys in domains:
            store_domain(con, column=column, type_=types[column], keys=keys, target=None)
    finally:
        con.close()


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
                spec = _bucket_spec(meta.source)
                session = self.session()
                df = session.read.parquet(meta.source)
                if spec is None:
                    df.createOrReplaceTempView(view)
                else:  # Spark knows the buckets only from a catalog table
                    cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}"
                                     for f in df.schema.fields)
                    path = exp.Literal.string(str(meta.source)).sql(dialect="spark")
                    session.sql(f"CREATE TABLE IF NOT EXISTS {view} ({cols}) USING parquet "
                                f"CLUSTERED BY (`{spec[0]}`) INTO {spec[1]} BUCKETS "
                                f"LOCATION {path}")
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

    def to_spark(self, text: str) -> str | None:
        """``text`` (DuckDB SQL) as Spark SQL over the views; None if it reads no Spark table.
        The public tables it joins are shipped to Spark on first use (refused above
        :data:`PUBLIC_MAX_ROWS` rows: a ``QueryError``, before the charge when asked by
        :meth:`check`)."""
        if not self._views or not any(p in text for _, p in self._views):
            return None
        done = self._texts.get(text)
        if done is not None:  # asked before the charge (check) and again to read (run)
            return done
        tree = sqlglot.parse_one(text, read="duckdb")
        tables = list(tree.find_all(exp.Table))
        if not any((t.db, t.name) in self._views for t in tables):
            return None
        for t in tables:
            view = self._views.get((t.db, t.name)) or self._public_view((t.db, t.name))
            if view is not None:
                t.replace(exp.to_table(view).as_(t.alias_or_name) if t.alias else
                          exp.to_table(view))
        if len(self._texts) >= 64:
            self._texts.clear()
        out = self._texts[text] = to_spark_sql(tree)
        return out

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
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise QueryError(f"Spark cannot run this query: {first} (nothing charged)") from None
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


def to_spark_sql(text: str | Any) -> str:
    """A portable statement (DuckDB SQL, or its parsed tree, which is changed) as Spark SQL:
    sqlglot's transpilation plus the rewrites where Spark's spelling of the same value
    differs (:func:`hex_casts`, :func:`exact_rounds`, :func:`exact_sums`)."""
    tree = sqlglot.parse_one(text, read="duckdb") if isinstance(text, str) else text
    return exact_sums(exact_rounds(hex_casts(tree))).sql(dialect="spark")


# A public table joined with a Spark table is shipped to Spark as rows held by the driver
# (a local relation, sent with the tasks): lookup tables are small. Above this many rows it is
# refused; aggregate or filter it to the keys the query needs first.
PUBLIC_MAX_ROWS = 100_000

# DuckDB type -> Spark type of a shipped public column (the reverse of _TYPES)
_TO_SPARK = {d: s for s, d in _TYPES.items()}


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
        spark_type = t.lower() if t.startswith("DECIMAL") else _TO_SPARK.get(t)
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


def exact_sums(tree: Any) -> Any:
    """Every SUM of a compiled statement adds integers (fixed-point values, counts); DuckDB
    adds them into HUGEINT, Spark into a BIGINT that wraps. Each BIGINT ``v`` is split as
    ``hi * 2^31 + lo`` (``hi = v >> 31``, ``0 <= lo < 2^31``): both parts are summed as BIGINT
    (exact below 2^32 rows per group; a per-row DECIMAL(38, 0) sum is several times slower in
    Spark) and joined as DECIMAL(38, 0) once per group (read back as Python ints, as DuckDB's
    HUGEINT is)."""
    dec = exp.DataType.build("DECIMAL(38, 0)")
    for node in list(tree.find_all(exp.Sum)):
        if isinstance(node.parent, exp.Window):
            continue  # a total over the groups' (already exact, DECIMAL) sums: few rows
        v = node.this
        hi = exp.cast(exp.Sum(this=exp.BitwiseRightShift(this=v.copy(),
                                                         expression=exp.Literal.number(31))),
                      dec)
        lo = exp.cast(exp.Sum(this=exp.BitwiseAnd(this=v.copy(),
                                                  expression=exp.Literal.number(2**31 - 1))),
                      dec)
        node.replace(exp.paren(exp.Add(this=exp.Mul(this=hi, expression=exp.Literal.number(
            2**31)), expression=lo)))
    return tree


def hex_casts(tree: Any) -> Any:
    """``CAST('0x' || h AS BIGINT)`` (DuckDB reads a hex text as an integer; the portable keyed
    hash uses it on 8 hex digits of an MD5) as ``CAST(conv(h, 16, 10) AS BIGINT)``: Spark's
    cast of a ``0x`` text is NULL. Same value: ``h`` is at most 8 hex digits (< 2^32)."""
    for node in list(tree.find_all(exp.Cast)):
        inner = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
        if (isinstance(inner, exp.DPipe) and isinstance(inner.this, exp.Literal)
                and inner.this.is_string and inner.this.this == "0x"
                and node.to.is_type(exp.DataType.Type.BIGINT)):
            node.set("this", exp.Anonymous(this="conv", expressions=[
                inner.expression.copy(), exp.Literal.number(16), exp.Literal.number(10)]))
    return tree


def exact_rounds(tree: Any) -> Any:
    """``CAST(round(y) AS BIGINT)`` (the fixed-point integers) without Spark's ``round``,
    which rounds a double through ``java.math.BigDecimal`` (its decimal text): measured at
    10M rows, most of the record-level statement's time. ``round`` half away from zero is
    written with ``floor``, exactly (``y - floor(y)`` is exact for ``|y| < 2^52``, and beyond
    that ``y`` is an integer): the integer DuckDB's ``round`` gives, and Spark's."""
    for node in list(tree.find_all(exp.Round)):
        cast = node.parent
        if (node.args.get("decimals") is not None or not isinstance(cast, exp.Cast)
                or not cast.to.is_type(exp.DataType.Type.BIGINT)):
            continue
        y = node.this
        neg = exp.Neg(this=exp.paren(y.copy()))
        node.replace(exp.paren(exp.case().when(
            exp.GTE(this=y.copy(), expression=exp.Literal.number(0)),
            _round_up(exp.paren(y.copy()))).else_(exp.Neg(this=exp.paren(_round_up(neg))))))
    return tree


def _round_up(v: exp.Expression) -> exp.Expression:
    """``floor(v) + (v - floor(v) >= 0.5)`` for ``v >= 0``: ``v`` rounded, halves up."""
    fl = exp.Floor(this=v.copy())
    frac = exp.Sub(this=v.copy(), expression=fl.copy())
    return exp.Add(this=fl, expression=exp.case().when(
        exp.GTE(this=frac, expression=exp.Literal.number(0.5)), exp.Literal.number(1)).else_(
        exp.Literal.number(0)))


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


_COPY = re.compile(r".+__v[0-9a-f]{16}")  # a Parquet copy's folder name (load's stored name)


def drop_spark_orphans(directory: Path, keep: Collection[str]) -> list[str]:
    """Remove the Parquet copies under the project's own ``directory`` (``<project>/spark``)
    that no Spark table in force names (``keep``: their stored names): the old rows of a
    replaced or dropped table, or the new rows of a load that crashed before its ledger row.
    Only folders named as a load names them are touched; a shared ``$DPKIT_SPARK_DIR`` is
    never cleaned (other projects may keep their copies there). The caller holds the load
    lock. Returns what was removed."""
    if not directory.is_dir():
        return []
    gone = []
    for entry in sorted(directory.iterdir()):
        if entry.is_dir() and _COPY.fullmatch(entry.name) and entry.name not in keep:
            shutil.rmtree(entry, ignore_errors=True)
            gone.append(f"spark/{entry.name}")
    return gone
