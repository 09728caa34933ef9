"""Building a plan: the passes that turn a QuerySpec into a Plan, each small.

Like sqlglot's optimizer, :func:`build_plan` chains the named passes of :data:`PLAN_PASSES` over
a small mutable :class:`Planning` state: the privacy parameters, the group keys and mode, the
query's delta, the budget (ε or ρ), the measurements, the top-k request, the budget split, the
calibration and the event. Each pass reads what the passes before it wrote and public inputs
only (the query, the declarations, the privacy parameters), never the data; each raises a
:class:`~dpkit.engine.plan.model.PlanError` that says what to do, before anything is charged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpkit import events as ev
from dpkit.accounting import zcdp
from dpkit.engine import sql as dsql
from dpkit.engine.plan.calibrate import (
    calibrate_measure,
    calibrate_topk,
    measure_weights,
    plan_event,
)
from dpkit.engine.plan.fixed import fixed_point_exponent, row_exponent
from dpkit.engine.plan.intervals import derive
from dpkit.engine.plan.model import (
    DIAG_KINDS,
    DIAGNOSTICS_SHARE,
    GAUSSIAN,
    LAPLACE,
    MAX_KEYS,
    MAX_TOP_K,
    MIN_QUERY_RHO,
    NOISES,
    AggPlan,
    KeyProduct,
    Measure,
    Plan,
    PlanError,
    check_delta,
    check_epsilon,
)
from dpkit.engine.tables import TableMeta, check_bounds, type_class
from dpkit.engine.totality import is_total


@dataclass
class Planning:
    """The state :data:`PLAN_PASSES` fill in: the request first, then what each pass decides."""

    spec: dsql.QuerySpec
    catalog: dict[str, TableMeta]
    epsilon: float | None
    rho: float | None
    delta: float | None
    noise: str
    level: float
    bounds: dict[str, tuple[float, float]] | None
    budget_delta: float
    gaussian_delta: float | None
    weights: Mapping[str, Any] | None
    accountant: str | None
    diagnostics: bool = True
    # check_parameters: per-query bounds, contribution bounds
    override: dict[str, tuple[float, float]] = field(default_factory=dict)
    m: int = 1
    g: int = 1
    l0: int = 1
    # group_keys
    key_sources: list[tuple[str, Any]] = field(default_factory=list)
    group_mode: str = "none"
    keys: Sequence[tuple[Any, ...]] | None = None
    # query_delta
    total_delta: float = 0.0
    q_delta: float = 0.0
    conv_delta: float = 0.0
    charge_delta: float | None = None
    # privacy_budget
    eps: float = float("nan")
    rho_total: float = 0.0
    # measurements, top_k
    measures: list[Measure] = field(default_factory=list)
    by_key: dict[tuple[Any, ...], Measure] = field(default_factory=dict)
    agg_plans: list[AggPlan] = field(default_factory=list)
    select: Measure | None = None
    topk: Measure | None = None
    notes: list[str] = field(default_factory=list)
    # aggregates over expressions: value column -> (SQL, type, derived range or None)
    derived: dict[str, tuple[str, str, tuple[float, float] | None]] = field(
        default_factory=dict)
    # budget_split
    share_eps: dict[str, float] = field(default_factory=dict)
    share_rho: dict[str, float] = field(default_factory=dict)
    # event
    event: ev.Event = field(default_factory=ev.NoOp)

    @property
    def table(self) -> TableMeta:
        return self.catalog[self.spec.table]

    @property
    def grouped(self) -> bool:
        return bool(self.spec.group_by)


def check_parameters(st: Planning) -> None:
    """Noise kind, interval level, per-query bounds; rows ``m`` and groups ``g`` per unit."""
    if st.noise not in NOISES:
        raise PlanError(f"noise must be one of {', '.join(NOISES)} (got {st.noise!r})")
    if not isinstance(st.diagnostics, bool):
        raise PlanError(f"diagnostics must be True or False (got {st.diagnostics!r})")
    level = st.level
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.5 <= level < 1:
        raise PlanError(f"level must lie in [0.5, 1) (got {level!r}); e.g. level=0.95")
    table = st.table
    for col, pair in (st.bounds or {}).items():
        c = table.column(col)
        st.override[c.name] = check_bounds(pair, c.name)
    st.m = m = 1 if table.record_level else table.max_rows_per_unit
    st.g = min(table.max_groups_per_unit or m, m) if st.grouped else 1
    st.l0 = min(st.g, m) if st.grouped else 1


def group_keys(st: Planning) -> None:
    """Public keys (declared domains, public tables, derived keys' domains, WHERE constants)
    or private partition selection."""
    table = st.table
    public_keys = True
    for k in st.spec.group_by:
        if k.expr is not None or k.source == dsql.PRIVATE_ALIAS:
            dom = key_domain(table, k)
            if dom is None:
                public_keys = False
                st.key_sources.append(("private", None))
            else:
                st.key_sources.append(("domain", dom))
        else:
            st.key_sources.append(("public", k))
    st.group_mode = "none" if not st.grouped else ("public" if public_keys else "select")
    if st.group_mode == "public" and all(s == "domain" for s, _ in st.key_sources):
        total = math.prod(len(v) for _, v in st.key_sources)
        if total > MAX_KEYS:
            raise PlanError(
                f"the declared domains give {total} groups (at most {MAX_KEYS}); group by "
                f"fewer columns"
            )
        st.keys = KeyProduct([v for _, v in st.key_sources])


def key_domain(table: TableMeta, k: dsql.GroupKey) -> list[Any] | None:
    """The public keys of one private or derived GROUP BY key, None when there are none: a
    derived key's domain; the declared domain, cut to the constants of ``WHERE key IN (...)``
    when there are some; or those constants alone (they are public: the query names them)."""
    declared = table.domains.get(k.column) if k.expr is None else None
    if k.domain is None:
        return None if declared is None else list(declared)
    if declared is None:
        values = list(k.domain)
    else:
        wanted = set(k.domain)
        values = [v for v in declared if v in wanted]
    if not values:
        raise PlanError(
            f"GROUP BY {k.column}: no key is left (the WHERE condition keeps none of its "
            f"{'declared ' if declared is not None else ''}keys, or the declared range holds "
            f"no bin), so there is nothing to answer; nothing was charged"
        )
    return values


def query_delta(st: Planning) -> None:
    """The query's delta: partition selection and (approx accountant) Gaussian conversion."""
    spec, budget_delta = st.spec, st.budget_delta
    if st.delta is not None:
        check_delta(st.delta, budget_delta)
    st.total_delta = float(st.delta) if st.delta is not None else budget_delta / 10.0
    st.conv_delta = st.gaussian_delta if st.gaussian_delta else budget_delta
    if st.group_mode == "select":
        if budget_delta <= 0:
            names = ", ".join(k.column for k in spec.group_by)
            raise PlanError(
                f"GROUP BY {names} needs public group keys or a delta: declare the domain "
                f"(add_table(..., domains={{'{spec.group_by[0].column}': [...]}})), or create the "
                f"project with delta > 0 so that groups can be selected privately"
            )
        st.q_delta = st.total_delta
        if st.q_delta <= 0:
            raise PlanError("partition selection needs delta > 0 (e.g. delta=1e-7)")
    if st.noise == GAUSSIAN and st.accountant == "approx":
        st.charge_delta = st.total_delta
        if st.group_mode == "select":  # one delta for the query: half each
            st.q_delta = st.conv_delta = st.total_delta / 2.0
        else:
            st.conv_delta = st.total_delta


def privacy_budget(st: Planning) -> None:
    """The query's ε (Laplace noise) or ρ (Gaussian noise; from ε at the conversion delta)."""
    epsilon, rho = st.epsilon, st.rho
    if st.noise == LAPLACE:
        if rho is not None:
            raise PlanError("rho= goes with noise='gaussian'; with Laplace noise give epsilon=")
        if epsilon is None:
            raise PlanError("give the query's budget: an epsilon (Python epsilon=0.5, command "
                            "line --epsilon 0.5, HTTP \"epsilon\": 0.5) or a target accuracy")
        st.eps = check_epsilon(epsilon)
        st.rho_total = 0.0
        return
    if st.budget_delta <= 0:
        raise PlanError(
            "Gaussian noise needs a project with delta > 0 (it is not pure DP); use "
            "noise='laplace' or create the project with a delta"
        )
    if rho is None:
        if epsilon is None:
            raise PlanError("give rho= (zCDP) or epsilon= for Gaussian noise")
        st.eps = check_epsilon(epsilon)
        st.rho_total = float(zcdp.epsilon_to_rho(st.eps, st.conv_delta))
        return
    if epsilon is not None:
        raise PlanError("give rho= or epsilon=, not both")
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not (
        math.isfinite(rho) and MIN_QUERY_RHO <= rho <= 50
    ):
        raise PlanError(f"rho must be a number in [{MIN_QUERY_RHO:g}, 50] (got {rho!r}); "
                        f"e.g. rho=0.05")
    st.rho_total = float(rho)
    st.eps = float("nan")


def add_measure(st: Planning, kind: str, column: str | None = None,
                q: float | None = None) -> Measure:
    """The measurement ``(kind, column, q)``: a new one, or the one already planned (shared)."""
    ident = (kind, column, q)
    if ident in st.by_key:
        return st.by_key[ident]
    mm = Measure(key=f"__m{len(st.measures)}", kind=kind, column=column, q=q)
    st.measures.append(mm)
    st.by_key[ident] = mm
    return mm


def column_bounds(st: Planning, column: str, call: dsql.AggCall) -> tuple[float, float]:
    """The clamp of ``column``: the query's ``bounds=`` first, else the declared bounds."""
    if column in st.override:
        return st.override[column]
    b = st.table.bounds_for(column)
    if b is None:
        raise PlanError(
            f"{call.label} needs bounds for column {column!r}: ask the data owner to declare "
            f"them (dpkit add-table ... --bounds {column}=LOW:HIGH --replace; in Python "
            f"add_table(..., bounds={{'{column}': (low, high)}})), or from Python pass "
            f"bounds={{'{column}': (low, high)}} with the query. Values outside are clamped. "
            f"Nothing was charged."
        )
    return b


def expression_column(st: Planning, call: dsql.AggCall, *, need_range: bool,
                      ) -> tuple[float, float]:
    """Register the value column of an aggregate over an expression; its derived range.

    The range comes from the columns' bounds by interval arithmetic (:func:`derive`; refused
    with the reason when it cannot be derived). A count needs no range: when the expression
    cannot be bounded, ``COUNT(expr)`` counts the rows where it is not NULL, unclamped."""
    key = f"{dsql.EXPR_SOURCE}.{call.column}"
    known = st.derived.get(key)
    if known is not None and (known[2] is not None or not need_range):
        return known[2] or (0.0, 0.0)
    table = st.table

    def bounds(col: str) -> tuple[float, float] | None:
        name = table.column(col).name
        return st.override.get(name) or table.bounds_for(name)

    try:
        d = derive(call.expr, bounds=bounds, kind=lambda c: type_class(table.column(c).type),
                   label=call.label,
                   total=lambda n: is_total(n, lambda c: table.column(c.name).type))  # type: ignore[arg-type]
    except PlanError:
        if need_range:
            raise
        st.derived[key] = (f"TRY({call.expr})", "VARCHAR", None)
        return 0.0, 0.0
    st.derived[key] = (d.sql, "DOUBLE", (d.lo, d.hi))
    if d.columns:
        given = ", ".join(f"{c} in [{lo:g}, {hi:g}]" for c, lo, hi in d.columns)
        st.notes.append(f"{call.label}: values in [{d.lo:g}, {d.hi:g}], derived from "
                        f"{given} by interval arithmetic (columns clamped to their bounds first)")
    return d.lo, d.hi


def raw_expression_column(st: Planning, call: dsql.AggCall) -> str:
    """``COUNT(DISTINCT expr)``: the expression's values as written (under TRY, unclamped:
    clamping would merge distinct values)."""
    key = f"{dsql.EXPR_SOURCE}.{call.column}_raw"
    st.derived[key] = (f"TRY({call.expr})", "VARCHAR", None)
    return key


def nonnull_count(st: Planning, source: str, column: str) -> Measure:
    """``COUNT(column)``: rows where it is not NULL/NaN."""
    # a column the owner declared complete has COUNT(col) = COUNT(*) (bounded rows): one
    # measurement of the row count serves both, and AVG/VAR of it
    table = st.table
    if source == dsql.PRIVATE_ALIAS and table.column(column).name in table.not_null:
        mm = add_measure(st, "rows")
        mm.label = "COUNT(*)"
        return mm
    mm = add_measure(st, "nonnull", f"{source}.{column}")
    mm.label = f"COUNT({column})" if source != dsql.EXPR_SOURCE else "COUNT(<expression>)"
    return mm


def measurements(st: Planning) -> None:
    """The measurements: partition selection (undeclared keys), then each aggregate's."""
    if st.group_mode == "select":
        st.select = add_measure(st, "select")
        st.select.label = "partition selection (distinct units per group)"
    for call in st.spec.aggs:
        st.agg_plans.append(aggregate_plan(st, call))


def aggregate_plan(st: Planning, call: dsql.AggCall) -> AggPlan:
    """The measurements one aggregate needs, by role (count, sum, csum, csq, quant)."""
    roles: dict[str, str] = {}
    lo = hi = 0.0
    if call.func == dsql.COUNT:
        if st.select is not None and st.m == 1:
            roles["count"] = st.select.key
        else:
            mm = add_measure(st, "rows")
            mm.label = "COUNT(*)"
            roles["count"] = mm.key
    elif call.func == dsql.COUNT_UNITS:
        if st.select is not None:
            roles["count"] = st.select.key
        else:
            mm = add_measure(st, "units")
            mm.label = call.label
            roles["count"] = mm.key
    elif call.func == dsql.COUNT_COL:
        assert call.source is not None and call.column is not None  # only COUNT(*) has None
        if call.source == dsql.EXPR_SOURCE:
            expression_column(st, call, need_range=False)
        roles["count"] = nonnull_count(st, call.source, call.column).key
    elif call.func == dsql.COUNT_DISTINCT:
        ref = (raw_expression_column(st, call) if call.source == dsql.EXPR_SOURCE
               else f"{call.source}.{call.column}")
        mm = add_measure(st, "distinct", ref)
        mm.label = call.label
        roles["count"] = mm.key
    else:
        assert call.source is not None and call.column is not None  # only COUNT(*) has None
        if call.source == dsql.EXPR_SOURCE:
            lo, hi = expression_column(st, call, need_range=True)
        else:
            lo, hi = column_bounds(st, call.column, call)
        ref = f"{call.source}.{call.column}"
        what = (call.column if call.source != dsql.EXPR_SOURCE
                else f"<value of {call.label}>")
        if call.func == dsql.SUM:
            mm = add_measure(st, "sum", ref)
            mm.label, mm.lo, mm.hi = f"SUM({what})", lo, hi
            roles["sum"] = mm.key
        elif call.func == dsql.QUANTILE:
            mm = add_measure(st, "quant", ref, call.q)
            mm.label, mm.lo, mm.hi = call.label, lo, hi
            roles["quant"] = mm.key
        else:
            cnt = nonnull_count(st, call.source, call.column)
            s = add_measure(st, "csum", ref)
            s.label, s.lo, s.hi = f"SUM({what} - mid)", lo, hi
            roles["count"], roles["csum"] = cnt.key, s.key
            if call.func != dsql.AVG:
                s2 = add_measure(st, "csq", ref)
                s2.label, s2.lo, s2.hi = f"SUM(({what} - mid)^2)", lo, hi
                roles["csq"] = s2.key
    return AggPlan(call=call, measures=roles, lo=lo, hi=hi)


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



def top_k(st: Planning) -> None:
    """Top-k groups by noisy max (``ORDER BY <COUNT/SUM> [DESC|ASC] LIMIT k``), or a note."""
    request = top_k_request(st.spec)
    if request is None:
        return
    if isinstance(request, str):
        st.notes.append(request)
        return
    agg_index, desc, k_top = request
    ap = st.agg_plans[agg_index]
    if st.keys is None and k_top > MAX_TOP_K:
        raise PlanError(
            f"LIMIT {k_top} asks for the top {k_top} groups by noisy max; with undeclared "
            f"keys at most {MAX_TOP_K} can be chosen (each of the k rounds gets 1/k of the "
            f"budget, so beyond a few hundred the choice is noise). Ask for LIMIT "
            f"{MAX_TOP_K} or fewer, or declare the keys (domains=) to see every group. "
            f"Nothing was charged"
        )
    if st.keys is not None and k_top >= len(st.keys):
        st.notes.append(f"LIMIT {k_top} keeps all {len(st.keys)} declared groups: no selection "
                        f"needed; ORDER BY sorts the noisy values (post-processing)")
        return
    topk = st.topk = add_measure(st, "topk")
    topk.k = k_top
    topk.desc = desc
    topk.score_key = ap.measures.get("count") or ap.measures["sum"]
    topk.score_label = ap.call.label
    topk.label = (f"top-{k_top} groups by {ap.call.label} "
                  f"{'DESC' if desc else 'ASC'} (noisy max)")


def diagnostics(st: Planning) -> None:
    """Rows dropped by the per-unit cap and values clamped by the bounds, measured privately.

    Three kinds of whole-query counts (never per group), each of sensitivity ``m``: ``dkept``
    the rows read after bounding (the denominator), ``ddrop`` the rows the per-unit caps
    dropped (user level only; each unit's dropped rows count at most ``m``, so the estimate is
    a lower bound), ``dclamp`` per bounded column and bounds the rows whose value lies outside
    them. Off with ``diagnostics=False``; none at record level without bounded columns, and
    none for a query without aggregates (its keys are all it releases: nothing to bias).
    """
    if not st.diagnostics or not st.spec.aggs:
        return
    clamped: dict[tuple[str, float, float], Measure] = {}
    for mm in st.measures:
        # an aggregate over an expression clamps the columns inside it first (its value is
        # always in range): those clamps are not counted here
        if (mm.kind in ("sum", "csum", "quant") and mm.column is not None
                and not mm.column.startswith(dsql.EXPR_SOURCE + ".")):
            clamped.setdefault((mm.column, mm.lo, mm.hi), mm)
    if st.table.record_level and not clamped:
        return
    kept = add_measure(st, "dkept")
    kept.label = "diagnostics: rows read after bounding"
    if not st.table.record_level:
        drop = add_measure(st, "ddrop")
        drop.label = (f"diagnostics: rows dropped by the per-unit cap (at most {st.m} "
                      f"counted per unit)")
    for col, lo, hi in clamped:
        dm = add_measure(st, "dclamp", col)
        dm.lo, dm.hi = lo, hi
        dm.label = f"diagnostics: {col.split('.', 1)[1]} outside [{lo:g}, {hi:g}]"


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
