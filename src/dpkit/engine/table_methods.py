"""The curator's tables: registering them (the owner's job), reading their declarations.

:class:`TableMethods` holds the project's state that every curator method reads (set by
:class:`~dpkit.engine.curator.Curator`'s constructor) and the table methods over it: ``tables``,
``add_table`` (rows copied into DuckDB or Parquet for Spark, declarations recorded in the
ledger), ``drop_orphans``, ``add_public_table`` and the query builder ``table``. Registering
spends nothing, except ``max_rows_per_unit="auto"`` (:mod:`dpkit.engine.bounds`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpkit import noise as _noise
from dpkit.engine import bounds as dbounds
from dpkit.engine import sql as dsql
from dpkit.engine.backend_duckdb import DuckBackend, drop_orphans
from dpkit.engine.backend_spark import (
    SPARK,
    SparkBackend,
    check_engine,
    check_on_spark,
    drop_spark_orphans,
)
from dpkit.engine.duckdb_sources import check_type_names
from dpkit.engine.ledger import Ledger
from dpkit.engine.load import (
    MAX_TEXT_LENGTH,
    Declarations,
    check_load,
    load_declared,
    load_declared_spark,
    load_lock,
    tables_in_force,
)
from dpkit.engine.prepare import Preparer
from dpkit.engine.project import DATA_FILE, LOAD_LOCK
from dpkit.engine.tables import TableMeta, check_identifier, file_source

__all__ = ["TableMethods"]


class TableMethods:
    """The tables of a project, as methods of :class:`dpkit.engine.Curator`."""

    # the project's state, set by Curator.__init__ (the query methods and the curator share it)
    path: Path
    ledger: Ledger
    analyst: str
    is_owner: bool
    _source: _noise.Source | None
    _lock: threading.RLock
    _tables_cache: tuple[int, dict[str, TableMeta]] | None
    _engine: str
    _backend: DuckBackend
    _preparer: Preparer

    def _require_owner(self, action: str) -> None:
        if not self.is_owner:
            raise PermissionError(
                f"{action} needs the owner's credential; analyst {self.analyst!r} (opened with "
                f"a token) cannot do it. The owner opens the project without a token, from an "
                f"account that can read its files. Nothing was changed"
            )

    def tables(self) -> dict[str, TableMeta]:
        """The registered tables and their (public) declarations."""
        rows = self.ledger.entries("table")
        key = rows[-1].seq if rows else 0
        if self._tables_cache is None or self._tables_cache[0] != key:
            self._tables_cache = (key, tables_in_force(rows))
        return dict(self._tables_cache[1])

    def add_table(
        self,
        name: str,
        source: Any,
        *,
        privacy_unit: str | None = None,
        bounds: Mapping[str, Any] | None = None,
        max_rows_per_unit: int | str | None = None,
        max_groups_per_unit: int | None = None,
        domains: Mapping[str, Any] | None = None,
        not_null: Any = None,
        public: bool = False,
        copy: bool = True,
        source_table: str | None = None,
        replace: bool = False,
        description: str = "",
        progress: Any = None,
        rows_epsilon: float = dbounds.AUTO_ROWS_EPSILON,
        engine: str | None = None,
        max_text_length: int | None = MAX_TEXT_LENGTH,
        drop_privacy_unit: bool = False,
        types: Mapping[str, str] | str | None = None,
        source_format: str | None = None,
        column_names: Sequence[str] | None = None,
    ) -> TableMeta:
        """Register a table (the data owner's job); spends nothing, except ``"auto"``.

        ``source``: a CSV / Parquet / JSON / DuckDB path (or a folder of CSV / Parquet / JSON
        files named for their format, ``visits.parquet/``), a pandas or polars DataFrame, a
        pyarrow Table or a DuckDB relation. ``privacy_unit``: the column naming one person
        (None: record level). ``max_rows_per_unit``: rows one unit may contribute to a query,
        required with a ``privacy_unit``: a number you know, or ``"auto"`` (chosen privately,
        charged ``rows_epsilon``: :mod:`dpkit.engine.bounds`). ``bounds={"age": (0, 120)}``:
        clamps. ``domains={"ward": ["A", "B"]}``: public keys. ``not_null=["age"]``: columns
        checked to hold no NULL/NaN. ``public=True``: a lookup table (``copy=False``: a view).
        ``progress(step, fraction)``: called during the load. ``engine="spark"``: the rows
        stay on Spark (a Spark DataFrame or a Parquet/CSV path; default: the project's engine;
        docs/scale.md). ``max_text_length``: a private copy's text values are cut to this many
        characters (None: not cut; public in the declarations). ``replace=True`` keeps a
        privacy unit unless it is given again or ``drop_privacy_unit=True`` says to drop it.
        ``types={"code": "VARCHAR", "year": "INTEGER"}``: how a CSV/JSON source's columns are
        read (a private table's other columns: DOUBLE with bounds, the domain keys' type, else
        VARCHAR, never the types its rows suggest; ``types="infer"``: DuckDB's sniffer, whose
        types follow the data and are released to analysts).
        ``source_format="csv"`` (or parquet, json): a path whose name does not say it
        (``adult.data.gz``); ``column_names=[...]``: a CSV without a header line, its columns
        in order. Details: docs/curator.md.
        """
        spark = check_engine(engine or self._engine) == SPARK
        source = file_source(source, source_format, column_names, spark=spark)
        check_identifier(name, "table")
        self._require_owner("adding, replacing or declaring a table")
        auto = dbounds.check_rows_declaration(privacy_unit, max_rows_per_unit, public=public,
                                              name=name, epsilon=rows_epsilon)
        decl = Declarations(privacy_unit=privacy_unit, bounds=bounds,
                            max_rows_per_unit=None if isinstance(max_rows_per_unit, str)
                            else max_rows_per_unit,
                            max_groups_per_unit=max_groups_per_unit, domains=domains,
                            not_null=not_null, public=public, copy=copy,
                            source_table=source_table, description=description,
                            max_text_length=max_text_length, types=check_type_names(types))
        with self._lock, load_lock(self.path / LOAD_LOCK):
            check_load(name, self.tables().get(name), decl, replace=replace,
                       drop_privacy_unit=drop_privacy_unit)
            self._backend.close()  # DuckDB: one writer, no readers attached meanwhile
            if spark:
                meta = self._add_spark_table(name, source, decl)
            else:
                meta = load_declared(
                    self.path / DATA_FILE, name, source, decl, progress=progress)
            if auto:  # charged before the declaration that publishes it is recorded
                check = (None if meta.storage != SPARK else  # Spark analyses it first
                         lambda text: check_on_spark(self._backend, meta, [text]))
                meta = dbounds.with_auto_rows(self.ledger, self._backend.query_public, meta,
                                              analyst=self.analyst, epsilon=rows_epsilon,
                                              source=self._source, check=check)
            self.ledger.record("table", {"name": name, "table": meta.to_dict()},
                               analyst=self.analyst,
                               query=f"ADD TABLE {name} ({meta.summary()})")
            self._drop_orphans_locked()
            return meta

    def _add_spark_table(self, name: str, source: Any, decl: Declarations) -> TableMeta:
        """Rows to Parquet under ``$DPKIT_SPARK_DIR`` (default ``<project>/spark``: on a
        cluster, a path every executor reads), read by Spark at every query."""
        if not isinstance(self._backend, SparkBackend):  # the first Spark table
            self._backend = SparkBackend(self.path / DATA_FILE)
            self._preparer = Preparer(self._backend, self._source)
        directory = Path(os.environ.get("DPKIT_SPARK_DIR") or self.path / "spark")
        return load_declared_spark(self.path / DATA_FILE, self._backend.session(), name,
                                   source, decl, directory=directory)

    def drop_orphans(self) -> list[str]:
        """Drop stored relations no table in force names (the old rows of a replaced table, or
        the new rows of a load that crashed before its ledger row); owner only. Best effort:
        returns [] while another process reads the data (the next load retries)."""
        self._require_owner("cleaning up the project's data")
        with self._lock, load_lock(self.path / LOAD_LOCK):
            return self._drop_orphans_locked()

    def _drop_orphans_locked(self) -> list[str]:
        with self._lock:  # the caller holds the load lock (flock is per open file: not again)
            tables = self.tables()
            keep = {(m.public, m.stored_name) for m in tables.values()}
            keys = {k for m in tables.values() for k in m.key_tables.values()}
            copies = {n for m in tables.values() if m.storage == SPARK
                      for n in (m.stored_name, Path(str(m.source)).name)}
            gone = drop_spark_orphans(self.path / "spark", copies)
            self._backend.close()
            try:
                return gone + drop_orphans(self.path / DATA_FILE, keep, keys)
            except RuntimeError:
                return gone

    def add_public_table(self, name: str, source: Any, **kwargs: Any) -> TableMeta:
        """Register a public lookup table (no privacy; may be joined and used as group keys)."""
        return self.add_table(name, source, public=True, **kwargs)

    def table(self, name: str) -> Any:
        """A Python query builder over ``name`` (compiles to the same SQL path)."""
        from dpkit.engine.builder import QueryBuilder

        if name not in self.tables():
            raise dsql.QueryError(
                f"unknown table {name!r}; registered tables: {', '.join(sorted(self.tables()))}"
            )
        return QueryBuilder(self, name)

    def _tables_version(self) -> int:
        """The ledger seq of the last table registration read (-1 before any read)."""
        return self._tables_cache[0] if self._tables_cache is not None else -1
