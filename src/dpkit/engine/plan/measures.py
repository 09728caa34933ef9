"""The passes that choose the measurements: each aggregate's, top-k's and the diagnostics'.

An aggregate becomes the integer-valued measurements it is computed from (``rows``, ``sum``,
``csum``, ``csq``, ``quant``, ...; the table in :mod:`dpkit.engine.plan`), shared between
aggregates that need the same one; ``ORDER BY <COUNT/SUM> LIMIT k`` adds a noisy-max selection,
and the diagnostics add whole-query counts of the rows bounding changed. Public inputs only.
"""

from __future__ import annotations

from dpkit.engine import sql as dsql
from dpkit.engine.plan.intervals import derive
from dpkit.engine.plan.model import MAX_TOP_K, AggPlan, Measure, PlanError
from dpkit.engine.plan.planning import Planning, add_measure
from dpkit.engine.tables import type_class
from dpkit.engine.totality import is_total


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
