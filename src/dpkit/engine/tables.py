"""Tables behind the curator: where the rows live and what the data owner declared about them.

A table's metadata is public (analysts may read it): its columns and types, the **privacy unit**
(the column naming one person; ``None`` means every row is its own unit, i.e. record-level
privacy), the **contribution bounds** (``max_rows_per_unit``: the rows one unit may contribute to
any one query; ``max_groups_per_unit``: the groups one unit may touch in a grouped query),
**numeric bounds** (values are clamped into ``[low, high]`` before they are summed) and
**domains** (the public list of keys of a categorical column, used as group keys so that no group
needs to be discovered from the data). Public lookup tables (``public=True``) hold no private
data; they may be joined to a private table and used as key sets.

Storage. By default the rows are **copied** into the project's DuckDB file (``data.duckdb``):
the project is then self-contained, a consistent snapshot, and fast. Private tables are always
copied. ``copy=False`` (CSV and Parquet paths, public tables only) stores a DuckDB *view* over
the file instead: nothing is copied, the file must stay where it is, and if it changes the
answers follow it.

The metadata itself is written to the ledger (a ``table`` row), so it is hash-chained with the
budget: changing a table's bounds after the fact is visible in the history.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

__all__ = [
    "FILE_FORMATS",
    "FIXED_PREFIX",
    "MAX_TEXT_LENGTH",
    "NUMERIC_TYPES",
    "TEXT_LENGTH_ERROR",
    "Column",
    "FileSource",
    "OpenedSource",
    "TableMeta",
    "check_identifier",
    "domain_table_name",
    "file_source",
    "from_text_file",
    "quote_ident",
    "text_length_ok",
    "type_class",
]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
RESERVED_PREFIX = "__dp"
# hidden columns a copied private table gets at load (fixed-point integers, unit row totals):
# source columns may not start with it, and analysts cannot name them
FIXED_PREFIX = "__dpfx_"

NUMERIC_TYPES = (
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "REAL", "DECIMAL", "INT", "INT1", "INT2", "INT4",
    "INT8", "FLOAT4", "FLOAT8", "NUMERIC",
)
_FLOAT_TYPES = ("FLOAT", "DOUBLE", "REAL", "FLOAT4", "FLOAT8")
_TEMPORAL = ("DATE", "TIME", "TIMESTAMP", "INTERVAL")


def check_identifier(name: str, what: str) -> str:
    """A table or project-level name: letters, digits, underscore; not starting with a digit."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(
            f"{what} name must be letters, digits and underscores, starting with a letter or "
            f"underscore, at most 63 characters (got {name!r}); e.g. 'visits'"
        )
    if name.lower().startswith(RESERVED_PREFIX):
        raise ValueError(
            f"{what} names starting with {RESERVED_PREFIX!r} are reserved (got {name!r})"
        )
    return name


def quote_ident(name: str) -> str:
    """A DuckDB identifier, double-quoted with embedded quotes doubled (safe for any string)."""
    return '"' + name.replace('"', '""') + '"'


def type_class(duck_type: str) -> str:
    """'int', 'float', 'decimal', 'bool', 'string', 'temporal' or 'other' for a DuckDB type name."""
    t = duck_type.upper()
    base = t.split("(")[0].strip()
    if base in ("BOOLEAN", "BOOL"):
        return "bool"
    if base in _FLOAT_TYPES:
        return "float"
    if base in ("DECIMAL", "NUMERIC"):
        return "decimal"
    if base in NUMERIC_TYPES:
        return "int"
    if base in ("VARCHAR", "TEXT", "STRING", "CHAR", "BPCHAR", "UUID", "ENUM") or t.startswith(
        "ENUM"
    ):
        return "string"
    if any(base.startswith(p) for p in _TEMPORAL):
        return "temporal"
    return "other"


@dataclass(frozen=True)
class Column:
    name: str
    type: str

    @property
    def cls(self) -> str:
        return type_class(self.type)

    @property
    def numeric(self) -> bool:
        return self.cls in ("int", "float", "decimal", "bool")


