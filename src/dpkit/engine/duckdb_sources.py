"""Reading a source into DuckDB: files, frames and relations, and declared domains as keys.

:func:`source_sql` turns what the owner passes to ``add_table`` (a CSV / Parquet / JSON / DuckDB
path, a pandas or polars frame, a pyarrow table, a dict of numpy columns, a DuckDB relation)
into a relation DuckDB can read, refusing column names equal but for case; :func:`store_domain`
casts a declared domain to its column's type and checks it (keys that cannot be read as the
type, or that coincide in it, are refused); :func:`loaded_columns` reads the loaded
relation's columns (refusing names reserved for hidden columns) and :func:`check_complete`
refuses a NULL in a column declared complete. All run only while a table is loaded.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from dpkit.engine.tables import FIXED_PREFIX, Column, FileSource, OpenedSource, quote_ident

__all__ = ["DATASET_SUFFIX", "INFER", "KEY_COLUMN", "ColumnTypes", "check_case_distinct",
           "check_complete", "check_type_names", "file_format", "key_parts", "loaded_columns",
           "source_sql", "store_domain", "string_literal", "truncate_text"]

KEY_COLUMN = "k"  # the one column of a hidden key table (a declared domain)
INFER = "infer"  # types="infer": a CSV/JSON source's types follow its rows (DuckDB's sniffer)
# A CSV/JSON source's column names (its header, or its JSON keys) -> the type each column is
# read as (None: DuckDB's sniffer types them from the rows)
ColumnTypes = Callable[[Sequence[str]], Mapping[str, str] | None]
_TYPE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_ ]*(\([0-9, ]+\))?(\[\])?")


def check_type_names(types: Any) -> dict[str, str] | str | None:
    """``types`` (``{"code": "VARCHAR"}``, ``"infer"`` or None) checked against DuckDB's type
    names, normalised to upper case; a ValueError names the column and the type not known."""
    if types is None or (isinstance(types, str) and types.strip().lower() == INFER):
        return None if types is None else INFER
    if not isinstance(types, Mapping):
        raise TypeError(f"types must map columns to DuckDB types, e.g. {{'code': 'VARCHAR', "
                        f"'year': 'INTEGER'}}, or be 'infer' (got {types!r})")
    out: dict[str, str] = {}
    con = duckdb.connect()
    try:
        for column, type_ in types.items():
            text = str(type_).strip().upper()
            try:
                if not isinstance(type_, str) or not _TYPE_NAME.fullmatch(text):
                    raise duckdb.Error(text)
                con.execute(f"SELECT CAST(NULL AS {text})")
            except duckdb.Error:
                raise ValueError(
                    f"types: column {column!r} has type {type_!r}, which is not a DuckDB type; "
                    f"use one such as VARCHAR, BIGINT, INTEGER, DOUBLE, DECIMAL(10,2), BOOLEAN, "
                    f"DATE or TIMESTAMP") from None
            out[str(column)] = text
    finally:
        con.close()
    return out


def string_literal(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def key_parts(keys: Sequence[Any]) -> list[tuple[Any, str]]:
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


def store_domain(con: duckdb.DuckDBPyConnection, *, column: str, type_: str,
                  keys: Sequence[Any], target: str | None, table: str | None = None) -> None:
    """Cast ``keys`` to the column's type (``type_``) and check them; store them as ``target``.

    Refuses (ValueError) a key that cannot be read as the column's type and keys that become
    equal in it (``1.0`` and ``1`` in an INTEGER column): such a key would be measured twice.
    ``target=None`` (views) only checks. ``table`` (the loaded relation): the keys are also
    compared with the column's own equality, which its type name does not show (a VARCHAR
    ``COLLATE NOCASE`` column makes 'a' and 'A' one group, joined to both keys).
    """
    parts = key_parts(keys)
    names = [f"__dp_keys{j}" for j in range(len(parts))]
    for nm, (tbl, _) in zip(names, parts, strict=True):
        con.register(nm, tbl)
    try:
        sel = " UNION ALL ".join(
            f"SELECT CAST(v AS {type_}) AS {KEY_COLUMN} FROM {nm}" for nm in names)
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
                f"SELECT {KEY_COLUMN}, COUNT(*) FROM {src} GROUP BY {KEY_COLUMN} "
                f"HAVING COUNT(*) > 1 ORDER BY {KEY_COLUMN} LIMIT 3").fetchall()
            if not dup and table is not None and type_.upper() == "VARCHAR":
                # a UNION with the (empty) column takes the column's collation
                col = quote_ident(column)
                dup = con.execute(
                    f"SELECT MIN(v), COUNT(*) FROM (SELECT {col} AS v FROM {table} WHERE FALSE "
                    f"UNION ALL SELECT {KEY_COLUMN} FROM {src}) GROUP BY v "
                    f"HAVING COUNT(*) > 1 LIMIT 3").fetchall()
            nulls = con.execute(
                f"SELECT COUNT(*) FROM {src} WHERE {KEY_COLUMN} IS NULL").fetchall()[0][0]
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


def source_sql(con: duckdb.DuckDBPyConnection, source: Any, source_table: str | None,
               column_types: ColumnTypes | None = None) -> tuple[str, str, Callable[[], object]]:
    """SQL for a relation over ``source``, its storage kind hint, and a cleanup callback
    (its return value, e.g. the connection from ``con.execute``, is ignored).
    ``column_types``: how a CSV/JSON source's columns are typed (None: the sniffer's types)."""
    if isinstance(source, (str, Path)):
        return _path_sql(con, str(source), source_table, column_types)
    if isinstance(source, OpenedSource):
        return _opened_sql(con, source, source_table, column_types)
    if isinstance(source, FileSource):
        return _path_sql(con, source.path, source_table, column_types, fmt=source.format,
                         names=source.column_names)
    return _frame_sql(con, source)


def _no_cleanup() -> None:
    return None


def _path_sql(con: duckdb.DuckDBPyConnection, text: str, source_table: str | None,
              column_types: ColumnTypes | None, *, fmt: str | None = None,
              names: Sequence[str] | None = None) -> tuple[str, str, Callable[[], object]]:
    """A file source: its format told by its name (``file.duckdb::table`` names a table) or
    by ``fmt``; ``names``: a header-less CSV's column names."""
    if "::" in text and not Path(text).exists():
        text, source_table = text.rsplit("::", 1)
    path = Path(text).expanduser()
    if not path.exists():
        # a service's data root that was never made (`dpkit serve` names PROJECT/data/ before
        # anyone creates it) gave only "source file .../data/x.parquet does not exist"
        folder = path.parent
        raise FileNotFoundError(f"source file {path} does not exist" + (
            "" if folder.exists() else f" (nor does its folder {folder}: create it and put the "
                                       f"file there)"))
    p = string_literal(str(path.resolve()))
    fmt = fmt or file_format(path, flags=True)
    if names is not None and fmt != "csv":
        raise ValueError(f"column_names= (--column-names) names a CSV's columns; {path} is "
                         f"read as {fmt}, whose columns are named in the file")
    if fmt == "database":
        return _database_sql(con, path, p, source_table)
    return _file_sql(con, fmt, p, "", column_types, names), "file", _no_cleanup


