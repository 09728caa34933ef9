"""The release families' entry points: ask → plan → :func:`~.run.run` with the family's finisher.

:class:`~dpkit.engine.curator.Curator` delegates its ``ranges``, ``cdf``, ``quantiles``,
``marginals``, ``synthetic`` and ``preview_release`` methods here (their docstrings state the
guarantees in short); each function takes the curator's :class:`~.job.Context` first, the
family's ask (the method's parameters, as data) and the privacy :class:`~.job.Target`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dpkit.engine.families.finish import (
    finish_cdf,
    finish_marginals,
    finish_quantiles,
    finish_ranges,
    split,
)
from dpkit.engine.families.job import (
    Ask,
    CdfAsk,
    Context,
    Job,
    MarginalsAsk,
    RangesAsk,
    SyntheticAsk,
    Target,
)
from dpkit.engine.families.plan import band_halfwidth, plan, plan_with_accuracy
from dpkit.engine.families.run import cost_of, run
from dpkit.engine.families.synthetic_data import SyntheticData, finish_synthetic
from dpkit.engine.results import Preview, Result
from dpkit.engine.spec import QueryError

__all__ = ["cdf", "marginals", "preview", "preview_job", "quantiles", "ranges", "synthetic"]


def ranges(ctx: Context, ask: RangesAsk, target: Target, *,
           accuracy: float | None = None) -> Result:
    """Counts of rows with ``low <= column <= high`` for every ``(low, high)`` in
    ``ranges``, answered together with correlated noise and charged once.

    **Guarantee.** ε-DP (``epsilon=``), ρ-zCDP (``rho=``) or the Gaussian mechanism at
    (ε, δ) (``epsilon=, delta=``) for add/remove one privacy unit with at most
    ``max_rows_per_unit`` rows (see :mod:`.plan`). The grid: integer
    columns one cell per integer (when the bounds hold at most 4096 integers), otherwise
    ``bins`` (default 1024) equal cells over the declared bounds; values are clamped into
    the bounds. Ranges must lie inside the bounds; on a binned grid their ends are snapped
    to the nearest cell edges (the snapped ends are the ``low``/``high`` columns, and a
    note says so). The workload is reduced to the segments between range ends (public),
    and answered through ``strategy`` (default: the better of the HDMM-optimised strategy
    for exactly this workload and the identity, cached; a tree above 1024 segments).

    Returns a :class:`~dpkit.engine.results.Result` with one row per range: ``low``,
    ``high``, ``count``, ``count_ci_low``, ``count_ci_high`` (each interval at ``level``
    on its own). ``accuracy=`` (instead of ``epsilon=``; also for :func:`cdf`,
    :func:`quantiles`, :func:`marginals`): the largest CI half-width wanted; the smallest
    epsilon meeting it is found from the plans (no data) and spent.

    >>> res = cur.ranges("visits", "age", [(0, 17), (18, 64), (65, 100)], epsilon=0.5)
    ... # doctest: +SKIP
    """
    return run(ctx, plan_with_accuracy(ctx, ask, target, accuracy), finish_ranges)


def cdf(ctx: Context, ask: CdfAsk, target: Target, *, accuracy: float | None = None) -> Result:
    """The cumulative distribution of ``column`` over its declared bounds, with a
    **simultaneous** confidence band (all rows at once at ``level``).

    Same guarantee and grid as :func:`ranges`; the workload is every prefix of the grid
    (the CDF), answered through ``strategy`` (default: the better of the optimised
    strategy and the identity up to 1024 cells, else the b-ary tree: 16-ary for Laplace,
    binary for Gaussian noise). Post-processing: isotonic fit, band tightened by
    monotonicity (:func:`dpkit.release.cdf_band`).

    One row per cell: ``edge`` (integer grid: the count is of values ``<= edge``;
    continuous grid: of values ``< edge``, the last edge included), ``count`` (cumulative,
    with ``count_ci_low/high``) and ``fraction`` (``count`` over the total, with
    ``fraction_ci_low/high`` from the band).
    """
    return run(ctx, plan_with_accuracy(ctx, ask, target, accuracy), finish_cdf)


def quantiles(ctx: Context, ask: CdfAsk, target: Target, *,
              accuracy: float | None = None) -> Result:
    """Any number of quantiles of ``column`` from one private CDF (one charge): rows
    ``probability``, ``quantile`` (interpolated in its cell), ``quantile_ci_low/high``
    (cell edges that contain the true quantile's cell, jointly for all rows at ``level``).
    Same guarantee as :func:`cdf`."""
    return run(ctx, plan_with_accuracy(ctx, ask, target, accuracy), finish_quantiles)


def marginals(ctx: Context, ask: MarginalsAsk, target: Target, *,
              accuracy: float | None = None) -> Result:
    """Marginal tables (contingency tables) over declared domains, answered together.

    ``columns``: a list of column names, whose ``k``-way marginals are all released
    (``k`` default ``min(2, len(columns))``), or a list of column tuples naming the
    marginals explicitly (``[("ward",), ("ward", "sex")]``). Categorical columns use their
    declared domain (rows with other values are not counted); numeric columns a grid over
    their bounds (one cell per integer up to 64 integers, else ``bins``, default 16). The
    product domain may hold at most 4096 cells.

    Same guarantee as :func:`ranges`. All marginals are one workload answered through one
    strategy (default: the better of the HDMM-optimised strategy and the identity up to
    1024 cells, the identity above), so they are mutually consistent (they come from one
    least-squares histogram). One row per cell of each marginal: ``marginal`` (e.g.
    ``"ward x age"``), the columns (``None`` where a column is not in that marginal),
    ``count`` and its interval; the expected RMSE per marginal is in ``split``/``notes``.
    """
    return run(ctx, plan_with_accuracy(ctx, ask, target, accuracy), finish_marginals)


def synthetic(ctx: Context, ask: SyntheticAsk, target: Target) -> SyntheticData:
    """Synthetic records over the declared domains of ``columns``, charged to the ledger.

    **What it protects.** The records are post-processing of one differentially private
    release of the table's histogram over the public product grid of ``columns`` (each
    unit cut to ``max_rows_per_unit`` rows, values clamped / mapped to their declared
    keys): ε-DP (``epsilon=``) or ρ-zCDP (``rho=``; ``epsilon=, delta=`` converts to the
    largest ρ meeting (ε, δ)) for add/remove one privacy unit. No synthetic record is a
    real row; what they preserve is what the release measured: the ``k``-way marginals
    (default ``k = min(2, len(columns))``), approximately. Relationships with other
    columns, and finer detail than the grid, are not preserved.

    ``method``: ``"auto"`` (default) is ``"factorization"`` while the product grid holds
    at most 4096 cells and ``"mst"`` beyond. ``"mst"`` (:mod:`.synthetic_mst`, any number of
    columns: all 1-way marginals and a privately selected spanning tree of 2-way marginals,
    ``target=`` a column measured with every selected pair; numeric values uniform within
    their cells). ``"factorization"``: all ``k``-way marginals measured through
    one optimised strategy, least-squares histogram, negative cells set to 0, rounded to
    records by largest remainder) or ``"mwem"`` (Hardt-Ligett-McSherry 2012: ``rounds``
    rounds of exponential-mechanism selection + measurement of the worst-answered
    marginal cell, multiplicative weights; 5% of the budget estimates the number of
    records). On these grids (at most 4096 cells) the factorization is the more accurate:
    measured on 6000 rows, 4 wards + 1 empty declared ward, ε = 1, the empty ward got 15
    synthetic records against MWEM's 652 of 4680. ``rows``: the number of records to
    output (default: the private estimate of the number of rows).
    Returns :class:`~dpkit.engine.families.SyntheticData` (``.to_pandas()``,
    ``.to_parquet(path)``, ``.to_csv(path)``), with the ledger entry's sequence number
    and cost.
    """
    return run(ctx, plan(ctx, ask, target), finish_synthetic)


_TARGET_KEYS = ("epsilon", "rho", "delta")


def _ranges_ask(table: str, column: str, ranges: Sequence[tuple[float, float]],
                **kw: Any) -> Ask:
    return RangesAsk(table=table, column=column, ranges=ranges, **kw)


def _cdf_ask(table: str, column: str, **kw: Any) -> Ask:
    return CdfAsk(table=table, column=column, **kw)


def _quantiles_ask(table: str, column: str, probabilities: Sequence[float],
                   **kw: Any) -> Ask:
    return CdfAsk(table=table, column=column, probabilities=probabilities, **kw)


def _marginals_ask(table: str, columns: Sequence[str | Sequence[str]], **kw: Any) -> Ask:
    return MarginalsAsk(table=table, columns=columns, **kw)


_PREVIEW_ASKS: dict[str, Callable[..., Ask]] = {
    "ranges": _ranges_ask, "cdf": _cdf_ask, "quantiles": _quantiles_ask,
    "marginals": _marginals_ask}


def preview(ctx: Context, kind: str, table: str, *args: Any, **kwargs: Any) -> Preview:
    """Cost and expected accuracy of the family ``kind`` with the same arguments as the
    curator's method, without reading data or spending anything."""
    make = _PREVIEW_ASKS.get(kind)
    if make is None:
        raise QueryError(
            f"kind must be 'ranges', 'cdf', 'quantiles' or 'marginals' (got {kind!r})")
    target = Target(**{k: kwargs.pop(k) for k in _TARGET_KEYS if k in kwargs})
    if kind == "quantiles":
        _column, _probabilities = args  # both positional, as Curator.quantiles takes them
    return preview_job(ctx, plan(ctx, make(table, *args, **kwargs), target), kind)


