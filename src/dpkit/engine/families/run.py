"""The one sequence every release family goes through (DESIGN invariant 3).

A planned :class:`~.job.Job` (public information only) → the budget check (a refusal spends
nothing and reads nothing) → the histogram statement's dry run over an empty table of the same
schema (errors from the query alone, before the charge) → :func:`dpkit.engine.charge.charged_read`:
the ledger durably charges the job's event, then the exact histogram is read and the family's
finisher adds the noise and builds the answer. A failure after the charge keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from dpkit import noise as _noise
from dpkit.accounting import BudgetExceeded
from dpkit.engine.backend_duckdb import table_relation
from dpkit.engine.charge import charged_read, quote
from dpkit.engine.families import diagnostics, histogram
from dpkit.engine.families.job import Context, Job, jsonable
from dpkit.engine.ledger import Entry

__all__ = ["Finish", "check_cost", "cost_of", "run"]

R = TypeVar("R")

#: turns the exact histogram of a charged job into its answer (noise + post-processing); the
#: last argument is the epsilon left to the analyst after the charge
Finish = Callable[[Context, Job, np.ndarray, Entry, float], R]


_ADVICE = "Use epsilon= (Laplace noise), or a project with an 'approx' or 'zcdp' accountant"


def _accountant_errors(ctx: Context, job: Job, *, check_only: bool) -> Any:
    return quote(ctx.ledger, job.event, analyst=ctx.analyst,
                 delta_share=job.privacy.delta_share, what="release", check_only=check_only,
                 advice=_ADVICE)


def check_cost(ctx: Context, job: Job) -> None:
    """Refuse (:class:`BudgetExceeded`, or a QueryError the accountant's) if ``job`` does not
    fit the analyst's budget now; writes nothing."""
    _accountant_errors(ctx, job, check_only=True)


def cost_of(ctx: Context, job: Job) -> Any:
    """What charging ``job`` now would cost, its ``epsilon`` and its ``delta`` as the ledger
    would record them (constant work's timing delta included; the requested cost when it
    does not fit)."""
    try:
        return _accountant_errors(ctx, job, check_only=False)
    except BudgetExceeded as exc:
        return exc.requested


def run(ctx: Context, job: Job, finish: Finish[R]) -> R:
    """Dry-run, charge, read, finish: the job's answer, charged once to the ledger (the budget
    check and the durable record are one transaction in :func:`charged_read`)."""
    with ctx.lock:
        histogram.dry_run(ctx, job)
        seed = int(_noise.uniform_int(2**63 - 1, 1, source=ctx.source)[0])
        text = histogram.statement(ctx.backend, job, table_relation(job.meta), seed=seed,
                                   portable=histogram.is_portable(ctx, job))
        diag_text = (histogram.diagnostics_statement(ctx.backend, job, table_relation(job.meta))
                     if job.diag else None)
        # a Spark table: Spark analyses both statements now, before the charge
        histogram.check_spark(ctx, job, [t for t in (text, diag_text) if t is not None])
        details = {k: v for k, v in job.details.items() if k != "workload"}
        details.update({"kind": job.kind, "level": job.level, "table": job.meta.name,
                        "contributions": job.contributions})

        exact_diag: dict[str, int] = {}

        def read() -> np.ndarray:
            sparse = bool(job.details.get("sparse"))  # MST: no product-domain array
            x = (histogram.read_cells(ctx, job, text) if sparse
                 else histogram.read(ctx, job, text))
            if diag_text is not None:
                exact_diag.update(histogram.read_diagnostics(ctx, diag_text, x, sparse=sparse))
            return x

        def done(x: np.ndarray, entry: Entry) -> R:
            res = finish(ctx, job, x, entry, ctx.remaining())
            if job.diag:
                diagnostics.attach(res, job.diag, exact_diag, level=job.level,
                                   m=job.contributions, source=ctx.source)
            return res

        return charged_read(ctx.ledger, job.event, analyst=ctx.analyst, query=job.query,
                            delta_share=job.privacy.delta_share, details=jsonable(details),
                            read=read, finish=done, what="release", advice=_ADVICE)