_FORMATS = (("csv", (".csv", ".tsv", ".txt")), ("parquet", (".parquet", ".pq")),
            ("json", (".json", ".jsonl", ".ndjson")), ("database", (".duckdb", ".db", ".ddb")))
# The files DuckDB reads from a directory given as a CSV/Parquet/JSON source: those, at any
# depth, whose name ends with this (``dir/**/*.parquet``; DuckDB 2.0 skips other files).
DATASET_SUFFIX = {"csv": ".csv", "parquet": ".parquet", "json": ".json"}


def file_format(path: Path, *, flags: bool = False) -> str:
    """``csv``, ``parquet``, ``json`` or ``database``, from ``path``'s suffixes (or a
    ValueError saying which names are understood, and with ``flags``, how to say the format
    of a file named otherwise)."""
    suffixes = [s.lower() for s in path.suffixes]
    for fmt, names in _FORMATS:
        if any(s in names for s in suffixes):
            return fmt
    raise ValueError(
        f"cannot tell the format of {path} from its name; use .csv, .parquet, .json or a "
        f".duckdb database" + (
            ", or say it: --format csv (source_format='csv' in Python; .gz/.zst compression "
            "is read from the name), and for a CSV without a header line its columns: "
            "--column-names a,b,c (column_names=[...])" if flags else ""))