@dataclass(frozen=True)
class TableMeta:
    """What the data owner declared about a table (all of it public)."""

    name: str
    columns: tuple[Column, ...]
    privacy_unit: str | None = None
    public: bool = False
    max_rows_per_unit: int = 1
    max_groups_per_unit: int | None = None
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    domains: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    # DATE / TIMESTAMP columns' declared ranges (ISO text, inclusive): date_trunc of such a
    # column takes its public keys from the bins of this range (:func:`split_date_bounds`)
    date_ranges: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    storage: str = "copy"  # "copy", "view", or "spark" (rows in Parquet, read by Spark)
    source: str = ""
    relation: str = ""  # the DuckDB relation holding the rows (schema-qualified, quoted)
    description: str = ""
    # column -> hidden key table holding its declared domain (copied tables only; see
    # :func:`domain_table_name`): queries read the keys from it instead of inlining them
    key_tables: Mapping[str, str] = field(default_factory=dict)
    # columns the owner declared complete (no NULL, no NaN; checked at load): COUNT(col) is
    # COUNT(*), so AVG/VAR/STDDEV of them share the row count's measurement
    not_null: tuple[str, ...] = ()
    # the relation's own name inside its schema: a fresh one per load (crash-safe replace);
    # "" for tables loaded before versioned relations (stored under ``name``)
    physical: str = ""
    # text values of a private copy were cut to this many characters at load (None: not cut,
    # as for public tables, Spark tables and loads before the bound existed); public, like the
    # bounds: it says how long a value a query can read
    max_text_length: int | None = None

    @property
    def stored_name(self) -> str:
        """The DuckDB table/view name holding the rows (inside schema priv or pub)."""
        return self.physical or self.name

    # ---------------------------------------------------------------- lookups

    def column(self, name: str) -> Column:
        """Case-insensitive lookup; unknown names raise with the close matches and the list."""
        hit = self.find(name)
        if hit is None:
            import difflib

            names = [c.name for c in self.columns]
            close = difflib.get_close_matches(name, names, n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ValueError(
                f"table {self.name!r} has no column {name!r}.{hint} Its columns: "
                f"{', '.join(names)}"
            )
        return hit

    def find(self, name: str) -> Column | None:
        exact = [c for c in self.columns if c.name == name]
        if exact:
            return exact[0]
        folded = [c for c in self.columns if c.name.lower() == name.lower()]
        if len(folded) > 1:
            raise ValueError(
                f"column name {name!r} is ambiguous in table {self.name!r} (matches "
                f"{', '.join(c.name for c in folded)}); quote it exactly"
            )
        return folded[0] if folded else None

    @property
    def record_level(self) -> bool:
        return self.privacy_unit is None

    def bounds_for(self, column: str) -> tuple[float, float] | None:
        col = self.column(column)
        if col.name in self.bounds:
            lo, hi = self.bounds[col.name]
            return float(lo), float(hi)
        if col.cls == "bool":
            return 0.0, 1.0
        return None

    # ---------------------------------------------------------------- (de)serialisation

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "columns": [[c.name, c.type] for c in self.columns],
            "privacy_unit": self.privacy_unit,
            "public": self.public,
            "max_rows_per_unit": self.max_rows_per_unit,
            "max_groups_per_unit": self.max_groups_per_unit,
            "bounds": {k: [float(v[0]), float(v[1])] for k, v in self.bounds.items()},
            "domains": {k: _jsonable_list(v) for k, v in self.domains.items()},
            "date_ranges": {k: [v[0], v[1]] for k, v in self.date_ranges.items()},
            "storage": self.storage,
            "source": self.source,
            "relation": self.relation,
            "description": self.description,
            "key_tables": dict(self.key_tables),
            "not_null": list(self.not_null),
            "physical": self.physical,
            "max_text_length": self.max_text_length,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TableMeta:
        return cls(
            name=str(d["name"]),
            columns=tuple(Column(str(n), str(t)) for n, t in d["columns"]),
            privacy_unit=d.get("privacy_unit"),
            public=bool(d.get("public", False)),
            max_rows_per_unit=int(d.get("max_rows_per_unit", 1)),
            max_groups_per_unit=(
                None if d.get("max_groups_per_unit") is None else int(d["max_groups_per_unit"])
            ),
            bounds={k: (float(v[0]), float(v[1])) for k, v in d.get("bounds", {}).items()},
            domains={k: tuple(v) for k, v in d.get("domains", {}).items()},
            date_ranges={str(k): (str(v[0]), str(v[1]))
                         for k, v in d.get("date_ranges", {}).items()},
            storage=str(d.get("storage", "copy")),
            source=str(d.get("source", "")),
            relation=str(d.get("relation", "")),
            description=str(d.get("description", "")),
            key_tables={str(k): str(v) for k, v in d.get("key_tables", {}).items()},
            not_null=tuple(str(c) for c in d.get("not_null", ())),
            physical=str(d.get("physical", "")),
            max_text_length=(None if d.get("max_text_length") is None
                             else int(d["max_text_length"])),
        )

    def summary(self) -> str:
        unit = f"privacy unit {self.privacy_unit!r}" if self.privacy_unit else "record level"
        if self.public:
            unit = "public (no privacy)"
        parts = [unit]
        if not self.public:
            parts.append(f"max_rows_per_unit={self.max_rows_per_unit}")
            if self.max_groups_per_unit is not None:
                parts.append(f"max_groups_per_unit={self.max_groups_per_unit}")
        if self.bounds:
            parts.append("bounds " + ", ".join(f"{k}=[{lo:g}, {hi:g}]"
                                               for k, (lo, hi) in self.bounds.items()))
        if self.date_ranges:
            parts.append("date ranges " + ", ".join(f"{k}=[{lo}, {hi}]"
                                                    for k, (lo, hi) in self.date_ranges.items()))
        if self.domains:
            parts.append("domains " + ", ".join(f"{k} ({len(v)} keys)"
                                                for k, v in self.domains.items()))
        if self.not_null:
            parts.append("not null " + ", ".join(self.not_null))
        if self.max_text_length is not None:
            parts.append(f"text cut at {self.max_text_length} characters")
        return "; ".join(parts)


def validate_not_null(columns: Sequence[Column], not_null: Any, *, public: bool) -> tuple[str, ...]:
    """The columns declared complete, by their exact names (unknown names raise)."""
    if not_null is None:
        return ()
    if isinstance(not_null, (str, bytes)) or not isinstance(not_null, Sequence | set | frozenset):
        raise TypeError(f"not_null must be a list of column names, e.g. ['age'] (got "
                        f"{not_null!r})")
    if public and not_null:
        raise ValueError("not_null is for private tables (a public table's NULLs are public)")
    probe = TableMeta(name="", columns=tuple(columns))
    return tuple(dict.fromkeys(probe.column(str(c)).name for c in not_null))


def domain_table_name(table: str, column: str, type_: str, keys: Sequence[Any]) -> str:
    """Name of the hidden table holding ``column``'s declared domain ``keys`` (in the project's
    DuckDB file, schema ``__dpkeys``; see :func:`dpkit.engine.backend_duckdb.load_table`).

    ``<table>__<hash>``: the hash covers the table, the column, its type and every key with its
    Python type, in order, so a changed domain (a reload with other keys, or another type) gets
    another name and a query can never read a stale key table. The name ends in ``__`` and 32
    hex digits, so it determines its table (everything before them): two tables' key tables
    never share a name.
    """
    import hashlib
    import json

    h = hashlib.sha256()
    h.update(json.dumps([table, column, type_]).encode())
    try:
        # keys are JSON values (validate_declarations): their JSON text is unambiguous
        # (1, 1.0, true and "1" differ; floats round-trip)
        text = json.dumps(list(keys), allow_nan=False)
    except (TypeError, ValueError):
        text = repr([(type(v).__name__, v) for v in keys])
    h.update(text.encode("utf-8", "surrogatepass"))
    return f"{table}__{h.hexdigest()[:32]}"


def _jsonable_list(values: Sequence[Any]) -> list[Any]:
    """``[_jsonable(x) for x in values]``, without the per-key call when every key is already
    a plain int or str (the common case, e.g. a million zip codes)."""
    if all(type(x) is int or type(x) is str for x in values):
        return list(values)
    return [_jsonable(x) for x in values]


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, (str, int, float, bool)) or x is None:
        if isinstance(x, float) and not math.isfinite(x):
            raise ValueError(f"domain values must be finite (got {x!r})")
        return x
    return str(x)


