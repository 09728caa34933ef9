"""A Spark table's copy: the rows written once to Parquet at load (bucketed by the privacy
unit), DuckDB's empty twin of its columns, and the copy read back as a view in each query
session; also the local session and the removal of copies no table names any more.

Like DuckDB's copied tables, a row appended to the source later changes nothing. A copy with
a privacy unit is bucketed by it (:func:`write_bucketed`), so that the per-unit window of
contribution bounding needs no shuffle of the rows; Spark keeps bucket information in its
catalog only, so a note beside the files says so and :func:`read_copy` declares the copy
again in each session. Nothing here reads a row to the driver but counts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import duckdb
from sqlglot import exp

from dpkit.engine.backend_duckdb import relation_name
from dpkit.engine.duckdb_sources import store_domain
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import FIXED_PREFIX, Column, quote_ident

__all__ = ["DUCK_TO_SPARK", "ROWS_PER_BUCKET", "SPARK", "bucket_count", "drop_spark_orphans",
           "load_spark_table", "local_session", "read_copy", "spark_columns", "write_bucketed"]

SPARK = "spark"  # TableMeta.storage of a Spark table
_MISSING = ("pyspark is not installed: pip install 'dpkit[spark]' (pyspark needs Java 17+); "
            "nothing was charged")

# Spark SQL type (simpleString) -> the DuckDB type the curator types queries with
_TYPES = {"tinyint": "TINYINT", "smallint": "SMALLINT", "int": "INTEGER", "bigint": "BIGINT",
          "float": "FLOAT", "double": "DOUBLE", "string": "VARCHAR", "boolean": "BOOLEAN",
          "date": "DATE", "timestamp_ntz": "TIMESTAMP"}
# DuckDB type -> Spark type (a shipped public column's; the reverse of the above)
DUCK_TO_SPARK = {d: s for s, d in _TYPES.items()}


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
                     unit: str | None = None, public: bool = False,
                     max_text_length: int | None = None) -> tuple[list[Column], str, str]:
    """Copy ``source`` to Parquet under ``directory/physical`` and give DuckDB an empty table of
    its columns (``priv.<physical>``, or ``pub.<physical>`` for a ``public`` lookup table, for
    typing and dry runs). ``validate(columns, rows)``, the declared domains (checked against
    the column types) and ``not_null`` (counted in Spark) run before anything is kept. With a
    privacy ``unit``, the copy is bucketed by it (:func:`write_bucketed`); with
    ``max_text_length``, its text values are cut to that many characters first (as
    ``duckdb_sources.truncate_text`` does for a DuckDB copy, and for the same timing reason).
    Returns (columns, storage ``"spark"``, DuckDB relation)."""
    df = _read_source(spark, source)
    columns = spark_columns(df.schema)
    df = _cut_text(df, columns, max_text_length)
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


def _cut_text(df: Any, columns: Sequence[Column], limit: int | None) -> Any:
    """``df`` with every string column cut to ``limit`` characters (None: unchanged). Spark's
    ``substring`` counts characters (code points), as DuckDB's ``left`` does, so both engines
    keep the same prefix of a value."""
    if limit is None:
        return df
    from pyspark.sql import functions as F  # noqa: N812

    for c in columns:
        if c.type.upper() == "VARCHAR":
            df = df.withColumn(c.name, F.substring(F.col(_backquoted(c.name)), 1, int(limit)))
    return df


def _backquoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


_BUCKETS = "_dpkit_buckets"  # in a bucketed copy's folder: "<unit>\t<buckets>" (Spark skips _*)
ROWS_PER_BUCKET = 2_000_000  # one task sorts a bucket: 50 at 100M rows took 0.81x 4's time


def bucket_count(rows: int, partitions: int, per_bucket: int = ROWS_PER_BUCKET) -> int:
    """Shuffle ``partitions`` (at least 1), more when a bucket would hold over ``per_bucket``."""
    return max(1, int(partitions), -(-int(rows) // int(per_bucket)))


def write_bucketed(spark: Any, df: Any, target: Path, unit: str, physical: str) -> None:
    """Write ``df`` to ``target`` as Parquet bucketed by ``unit`` (Spark's bucket layout: one
    file per bucket, a row's bucket a hash of its unit), :func:`bucket_count` buckets (one
    job counts the rows first). A query's windows partitioned by the unit then need no
    shuffle of the rows (``EXPLAIN``: no ``Exchange hashpartitioning`` on the unit). Bucket
    information lives in Spark's catalog only, so the table written here is dropped from it
    at once (an external table: its files stay) and :meth:`SparkBackend.register` declares
    it again in each query session (:func:`read_copy`) from the note this writes beside the
    files."""
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    buckets = bucket_count(int(df.count()), parts, ROWS_PER_BUCKET)
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


def read_copy(session: Any, source: str, view: str) -> None:
    """Declare the copy at ``source`` as ``view`` in ``session``: a temporary view of a plain
    copy, an external catalog table (``CLUSTERED BY (unit) INTO n BUCKETS``, from the note
    :func:`write_bucketed` left) of a bucketed one, since Spark knows the buckets only from
    a catalog table. Reads the files' schema, no row."""
    spec = _bucket_spec(source)
    df = session.read.parquet(source)
    if spec is None:
        df.createOrReplaceTempView(view)
        return
    cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields)
    path = exp.Literal.string(str(source)).sql(dialect="spark")
    session.sql(f"CREATE TABLE IF NOT EXISTS {view} ({cols}) USING parquet "
                f"CLUSTERED BY (`{spec[0]}`) INTO {spec[1]} BUCKETS LOCATION {path}")


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