def _file_sql(con: duckdb.DuckDBPyConnection, fmt: str, p: str, options: str,
              column_types: ColumnTypes | None = None,
              names: Sequence[str] | None = None) -> str:
    """The reader of a CSV/Parquet/JSON source ``p`` (a SQL string literal, or a list of
    them), its column names checked first (``names``: a CSV with no header line, named so).
    A CSV/JSON source's columns are read as ``column_types`` says (given the names), never as
    the sniffer would type them from the rows, unless it says None (FINDINGS.md L3)."""
    if fmt == "csv":
        header = con.execute(f"SELECT * FROM read_csv_auto({p}, header=false, "
                             f"all_varchar=true{options}) LIMIT 1").fetchall()
        if names is None:
            found = [str(v) for v in header[0]] if header else []
            check_case_distinct(found)
            typed = _typed_option(column_types, found, "types")
            return f"read_csv_auto({p}{', header=true' if typed else ''}{typed}{options})"
        width = len(header[0]) if header else 0
        if width != len(names):
            raise ValueError(f"column_names gives {len(names)} names and the file's first line "
                             f"has {width} columns: name each column, in order")
        check_case_distinct(list(names))
        listed = ", ".join(string_literal(n) for n in names)
        typed = _typed_option(column_types, list(names), "types")
        return f"read_csv_auto({p}{options}, header=false, names=[{listed}]{typed})"
    if fmt == "parquet":
        check_case_distinct([str(r[0]) for r in con.execute(
            f"SELECT name FROM parquet_schema({p}) WHERE num_children IS NULL OR "
            f"num_children = 0").fetchall()])
        return f"read_parquet({p})"
    if column_types is None:
        return f"read_json_auto({p}{options})"
    sniffed = {str(r[0]): str(r[1]) for r in con.execute(
        f"DESCRIBE SELECT * FROM read_json_auto({p}{options})").fetchall()}
    # read_json's columns= reads only the columns it names: the rest keep the sniffer's type
    # (a public table's undeclared columns; a private table's are all given)
    typed = _typed_option(column_types, list(sniffed), "columns", sniffed)
    return f"read_json_auto({p}{typed}{options})"


def _typed_option(column_types: ColumnTypes | None, names: Sequence[str], option: str,
                  rest: Mapping[str, str] | None = None) -> str:
    """``, types={...}`` (read_csv) or ``, columns={...}`` (read_json): the types
    ``column_types`` gives the columns ``names`` ("" when it leaves them to the sniffer),
    after ``rest`` (the types of the columns it does not name)."""
    given = column_types(names) if column_types is not None else None
    if not given:
        return ""
    types = {**(rest or {}), **given}
    pairs = ", ".join(f"{string_literal(n)}: {string_literal(t)}" for n, t in types.items())
    return f", {option}={{{pairs}}}"


def _opened_sql(con: duckdb.DuckDBPyConnection, source: OpenedSource, source_table: str | None,
                column_types: ColumnTypes | None) -> tuple[str, str, Callable[[], object]]:
    """A source its caller opened (:class:`~dpkit.engine.tables.OpenedSource`): read through
    its paths, never its name, so nothing swapped at the name since the check is read. The
    paths carry no suffix, so a compression the name shows is said explicitly."""
    fmt = file_format(Path(source.name))
    if not source.paths:
        raise ValueError(f"{source.name} holds no {DATASET_SUFFIX.get(fmt, fmt)} file to load; "
                         f"put the data files in it or name one file")
    if fmt == "database":
        if len(source.paths) != 1:
            raise ValueError(f"{source.name}: a DuckDB database is one file, not a folder")
        return _database_sql(con, Path(source.name), string_literal(source.paths[0]),
                             source.table or source_table, views=False)
    p = "[" + ", ".join(string_literal(x) for x in source.paths) + "]"
    last = Path(source.name).suffix.lower()
    options = {".gz": ", compression='gzip'", ".zst": ", compression='zstd'"}.get(last, "")
    return _file_sql(con, fmt, p, options, column_types), "opened", _no_cleanup


