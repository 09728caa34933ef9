"""Registering a table: validate the declarations against the source, load the rows, describe
them as a :class:`TableMeta` (the curator then records it in the ledger).

Everything a load computes is public: the declarations (privacy unit, contribution bounds, value
bounds, domains, ``not_null``), checked against the source's schema, plus, for copied private
tables, the hidden columns queries read (each value's clamped fixed-point integer for the
declared bounds, each row's unit total) and the hidden key tables of the declared domains. Each
load writes a fresh relation (``<name>__v<random>``): the ledger row that names it is what
switches queries to it, so rows and declarations change together or not at all.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpkit import noise as _noise
from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import load_table
from dpkit.engine.duckdb_sources import INFER
from dpkit.engine.ledger import Entry
from dpkit.engine.spark_load import load_spark_table
from dpkit.engine.spec import DROP_UNIT_ON, REPLACE_ON
from dpkit.engine.tables import (
    MAX_TEXT_LENGTH,
    TEXT_LENGTH_ERROR,
    Column,
    TableMeta,
    describe_source,
    domain_table_name,
    quote_ident,
    split_date_bounds,
    text_length_ok,
    validate_declarations,
    validate_not_null,
)

__all__ = ["MAX_TEXT_LENGTH", "Declarations", "check_load", "load_declared",
           "load_declared_spark", "load_lock", "tables_in_force"]



@dataclass(frozen=True)
class Declarations:
    """What the owner declares about a table (see :meth:`Curator.add_table`)."""

    privacy_unit: str | None = None
    bounds: Mapping[str, Any] | None = None
    max_rows_per_unit: int | None = None
    max_groups_per_unit: int | None = None
    domains: Mapping[str, Any] | None = None
    not_null: Any = None
    public: bool = False
    copy: bool = True
    source_table: str | None = None
    description: str = ""
    max_text_length: int | None = MAX_TEXT_LENGTH
    # a CSV/JSON source's column types: {"code": "VARCHAR"}, or "infer" (the sniffer's)
    types: Mapping[str, str] | str | None = None


def reader_types(decl: Declarations, names: Sequence[str]) -> dict[str, str] | None:
    """The type each column of a CSV/JSON source with columns ``names`` is read as: a private
    table's from its declarations only (FINDINGS.md L3), so that they are the same on D and on
    D' = D plus one unit whose value the sniffer would type otherwise: the ``types`` entry;
    else DOUBLE for numeric bounds (DATE, TIMESTAMP for ISO ones); else the domain keys' type
    (BOOLEAN, BIGINT, DOUBLE or VARCHAR); else VARCHAR. A public table's undeclared columns,
    and every column under ``types="infer"``, are left to the sniffer (None: all of them)."""
    if decl.types == INFER:
        return None
    declared = {str(k).lower(): v for k, v in (decl.types or {}).items()}  # type: ignore[union-attr]
    exact = {n.lower(): n for n in names}
    unknown = [k for k in (decl.types or {}) if str(k).lower() not in exact]
    if unknown:
        raise ValueError(f"types: the source has no column {unknown[0]!r}; its columns: "
                         f"{', '.join(names)}")
    if decl.public:
        return {exact[k]: t for k, t in declared.items()} or None
    bounds = {str(k).lower(): v for k, v in (decl.bounds or {}).items()}
    domains = {str(k).lower(): v for k, v in (decl.domains or {}).items()}
    out = {}
    for n in names:
        low = n.lower()
        out[n] = declared.get(low) or (_bounds_type(bounds[low]) if low in bounds
                                      else _keys_type(domains[low]) if low in domains
                                      else "VARCHAR")
    return out


def _bounds_type(pair: Any) -> str:
    """DOUBLE for a pair of numbers; DATE for ISO dates, TIMESTAMP for ISO times."""
    import datetime as dt

    if isinstance(pair, Sequence) and not isinstance(pair, str) and pair and all(
            isinstance(v, str | dt.date) for v in pair):
        dates = all(len(v.strip()) == 10 if isinstance(v, str) else
                    not isinstance(v, dt.datetime) for v in pair)
        return "DATE" if dates else "TIMESTAMP"
    return "DOUBLE"


def _keys_type(keys: Any) -> str:
    """The type a domain's keys share: BOOLEAN, BIGINT, DOUBLE, else VARCHAR."""
    values = list(keys) if isinstance(keys, Iterable) and not isinstance(keys, str) else []
    if values and all(isinstance(v, bool) for v in values):
        return "BOOLEAN"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "BIGINT"
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return "DOUBLE"
    return "VARCHAR"


