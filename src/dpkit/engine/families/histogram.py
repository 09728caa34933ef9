"""The exact histogram of a release job: one DuckDB statement, dry-run first, read after the charge.

The statement maps every row of the table (after the job's WHERE) to its cell on the job's
public grid (:meth:`~.axes.Axis.cell_sql`), drops rows in no cell, cuts each privacy unit to
``max_rows_per_unit`` rows (:func:`dpkit.engine.plan.bounding_ctes`, keyed by a fresh seed) and
counts rows per cell: a ``GROUP BY`` count, which Spark runs as DuckDB does. For a Spark table
(or ``Context.portable``) the bounding is the portable one
(:func:`dpkit.engine.plan.portable.bounding_ctes_portable`: the same rows kept in both
engines), and Spark analyses the statements before the charge (:func:`check_spark`).

Every expression in it is total (TRY_CAST, NULL tests before the clamps), so :func:`read`
fails only for reasons outside the data. The histogram never leaves the engine: only the noisy
answer built from it does.
"""

from __future__ import annotations

import numpy as np

from dpkit import noise as _noise
from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import DuckBackend, dry_run_errors, table_relation
from dpkit.engine.backend_spark import SPARK, check_on_spark
from dpkit.engine.families.job import Context, Job
from dpkit.engine.plan.portable import bounding_ctes_portable
from dpkit.engine.spec import PRIVATE_ALIAS
from dpkit.engine.tables import TableMeta, quote_ident

__all__ = ["check_spark", "diagnostics_statement", "dry_run", "is_portable", "read",
           "read_cells", "read_diagnostics", "statement"]


def _unit_totals(backend: DuckBackend, meta: TableMeta) -> str | None:
    """The hidden per-unit row-total column stored at load time, when there is one: units
    whose total is within the cap skip the bounding work (the output is unchanged)."""
    if meta.storage != "copy" or meta.privacy_unit is None:
        return None
    name = str(dplan.unit_rows_column_name(str(meta.privacy_unit)))
    return name if name in backend.fixed_columns(meta.stored_name) else None


def _ctes(backend: DuckBackend, job: Job, relation: str, *, seed: int,
          outside: bool = False, portable: bool = False) -> tuple[list[str], str, list[str]]:
    """The CTEs mapping rows to cells and bounding each unit: ``(ctes, bounded relation,
    cell columns)``. ``__src0``: every row (after WHERE) with its cells (and, ``outside``, the
    flag ``__x`` of :meth:`~.axes.Axis.outside_sql`); ``__src``: the rows in a cell."""
    meta = job.meta
    alias = quote_ident(PRIVATE_ALIAS)
    cnames = [f"__c{i}" for i in range(len(job.axes))]
    refs = [f"{alias}.{quote_ident(a.column)}" for a in job.axes]
    proj = [f"{a.cell_sql(r)} AS {c}" for a, r, c in zip(job.axes, refs, cnames, strict=True)]
    total_col = None
    if not meta.record_level:
        proj.insert(0, f"{alias}.{quote_ident(str(meta.privacy_unit))} AS __u")
        total_col = _unit_totals(backend, meta)
        if total_col is not None:
            proj.append(f"{alias}.{quote_ident(total_col)} AS __nt")
    if outside:
        proj.append("(" + " OR ".join(a.outside_sql(r) for a, r in zip(job.axes, refs,
                                                                       strict=True))
                    + ") AS __x")
    inner = (f"SELECT {', '.join(proj)} FROM {relation} AS {alias}"
             + (f" WHERE {job.where_sql}" if job.where_sql else ""))
    keep = " AND ".join(f"{c} IS NOT NULL" for c in cnames)
    ctes = [f"__src0 AS ({inner})", f"__src AS (SELECT * FROM __src0 WHERE {keep})"]
    current = "__src"
    if not meta.record_level and portable:
        unit_type = meta.column(str(meta.privacy_unit)).type
        bound, current = bounding_ctes_portable(
            current, [("__u", unit_type), *((c, "BIGINT") for c in cnames)], [],
            m=int(meta.max_rows_per_unit), seed=seed)
        ctes.extend(bound)
    elif not meta.record_level:
        bound, current = dplan.bounding_ctes(
            current, ["__u", *cnames], [], m=int(meta.max_rows_per_unit),
            seed_lit=f"CAST({seed} AS UBIGINT)",
            total_col="__nt" if total_col is not None else None)
        ctes.extend(bound)
    return ctes, current, cnames


def is_portable(ctx: Context, job: Job) -> bool:
    """Whether the job's statement is compiled portable (a Spark table, or the context asks)."""
    return job.meta.storage == SPARK or ctx.portable


def statement(backend: DuckBackend, job: Job, relation: str, *, seed: int,
              portable: bool = False) -> str:
    """The one statement computing the job's exact histogram over ``relation``
    (``portable``: the form Spark runs alike, :func:`is_portable`)."""
    ctes, current, cnames = _ctes(backend, job, relation, seed=seed, portable=portable)
    cols = ", ".join(cnames)
    return (f"WITH {', '.join(ctes)} SELECT {cols}, COUNT(*) AS __n FROM {current} "
            f"GROUP BY {cols}")


