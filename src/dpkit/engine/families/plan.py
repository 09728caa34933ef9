"""Planning each release family: an ask and a privacy target → a :class:`~.job.Job`.

**Privacy semantics.** Neighbouring relation: add or remove one privacy unit together with all
its rows (record level: one row). Before counting, each unit's rows are cut to at most
``m = max_rows_per_unit`` (:func:`dpkit.engine.plan.bounding_ctes`: a keyed hash chooses them,
a stable transformation), every value is clamped into the declared bounds (or mapped to its key
in a declared domain; NULL, NaN and keys outside the domain are not counted) and falls into
exactly one cell of a *public* grid (:mod:`.axes`). One unit therefore moves the integer
histogram ``x`` by at most ``m`` in L1 norm and at most ``m`` in L2 norm (``sqrt(m)`` if its rows
fall in distinct cells; ``m`` bounds both). The histogram is released through a strategy ``M``
with exact integer noise calibrated to ``m·Δ₁(M)`` (ε-DP, discrete Laplace) or ``m·Δ₂(M)``
(ρ-zCDP, discrete Gaussian); everything after the noise is post-processing
(:mod:`dpkit.release.mechanism`). MWEM synthetic data: :func:`dpkit.release.mwem_event`.

Everything here reads public information only (declarations, the ask): grid, workload, strategy,
noise and event are fixed before :mod:`.run` checks the budget and reads a row.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpkit.accounting import zcdp
from dpkit.engine.accuracy import epsilon_for_accuracy
from dpkit.engine.families.axes import (
    MAX_PRODUCT_CELLS,
    Axis,
    categorical_axis,
    column_of,
    ordered_axis,
    product_axes,
)
from dpkit.engine.families.diagnostics import compose, plan_counts
from dpkit.engine.families.job import (
    OPTIMIZE_CELLS,
    Ask,
    CdfAsk,
    Context,
    Job,
    MarginalsAsk,
    RangesAsk,
    SyntheticAsk,
    Target,
    jsonable,
    new_job,
    table_meta,
)
from dpkit.engine.families.synthetic_mst import plan_mst
from dpkit.engine.spec import DIAGNOSTICS_OFF, QueryError
from dpkit.engine.tables import TableMeta
from dpkit.release import mwem_event, plan_workload, workloads
from dpkit.release.quantiles import band_level
from dpkit.release.workloads import Workload

__all__ = ["MAX_RANGES", "band_halfwidth", "plan", "plan_with_accuracy"]

MAX_RANGES = 10_000


def plan(ctx: Context, ask: Ask, target: Target) -> Job:
    """The job for ``ask`` at ``target``: grid, workload, strategy and event (no row read)."""
    if isinstance(ask, RangesAsk):
        job = _plan_ranges(ctx, ask, target)
    elif isinstance(ask, CdfAsk):
        job = _plan_cdf(ctx, ask, target)
    elif isinstance(ask, MarginalsAsk):
        job = _plan_marginals(ctx, ask, target)
    elif isinstance(ask, SyntheticAsk):
        job = _plan_synthetic(ctx, ask, target)
    else:  # pragma: no cover
        raise TypeError(f"not a release family: {ask!r}")
    return _with_diagnostics(job)


def _with_diagnostics(job: Job) -> Job:
    """Add the diagnostic counts (:mod:`.diagnostics`) to a job planned at ``(1 - share)`` of
    its target: the job's event becomes the composition, so one charge pays for both."""
    job.family_event = job.event
    job.details["diagnostics_share"] = job.diag_share
    if not job.diag_share:
        return job
    try:
        job.diag = plan_counts(job.privacy, m=job.contributions,
                               record_level=job.meta.record_level)
    except (TypeError, ValueError) as exc:
        raise QueryError(f"{exc} (nothing charged; {DIAGNOSTICS_OFF} gives the release the "
                         f"whole budget)") from None
    job.event = compose(job.event, job.diag)
    return job


