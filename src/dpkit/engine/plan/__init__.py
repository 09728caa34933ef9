"""From a validated query to an aggregation plan: measurements, sensitivities, budget split, SQL.

A plan is computed from public information only (the query text, the table's declarations, the
privacy parameters): never from the data. It lists the **measurements**, the integer-valued
aggregates that receive noise, each with its per-unit sensitivity, its share of the budget, the
noise that will be added and the event that will be charged. Analyst-facing aggregates are
functions of measurements:

==========================  ======================================================================
``COUNT(*)``                ``rows``: number of (bounded) rows
``COUNT(col)``              ``nonnull``: rows where ``col`` is not NULL/NaN
``COUNT(DISTINCT unit)``    ``units``: distinct privacy units
``SUM(col)``                ``sum``: Σ round(clamp(col)·2^f) (fixed point, integers)
``AVG(col)``                ``mid + csum / nonnull`` with ``csum`` = Σ round((clamp(col) − mid)·2^f)
``VAR``/``STDDEV``          ``csq / nonnull − (csum / nonnull)²`` with ``csq`` = Σ round((…)²·2^f)
``MEDIAN``/``QUANTILE``     exponential mechanism over a public grid of candidates (per group)
``MIN``/``MAX``             the 1st/99th percentile, as above
==========================  ======================================================================

**Contribution bounding** (user-level privacy). Let ``m`` = ``max_rows_per_unit`` and
``g`` = ``max_groups_per_unit`` (default ``m``). Inside the one SQL statement, after ``WHERE``,
each unit keeps at most ``g`` groups (``DENSE_RANK`` over a keyed hash of the group key, only when
``g < m``) and then at most ``m`` rows (``ROW_NUMBER`` over a keyed hash of the row's relevant
columns). The hash key is a fresh secret per query, drawn from :mod:`dpkit.noise`; the choice of
rows depends only on the unit's own rows, so bounding is a stable transformation. Then, under
add/remove of one unit, with ``L0 = min(g, m)`` groups touched (1 without GROUP BY):

* ``rows``, ``nonnull``: L1 = L2 = m;   ``units``: L1 = L0, L2 = √L0;
* ``sum``: L1 = L2 = m·B where ``B = ceil(max(|lo|, |hi|)·2^f)`` bounds every row's integer
  ``round(clamp(x)·2^f)`` (multiplying by a power of two is exact in floating point and rounding is
  monotone, so the bound holds *exactly*: no floating-point sum attack, Casacuberta et al. 2022);
  ``csum``/``csq`` are additionally clipped to ``[-B, B]`` in integers;
* quantiles: each row moves a rank score by at most ``max(q, 1−q)``; per group sensitivity
  ``m·max(q, 1−q)``, at most L0 groups affected, so each group's exponential mechanisms get
  ``ε_i / L0`` in total (event ``SelfComposed(Exponential(ε_i/L0), L0)``). Per group that total is
  split (``QUANTILE_CI_SHARE``) between the point estimate (half) and the two interval ends (a
  quarter each); three exponential mechanisms of ``ε_a + ε_b + ε_c = ε`` compose to ε-DP (basic
  composition) and to ``Σ ε²/8 <= ε²/8``-zCDP, so the charged ``Exponential(ε)`` covers them.

**Budget split**: each measurement gets a share of the query's epsilon (Laplace noise:
``ε_i = ε·w_i/Σw``, basic composition is exact for pure DP) or of its ρ (Gaussian noise), equal
by default; ``weights={"n": 1, "avg_age": 3}`` weighs the measurements of the named outputs
(:func:`measure_weights`). Private partition selection, when the group keys are not public, and
top-k selection take one more share each (weight 1, or ``"partition_selection"`` /
``"top_k"`` in ``weights``); partition selection also spends ``delta``.

**Partition selection** (Korolova et al. 2009; Wilson et al. 2020): the number of distinct units
per group gets discrete Laplace noise of scale ``s = L0/ε_sel``; a group is released iff its
noisy count is at least ``T = 1 + ceil(s·ln(L0 / (δ (1+q))))`` with ``q = e^{-1/s}``, so that a
group made of a single unit appears with probability ``L0·q^{T-1}/(1+q) <= δ`` in total. Event:
``ApproxDP(ε_sel, δ)``. With ``noise="gaussian"``: discrete Gaussian noise of L2 sensitivity
``√L0`` and the threshold of :func:`gaussian_threshold`; event
``Composed(ZCDP(ρ_sel), ApproxDP(0, δ))`` (accountant ``approx``; zCDP cannot express δ).

**Top-k groups** (``ORDER BY <COUNT/SUM> [DESC|ASC] LIMIT k``, no HAVING/OFFSET): ``k`` rounds of
the exponential mechanism on the exact per-group scores (peeling = one-shot Gumbel top-k,
Durfee-Rogers 2019), monotone with L∞ sensitivity ``m`` for counts; see
:func:`_calibrate_topk`. Event ``SelfComposed(Exponential(ε_sel/k), k)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dpkit.engine import sql as dsql
from dpkit.engine.plan.calibrate import (
    calibrate_measure,
    calibrate_topk,
    dgauss_upper_tail,
    gaussian_selection_delta,
    gaussian_threshold,
    measure_weights,
    ordinal,
    plan_event,
    quantile_candidates,
    top_k_utility,
)
from dpkit.engine.plan.compile import (
    COMPILE_PASSES,
    FILL_MAX_KEYS,
    CompiledSQL,
    SqlState,
    bounding_ctes,
    can_fill_keys,
    compile_sql,
    fill_declared_keys,
    literal_sql,
)
from dpkit.engine.plan.fixed import (
    FIXED_PREFIX,
    SHIFT_ZERO,
    clamp_sql,
    double_lit,
    fixed_column_name,
    fixed_column_sql,
    fixed_point_exponent,
    grid_bound,
    pow2_lit,
    round_half_away,
    row_exponent,
    shift_round,
    unit_rows_column_name,
)
from dpkit.engine.plan.model import (
    GAUSSIAN,
    GAUSSIAN_THRESHOLD,
    LAPLACE,
    MAX_KEYS,
    MAX_QUERY_EPSILON,
    MAX_TOP_K,
    MIN_QUERY_EPSILON,
    MIN_QUERY_RHO,
    NOISES,
    QUANTILE_BINS,
    QUANTILE_CI_SHARE,
    SELECTION_WEIGHT,
    TOP_K_WEIGHT,
    AggPlan,
    KeyProduct,
    Measure,
    Plan,
    PlanError,
    check_delta,
    check_epsilon,
)
from dpkit.engine.tables import TableMeta, check_bounds

__all__ = [
    "COMPILE_PASSES",
    "FILL_MAX_KEYS",
    "FIXED_PREFIX",
    "GAUSSIAN",
    "GAUSSIAN_THRESHOLD",
    "LAPLACE",
    "MAX_KEYS",
    "MAX_QUERY_EPSILON",
    "MAX_TOP_K",
    "MIN_QUERY_EPSILON",
    "MIN_QUERY_RHO",
    "NOISES",
    "QUANTILE_BINS",
    "QUANTILE_CI_SHARE",
    "SELECTION_WEIGHT",
    "SHIFT_ZERO",
    "TOP_K_WEIGHT",
    "AggPlan",
    "CompiledSQL",
    "KeyProduct",
    "Measure",
    "Plan",
    "PlanError",
    "SqlState",
    "bounding_ctes",
    "build_plan",
    "calibrate_measure",
    "calibrate_topk",
    "can_fill_keys",
    "check_delta",
    "check_epsilon",
    "clamp_sql",
    "compile_sql",
    "dgauss_upper_tail",
    "double_lit",
    "fill_declared_keys",
    "fixed_column_name",
    "fixed_column_sql",
    "fixed_point_exponent",
    "gaussian_selection_delta",
    "gaussian_threshold",
    "grid_bound",
    "literal_sql",
    "measure_weights",
    "ordinal",
    "plan_event",
    "pow2_lit",
    "quantile_candidates",
    "round_half_away",
    "row_exponent",
    "shift_round",
    "top_k_utility",
    "unit_rows_column_name",
]


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
) -> Plan:
    """The data-independent plan for ``spec`` at the given privacy parameters.

    ``weights``: per output name, the relative share of the budget of the measurements that
    output needs (unnamed outputs weigh 1; see :func:`measure_weights`). ``accountant``: the
    project's accountant; with ``"approx"`` and Gaussian noise the query's ``delta`` (default a
    tenth of the project's) is booked once, split in halves between the Gaussian conversion and
    private partition selection when both are needed (``Plan.charge_delta``).
    """
    if noise not in NOISES:
        raise PlanError(f"noise must be one of {', '.join(NOISES)} (got {noise!r})")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.5 <= level < 1:
        raise PlanError(f"level must lie in [0.5, 1) (got {level!r}); e.g. level=0.95")
    table = catalog[spec.table]
    override = {}
    for col, pair in (bounds or {}).items():
        c = table.column(col)
        override[c.name] = check_bounds(pair, c.name)
    m = 1 if table.record_level else table.max_rows_per_unit
    grouped = bool(spec.group_by)
    g = min(table.max_groups_per_unit or m, m) if grouped else 1
    l0 = min(g, m) if grouped else 1

    # --- groups: public keys (domains / public tables) or private partition selection
    key_sources: list[tuple[str, Any]] = []
    public_keys = True
    for k in spec.group_by:
        if k.source == dsql.PRIVATE_ALIAS:
            dom = table.domains.get(k.column)
            if dom is None:
                public_keys = False
                key_sources.append(("private", None))
            else:
                key_sources.append(("domain", list(dom)))
        else:
            key_sources.append(("public", k))
    group_mode = "none" if not grouped else ("public" if public_keys else "select")
    keys: Sequence[tuple[Any, ...]] | None = None
    if group_mode == "public" and all(s == "domain" for s, _ in key_sources):
        total = math.prod(len(v) for _, v in key_sources)
        if total > MAX_KEYS:
            raise PlanError(
                f"the declared domains give {total} groups (at most {MAX_KEYS}); group by "
                f"fewer columns"
            )
        keys = KeyProduct([v for _, v in key_sources])

    # --- the query's delta: partition selection and (approx accountant) Gaussian conversion
    if delta is not None:
        check_delta(delta, budget_delta)
    total_delta = float(delta) if delta is not None else budget_delta / 10.0
    q_delta = 0.0
    charge_delta: float | None = None
    conv_delta = gaussian_delta if gaussian_delta else budget_delta
    if group_mode == "select":
        if budget_delta <= 0:
            names = ", ".join(k.column for k in spec.group_by)
            raise PlanError(
                f"GROUP BY {names} needs public group keys or a delta: declare the domain "
                f"(add_table(..., domains={{'{spec.group_by[0].column}': [...]}})), or create the "
                f"project with delta > 0 so that groups can be selected privately"
            )
        q_delta = total_delta
        if q_delta <= 0:
            raise PlanError("partition selection needs delta > 0 (e.g. delta=1e-7)")
    if noise == GAUSSIAN and accountant == "approx":
        charge_delta = total_delta
        if group_mode == "select":  # one delta for the query: half each
            q_delta = conv_delta = total_delta / 2.0
        else:
            conv_delta = total_delta

    if noise == LAPLACE:
        if rho is not None:
            raise PlanError("rho= goes with noise='gaussian'; with Laplace noise give epsilon=")
        if epsilon is None:
            raise PlanError("give the query's budget: epsilon=0.5 (or accuracy=...)")
        eps = check_epsilon(epsilon)
        rho_total = 0.0
    else:
        if budget_delta <= 0:
            raise PlanError(
                "Gaussian noise needs a project with delta > 0 (it is not pure DP); use "
                "noise='laplace' or create the project with a delta"
            )
        if rho is None:
            if epsilon is None:
                raise PlanError("give rho= (zCDP) or epsilon= for Gaussian noise")
            from dpkit.accounting import zcdp

            eps = check_epsilon(epsilon)
            rho_total = float(zcdp.epsilon_to_rho(eps, conv_delta))
        else:
            if epsilon is not None:
                raise PlanError("give rho= or epsilon=, not both")
            if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not (
                math.isfinite(rho) and MIN_QUERY_RHO <= rho <= 50
            ):
                raise PlanError(f"rho must be a number in [{MIN_QUERY_RHO:g}, 50] (got {rho!r}); "
                                f"e.g. rho=0.05")
            rho_total = float(rho)
            eps = float("nan")

    # --- measurements
    measures: list[Measure] = []
    by_key: dict[tuple[Any, ...], Measure] = {}

    def measure(kind: str, column: str | None = None, q: float | None = None) -> Measure:
        ident = (kind, column, q)
        if ident in by_key:
            return by_key[ident]
        mm = Measure(key=f"__m{len(measures)}", kind=kind, column=column, q=q)
        measures.append(mm)
        by_key[ident] = mm
        return mm

    def col_bounds(column: str, call: dsql.AggCall) -> tuple[float, float]:
        if column in override:
            return override[column]
        b = table.bounds_for(column)
        if b is None:
            raise PlanError(
                f"{call.label} needs bounds for column {column!r}: the data owner declares them "
                f"(add_table(..., bounds={{'{column}': (low, high)}})) or pass "
                f"bounds={{'{column}': (low, high)}} with the query. Values outside are clamped."
            )
        return b

    def nonnull_count(source: str, column: str) -> Measure:
        # a column the owner declared complete has COUNT(col) = COUNT(*) (bounded rows): one
        # measurement of the row count serves both, and AVG/VAR of it
        if source == dsql.PRIVATE_ALIAS and table.column(column).name in table.not_null:
            mm = measure("rows")
            mm.label = "COUNT(*)"
            return mm
        mm = measure("nonnull", f"{source}.{column}")
        mm.label = f"COUNT({column})"
        return mm

    select: Measure | None = None
    if group_mode == "select":
        select = measure("select")
        select.label = "partition selection (distinct units per group)"

    agg_plans: list[AggPlan] = []
    for call in spec.aggs:
        roles: dict[str, str] = {}
        lo = hi = 0.0
        if call.func == dsql.COUNT:
            if select is not None and m == 1:
                roles["count"] = select.key
            else:
                mm = measure("rows")
                mm.label = "COUNT(*)"
                roles["count"] = mm.key
        elif call.func == dsql.COUNT_UNITS:
            if select is not None:
                roles["count"] = select.key
            else:
                mm = measure("units")
                mm.label = call.label
                roles["count"] = mm.key
        elif call.func == dsql.COUNT_COL:
            assert call.source is not None and call.column is not None  # only COUNT(*) has None
            mm = nonnull_count(call.source, call.column)
            roles["count"] = mm.key
        else:
            assert call.source is not None and call.column is not None  # only COUNT(*) has None
            lo, hi = col_bounds(call.column, call)
            ref = f"{call.source}.{call.column}"
            if call.func == dsql.SUM:
                mm = measure("sum", ref)
                mm.label, mm.lo, mm.hi = f"SUM({call.column})", lo, hi
                roles["sum"] = mm.key
            elif call.func == dsql.QUANTILE:
                mm = measure("quant", ref, call.q)
                mm.label, mm.lo, mm.hi = call.label, lo, hi
                roles["quant"] = mm.key
            else:
                cnt = nonnull_count(call.source, call.column)
                s = measure("csum", ref)
                s.label, s.lo, s.hi = f"SUM({call.column} - mid)", lo, hi
                roles["count"], roles["csum"] = cnt.key, s.key
                if call.func != dsql.AVG:
                    s2 = measure("csq", ref)
                    s2.label, s2.lo, s2.hi = f"SUM(({call.column} - mid)^2)", lo, hi
                    roles["csq"] = s2.key
        agg_plans.append(AggPlan(call=call, measures=roles, lo=lo, hi=hi))

    # --- top-k groups by noisy max (ORDER BY <COUNT/SUM> [DESC|ASC] LIMIT k)
    notes: list[str] = []
    topk: Measure | None = None
    request = top_k_request(spec)
    if request is not None and isinstance(request, str):
        notes.append(request)
    elif request is not None:
        agg_index, desc, k_top = request
        ap = agg_plans[agg_index]
        if keys is None and k_top > MAX_TOP_K:
            raise PlanError(
                f"LIMIT {k_top} asks for the top {k_top} groups by noisy max; with undeclared "
                f"keys at most {MAX_TOP_K} can be chosen (each of the k rounds gets 1/k of the "
                f"budget, so beyond a few hundred the choice is noise). Ask for LIMIT "
                f"{MAX_TOP_K} or fewer, or declare the keys (domains=) to see every group. "
                f"Nothing was charged"
            )
        if keys is not None and k_top >= len(keys):
            notes.append(f"LIMIT {k_top} keeps all {len(keys)} declared groups: no selection "
                         f"needed; ORDER BY sorts the noisy values (post-processing)")
        else:
            topk = measure("topk")
            topk.k = k_top
            topk.desc = desc
            topk.score_key = ap.measures.get("count") or ap.measures["sum"]
            topk.score_label = ap.call.label
            topk.label = (f"top-{k_top} groups by {ap.call.label} "
                          f"{'DESC' if desc else 'ASC'} (noisy max)")

    # --- budget split (weighted; equal by default)
    mweights = measure_weights(spec, agg_plans, measures, weights)
    total_w = math.fsum(mweights[x.key] for x in measures)
    share_eps: dict[str, float] = {}
    share_rho: dict[str, float] = {}
    for x in measures:
        x.weight = mweights[x.key]
        x.share = x.weight / total_w
        if noise == LAPLACE:
            share_eps[x.key] = eps * x.share
            share_rho[x.key] = 0.0
        else:
            share_rho[x.key] = rho_total * x.share
            # used for fixed-point sizing and the exponential mechanisms
            share_eps[x.key] = math.sqrt(2.0 * share_rho[x.key])

    # SUM and the centred sum of AVG/VAR share one fixed-point column: the same f
    col_f: dict[str, int] = {}
    for mm in measures:
        if mm.kind in ("sum", "csum"):
            mag = max(abs(mm.lo), abs(mm.hi)) if mm.kind == "sum" else (mm.hi - mm.lo) / 2.0
            fx = fixed_point_exponent(mag, m, share_eps[mm.key])
            assert mm.column is not None
            col_f[mm.column] = min(col_f.get(mm.column, fx), fx)
    for mm in measures:
        if mm.kind == "topk":
            continue
        if mm.column in col_f and mm.kind in ("sum", "csum"):
            mm.f = min(col_f[mm.column], row_exponent(mm.lo, mm.hi))
        calibrate_measure(mm, table=table, m=m, l0=l0, noise=noise, share_eps=share_eps[mm.key],
                   share_rho=share_rho[mm.key], q_delta=q_delta, grouped=grouped)
    if topk is not None:
        calibrate_topk(topk, next(x for x in measures if x.key == topk.score_key), m=m,
                        noise=noise, share_eps=share_eps[topk.key],
                        share_rho=share_rho[topk.key], level=float(level))
        kk = "the group shown was" if topk.k == 1 else f"the {topk.k} groups shown were"
        rounds = "1 round" if topk.k == 1 else f"{topk.k} rounds"
        notes.append(
            f"{kk} chosen by noisy max ({rounds} of the exponential mechanism at epsilon "
            f"{topk.round_epsilon:.4g} each) among all "
            f"{'selected' if select is not None else 'candidate'} groups, before their values "
            f"were measured"
        )
    event = plan_event([mm.event for mm in measures])
    if select is not None:
        how = ("discrete Gaussian" if noise == GAUSSIAN else "discrete Laplace")
        notes.insert(0,
            f"groups were selected privately ({how} noise on distinct-unit counts, threshold "
            f"{select.threshold}; delta {q_delta:g}); groups with few units are not shown"
        )
    return Plan(
        spec=spec,
        table=table,
        catalog=catalog,
        measures=measures,
        aggs=agg_plans,
        group_mode=group_mode,
        keys=keys,
        key_sources=key_sources,
        epsilon=eps if noise == LAPLACE else (eps if rho is None else float("nan")),
        rho=rho_total,
        delta=q_delta,
        noise=noise,
        level=float(level),
        m=m,
        g=g,
        l0=l0,
        event=event,
        notes=notes,
        charge_delta=charge_delta,
        weights={str(k): float(v) for k, v in (weights or {}).items()},
    )


def top_k_request(spec: dsql.QuerySpec) -> tuple[int, bool, int] | str | None:
    """``(aggregate index, descending, k)`` when the query asks for the top ``k`` groups by one
    COUNT / COUNT(col) / COUNT(DISTINCT unit) / SUM aggregate (``ORDER BY <it> [DESC|ASC] LIMIT
    k`` with GROUP BY, no HAVING, no OFFSET): those groups are then chosen by noisy max. A
    string (a note) when ORDER BY ... LIMIT is answered by sorting every group's noisy value
    instead (post-processing, still private); None when the query has no LIMIT over groups.
    """
    if not spec.group_by or spec.limit is None or spec.limit < 1:
        return None
    if not spec.order:
        return None
    if spec.having is not None or spec.offset:
        return ("ORDER BY ... LIMIT with HAVING or OFFSET: every group's noisy value is "
                "measured, then filtered, sorted and cut (post-processing); without HAVING/"
                "OFFSET the top groups are chosen by noisy max")
    idx = spec.order_aggs[0] if len(spec.order) == 1 and spec.order_aggs else None
    if idx is None:
        return ("ORDER BY ... LIMIT over anything but one COUNT/SUM aggregate: every group's "
                "noisy value is measured, then sorted and cut (post-processing)")
    call = spec.aggs[idx]
    if call.func not in (dsql.COUNT, dsql.COUNT_COL, dsql.COUNT_UNITS, dsql.SUM):
        return (f"ORDER BY {call.label} LIMIT: ranked on every group's noisy value "
                f"(post-processing); only COUNT and SUM orderings use noisy-max selection")
    return idx, bool(spec.order[0][1]), int(spec.limit)

