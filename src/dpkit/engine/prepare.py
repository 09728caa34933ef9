"""Everything before the charge: one compiled statement per query, dry-run on no row.

:meth:`Preparer.prepare` does everything that may fail without depending on a row, before the
ledger is charged: the public look-ups (declared keys, a record-level join's key uniqueness), the
compiled statement, and its dry run over empty tables of the same schema (DuckDB binds, casts
constants and type-checks there, on no row). What it returns (:class:`dpkit.engine.read.Prepared`)
is read after the charge by :func:`dpkit.engine.read.read_exact`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dpkit import noise as _noise
from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import (
    DuckBackend,
    columnar_type,
    dry_run_errors,
    key_table_relation,
    table_relation,
)
from dpkit.engine.backend_spark import SPARK, SparkBackend
from dpkit.engine.read import Prepared
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import quote_ident

__all__ = ["Preparer"]

_FEW_GROUPS = 256  # results with at most this many public keys are read as tuples, not Arrow


class Preparer:
    """Prepares a plan's statement against one backend (see the module docstring)."""

    def __init__(self, backend: DuckBackend, source: _noise.Source | None) -> None:
        self._backend = backend
        self._source = source
        # plans whose statements passed their dry run, with the tables version they ran at (a
        # plan object is cached per public input, so its identity stands for its statement;
        # the plan is kept so that its id cannot be reused)
        self._dry_ok: dict[int, tuple[dplan.Plan, int]] = {}
        self._keys_cache: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
        self._unique_cache: dict[str, bool] = {}  # Spark public tables' join-key checks
        self._public_keys_cache: dict[tuple[str, int], list[tuple[Any, ...]] | None] = {}
        # compile DuckDB tables' statements in the portable form too (tests and benchmarks
        # that compare the engines: the same rows kept, the same exact values)
        self.portable = False

    def prepare(self, plan: dplan.Plan, tables_version: int) -> Prepared:
        """Everything before the charge (spends nothing; errors depend on public things only).

        ``tables_version`` keys the cache of declared keys (the ledger seq of the last table
        registration)."""
        relations = {name: table_relation(meta) for name, meta in plan.catalog.items()}
        portable = self._spark_table(plan)
        if portable and isinstance(self._backend, SparkBackend):
            # Spark views first: the public look-ups below read a Spark public table on Spark
            self._backend.register({n: plan.catalog[n] for n in
                                    (plan.table.name, *(j.table for j in plan.spec.joins))})
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
        # a Spark table grouped by a public table's column: its keys are read once on the
        # driver too (by Spark, from the view the statement joins), not joined in Spark
        # (a DISTINCT over the lookup, a join and a sort: stages per query; docs/scale.md)
        spark = (self._backend if isinstance(self._backend, SparkBackend)
                 and plan.table.storage == SPARK else None)
        public_fill = (not fill and spark is not None
                       and dplan.can_fill_keys(plan, collated, public=True))

        def compile_with(rels: Mapping[str, str], keys: Mapping[str, str], seed: int,
                         fill_keys: bool) -> dplan.CompiledSQL:
            return dplan.compile_sql(plan, relations=dict(rels), seed=seed, fixed_columns=fixed,
                                     key_tables=keys, fill_keys=fill_keys, portable=portable)

        ran = self._dry_ok.get(id(plan))
        if ran is None or ran[0] is not plan or ran[1] != tables_version:
            used = {plan.table.name, *(j.table for j in plan.spec.joins)}
            shadow_rel = {n: self._backend.shadow(r) for n, r in relations.items()
                          if n in used or (plan.catalog[n].public and plan.group_mode == "public")}
            shadow_keys = {c: self._backend.shadow(r) for c, r in key_rel.items()}
            for variant in ((True, False) if fill or public_fill else (False,)):
                with dry_run_errors("query"):
                    self._backend.dry_run(compile_with(shadow_rel, shadow_keys, 0, variant).text)
            if len(self._dry_ok) >= 256:
                self._dry_ok.clear()
            self._dry_ok[id(plan)] = (plan, tables_version)
        seed = int(_noise.uniform_int(2**63 - 1, 1, source=self._source)[0])
        compiled = compile_with(relations, key_rel, seed, fill or public_fill)
        declared = None
        if spark is not None and public_fill and compiled.keys_text is not None:
            declared = self._public_keys(spark, compiled.keys_text, tables_version)
            if declared is None:  # too many keys: the statement joins them in Spark
                compiled = compile_with(relations, key_rel, seed, False)
        if spark is not None:
            # Spark analyses the real statement too (no row read), before the charge
            spark.check(compiled.text, plan.catalog)
        fallback: Callable[[], dplan.CompiledSQL] | None = None
        if compiled.keys_text is not None:
            if declared is None:
                declared = self._declared_keys(compiled.keys_text, tables_version)

            def fallback() -> dplan.CompiledSQL:  # the join form, compiled only when needed
                return compile_with(relations, key_rel, seed, False)
        # Arrow pays off with many groups; for a few, one fetchall of tuples is ~1 ms faster
        few = not plan.spec.group_by or (plan.keys is not None and len(plan.keys) <= _FEW_GROUPS)
        columnar = not few and all(columnar_type(k.type) for k in plan.spec.group_by)
        # a group whose public-table key is NULL is one the key join drops, not a mismatch
        open_keys = tuple(i for i, (kind, _) in enumerate(plan.key_sources) if kind == "public")
        return Prepared(plan, compiled, fallback, declared, columnar, open_keys)

    def _spark_table(self, plan: dplan.Plan) -> bool:
        """Whether the plan reads a Spark table (its public JOINs are shipped to Spark: see
        :meth:`dpkit.engine.backend_spark.SparkBackend.to_spark`)."""
        if plan.table.storage != SPARK:  # a Spark public table joined to it: refused in scope
            return self.portable
        if not isinstance(self._backend, SparkBackend):
            raise QueryError(f"table {plan.table.name!r} is on Spark; open the project with "
                             f"a Spark session: Curator.open(path, spark=session)")
        return True

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

    def _public_keys(self, spark: SparkBackend, keys_text: str,
                     version: int) -> list[tuple[Any, ...]] | None:
        """The public keys of a Spark plan's key CTEs, read by Spark (public; cached until a
        table is registered again); None above ``PUBLIC_KEYS_MAX`` keys."""
        if (keys_text, version) not in self._public_keys_cache:
            if len(self._public_keys_cache) >= 64:
                self._public_keys_cache.clear()
            self._public_keys_cache[(keys_text, version)] = spark.query_keys(keys_text)
        return self._public_keys_cache[(keys_text, version)]

    def _check_join_keys(self, plan: dplan.Plan, relations: dict[str, str]) -> None:
        """Record-level tables: a public join must match each private row at most once."""
        for j in plan.spec.joins:
            cols = ", ".join(quote_ident(b) for _, b in j.on)
            text = (f"SELECT COUNT(*) FROM (SELECT {cols} FROM {relations[j.table]} GROUP BY "
                    f"{cols} HAVING COUNT(*) > 1)")
            # a public table on Spark is a Parquet copy that no later load changes (a reload
            # is a new relation, so a new text): its answer is kept (a Spark job per query
            # otherwise); DuckDB's are cheap, and a copy=False view may change
            repeated = self._unique_cache.get(text)
            if repeated is None:
                repeated = bool(self._backend.query_public(text)[0][0])
                if plan.catalog[j.table].storage == SPARK:
                    if len(self._unique_cache) >= 256:
                        self._unique_cache.clear()
                    self._unique_cache[text] = repeated
            if repeated:
                raise QueryError(
                    f"public table {j.table!r} has repeated join keys ({cols}); a row of the "
                    f"record-level table {plan.table.name!r} would be counted several times. "
                    f"Make the keys unique, or declare a privacy unit"
                )
