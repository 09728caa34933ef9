"""Synthetic data over many columns: MST on the table's sparse histogram (any product size).

**What it protects.** The exact histogram over the columns' public grids is read *sparsely*
(one row per occupied cell: never the product domain), each privacy unit cut to
``max_rows_per_unit = m`` rows and values clamped / mapped to their declared keys, as for the
other families (:mod:`.plan`). :func:`dpkit.release.mst` then measures all 1-way marginals,
selects a spanning tree of 2-way marginals with the exponential mechanism and measures them, for
add/remove one privacy unit (every marginal moves by at most ``m`` in L1 and L2): ρ-zCDP with
``rho=`` (``epsilon=, delta=``: the largest ρ meeting (ε, δ)), ε-DP with ``epsilon=`` alone
(discrete Laplace). One event, charged once before any row is read by
:func:`dpkit.engine.families.run.run`; the records are post-processing.

Numeric columns are binned over their declared bounds (the grid of :mod:`.axes`) and each
record's value is drawn **uniformly within its cell** (:func:`values_in_cells`), not set to the
cell's midpoint, so that the synthetic column has no spikes the real one does not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit import noise as _noise
from dpkit.accounting import zcdp
from dpkit.engine.families.axes import Axis, categorical_axis
from dpkit.engine.families.job import Context, Job, SyntheticAsk, Target, new_job
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import TableMeta
from dpkit.release.mst import check_target, mst, mst_event

__all__ = ["mst_frame", "plan_mst", "values_in_cells"]


def _mst_privacy(job: Job) -> dict[str, float | None]:
    """MST's own budget argument: rho (zCDP; (ε, δ) converted), or epsilon (pure DP)."""
    p = job.family_privacy()  # (1 - share) of the target when diagnostics are measured
    if p["rho"] is not None:
        return {"rho": p["rho"]}
    assert p["epsilon"] is not None
    if p["delta"] is not None:
        return {"rho": zcdp.epsilon_to_rho(p["epsilon"], p["delta"])}
    return {"epsilon": p["epsilon"]}


def plan_mst(ctx: Context, meta: TableMeta, names: list[str], ask: SyntheticAsk,
             target: Target) -> Job:
    """The MST job: per-column grids (no product cap), the event, a sparse read."""
    if ask.k is not None:
        raise QueryError("k= applies to method='factorization' or 'mwem'; MST keeps the 1-way "
                         "marginals and a tree of 2-way marginals: leave k out")
    axes = [categorical_axis(meta, c, bins=ask.bins, bounds=ask.bounds) for c in names]
    text = f"SYNTHETIC {meta.name} ({', '.join(names)}) method=mst"
    job = new_job(ctx, "synthetic", meta, axes, ask, target, default_query=text,
                  where_alias=None)
    budget = _mst_privacy(job)
    label = _target_index(names, ask.target)
    try:
        shape = tuple(a.size for a in axes)
        job.event = mst_event(shape, contributions=job.contributions, **budget)
        check_target(shape, label)
    except (TypeError, ValueError) as exc:
        raise QueryError(f"{exc} (nothing charged)") from None
    job.details.update({"grid": [a.describe() for a in axes], "method": "mst",
                        "rows": ask.rows, "sparse": True, "mst_budget": budget,
                        "target": label})
    job.notes.append("grids: " + "; ".join(a.describe() for a in axes))
    return job


def _target_index(names: list[str], target: Any) -> int | None:
    if target is None:
        return None
    folded = [n.lower() for n in names]
    if not isinstance(target, str) or target.lower() not in folded or len(names) < 2:
        raise QueryError(f"target must be one of the requested columns {names} (and at least "
                         f"two columns) (got {target!r})")
    return folded.index(target.lower())


def values_in_cells(axis: Axis, idx: np.ndarray, source: Any) -> np.ndarray:
    """A value per record of cell indices ``idx``: the key of a categorical axis; on a numeric
    axis uniform within the cell (every integer of an integer cell equally likely; a continuous
    cell ``[a, b)`` uniformly). Post-processing: the uniform draws do not touch the data."""
    if axis.kind == "keys":
        keys = np.empty(axis.size, dtype=object)
        keys[:] = list(axis.keys)
        return keys[idx]
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64 if axis.kind == "int" else np.float64)
    e = axis.edges()
    lo, width = e[idx], e[idx + 1] - e[idx]
    u = _noise.uniform_float01(idx.size, source=source)
    if axis.kind == "int":
        return (lo + np.minimum(np.floor(u * width), width - 1)).astype(np.int64)
    return np.minimum(lo + u * width, e[idx + 1])


def mst_frame(ctx: Context, job: Job, x: np.ndarray) -> tuple[dict[str, np.ndarray],
                                                              list[str], float]:
    """The records of an MST job from its sparse histogram ``x`` (rows: cell indices, then
    the count), the notes, and MST's estimate of the number of rows."""
    d = len(job.axes)
    rel = mst(x[:, :d], x[:, d], tuple(a.size for a in job.axes), rows=job.details["rows"],
              contributions=job.contributions, target=job.details["target"],
              source=ctx.source, **job.details["mst_budget"])
    if rel.event != job.family_event:  # pragma: no cover - guards the planning
        raise RuntimeError("MST ran with another event than the one charged")
    records = rel.value
    frame = {a.column: values_in_cells(a, records[:, i], ctx.source)
             for i, a in enumerate(job.axes)}
    names = [a.column for a in job.axes]
    edges = ", ".join(f"{names[a]}-{names[b]}" for a, b in rel.details["edges"])
    t = job.details["target"]
    kind = "2-way" if t is None else f"3-way (with the target {names[t]})"
    notes = [*job.notes, f"MST: 1-way marginals of {d} columns and the tree of {kind} "
                         f"marginals {edges or '(none)'}; estimated "
                         f"{float(rel.details['total']):.1f} records"]
    return frame, notes, float(rel.details["total"])
