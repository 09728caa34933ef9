"""Reading the rows: one compiled statement per query, prepared before the charge, run after.

:meth:`Reader.prepare` does everything that may fail without depending on a row, before the
ledger is charged: the public look-ups (declared keys, a record-level join's key uniqueness), the
compiled statement, and its dry run over empty tables of the same schema (DuckDB binds, casts
constants and type-checks there, on no row). :meth:`Reader.read` runs the statement after the
charge; its row conditions are total (:mod:`dpkit.engine.totality`), so it fails only for
reasons outside the data (memory, disk), and :mod:`dpkit.engine.charge` keeps the charge then.
The exact values (:class:`Exact`) never leave the engine: only :mod:`dpkit.engine.noisy` reads
them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import noise as _noise
from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import (
    DuckBackend,
    columnar_type,
    dry_run_errors,
    key_table_relation,
    table_relation,
)
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import quote_ident

__all__ = ["Exact", "Prepared", "Reader"]

_FEW_GROUPS = 256  # results with at most this many public keys are read as tuples, not Arrow


class Exact:
    """Exact aggregates straight from the backend (they never leave the engine).

    Built from rows (``keys``: one tuple of group values per group; ``cols``: one list per
    measurement column, NULL as None, as DuckDB's ``fetchall`` gives them) or from columns
    (``key_columns``: one object array of the same Python values per group column;
    ``columns``: int64 arrays with NULL read as 0, their NULL masks in ``nulls``, or lists).
    Either view is available from both; the release reads the columnar one (no Python object
    per group and measurement), ``keys``/``cols`` are built on first use.
    """

    def __init__(self, keys: list[tuple[Any, ...]] | None = None,
                 cols: dict[str, list[Any]] | None = None, *, rows: int | None = None,
                 key_columns: list[np.ndarray] | None = None,
                 columns: dict[str, Any] | None = None,
                 nulls: dict[str, np.ndarray | None] | None = None) -> None:
        if key_columns is None or columns is None:
            if keys is None or cols is None:
                raise ValueError("Exact needs keys and cols, or key_columns and columns")
            self._keys: list[tuple[Any, ...]] | None = keys
            self._cols: dict[str, list[Any]] | None = cols
            self.n_groups = len(keys)
            self._key_columns: list[np.ndarray] | None = None
            self._columns: dict[str, Any] = dict(cols)
            self._nulls: dict[str, np.ndarray | None] = {}
        else:
            self._keys = self._cols = None
            self.n_groups = int(rows if rows is not None else
                                (len(key_columns[0]) if key_columns else 1))
            self._key_columns = key_columns
            self._columns = columns
            self._nulls = dict(nulls or {})

    @property
    def keys(self) -> list[tuple[Any, ...]]:
        if self._keys is None:
            assert self._key_columns is not None
            if self._key_columns:
                self._keys = list(zip(*(c.tolist() for c in self._key_columns), strict=True))
            else:
                self._keys = [() for _ in range(self.n_groups)]
        return self._keys

    @property
    def cols(self) -> dict[str, list[Any]]:
        if self._cols is None:
            out: dict[str, list[Any]] = {}
            for name, col in self._columns.items():
                if isinstance(col, np.ndarray):
                    vals: list[Any] = col.tolist()
                    mask = self._nulls.get(name)
                    if mask is not None:
                        for i in np.flatnonzero(mask).tolist():
                            vals[i] = None
                    out[name] = vals
                else:
                    out[name] = list(col)
            self._cols = out
        return self._cols

    def key_column(self, index: int) -> np.ndarray:
        """Group column ``index`` as an object array of Python values."""
        if self._key_columns is not None:
            return self._key_columns[index]
        arr = np.empty(self.n_groups, dtype=object)
        arr[:] = [k[index] for k in self.keys]
        return arr

    def column(self, name: str) -> Any:
        """Measurement column ``name``: an int64 array (NULL as 0) or a list (NULL as None)."""
        return self._columns[name]


@dataclass(frozen=True)
class Prepared:
    """A query ready to read: its statement (and the join form it falls back to when Python
    cannot match DuckDB's key equality), the declared keys to fill, and how to fetch."""

    plan: dplan.Plan
    compiled: dplan.CompiledSQL
    fallback: Callable[[], dplan.CompiledSQL] | None
    declared: list[tuple[Any, ...]] | None
    columnar: bool


class Reader:
    """Prepares and runs a plan's statement against one backend (see the module docstring)."""

    def __init__(self, backend: DuckBackend, source: _noise.Source | None) -> None:
        self._backend = backend
        self._source = source
        # plans whose statements passed their dry run, with the tables version they ran at (a
        # plan object is cached per public input, so its identity stands for its statement;
        # the plan is kept so that its id cannot be reused)
        self._dry_ok: dict[int, tuple[dplan.Plan, int]] = {}
        self._keys_cache: dict[tuple[str, int], list[tuple[Any, ...]]] = {}

    def prepare(self, plan: dplan.Plan, tables_version: int) -> Prepared:
        """Everything before the charge (spends nothing; errors depend on public things only).

        ``tables_version`` keys the cache of declared keys (the ledger seq of the last table
        registration)."""
        relations = {name: table_relation(meta) for name, meta in plan.catalog.items()}
        if plan.table.record_level:
            self._check_join_keys(plan, relations)
        # a copied private table carries hidden columns and key tables from its load
        copied = plan.table.storage == "copy" and not plan.table.public
        fixed = self._backend.fixed_columns(plan.table.stored_name) if copied else frozenset()
        # declared domains stored as hidden key tables at load (copied private tables): read
        # the keys from them instead of inlining every key in the statement
        key_rel: dict[str, str] = {}
        if plan.table.key_tables and copied:
            have = self._backend.key_tables()
            key_rel = {col: key_table_relation(t) for col, t in plan.table.key_tables.items()
                       if t in have}
        # a few declared keys: DuckDB returns the groups present and Python fills in the
        # missing keys (the LEFT JOIN with the keys costs ~1 ms at any data size)
        collated = self._backend.collated_columns(plan.table.stored_name) if copied else frozenset()
        fill = dplan.can_fill_keys(plan, collated)

        def compile_with(rels: Mapping[str, str], keys: Mapping[str, str], seed: int,
                         fill_keys: bool) -> dplan.CompiledSQL:
            return dplan.compile_sql(plan, relations=dict(rels), seed=seed, fixed_columns=fixed,
                                     key_tables=keys, fill_keys=fill_keys)

        ran = self._dry_ok.get(id(plan))
        if ran is None or ran[0] is not plan or ran[1] != tables_version:
            used = {plan.table.name, *(j.table for j in plan.spec.joins)}
            shadow_rel = {n: self._backend.shadow(r) for n, r in relations.items()
                          if n in used or (plan.catalog[n].public and plan.group_mode == "public")}
            shadow_keys = {c: self._backend.shadow(r) for c, r in key_rel.items()}
            for variant in ((True, False) if fill else (False,)):
                with dry_run_errors("query"):
                    self._backend.dry_run(compile_with(shadow_rel, shadow_keys, 0, variant).text)
            if len(self._dry_ok) >= 256:
                self._dry_ok.clear()
            self._dry_ok[id(plan)] = (plan, tables_version)
        seed = int(_noise.uniform_int(2**63 - 1, 1, source=self._source)[0])
        compiled = compile_with(relations, key_rel, seed, fill)
        declared = None
        fallback: Callable[[], dplan.CompiledSQL] | None = None
        if compiled.keys_text is not None:
            declared = self._declared_keys(compiled.keys_text, tables_version)

            def fallback() -> dplan.CompiledSQL:  # the join form, compiled only when needed
                return compile_with(relations, key_rel, seed, False)
        # Arrow pays off with many groups; for a few, one fetchall of tuples is ~1 ms faster
        few = not plan.spec.group_by or (plan.keys is not None and len(plan.keys) <= _FEW_GROUPS)
        columnar = not few and all(columnar_type(k.type) for k in plan.spec.group_by)
        return Prepared(plan, compiled, fallback, declared, columnar)

    def read(self, r: Prepared) -> Exact:
        """The exact aggregates (after the charge; the statement is total)."""
        plan, compiled = r.plan, r.compiled
        if r.declared is not None:
            wanted, ng = set(r.declared), len(compiled.group_cols)
            rows, unmatched = self._backend.run_rows(
                compiled.text, keep=lambda row: tuple(row[:ng]) in wanted)
            # at user level DuckDB kept only rows with declared keys: a group Python cannot
            # match means DuckDB's equality is not Python's (a collation it was not told of);
            # dropping it would hinge a whole group on one row's spelling, so use the join
            if not unmatched or plan.table.record_level:
                filled, lists = dplan.fill_declared_keys(r.declared, rows,
                                                         len(compiled.measure_cols))
                return Exact(keys=filled,
                             cols=dict(zip(compiled.measure_cols, lists, strict=True)))
            assert r.fallback is not None
            compiled = r.fallback()
        if r.columnar:  # column by column (Arrow): no Python object per group and value
            try:
                n, key_cols, cols_np, nulls = self._backend.run_columns(
                    compiled.text, compiled.group_cols, compiled.measure_cols)
                return Exact(rows=n, key_columns=key_cols, columns=cols_np, nulls=nulls)
            except (OverflowError, ValueError):
                # a key Python's date/datetime cannot hold (DATE 'infinity', year 10000)
                # fails the Arrow conversion; the row read converts it as DuckDB does, so
                # whether the query fails never depends on one row's value
                pass
        keys, cols = self._backend.run(compiled.text, compiled.group_cols, compiled.measure_cols)
        return Exact(keys=keys, cols=cols)

    def _declared_keys(self, keys_text: str, version: int) -> list[tuple[Any, ...]]:
        """The declared keys a statement's key CTEs give, in DuckDB's order and types (public;
        cached until a table is registered again)."""
        keys = self._keys_cache.get((keys_text, version))
        if keys is None:
            keys = [tuple(r) for r in self._backend.query_public(keys_text)]
            if len(self._keys_cache) >= 64:
                self._keys_cache.clear()
            self._keys_cache[(keys_text, version)] = keys
        return keys

    def _check_join_keys(self, plan: dplan.Plan, relations: dict[str, str]) -> None:
        """Record-level tables: a public join must match each private row at most once."""
        for j in plan.spec.joins:
            cols = ", ".join(quote_ident(b) for _, b in j.on)
            rows = self._backend.query_public(
                f"SELECT COUNT(*) FROM (SELECT {cols} FROM {relations[j.table]} GROUP BY {cols} "
                f"HAVING COUNT(*) > 1)"
            )
            if rows[0][0]:
                raise QueryError(
                    f"public table {j.table!r} has repeated join keys ({cols}); a row of the "
                    f"record-level table {plan.table.name!r} would be counted several times. "
                    f"Make the keys unique, or declare a privacy unit"
                )
