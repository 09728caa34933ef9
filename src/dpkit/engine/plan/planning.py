"""The state a plan is built in: the request, then what each pass of :data:`PLAN_PASSES` decides.

:class:`Planning` is the small mutable record the passes of :mod:`.build` fill in, in order;
:func:`add_measure` is the one way a pass adds (or shares) a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpkit import events as ev
from dpkit.engine import sql as dsql
from dpkit.engine.plan.model import AggPlan, Measure
from dpkit.engine.tables import TableMeta


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