def band_halfwidth(job: Job) -> float | None:
    """The largest CI half-width of ``job`` (of the simultaneous band, for CDFs and quantiles),
    or None when the strategy cannot say it without the data."""
    wp = job.workload_plan()
    lvl = job.level
    if job.kind in ("cdf", "quantiles"):
        lvl = band_level(job.level, wp.workload.domain_size)
    half = wp.halfwidths(lvl)
    return None if half is None else float(np.max(half))


def plan_with_accuracy(ctx: Context, ask: Ask, target: Target, accuracy: object) -> Job:
    """:func:`plan` at ``target``, or with ``accuracy=``: the plan at the smallest epsilon whose
    largest CI half-width (the band's, for CDFs) is at most ``accuracy`` (data-independent:
    found from the plans alone; ``delta`` given: Gaussian noise at (epsilon, delta))."""
    if accuracy is None:
        return plan(ctx, ask, target)
    if target.epsilon is not None or target.rho is not None:
        raise QueryError("give epsilon= (or rho=) or accuracy=, not both")
    if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not (
        math.isfinite(accuracy) and accuracy > 0
    ):
        raise QueryError(
            f"accuracy must be a number > 0: the largest CI half-width wanted (got "
            f"{accuracy!r})")
    wanted = float(accuracy)

    def band_at(eps: float) -> list[dict[str, Any]]:
        half = band_halfwidth(plan(ctx, ask, Target(epsilon=eps, delta=target.delta)))
        if half is None:
            raise QueryError("accuracy= needs at most 8192 cells; give epsilon=")
        return [{"name": "band", "halfwidth": half, "note": "the largest CI half-width"}]

    eps = epsilon_for_accuracy(band_at, wanted)
    best = plan(ctx, ask, Target(epsilon=eps, delta=target.delta))
    best.notes.append(f"accuracy {wanted:g}: epsilon {eps:.4g} is the smallest (to 0.01%) "
                      f"whose largest CI half-width meets it")
    return best


def _attach_plan(ctx: Context, job: Job, workload: Workload, strategy: Any) -> None:
    try:
        wp = plan_workload(workload, strategy, contributions=job.contributions,
                           cache_dir=ctx.strategy_cache, **job.family_privacy())
    except (TypeError, ValueError) as exc:
        raise QueryError(f"{exc} (nothing charged)") from None
    job.plan = wp
    job.event = wp.event
    job.details["release"] = jsonable(wp.summary())


def _plan_ranges(ctx: Context, ask: RangesAsk, target: Target) -> Job:
    meta = table_meta(ctx, ask.table)
    axis = ordered_axis(meta, ask.column, bins=ask.bins, bounds=ask.bounds)
    pairs = _check_ranges(ask.ranges, axis)
    cells_lo, cells_hi, snapped = _snap(pairs, axis)
    text = (f"SELECT DP_RANGES({axis.column}, "
            + ", ".join(f"({a:g}, {b:g})" for a, b in pairs)
            + f") FROM {meta.name}")
    job = new_job(ctx, "ranges", meta, [axis], ask, target, default_query=text,
                  where_alias=ask.where_alias)
    cell_map, n_seg = _segments(cells_lo, cells_hi, axis.size)
    W = workloads.ranges(list(zip(cell_map[cells_lo].tolist(), cell_map[cells_hi].tolist(),
                                  strict=True)), n_seg)
    strategy = ask.strategy
    if strategy is None and n_seg > OPTIMIZE_CELLS:
        strategy = "tree"
    _attach_plan(ctx, job, W, strategy)
    job.cell_map = cell_map
    edges = axis.edges()
    job.details.update({"grid": axis.describe(), "segments": n_seg,
                        "requested": [list(p) for p in pairs]})
    job.details["low"] = [float(edges[a]) for a in cells_lo]
    job.details["high"] = [float(edges[b + 1] - 1) if axis.kind == "int"
                           else float(edges[b + 1]) for b in cells_hi]
    job.notes.append(f"grid {axis.describe()}; the {len(pairs)} ranges need {n_seg} "
                     f"segments (public domain reduction)")
    if snapped:
        job.notes.append(
            f"range ends snapped to the nearest cell edges ({snapped} of {len(pairs)} "
            f"ranges changed): the low/high columns are the ranges actually counted"
            + (" ([low, high), the last cell closed)" if axis.kind == "float" else ""))
    return job