def diagnostics_statement(backend: DuckBackend, job: Job, relation: str) -> str:
    """The diagnostic counts besides the rows read (the histogram's total), one row: ``__d``
    rows the per-unit cap drops and ``__o`` rows outside the bounds/domains or NULL, each
    unit's term clipped at ``m`` (so each total moves by at most ``m`` when one unit is added
    or removed). One scan and one aggregate by unit, without the bounding's hashing: a unit
    drops ``max(c - m, 0)`` rows, ``c`` its rows in a cell (the cap keeps ``min(c, m)``)."""
    ctes, _, cnames = _ctes(backend, job, relation, seed=0, outside=True)
    if job.meta.record_level:
        return f"WITH {ctes[0]} SELECT 0 AS __d, COUNT(*) FILTER (WHERE __x) AS __o FROM __src0"
    m = int(job.meta.max_rows_per_unit)
    inside = " AND ".join(f"{c} IS NOT NULL" for c in cnames)
    # units whose stored total is within the cap drop nothing: only their outside rows count
    heavy = f"__nt > {m} OR __x" if _unit_totals(backend, job.meta) else "TRUE"
    return (f"WITH {ctes[0]}, __pu AS (SELECT COUNT(*) FILTER (WHERE {inside}) AS __ci, "
            f"COUNT(*) FILTER (WHERE __x) AS __co FROM __src0 WHERE {heavy} GROUP BY __u) "
            f"SELECT COALESCE(SUM(LEAST(GREATEST(__ci - {m}, 0), {m})), 0) AS __d, "
            f"COALESCE(SUM(LEAST(__co, {m})), 0) AS __o FROM __pu")


def read_diagnostics(ctx: Context, text: str, x: np.ndarray, *, sparse: bool) -> dict[str, int]:
    """The exact diagnostic counts: :func:`diagnostics_statement`'s and the rows read, the
    total of the exact histogram ``x`` (dense, or :func:`read_cells`' rows when ``sparse``).
    They never leave the engine: :mod:`.diagnostics` noises them."""
    _, out = ctx.backend.run(text, [], ["__d", "__o"])

    def first(c: str) -> int:
        vals = list(out[c])
        return int(vals[0]) if vals and vals[0] is not None else 0

    kept = int(x[:, -1].sum()) if sparse else int(x.sum())
    return {"rows_read": kept, "rows_dropped": first("__d"), "rows_outside": first("__o")}


def dry_run(ctx: Context, job: Job) -> None:
    """Run the statement over an empty table of the same schema: every error that does not
    depend on a row (types, casts, functions in WHERE) surfaces here, before the charge."""
    shadow = ctx.backend.shadow(table_relation(job.meta))
    with dry_run_errors("release"):
        ctx.backend.dry_run(statement(ctx.backend, job, shadow, seed=0,
                                      portable=is_portable(ctx, job)))
        if job.diag:
            ctx.backend.dry_run(diagnostics_statement(ctx.backend, job, shadow))


def check_spark(ctx: Context, job: Job, texts: list[str]) -> None:
    """Before the charge, for a Spark table: Spark analyses each statement (no row read), so
    that what Spark cannot run, or a stopped session, is refused with nothing charged."""
    check_on_spark(ctx.backend, job.meta, texts)


def read(ctx: Context, job: Job, text: str | None = None) -> np.ndarray:
    """The exact integer histogram over the job's product grid (never leaves the engine);
    ``text`` from :func:`statement` (default: a fresh seed, for tests)."""
    if text is None:
        seed = int(_noise.uniform_int(2**63 - 1, 1, source=ctx.source)[0])
        text = statement(ctx.backend, job, table_relation(job.meta), seed=seed,
                         portable=is_portable(ctx, job))
    cnames = [f"__c{i}" for i in range(len(job.axes))]
    keys, out = ctx.backend.run(text, cnames, ["__n"])
    shape = tuple(a.size for a in job.axes)
    x = np.zeros(shape, dtype=np.int64)
    for key, n in zip(keys, out["__n"], strict=True):
        x[tuple(int(k) for k in key)] += int(n)
    return x.reshape(-1)


def read_cells(ctx: Context, job: Job, text: str) -> np.ndarray:
    """The same exact histogram, sparse: int64 rows ``(cell index per axis ..., count)``, one
    per occupied cell, in the statement's order (for grids whose product is too large to hold;
    never leaves the engine)."""
    d = len(job.axes)
    cnames = [f"__c{i}" for i in range(d)]
    keys, out = ctx.backend.run(text, cnames, ["__n"])
    x = np.zeros((len(keys), d + 1), dtype=np.int64)
    if len(keys):
        x[:, :d] = np.asarray([tuple(k) for k in keys], dtype=np.int64).reshape(len(keys), d)
        x[:, d] = np.asarray(out["__n"], dtype=np.int64)
    return x
