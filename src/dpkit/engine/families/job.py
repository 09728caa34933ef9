"""The job model of the release families: what a family asks, and what is decided before reading.

A caller asks through one of the *asks* (:class:`RangesAsk`, :class:`CdfAsk`,
:class:`MarginalsAsk`, :class:`SyntheticAsk`) and a privacy :class:`Target`; planning
(:mod:`dpkit.engine.families.plan`) turns them into a :class:`Job`: the public grid, the workload
and its strategy (a ``WorkloadPlan``), the event that will be charged, and the notes and ledger
details, all from public information (declarations, the query's parameters), never from rows.

:class:`Context` is what the families need from the curator, and nothing more: the tables'
declarations, the ledger, the backend, the noise source, the curator's lock, the folder that
caches optimised strategies, and the analyst charged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpkit import events as ev
from dpkit.engine import plan as dplan
from dpkit.engine import sql as dsql
from dpkit.engine.backend_duckdb import DuckBackend
from dpkit.engine.families.axes import Axis
from dpkit.engine.families.diagnostics import DiagCount, family_budget
from dpkit.engine.ledger import Ledger
from dpkit.engine.roles import headroom
from dpkit.engine.spec import QueryError, where_sql
from dpkit.engine.tables import TableMeta, quote_ident
from dpkit.mechanisms import validate
from dpkit.noise import Source

if TYPE_CHECKING:  # the release room loads scipy: imported where a plan is made, not here
    from dpkit.release.mechanism import WorkloadPlan

__all__ = [
    "OPTIMIZE_CELLS",
    "Ask",
    "CdfAsk",
    "Context",
    "Job",
    "MarginalsAsk",
    "Privacy",
    "RangesAsk",
    "SyntheticAsk",
    "Target",
    "jsonable",
    "new_job",
    "resolve_privacy",
    "table_meta",
]

#: the strategy optimiser runs by default up to this many cells (cached); beyond, a tree or
#: the identity (see each family)
OPTIMIZE_CELLS = 1024


@dataclass(frozen=True)
class Context:
    """What a release family needs from the curator (built by it for each call)."""

    tables: Callable[[], dict[str, TableMeta]]
    ledger: Ledger
    backend: DuckBackend
    source: Source | None
    lock: AbstractContextManager[Any]
    #: optimised strategies are public (they depend only on the workload): kept on disk in the
    #: project folder so that later processes (the CLI) skip the optimisation
    strategy_cache: Path | None
    analyst: str
    #: compile DuckDB tables' statements in the portable form too, as Spark tables' are
    #: (tests comparing the engines: the same rows kept by bounding, the same histograms)
    portable: bool = False

    @property
    def insecure(self) -> bool:
        return bool(self.source is not None and self.source.insecure)

    def remaining(self) -> float:
        """The epsilon the analyst's next charge may use (its cap's headroom, bounded by the
        project's)."""
        return headroom(self.ledger, self.analyst)


@dataclass(frozen=True)
class Target:
    """The privacy the caller gives: ``epsilon`` (with ``delta``: Gaussian noise) or ``rho``."""

    epsilon: float | None = None
    rho: float | None = None
    delta: float | None = None


@dataclass(frozen=True)
class Privacy:
    """The privacy target of one release, validated, in dpkit.release's terms."""

    epsilon: float | None
    rho: float | None
    delta: float | None  # with epsilon: Gaussian noise at the largest rho meeting (eps, delta)
    delta_share: float | None  # the delta booked in an 'approx' ledger for Gaussian noise

    @property
    def kwargs(self) -> dict[str, float | None]:
        return {"epsilon": self.epsilon, "rho": self.rho, "delta": self.delta}

    @property
    def gaussian(self) -> bool:
        return self.rho is not None or self.delta is not None