class _Load:
    """The callbacks :func:`load_table` runs inside its transaction, and what they found."""

    def __init__(self, name: str, decl: Declarations) -> None:
        self.name = name
        self.decl = decl
        rows = decl.max_rows_per_unit
        if not decl.public and rows is None and decl.privacy_unit is not None:
            rows = 1  # the default contribution bound: one row per unit
        self.max_rows = rows
        self.columns: list[Column] = []
        self.valid: tuple[Any, ...] = ()
        self.not_null: Any = None
        self.key_tables: dict[str, str] = {}
        self.date_ranges: dict[str, tuple[str, str]] = {}
        self.typed = False  # the source was a CSV/JSON file, read with reader_types

    def reader_types(self, names: Sequence[str]) -> dict[str, str] | None:
        self.typed = True
        return reader_types(self.decl, names)

    def validate(self, columns: list[Column], rows: int) -> None:
        d = self.decl
        if isinstance(d.types, Mapping) and d.types and not self.typed:
            raise ValueError(f"types= declares how DuckDB reads a CSV or JSON source's "
                             f"columns; the source of {self.name!r} carries its own types "
                             f"(Parquet, a database table, a frame) or is read by Spark: cast "
                             f"in the source instead")
        if rows == 0:
            raise ValueError(f"the source for {self.name!r} has no rows; nothing to protect")
        self.columns = columns
        bounds, self.date_ranges = split_date_bounds(columns, d.bounds)
        self.valid = validate_declarations(
            name=self.name, columns=columns, privacy_unit=d.privacy_unit, public=d.public,
            bounds=bounds, max_rows_per_unit=self.max_rows,
            max_groups_per_unit=d.max_groups_per_unit, domains=d.domains,
        )
        self.not_null = validate_not_null(columns, d.not_null, public=d.public)

    def fixed(self) -> list[tuple[str, str]]:
        """The hidden columns: each row's unit total (the bounding fast path) and the clamped
        fixed-point integers for the bounds declared now (a reload with other bounds recomputes
        them; a query reads one only if its name, a hash of column + bounds, matches)."""
        if self.decl.public:
            return []
        unit, _, _, bounds, _ = self.valid
        types = {c.name: c for c in self.columns}
        out = []
        if unit is not None:
            out.append((dplan.unit_rows_column_name(unit),
                        f"COUNT(*) OVER (PARTITION BY {quote_ident(unit)})"))
        for col, (lo, hi) in bounds.items():
            out.append((dplan.fixed_column_name(col, lo, hi),
                        dplan.fixed_column_sql(quote_ident(col), lo, hi, types[col].cls)))
        return out

    def domains(self) -> list[tuple[str, str, tuple[Any, ...]]]:
        """Each declared domain, cast to its column's type and checked at load; a copied private
        table keeps it as a hidden key table named by a hash of the table, column, type and
        keys (a changed domain gets a new table, never a stale one)."""
        types = {c.name: c.type for c in self.columns}
        out = []
        for col, keys in self.valid[4].items():
            tname = domain_table_name(self.name, col, types[col], keys)
            self.key_tables[col] = tname
            out.append((col, tname, keys))
        return out


def load_declared(db_path: Path, name: str, source: Any, decl: Declarations, *,
                  progress: Any = None) -> TableMeta:
    """Load ``source`` as table ``name`` under ``decl`` into the project's DuckDB file and
    return its metadata (not yet recorded: the caller's ledger row puts it in force). A
    refused declaration or a failed load stores nothing that any table names."""
    job = _Load(name, decl)
    physical = f"{name}__v{_noise.token_hex(16)[:16]}"
    limit = None if decl.public or not decl.copy else decl.max_text_length
    columns, storage, relation = load_table(
        db_path, name, source, public=decl.public, copy=decl.copy,
        source_table=decl.source_table, validate=job.validate, fixed=job.fixed,
        domains=job.domains, not_null=lambda: job.not_null, progress=progress,
        physical=physical, text_limit=limit, column_types=job.reader_types,
    )
    unit, rows, groups, bounds, doms = job.valid
    return TableMeta(
        name=name, columns=tuple(columns), privacy_unit=unit, public=decl.public,
        max_rows_per_unit=rows, max_groups_per_unit=groups, bounds=bounds, domains=doms,
        date_ranges=job.date_ranges, storage=storage, source=describe_source(source),
        relation=relation,
        description=decl.description,
        key_tables=job.key_tables if storage == "copy" and not decl.public else {},
        not_null=job.not_null, physical=physical, max_text_length=limit,
    )