def preview_job(ctx: Context, job: Job, kind: str) -> Preview:
    """The preview of a planned ``job`` of the family ``kind`` (its cost, and its expected
    RMSE and largest half-width): what :func:`~.run.run` would charge, nothing read."""
    wp = job.workload_plan()
    remaining = ctx.remaining()
    price = cost_of(ctx, job)  # the epsilon and delta the ledger would charge
    band = kind in ("cdf", "quantiles")
    rmse = wp.expected_rmse
    n = wp.workload.num_queries
    # the half-width is in rows: a quantile's own error is in the column's units and depends
    # on the data, so the name says what the figure is (the console showed "quantiles:
    # ± 7,694" beside amounts, read as an error in the amount)
    outputs: list[dict[str, Any]] = [{
        "name": (f"{kind}: the CDF's band, in rows ({n} prefixes)" if band
                 else f"{kind}: each count, in rows ({n} queries)"),
        "halfwidth": band_halfwidth(job),
        "note": (f"expected RMSE {rmse:.4g} per query; strategy {wp.strategy.name}"
                 if rmse is not None else f"strategy {wp.strategy.name}")
        + ("; half-width of the simultaneous band (at most)" if band else ""),
    }]
    return Preview(query=job.query, epsilon=float(job.privacy.epsilon or 0.0),
                   cost=float(price.epsilon), remaining=remaining, delta=float(price.delta),
                   level=job.level, split=split(job), outputs=outputs, event=job.event,
                   notes=list(job.notes))
