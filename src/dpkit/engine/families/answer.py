"""The release families' entry points: ask → plan → :func:`~.run.run` with the family's finisher.

:class:`~dpkit.engine.curator.Curator` delegates its ``ranges``, ``cdf``, ``quantiles``,
``marginals``, ``synthetic`` and ``preview_release`` methods here (their docstrings state the
guarantees); each function takes the curator's :class:`~.job.Context` first.
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
    MarginalsAsk,
    RangesAsk,
    SyntheticAsk,
    Target,
)
from dpkit.engine.families.plan import band_halfwidth, plan, plan_with_accuracy
from dpkit.engine.families.run import cost_epsilon, run
from dpkit.engine.families.synthetic_data import SyntheticData, finish_synthetic
from dpkit.engine.results import Preview, Result
from dpkit.engine.spec import QueryError

__all__ = ["cdf", "marginals", "preview", "quantiles", "ranges", "synthetic"]


def ranges(ctx: Context, ask: RangesAsk, target: Target, *,
           accuracy: float | None = None) -> Result:
    """Counts of rows with ``low <= column <= high`` for every range (one charge)."""
    return run(ctx, plan_with_accuracy(ctx, ask, target, accuracy), finish_ranges)


def cdf(ctx: Context, ask: CdfAsk, target: Target, *, accuracy: float | None = None) -> Result:
    """The CDF of a column with a simultaneous band (``ask.probabilities`` must be None)."""
    return run(ctx, plan_with_accuracy(ctx, ask, target, accuracy), finish_cdf)


def quantiles(ctx: Context, ask: CdfAsk, target: Target, *,
              accuracy: float | None = None) -> Result:
    """Quantiles read off one private CDF (``ask.probabilities`` given)."""
    return run(ctx, plan_with_accuracy(ctx, ask, target, accuracy), finish_quantiles)


def marginals(ctx: Context, ask: MarginalsAsk, target: Target, *,
              accuracy: float | None = None) -> Result:
    """k-way marginal tables over declared domains, answered together."""
    return run(ctx, plan_with_accuracy(ctx, ask, target, accuracy), finish_marginals)


def synthetic(ctx: Context, ask: SyntheticAsk, target: Target) -> SyntheticData:
    """Synthetic records over the declared domains of ``ask.columns``."""
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
    job = plan(ctx, make(table, *args, **kwargs), target)
    wp = job.workload_plan()
    remaining = ctx.remaining()
    cost = cost_epsilon(ctx, job)
    band = kind in ("cdf", "quantiles")
    rmse = wp.expected_rmse
    outputs: list[dict[str, Any]] = [{
        "name": f"{kind} ({wp.workload.num_queries} queries)",
        "halfwidth": band_halfwidth(job),
        "note": (f"expected RMSE {rmse:.4g} per query; strategy {wp.strategy.name}"
                 if rmse is not None else f"strategy {wp.strategy.name}")
        + ("; half-width of the simultaneous band (at most)" if band else ""),
    }]
    return Preview(query=job.query, epsilon=float(job.privacy.epsilon or 0.0), cost=cost,
                   remaining=remaining, delta=float(job.privacy.delta_share or 0.0),
                   level=job.level, split=split(job), outputs=outputs, event=job.event,
                   notes=list(job.notes))
