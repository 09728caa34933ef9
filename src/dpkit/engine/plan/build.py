"""Building a plan: the passes that turn a QuerySpec into a Plan, each small.

Like sqlglot's optimizer, :func:`build_plan` chains the named passes of :data:`PLAN_PASSES` over
a small mutable :class:`Planning` state: the privacy parameters, the group keys and mode, the
query's delta, the budget (ε or ρ), the measurements, the top-k request, the budget split, the
calibration and the event. Each pass reads what the passes before it wrote and public inputs
only (the query, the declarations, the privacy parameters), never the data; each raises a
:class:`~dpkit.engine.plan.model.PlanError` that says what to do, before anything is charged.

The state is :mod:`.planning`'s; the passes that read the request are in :mod:`.request`, those
that choose the measurements in :mod:`.measures`; the budget split, calibration and event here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from dpkit.engine import sql as dsql
from dpkit.engine.plan.calibrate import (
    calibrate_measure,
    calibrate_topk,
    measure_weights,
    plan_event,
)
from dpkit.engine.plan.fixed import fixed_point_exponent, row_exponent
from dpkit.engine.plan.measures import diagnostics, measurements, top_k, top_k_request
from dpkit.engine.plan.model import DIAG_KINDS, DIAGNOSTICS_SHARE, GAUSSIAN, LAPLACE, Plan
from dpkit.engine.plan.planning import Planning
from dpkit.engine.plan.request import check_parameters, group_keys, privacy_budget, query_delta
from dpkit.engine.tables import TableMeta

__all__ = ["PLAN_PASSES", "Planning", "build_plan", "top_k_request"]


def budget_split(st: Planning) -> None:
    """Each measurement's share of ε (or ρ): its weight over the sum (equal by default).

    Diagnostic measurements (:func:`diagnostics`) take :data:`DIAGNOSTICS_SHARE` together,
    in equal parts; the outputs split the rest by their weights."""
    mweights = measure_weights(st.spec, st.agg_plans, st.measures, st.weights)
    diag = [x for x in st.measures if x.kind in DIAG_KINDS]
    main_part = 1.0 - DIAGNOSTICS_SHARE if diag else 1.0
    total_w = math.fsum(mweights[x.key] for x in st.measures if x.kind not in DIAG_KINDS)
    for x in st.measures:
        x.weight = mweights[x.key]
        if x.kind in DIAG_KINDS:
            x.share = DIAGNOSTICS_SHARE / len(diag)
        else:
            x.share = main_part * x.weight / total_w
        if st.noise == LAPLACE:
            st.share_eps[x.key] = st.eps * x.share
            st.share_rho[x.key] = 0.0
        else:
            st.share_rho[x.key] = st.rho_total * x.share
            # used for fixed-point sizing and the exponential mechanisms
            st.share_eps[x.key] = math.sqrt(2.0 * st.share_rho[x.key])


def calibration(st: Planning) -> None:
    """Fixed point, sensitivity, noise and event of every measurement, then the top-k."""
    # SUM and the centred sum of AVG/VAR share one fixed-point column: the same f
    col_f: dict[str, int] = {}
    for mm in st.measures:
        if mm.kind in ("sum", "csum"):
            mag = max(abs(mm.lo), abs(mm.hi)) if mm.kind == "sum" else (mm.hi - mm.lo) / 2.0
            fx = fixed_point_exponent(mag, st.m, st.share_eps[mm.key])
            assert mm.column is not None
            col_f[mm.column] = min(col_f.get(mm.column, fx), fx)
    for mm in st.measures:
        if mm.kind == "topk":
            continue
        if mm.column in col_f and mm.kind in ("sum", "csum"):
            mm.f = min(col_f[mm.column], row_exponent(mm.lo, mm.hi))
        calibrate_measure(mm, table=st.table, m=st.m, l0=st.l0, noise=st.noise,
                          share_eps=st.share_eps[mm.key], share_rho=st.share_rho[mm.key],
                          q_delta=st.q_delta, grouped=st.grouped)
    topk = st.topk
    if topk is None:
        return
    calibrate_topk(topk, next(x for x in st.measures if x.key == topk.score_key), m=st.m,
                   noise=st.noise, share_eps=st.share_eps[topk.key],
                   share_rho=st.share_rho[topk.key], level=float(st.level))
    kk = "the group shown was" if topk.k == 1 else f"the {topk.k} groups shown were"
    rounds = "1 round" if topk.k == 1 else f"{topk.k} rounds"
    st.notes.append(
        f"{kk} chosen by noisy max ({rounds} of the exponential mechanism at epsilon "
        f"{topk.round_epsilon:.4g} each) among all "
        f"{'selected' if st.select is not None else 'candidate'} groups, before their values "
        f"were measured"
    )


def query_event(st: Planning) -> None:
    """The event charged for the query: the measurements' events, zCDP parts merged."""
    st.event = plan_event([mm.event for mm in st.measures])
    if st.select is not None:
        how = ("discrete Gaussian" if st.noise == GAUSSIAN else "discrete Laplace")
        st.notes.insert(0,
            f"groups were selected privately ({how} noise on distinct-unit counts, threshold "
            f"{st.select.threshold}; delta {st.q_delta:g}); groups with few units are not shown"
        )