def _database_sql(con: duckdb.DuckDBPyConnection, path: Path, p: str,
                  source_table: str | None, *,
                  views: bool = True) -> tuple[str, str, Callable[[], object]]:
    """One table of a DuckDB database file (``p``: its path as a SQL literal), attached
    read-only until the cleanup detaches it (also before any refusal here). ``views=False``
    (a source its caller opened and confined): its stored tables only, since a view runs
    whatever its definition reads (``read_csv('/any/file')``, another project's key), past
    the checks made on the one file opened (FINDINGS.md J4)."""
    con.execute(f"ATTACH {p} AS __dp_src (READ_ONLY)")
    cleanup: Callable[[], object] = lambda: con.execute("DETACH __dp_src")  # noqa: E731
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = '__dp_src'").fetchall()]
    shown = [r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE database_name = '__dp_src' "
        "AND NOT internal").fetchall()]
    if not views and source_table in shown:
        cleanup()
        raise ValueError(
            f"{source_table!r} in {path} is a view: it reads whatever its definition names, "
            f"which may lie outside what was checked, so only stored tables load from here; "
            f"store it first (CREATE TABLE ... AS SELECT ...) or load it with dpkit add-table "
            f"on the machine")
    tables += shown if views else []
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


def _frame_sql(con: duckdb.DuckDBPyConnection,
               source: Any) -> tuple[str, str, Callable[[], object]]:
    """An in-memory frame (dict of numpy columns, pandas, polars, pyarrow, a DuckDB
    relation), registered as ``__dp_frame`` until the cleanup unregisters it."""
    mod = type(source).__module__.split(".")[0]
    obj = source
    if isinstance(source, Mapping):
        obj = _dict_columns(source)
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
    cleanup: Callable[[], object] = lambda: con.unregister("__dp_frame")  # noqa: E731
    return "__dp_frame", "frame", cleanup


def _dict_columns(source: Mapping[Any, Any]) -> dict[str, Any]:
    """A dict source as numpy columns of one length, dates in a resolution DuckDB reads."""
    import numpy as np

    obj: dict[str, Any] = {}
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
    return obj


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


def check_complete(con: duckdb.DuckDBPyConnection, target: str, columns: Sequence[Column],
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


def loaded_columns(con: duckdb.DuckDBPyConnection, target: str) -> list[Column]:
    """The loaded relation's columns, refusing a name in the hidden columns' namespace."""
    desc = con.execute(f"DESCRIBE SELECT * FROM {target}").fetchall()
    columns = [Column(str(r[0]), str(r[1])) for r in desc]
    for c in columns:
        if c.name.lower().startswith(FIXED_PREFIX):
            raise ValueError(
                f"column {c.name!r} starts with {FIXED_PREFIX!r}, reserved for the "
                f"curator's hidden columns; rename it"
            )
    return columns


def truncate_text(con: duckdb.DuckDBPyConnection, target: str, columns: Sequence[Column],
                  limit: int | None) -> None:
    """Cut every VARCHAR value of the loaded relation ``target`` to ``limit`` characters
    (None: leave them). A row function's time follows the length of the value it reads, so one
    unit's 10^7-character value would make every query that reads the column measurably slower
    on the data that holds it (docs/attacks.md §6, "Text: what one value can cost"); the
    bound is public (recorded in the table's declarations), so a query's work no longer
    depends on how long one unit's text is beyond it."""
    if limit is None:
        return
    n = int(limit)
    for c in columns:
        if c.type.upper() == "VARCHAR":
            q = quote_ident(c.name)
            con.execute(f"UPDATE {target} SET {q} = left({q}, {n}) WHERE length({q}) > {n}")