# -------------------------------------------------------------------------------- validation


def validate_declarations(
    *,
    name: str,
    columns: Sequence[Column],
    privacy_unit: str | None,
    public: bool,
    bounds: Mapping[str, Any] | None,
    max_rows_per_unit: int | None,
    max_groups_per_unit: int | None,
    domains: Mapping[str, Sequence[Any]] | None,
) -> tuple[str | None, int, int | None, dict[str, tuple[float, float]],
           dict[str, tuple[Any, ...]]]:
    """Check the owner's declarations against the columns; return them normalised.

    Every problem raises ``ValueError`` naming the column and the fix; nothing is written.
    """
    probe = TableMeta(name=name, columns=tuple(columns))
    for c in columns:
        if c.name.lower().startswith(RESERVED_PREFIX):
            raise ValueError(
                f"column {c.name!r}: names starting with {RESERVED_PREFIX!r} are reserved; "
                f"rename it in the source"
            )
    unit: str | None = None
    if privacy_unit is not None:
        if public:
            raise ValueError("a public table has no privacy unit; drop privacy_unit or public")
        unit = probe.column(str(privacy_unit)).name
    if max_rows_per_unit is None:
        rows = 1
    else:
        if isinstance(max_rows_per_unit, bool) or not isinstance(max_rows_per_unit, int):
            raise TypeError(f"max_rows_per_unit must be an int >= 1 (got {max_rows_per_unit!r})")
        if max_rows_per_unit < 1:
            raise ValueError(f"max_rows_per_unit must be >= 1 (got {max_rows_per_unit})")
        if unit is None and max_rows_per_unit != 1 and not public:
            raise ValueError(
                "max_rows_per_unit applies to tables with a privacy_unit; at record level every "
                "row is its own unit (drop max_rows_per_unit or name the privacy_unit column)"
            )
        rows = int(max_rows_per_unit)
    groups: int | None = None
    if max_groups_per_unit is not None:
        if isinstance(max_groups_per_unit, bool) or not isinstance(max_groups_per_unit, int):
            raise TypeError(
                f"max_groups_per_unit must be an int >= 1 (got {max_groups_per_unit!r})"
            )
        if max_groups_per_unit < 1:
            raise ValueError(f"max_groups_per_unit must be >= 1 (got {max_groups_per_unit})")
        groups = int(max_groups_per_unit)
    out_bounds: dict[str, tuple[float, float]] = {}
    for col_name, pair in (bounds or {}).items():
        col = probe.column(str(col_name))
        if not col.numeric:
            raise ValueError(
                f"bounds for column {col.name!r}: it has type {col.type}, not a number; bounds "
                f"apply to numeric columns (cast it in the source first)"
            )
        out_bounds[col.name] = check_bounds(pair, col.name)
    out_domains: dict[str, tuple[Any, ...]] = {}
    for col_name, keys in (domains or {}).items():
        col = probe.column(str(col_name))
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence | set | frozenset):
            raise TypeError(
                f"domain of {col.name!r} must be a list of keys, e.g. ['A', 'B'] (got {keys!r})"
            )
        values = list(keys)
        if not values:
            raise ValueError(f"domain of {col.name!r} is empty: list its possible values")
        cls = col.cls
        numeric = cls in ("int", "decimal", "float")

        def normal(v: Any, col: Column = col, cls: str = cls, numeric: bool = numeric) -> Any:
            v = _jsonable(v)
            if v is None:
                raise ValueError(f"domain of {col.name!r} contains NULL; list only real values")
            if numeric and isinstance(v, str):
                try:
                    v = int(v) if cls == "int" else float(v)
                except ValueError:
                    raise ValueError(
                        f"domain of {col.name!r} ({col.type}) contains {v!r}, not a number"
                    ) from None
            return v

        # plain ints (any column), plain strings (non-numeric columns) are already normal
        if not all(type(v) is int or (type(v) is str and not numeric) for v in values):
            values = [normal(v) for v in values]
        clean = list(dict.fromkeys(values))  # first occurrence of each key, in order
        if len(clean) > 1_000_000:
            raise ValueError(f"domain of {col.name!r} has {len(clean)} keys; at most 1e6")
        out_domains[col.name] = tuple(clean)
    return unit, rows, groups, out_bounds, out_domains


