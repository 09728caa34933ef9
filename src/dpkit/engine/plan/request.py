"""The passes that read the request: parameters, group keys, the query's delta, its budget.

Each reads public inputs only (the query, the declarations, the privacy parameters) and raises
a :class:`~dpkit.engine.plan.model.PlanError` that says what to do, before anything is charged.
"""

from __future__ import annotations

import math
from typing import Any

from dpkit.accounting import zcdp
from dpkit.engine import sql as dsql
from dpkit.engine.plan.model import (
    GAUSSIAN,
    LAPLACE,
    MAX_KEYS,
    MIN_QUERY_RHO,
    NOISES,
    KeyProduct,
    PlanError,
    check_delta,
    check_epsilon,
)
from dpkit.engine.plan.planning import Planning
from dpkit.engine.tables import TableMeta, check_bounds


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