@dataclass(frozen=True, kw_only=True)
class Ask:
    """What every family asks besides its own columns (see the curator's methods)."""

    table: str
    where: str | None = None
    bins: int | None = None
    bounds: Mapping[str, Any] | None = None
    level: float = 0.95
    #: the SQL text that asked (the SQL forms); None: a text is written from the ask
    query: str | None = None
    #: the FROM alias the WHERE condition of a SQL form may use
    where_alias: str | None = None
    #: measure rows dropped by the cap / outside the bounds with DIAGNOSTICS_SHARE of the
    #: budget (:mod:`.diagnostics`); False: the family gets the whole budget
    diagnostics: bool = True


@dataclass(frozen=True, kw_only=True)
class RangesAsk(Ask):
    column: str
    ranges: Sequence[tuple[float, float]]
    strategy: Any = None  # a strategy name or object, as dpkit.release.plan_workload takes


@dataclass(frozen=True, kw_only=True)
class CdfAsk(Ask):
    """The CDF of ``column``; with ``probabilities``: quantiles read off it."""

    column: str
    probabilities: Sequence[float] | None = None
    strategy: Any = None
    #: the grid's cells: "linear", "log" or "auto" (:func:`.axes.ordered_axis`)
    grid: str = "linear"


@dataclass(frozen=True, kw_only=True)
class MarginalsAsk(Ask):
    columns: Sequence[str | Sequence[str]]
    k: int | None = None
    strategy: Any = None


@dataclass(frozen=True, kw_only=True)
class SyntheticAsk(Ask):
    columns: Sequence[str] | str
    rows: int | None = None
    method: str = "auto"  # factorization up to MAX_PRODUCT_CELLS cells, MST beyond
    k: int | None = None
    rounds: int = 20
    #: MST: a column measured with every selected pair (e.g. the label a model will predict)
    target: str | None = None


@dataclass
class Job:
    """A planned release: everything decided from public information before data are read."""

    kind: str
    meta: TableMeta
    axes: list[Axis]
    where_sql: str | None
    query: str
    privacy: Privacy
    event: ev.Event
    level: float
    plan: WorkloadPlan | None = None
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    cell_map: np.ndarray | None = None  # ranges: grid cell -> reduced segment (-1: dropped)
    #: the diagnostic share of the budget (0: none measured) and the counts it pays for
    diag_share: float = 0.0
    diag: list[DiagCount] = field(default_factory=list)
    #: the family's own event (``event`` composes it with the diagnostics')
    family_event: ev.Event | None = None

    def family_privacy(self) -> dict[str, float | None]:
        """The family's own privacy arguments: ``(1 - diag_share)`` of the target."""
        return family_budget(self.privacy, self.diag_share)

    @property
    def contributions(self) -> int:
        return 1 if self.meta.record_level else int(self.meta.max_rows_per_unit)

    @property
    def cells(self) -> int:
        return int(math.prod(a.size for a in self.axes))

    def workload_plan(self) -> WorkloadPlan:
        """The strategy plan (every family but MWEM synthetic data has one)."""
        if self.plan is None:  # pragma: no cover - guards the planning
            raise RuntimeError(f"the {self.kind} job has no workload plan")
        return self.plan