def split_date_bounds(columns: Sequence[Column], bounds: Mapping[str, Any] | None,
                      ) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    """(the numeric bounds, the DATE/TIMESTAMP ranges) of ``bounds``.

    A temporal column's bounds are a public range, ``("2024-01-01", "2024-12-31")`` (ISO text,
    ``datetime.date`` or ``datetime.datetime``; inclusive): ``date_trunc`` of the column then
    releases every bin of the range, and rows outside it fall in no released group. They are
    never summed, so they get no fixed-point column."""
    probe = TableMeta(name="?", columns=tuple(columns))
    numeric: dict[str, Any] = {}
    dates: dict[str, tuple[str, str]] = {}
    for col_name, pair in (bounds or {}).items():
        col = probe.find(str(col_name))
        if col is None or col.cls != "temporal":
            numeric[col_name] = pair
            continue
        dates[col.name] = _date_range(pair, col)
    return numeric, dates


def _date_range(pair: Any, col: Column) -> tuple[str, str]:
    import datetime as dt

    try:
        lo, hi = pair
    except (TypeError, ValueError):
        raise ValueError(f"bounds for {col.name!r} ({col.type}) must be a pair (first, last), "
                         f"e.g. ('2024-01-01', '2024-12-31') (got {pair!r})") from None
    date_only = col.type.upper().split("(")[0].strip() == "DATE"
    out = []
    for v in (lo, hi):
        try:
            t = v if isinstance(v, dt.datetime) else (
                dt.datetime(v.year, v.month, v.day) if isinstance(v, dt.date)
                else dt.datetime.fromisoformat(str(v)))
        except ValueError:
            raise ValueError(f"bounds for {col.name!r} ({col.type}): {v!r} is not an ISO date "
                             f"or timestamp such as '2024-01-31' or '2024-01-31 12:00'") from None
        if t.tzinfo is not None:
            raise ValueError(f"bounds for {col.name!r}: give times without a time zone "
                             f"(got {v!r})")
        out.append(t)
    if not out[0] < out[1]:
        raise ValueError(f"bounds for {col.name!r} must satisfy first < last (got {pair!r})")
    fmt = (lambda t: t.date().isoformat()) if date_only else (lambda t: t.isoformat(sep=" "))
    return fmt(out[0]), fmt(out[1])