def _segments(cells_lo: np.ndarray, cells_hi: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Public domain reduction: only the segments between range ends matter. Returns the map
    grid cell → segment (-1: a cell no range covers) and the number of segments."""
    brk = np.unique(np.concatenate([cells_lo, cells_hi + 1]))
    seg_of_cell = np.searchsorted(brk, np.arange(size), side="right") - 1
    covered = np.zeros(brk.size, dtype=bool)
    for a, b in zip(cells_lo, cells_hi, strict=True):
        covered[seg_of_cell[a]: seg_of_cell[b] + 1] = True
    seg_index = np.cumsum(covered) - 1
    cell_map = np.where((seg_of_cell >= 0) & covered[np.clip(seg_of_cell, 0, None)],
                        seg_index[np.clip(seg_of_cell, 0, None)], -1)
    return cell_map, int(covered.sum())


def _plan_cdf(ctx: Context, ask: CdfAsk, target: Target) -> Job:
    meta = table_meta(ctx, ask.table)
    axis = ordered_axis(meta, ask.column, bins=ask.bins, bounds=ask.bounds, grid=ask.grid)
    probs = _check_probabilities(ask.probabilities)
    if probs is None:
        text = f"SELECT DP_CDF({axis.column}) FROM {meta.name}"
    else:
        text = (f"SELECT DP_QUANTILES({axis.column}, {', '.join(f'{p:g}' for p in probs)}) "
                f"FROM {meta.name}")
    job = new_job(ctx, "quantiles" if probs else "cdf", meta, [axis], ask, target,
                  default_query=text, where_alias=ask.where_alias)
    strategy = ask.strategy
    if strategy is None and axis.size > OPTIMIZE_CELLS:
        strategy = "tree"
    _attach_plan(ctx, job, workloads.prefix(axis.size), strategy)
    job.details.update({"grid": axis.describe()})
    if probs is not None:
        job.details["probabilities"] = probs
    job.notes.append(f"grid {axis.describe()}; band simultaneous over all {axis.size} "
                     f"prefixes at level {job.level:g}")
    return job


def _check_probabilities(probabilities: Any) -> list[float] | None:
    if probabilities is None:
        return None
    try:
        probs = [float(p) for p in probabilities]
    except (TypeError, ValueError):
        raise QueryError(
            f"probabilities must be numbers in [0, 1] (got {probabilities!r})") from None
    if not probs or any(not (0.0 <= p <= 1.0) for p in probs):
        raise QueryError(f"probabilities must be numbers in [0, 1] (got {probabilities!r})")
    return probs


def _plan_marginals(ctx: Context, ask: MarginalsAsk, target: Target) -> Job:
    meta = table_meta(ctx, ask.table)
    names, sets = _marginal_sets(meta, ask.columns, ask.k)
    axes, cells = product_axes(meta, names, bins=ask.bins, bounds=ask.bounds)
    text = (f"SELECT DP_MARGINALS({', '.join(names)}"
            + (f", {ask.k}" if ask.k is not None else "") + f") FROM {meta.name}")
    if ask.query is None and ask.k is None and any(len(s) != len(sets[0]) for s in sets):
        text = (f"MARGINALS {meta.name} "
                + "; ".join(" x ".join(names[i] for i in s) for s in sets))
    job = new_job(ctx, "marginals", meta, axes, ask, target, default_query=text,
                  where_alias=ask.where_alias)
    W = workloads.marginals(tuple(a.size for a in axes), sets)
    strategy = ask.strategy
    if strategy is None and cells > OPTIMIZE_CELLS:
        strategy = "identity"
    _attach_plan(ctx, job, W, strategy)
    job.details.update({"grid": [a.describe() for a in axes],
                        "marginals": [[names[i] for i in s] for s in sets]})
    job.notes.append("grids: " + "; ".join(a.describe() for a in axes))
    return job


def _synthetic_columns(ask: SyntheticAsk) -> list[str]:
    columns = ask.columns
    if isinstance(columns, str):
        columns = [c.strip() for c in columns.split(",") if c.strip()]
    cols = list(columns or [])
    if not cols or not all(isinstance(c, str) for c in cols):
        raise QueryError("columns must be a list of column names, e.g. ['ward', 'age']")
    return cols


def _synthetic_method(meta: TableMeta, names: list[str], ask: SyntheticAsk) -> str:
    """The method asked, ``"auto"`` resolved from the public grid: the dense methods while
    the product grid holds at most MAX_PRODUCT_CELLS cells, MST beyond."""
    method = ask.method
    if method not in ("auto", "mwem", "factorization", "mst"):
        raise QueryError(
            f"method must be 'auto', 'factorization', 'mwem' or 'mst' (got {method!r})")
    if method != "auto":
        return method
    cells = math.prod(categorical_axis(meta, c, bins=ask.bins, bounds=ask.bounds).size
                      for c in names)
    return "factorization" if cells <= MAX_PRODUCT_CELLS else "mst"


def _plan_synthetic(ctx: Context, ask: SyntheticAsk, target: Target) -> Job:
    meta = table_meta(ctx, ask.table)
    cols = _synthetic_columns(ask)
    rows = ask.rows
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)
                             or not 1 <= rows <= 100_000_000):
        raise QueryError(f"rows must be an integer in [1, 1e8] (got {rows!r})")
    names, sets = _marginal_sets(meta, cols, ask.k if ask.method != "mst" else None)
    method = _synthetic_method(meta, names, ask)
    if method == "mst":
        return plan_mst(ctx, meta, names, ask, target)
    if ask.target is not None:
        raise QueryError(f"target= applies to method='mst' (method {method!r} here)")
    try:
        axes, cells = product_axes(meta, names, bins=ask.bins, bounds=ask.bounds)
    except QueryError as exc:
        raise QueryError(f"{exc}; or method='mst' (1-way and tree-selected 2-way "
                         f"marginals, any number of cells)") from None
    text = (f"SYNTHETIC {meta.name} ({', '.join(names)}) method={method}"
            + (f" k={ask.k}" if ask.k is not None else ""))
    job = new_job(ctx, "synthetic", meta, axes, ask, target, default_query=text,
                  where_alias=None)
    W = workloads.marginals(tuple(a.size for a in axes), sets)
    job.details.update({"grid": [a.describe() for a in axes], "method": method,
                        "marginals": [[names[i] for i in s] for s in sets], "rows": rows})
    if method == "factorization":
        _attach_plan(ctx, job, W, None if cells <= OPTIMIZE_CELLS else "identity")
        return job
    fp = job.family_privacy()
    rho_m = fp["rho"]
    if fp["delta"] is not None:
        assert fp["epsilon"] is not None
        rho_m = zcdp.epsilon_to_rho(fp["epsilon"], fp["delta"])
    try:
        r = int(ask.rounds)
        job.event = mwem_event(W, epsilon=fp["epsilon"] if rho_m is None else None, rho=rho_m,
                               rounds=r, contributions=job.contributions)
    except (TypeError, ValueError) as exc:
        raise QueryError(f"{exc} (nothing charged)") from None
    job.details.update({"rounds": r, "mwem_rho": rho_m})
    job.details["workload"] = W
    return job


def _check_ranges(ranges: Any, axis: Axis) -> list[tuple[float, float]]:
    if isinstance(ranges, (str, bytes)) or not isinstance(ranges, Sequence | np.ndarray):
        raise QueryError("ranges must be a list of (low, high) pairs, e.g. [(0, 17), (18, 64)]")
    if not 1 <= len(ranges) <= MAX_RANGES:
        raise QueryError(f"give between 1 and {MAX_RANGES} ranges (got {len(ranges)})")
    out = []
    for i, r in enumerate(ranges):
        try:
            a, b = r
            a, b = float(a), float(b)
        except (TypeError, ValueError):
            raise QueryError(
                f"range {i} must be a pair (low, high) of numbers (got {r!r})") from None
        if not (math.isfinite(a) and math.isfinite(b)):
            raise QueryError(f"range {i} = {r!r} must have finite ends")
        if a > b:
            raise QueryError(f"range {i} = ({a:g}, {b:g}) has low > high; swap them")
        if a < axis.lo or b > axis.hi:
            raise QueryError(
                f"range {i} = ({a:g}, {b:g}) extends beyond the bounds [{axis.lo:g}, "
                f"{axis.hi:g}] of {axis.column!r}; values are clamped into the bounds, so ask "
                f"for ({max(a, axis.lo):g}, {min(b, axis.hi):g}) (the end cells include the "
                f"clamped values)")
        if axis.kind == "int" and math.floor(b) < math.ceil(a):
            raise QueryError(f"range {i} = ({a:g}, {b:g}) contains no integer of "
                             f"{axis.column!r}")
        out.append((a, b))
    return out


def _snap(pairs: list[tuple[float, float]], axis: Axis) -> tuple[np.ndarray, np.ndarray, int]:
    """First and last cell of every range on the grid, and how many ranges were snapped."""
    lo_c, hi_c, snapped = [], [], 0
    for a, b in pairs:
        if axis.kind == "int":
            ia, ib = math.ceil(a), math.floor(b)
            s = round((ia - axis.lo) / axis.step)
            t = round((ib + 1 - axis.lo) / axis.step) - 1
            s, t = min(max(s, 0), axis.size - 1), min(max(t, 0), axis.size - 1)
            t = max(t, s)
            exact_lo = axis.lo + s * axis.step
            exact_hi = min(axis.lo + (t + 1) * axis.step - 1, axis.hi)
            changed = exact_lo != ia or exact_hi != ib
        else:
            s = round((a - axis.lo) / axis.step)
            t = round((b - axis.lo) / axis.step) - 1
            s, t = min(max(s, 0), axis.size - 1), min(max(t, 0), axis.size - 1)
            t = max(t, s)
            e = axis.edges()
            changed = not (math.isclose(e[s], a, abs_tol=1e-12 * max(1.0, abs(a)))
                           and math.isclose(e[t + 1], b, abs_tol=1e-12 * max(1.0, abs(b))))
        snapped += int(changed)
        lo_c.append(s)
        hi_c.append(t)
    return np.array(lo_c, dtype=np.int64), np.array(hi_c, dtype=np.int64), snapped


def _marginal_sets(meta: TableMeta, columns: Any,
                   k: int | None) -> tuple[list[str], list[tuple[int, ...]]]:
    """Column names (resolved, in first-seen order) and marginals as index tuples."""
    if isinstance(columns, str):
        columns = [c.strip() for c in columns.split(",") if c.strip()]
    if isinstance(columns, (bytes,)) or not isinstance(columns, Sequence) or not columns:
        raise QueryError(
            "columns must be a list of column names (all k-way marginals) or of column tuples "
            "(explicit marginals), e.g. ['ward', 'age'] or [('ward',), ('ward', 'age')]")
    names: list[str] = []

    def idx(c: Any) -> int:
        name = column_of(meta, c).name
        if name not in names:
            names.append(name)
        return names.index(name)

    if all(isinstance(c, str) for c in columns):
        for c in columns:
            idx(c)
        d = len(names)
        kk = min(2, d) if k is None else k
        if isinstance(kk, bool) or not isinstance(kk, int) or not 1 <= kk <= d:
            raise QueryError(f"k must be an integer in [1, {d}] (got {k!r})")
        return names, list(itertools.combinations(range(d), kk))
    if k is not None:
        raise QueryError("give k= with a list of column names, not with explicit tuples")
    sets_out: list[tuple[int, ...]] = []
    for t in columns:
        group = [t] if isinstance(t, str) else list(t)
        if not group or not all(isinstance(c, str) for c in group):
            raise QueryError(f"each marginal is a tuple of column names (got {t!r})")
        s = tuple(sorted({idx(c) for c in group}))
        if s not in sets_out:
            sets_out.append(s)
    return names, sets_out