PLAN_PASSES: tuple[Callable[[Planning], None], ...] = (
    check_parameters,
    group_keys,
    query_delta,
    privacy_budget,
    measurements,
    top_k,
    diagnostics,
    budget_split,
    calibration,
    query_event,
)


def build_plan(
    spec: dsql.QuerySpec,
    catalog: dict[str, TableMeta],
    *,
    epsilon: float | None,
    rho: float | None = None,
    delta: float | None = None,
    noise: str = LAPLACE,
    level: float = 0.95,
    bounds: dict[str, tuple[float, float]] | None = None,
    budget_delta: float = 0.0,
    gaussian_delta: float | None = None,
    weights: Mapping[str, Any] | None = None,
    accountant: str | None = None,
    diagnostics: bool = True,
) -> Plan:
    """The data-independent plan for ``spec`` at the given privacy parameters.

    ``weights``: per output name, the relative share of the budget of the measurements that
    output needs (unnamed outputs weigh 1; see :func:`measure_weights`). ``accountant``: the
    project's accountant; with ``"approx"`` and Gaussian noise the query's ``delta`` (default a
    tenth of the project's) is booked once, split in halves between the Gaussian conversion and
    private partition selection when both are needed (``Plan.charge_delta``). ``diagnostics``:
    measure the rows dropped and values clamped (:func:`diagnostics`) with
    :data:`~dpkit.engine.plan.model.DIAGNOSTICS_SHARE` of the budget.
    """
    st = Planning(spec=spec, catalog=catalog, epsilon=epsilon, rho=rho, delta=delta,
                  noise=noise, level=level, bounds=bounds, budget_delta=budget_delta,
                  gaussian_delta=gaussian_delta, weights=weights, accountant=accountant,
                  diagnostics=diagnostics)
    for plan_pass in PLAN_PASSES:
        plan_pass(st)
    return Plan(
        spec=spec, table=st.table, catalog=catalog, measures=st.measures, aggs=st.agg_plans,
        group_mode=st.group_mode, keys=st.keys, key_sources=st.key_sources,
        epsilon=st.eps if noise == LAPLACE else (st.eps if rho is None else float("nan")),
        rho=st.rho_total, delta=st.q_delta, noise=noise, level=float(level), m=st.m, g=st.g,
        l0=st.l0, event=st.event, notes=st.notes, charge_delta=st.charge_delta,
        weights={str(k): float(v) for k, v in (weights or {}).items()},
        derived_sql={k: (v[0], v[1]) for k, v in st.derived.items()},
        diagnostics=bool(diagnostics),
    )