def check_bounds(pair: Any, column: str) -> tuple[float, float]:
    """``(low, high)`` finite numbers with ``low < high``."""
    try:
        lo, hi = pair
    except (TypeError, ValueError):
        raise ValueError(
            f"bounds for {column!r} must be a pair (low, high), e.g. (0, 120) (got {pair!r})"
        ) from None
    for v in (lo, hi):
        if isinstance(v, bool) or (not isinstance(v, (int, float)) and not hasattr(v, "__float__")):
            raise TypeError(f"bounds for {column!r} must be numbers (got {pair!r})")
    try:
        lo_f, hi_f = float(lo), float(hi)
    except OverflowError:  # an int past a float (10**400): as far out as inf
        lo_f = hi_f = math.inf
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        raise ValueError(
            f"bounds for {column!r} must be finite numbers (got {pair!r}); NaN and inf cannot "
            f"bound a sum"
        )
    if not lo_f < hi_f:
        raise ValueError(
            f"bounds for {column!r} must satisfy low < high (got low={lo_f:g}, high={hi_f:g})"
            + ("; they look swapped" if lo_f > hi_f else "")
        )
    if max(abs(lo_f), abs(hi_f)) > 2.0**60:
        raise ValueError(f"bounds for {column!r} exceed 2**60 in magnitude (got {pair!r})")
    return lo_f, hi_f