def load_declared_spark(db_path: Path, spark: Any, name: str, source: Any,
                        decl: Declarations, *, directory: Path) -> TableMeta:
    """Like :func:`load_declared`, for a table whose rows stay on Spark: the rows are copied
    to Parquet under ``directory`` (read by Spark at every query), DuckDB gets an empty table
    of the same columns (:func:`dpkit.engine.spark_load.load_spark_table`). No hidden
    columns: the clamped fixed-point values and unit totals are computed in each query, and
    declared domains are written into the statement (same values, see ``compile_sql``).
    A ``public`` lookup table is copied the same way (no row limit), joinable with the
    project's Spark tables only (a DuckDB table's query refuses it before the charge)."""
    if not decl.copy or decl.source_table is not None:
        raise ValueError(f"engine='spark' copies the rows to Parquet (copy=False and "
                         f"source_table= are for DuckDB tables); {name!r} not loaded")
    job = _Load(name, decl)
    physical = f"{name}__v{_noise.token_hex(16)[:16]}"
    limit = None if decl.public else decl.max_text_length
    columns, storage, relation = load_spark_table(
        db_path, spark, name, source, directory=directory, physical=physical,
        validate=job.validate, domains=job.domains, not_null=lambda: job.not_null,
        unit=None if decl.public else decl.privacy_unit, public=decl.public,
        max_text_length=limit)
    unit, rows, groups, bounds, doms = job.valid
    return TableMeta(
        name=name, columns=tuple(columns), privacy_unit=unit, public=decl.public,
        max_rows_per_unit=rows, max_groups_per_unit=groups, bounds=bounds, domains=doms,
        date_ranges=job.date_ranges, storage=storage, source=str(directory / physical),
        relation=relation,
        description=decl.description, key_tables={}, not_null=job.not_null, physical=physical,
        max_text_length=limit,
    )


def check_load(name: str, old: TableMeta | None, decl: Declarations, *, replace: bool,
               drop_privacy_unit: bool) -> None:
    """Refuse, before anything is loaded, a load the owner cannot mean: a view over a private
    table's file, a name taken without ``replace``, a bad text bound, and a ``replace`` that
    would silently drop the table's privacy unit (it reloads with the declarations given only:
    without ``privacy_unit`` each row would become its own unit, a weaker guarantee for anyone
    with several rows; found by the first hour's owner, who replaced a table to add bounds)."""
    if not decl.copy and not decl.public:
        raise ValueError(
            f"copy=False keeps a view that re-reads the file at every query, so a row "
            f"appended or changed after loading (or a malformed one) would change answers "
            f"and errors without the ledger knowing; private tables are always copied in. "
            f"Drop copy=False for {name!r} (public lookup tables may stay views)")
    if old is not None and not replace:
        raise ValueError(f"table {name!r} already exists; pass {REPLACE_ON} to load it again "
                         f"(its declarations are replaced too, and the change is recorded in "
                         f"the ledger)")
    n = decl.max_text_length
    if n is not None and not text_length_ok(n):
        raise ValueError(TEXT_LENGTH_ERROR.format(got=repr(n), none="None"))
    long = [c for c, keys in (decl.domains or {}).items() if n is not None and not decl.public
            and any(isinstance(k, str) and len(k) > n for k in keys)]
    if long:
        raise ValueError(f"the domain of {long[0]!r} has a key longer than max_text_length={n} "
                         f"characters: values are cut to that length at load, so it could "
                         f"never match; raise max_text_length or shorten the key")
    if drop_privacy_unit and decl.privacy_unit is not None:
        raise ValueError(f"{DROP_UNIT_ON} makes {name!r} record level, but "
                         f"privacy_unit={decl.privacy_unit!r} was given too: keep one")
    if (old is None or old.public or old.privacy_unit is None or decl.public
            or decl.privacy_unit is not None or drop_privacy_unit):
        return
    raise ValueError(
        f"table {name!r} is declared with privacy unit {old.privacy_unit!r} (at most "
        f"{old.max_rows_per_unit} rows per unit), and {REPLACE_ON} reloads it with the "
        f"declarations given only: without privacy_unit each row would become its own unit, a "
        f"weaker guarantee for anyone with several rows. Give privacy_unit="
        f"{old.privacy_unit!r} and max_rows_per_unit={old.max_rows_per_unit} again (and the "
        f"other declarations), or, to make each row its own unit on purpose, "
        f"{DROP_UNIT_ON}. Nothing was loaded")


@contextlib.contextmanager
def load_lock(lock_file: Path) -> Iterator[None]:
    """One table load per project at a time, across processes (a load's relation is an
    orphan until its ledger row commits: a concurrent cleanup must not drop it)."""
    with open(lock_file, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def tables_in_force(rows: Iterable[Entry]) -> dict[str, TableMeta]:
    """The tables the ledger's ``table`` rows declare, in order: a later row for a name
    replaces the earlier one, a ``dropped`` row removes it."""
    out: dict[str, TableMeta] = {}
    for e in rows:
        if e.payload.get("dropped"):
            out.pop(str(e.payload["name"]), None)
        else:
            meta = TableMeta.from_dict(e.payload["table"])
            out[meta.name] = meta
    return out