def resolve_privacy(ledger: Ledger, target: Target, analyst: str | None = None) -> Privacy:
    """Validate ``target`` against the project's budget: epsilon (pure DP, Laplace noise),
    epsilon with delta (Gaussian noise) or rho (zCDP), with the delta an 'approx' ledger books
    (by default a tenth of ``analyst``'s δ: the project's, or their own cap)."""
    cfg = ledger.config
    epsilon, rho, delta = target.epsilon, target.rho, target.delta
    if rho is not None:
        if epsilon is not None:
            raise QueryError("give epsilon= (with delta= for Gaussian noise) or rho=, not both")
        try:
            r = validate.check_rho(rho)
        except (TypeError, ValueError) as exc:
            raise QueryError(str(exc)) from None
        share = None
        if cfg.accountant == "approx":
            share = (float(delta) if delta is not None
                     else ledger.delta_for(analyst) / 10.0)
            if not 0.0 < share <= cfg.delta:
                raise QueryError(
                    f"delta must lie in (0, {cfg.delta:g}] (the project's delta) (got {delta!r})")
        return Privacy(None, r, None, share)
    if epsilon is None:
        raise QueryError(
            "give the budget to spend: epsilon= (pure DP, discrete Laplace noise), epsilon= with "
            "delta= (discrete Gaussian noise) or rho= (zCDP)"
        )
    eps = dplan.check_epsilon(epsilon)
    if delta is None:
        return Privacy(eps, None, None, None)
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (
        0.0 < float(delta) <= cfg.delta
    ):
        raise QueryError(
            f"delta must lie in (0, {cfg.delta:g}] (the project's delta) for Gaussian noise "
            f"(got {delta!r}); leave it out for pure-DP Laplace noise"
        )
    share = float(delta) if cfg.accountant == "approx" else None
    return Privacy(eps, None, float(delta), share)


def table_meta(ctx: Context, table: Any) -> TableMeta:
    """The private table named ``table`` (case-insensitive when unambiguous)."""
    catalog = ctx.tables()
    if not isinstance(table, str):
        raise QueryError(f"name the table by a string (got {table!r})")
    meta = catalog.get(table)
    if meta is None:
        folded = [m for n, m in catalog.items() if n.lower() == table.lower()]
        meta = folded[0] if len(folded) == 1 else None
    if meta is None:
        known = ", ".join(sorted(catalog)) or "(none yet)"
        raise QueryError(f"unknown table {table!r}; registered tables: {known}")
    if meta.public:
        raise QueryError(
            f"{meta.name!r} is a public table (no privacy, nothing to release): query it "
            f"directly")
    return meta


def validated_where(ctx: Context, meta: TableMeta, where: str | None,
                    alias: str | None) -> str | None:
    """Validate ``where`` with the curator's own SQL front end; DuckDB text over the alias
    ``"__t"``, or None."""
    if where is None:
        return None
    if not isinstance(where, str) or not where.strip():
        raise QueryError("where= must be a SQL condition, e.g. \"ward = 'A'\"")
    frm = quote_ident(meta.name) + (f" AS {quote_ident(alias)}" if alias else "")
    spec = dsql.parse_query(f"SELECT COUNT(*) FROM {frm} WHERE {where}", ctx.tables())
    if (spec.joins or spec.group_by or spec.having is not None or spec.order
            or spec.limit is not None or spec.offset is not None or len(spec.aggs) != 1
            or spec.where is None or spec.table != meta.name):
        raise QueryError(
            f"where= must be one condition on the columns of {meta.name!r} (got {where!r})")
    return where_sql(spec)


def new_job(ctx: Context, kind: str, meta: TableMeta, axes: list[Axis], ask: Ask,
            target: Target, *, default_query: str, where_alias: str | None) -> Job:
    """A job with its level, privacy and WHERE validated (no plan or event yet)."""
    try:
        lvl = validate.check_level(ask.level)
    except (TypeError, ValueError) as exc:
        raise QueryError(str(exc)) from None
    privacy = resolve_privacy(ctx.ledger, target, ctx.analyst)
    where = validated_where(ctx, meta, ask.where, where_alias)
    text = ask.query if ask.query is not None else default_query + (
        f" WHERE {ask.where}" if ask.where is not None else "")
    if not isinstance(ask.diagnostics, bool):
        raise QueryError(f"diagnostics must be True or False (got {ask.diagnostics!r})")
    return Job(kind=kind, meta=meta, axes=axes, where_sql=where, query=text, privacy=privacy,
               event=ev.NoOp(), level=lvl,
               diag_share=dplan.DIAGNOSTICS_SHARE if ask.diagnostics else 0.0)


def jsonable(obj: Any) -> Any:
    """JSON-ready copies for the ledger (numpy scalars to Python; NaN/inf to None)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)