# The default bound on a private table's text values, in characters. A query's time grows
# linearly with the length of each value it reads (docs/attacks.md §6: eight calls over one
# unit's 10^6-character value added 10-20 ms, 10^7 added 60-220 ms, on 10,000 units); cut at
# 1,000, one unit's text costs at most ~1/1000 of the former, microseconds, under the jitter
# of any query, while names, codes, addresses and short comments pass whole. Free text
# longer than that is no GROUP BY key anyway; the owner raises it (or None) where it is.
MAX_TEXT_LENGTH = 1000
# one text for add_table, the command line and declaration files (``none``: how each says it)
TEXT_LENGTH_ERROR = ("max_text_length must be a whole number of characters >= 1, or {none} for "
                     "no bound (got {got}); the default is " + str(MAX_TEXT_LENGTH))


def text_length_ok(n: Any) -> bool:
    """Whether ``n`` is a bound ``max_text_length`` takes (a whole number >= 1; None apart)."""
    return not isinstance(n, bool) and isinstance(n, int) and n >= 1


@dataclass(frozen=True)
class OpenedSource:
    """A file source its caller has already opened and checked, so that what is loaded is
    exactly what was checked (the service's data root: ``dpkit.server.paths``).

    ``name``: the path as the owner gave it (its suffixes tell the format; the declarations
    record it). ``paths``: what DuckDB opens, one per file (a Parquet/CSV/JSON dataset that is
    a directory has several), each a name for an already open file such as
    ``/proc/self/fd/N``, which no one can swap for a symlink. ``table``: a DuckDB database's
    table. Always copied (a view would read the paths again after they are closed).
    """

    name: str
    paths: tuple[str, ...]
    table: str | None = None


@dataclass(frozen=True)
class FileSource:
    """A file path with what its name does not say: ``format`` (``csv``, ``parquet`` or
    ``json``: a name such as ``adult.data.gz``) and, for a CSV without a header line,
    ``column_names`` (one per column, in order). Made by :func:`file_source`."""

    path: str
    format: str | None = None
    column_names: tuple[str, ...] | None = None


FILE_FORMATS = ("csv", "parquet", "json")


def file_source(source: Any, source_format: str | None,
                column_names: Sequence[str] | None, *, spark: bool = False) -> Any:
    """``source`` itself when neither is given, else a :class:`FileSource` (refused for
    anything but a path, an unknown format, names for a file that is not CSV, or Spark)."""
    if source_format is None and column_names is None:
        return source
    if not isinstance(source, (str, Path)):
        raise TypeError(f"source_format= and column_names= describe a file path (got "
                        f"{describe_source(source)}); a frame already has its columns")
    if spark:
        raise ValueError("engine='spark' reads a CSV by its name, with its header line: "
                         "source_format= and column_names= are for DuckDB tables")
    fmt = None if source_format is None else str(source_format).lower()
    if fmt is not None and fmt not in FILE_FORMATS:
        raise ValueError(f"source_format must be one of {', '.join(FILE_FORMATS)} (got "
                         f"{source_format!r}); a DuckDB database is told by its name")
    names = None if column_names is None else tuple(str(c) for c in column_names)
    if names is not None and (not names or not all(names)):
        raise ValueError("column_names must name every column of the file, in order")
    return FileSource(str(source), fmt, names)


def describe_source(source: Any) -> str:
    if isinstance(source, (str, Path)):
        return str(source)
    if isinstance(source, OpenedSource):
        return source.name
    if isinstance(source, FileSource):  # a format the name does not say is said after it
        fmt = source.format
        named = fmt is None or f".{fmt}" in PurePath(source.path.lower()).suffixes
        return source.path if named else f"{source.path} (read as {fmt})"
    mod = type(source).__module__.split(".")[0]
    return f"{mod}.{type(source).__name__}"


_TEXT_FILES = (".csv", ".tsv", ".txt", ".json", ".jsonl", ".ndjson")


def from_text_file(meta: TableMeta) -> bool:
    """Whether ``meta`` was loaded from a CSV/JSON file (its source's name, public in the
    declarations): its columns are VARCHAR unless declared (FINDINGS.md L3), so a refusal
    over a text column there names the declaration that types it."""
    source = meta.source.lower().split("::")[0]
    if source.endswith((" (read as csv)", " (read as json)")):  # --format on another name
        return True
    return any(s in _TEXT_FILES for s in PurePath(source).suffixes)
