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

**Budget split**: each measurement gets an equal share of the query's epsilon (Laplace noise:
``ε_i = ε / k``, basic composition is exact for pure DP) or of its ρ (Gaussian noise). Private
partition selection, when the group keys are not public, takes one more share and ``delta``.

**Partition selection** (Korolova et al. 2009; Wilson et al. 2020): the number of distinct units
per group gets discrete Laplace noise of scale ``s = L0/ε_sel``; a group is released iff its
noisy count is at least ``T = 1 + ceil(s·ln(L0 / (δ (1+q))))`` with ``q = e^{-1/s}``, so that a
group made of a single unit appears with probability ``L0·q^{T-1}/(1+q) <= δ`` in total. Event:
``ApproxDP(ε_sel, δ)``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from sqlglot import exp

from dpkit import events as ev
from dpkit.engine import sql as dsql
from dpkit.engine.tables import TableMeta, check_bounds, quote_ident, type_class
from dpkit.mechanisms.plan import discrete_gaussian_plan, discrete_laplace_plan

__all__ = ["Measure", "Plan", "PlanError", "build_plan"]

LAPLACE = "laplace"
GAUSSIAN = "gaussian"
NOISES = (LAPLACE, GAUSSIAN)
MAX_QUERY_EPSILON = 100.0
MAX_KEYS = 1_000_000
# Per-row fixed-point magnitude: at most 2**32 (sums of 2**30 rows stay in int64) and small
# enough that the noise scale in grid units stays below the samplers' limits.
_ROW_BITS = 32
_MAX_GRID_SCALE_BITS = 38
QUANTILE_BINS = 1000
# Share of each quantile's (per group) epsilon spent on its interval: two more exponential
# mechanism releases (low and high end), each getting half of it; the point estimate keeps the
# rest. Powers of two, so the three shares add back to the charged epsilon exactly.
QUANTILE_CI_SHARE = 0.5


class PlanError(dsql.QueryError):
    """The query is valid SQL but cannot be answered as asked (bounds, budget parameters)."""


@dataclass
class Measure:
    """One noisy, integer-valued aggregate (a vector over the groups)."""

    key: str
    kind: str  # rows | nonnull | units | sum | csum | csq | quant | select
    column: str | None = None
    label: str = ""
    lo: float = 0.0
    hi: float = 0.0
    f: int = 0  # values are integers in units of 2**-f
    bound: int = 1  # per-row |integer| bound
    l1: int = 1
    l2: float = 1.0
    weight: float = 1.0
    noise: str = LAPLACE  # laplace | gaussian | exponential | threshold
    epsilon: float = 0.0
    rho: float = 0.0
    scale: float = 0.0  # discrete Laplace scale (integer units)
    sigma2: float = 0.0  # discrete Gaussian variance (integer units)
    q: float | None = None
    candidates: np.ndarray | None = None
    quant_sensitivity: float = 0.0
    quant_epsilon: float = 0.0  # per group
    sql_col: str = ""
    count_col: str = ""  # csum: exact = SUM(v) - COUNT(v)·center, derived from the sum column
    center: int = 0  # csum: round(mid·2^f), subtracted from every row's integer
    threshold: int = 0
    delta: float = 0.0
    event: ev.Event = field(default_factory=ev.NoOp)

    @property
    def unit(self) -> float:
        return math.ldexp(1.0, -self.f)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "measurement": self.label,
            "mechanism": {"laplace": "discrete Laplace", "gaussian": "discrete Gaussian",
                          "exponential": "exponential mechanism",
                          "threshold": "discrete Laplace + threshold"}[self.noise],
            "epsilon": self.epsilon if self.noise != GAUSSIAN else None,
            "rho": self.rho if self.noise == GAUSSIAN else None,
            "sensitivity": (self.l1 if self.noise != GAUSSIAN else self.l2) * self.unit
            if self.kind != "quant" else self.quant_sensitivity,
        }
        if self.kind == "quant":
            point = self.epsilon * (1.0 - QUANTILE_CI_SHARE)
            end = self.epsilon * QUANTILE_CI_SHARE / 2.0
            d["split"] = f"point {point:.6g} + interval low {end:.6g} + interval high {end:.6g}"
        if self.kind == "select":
            d["delta"] = self.delta
            d["threshold"] = self.threshold
        return d


@dataclass
class AggPlan:
    """How one analyst-facing aggregate is computed from measurements."""

    call: dsql.AggCall
    measures: dict[str, str]  # role -> measure key (count, sum, csum, csq, quant)
    lo: float = 0.0
    hi: float = 0.0


@dataclass
class Plan:
    spec: dsql.QuerySpec
    table: TableMeta
    catalog: dict[str, TableMeta]
    measures: list[Measure]
    aggs: list[AggPlan]
    group_mode: str  # none | public | select
    keys: list[tuple[Any, ...]] | None  # public keys known in advance (domains)
    key_sources: list[tuple[str, Any]]  # per group column: ("domain", values) | ("public", sql)
    epsilon: float
    rho: float
    delta: float
    noise: str
    level: float
    m: int
    g: int
    l0: int
    event: ev.Event
    notes: list[str] = field(default_factory=list)

    def measure(self, key: str) -> Measure:
        for x in self.measures:
            if x.key == key:
                return x
        raise KeyError(key)

    def split(self) -> list[dict[str, Any]]:
        return [m.describe() for m in self.measures]


# ------------------------------------------------------------------------------ parameters


def check_epsilon(epsilon: Any, what: str = "epsilon") -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
        raise PlanError(f"{what} must be a number > 0 (got {epsilon!r}); e.g. {what}=0.5")
    e = float(epsilon)
    if math.isnan(e) or e <= 0:
        raise PlanError(f"{what} must be > 0 (got {epsilon!r}); e.g. {what}=0.5")
    if not math.isfinite(e) or e > MAX_QUERY_EPSILON:
        raise PlanError(
            f"{what}={epsilon!r} offers no meaningful privacy; one query may spend at most "
            f"{MAX_QUERY_EPSILON:g} (typical values are 0.1 to 2)"
        )
    return e


def check_delta(delta: Any, budget_delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise PlanError(f"delta must be a number in (0, 1) (got {delta!r}); e.g. delta=1e-7")
    d = float(delta)
    if math.isnan(d) or not 0.0 <= d < 1.0:
        raise PlanError(f"delta must lie in [0, 1) (got {delta!r}); e.g. delta=1e-7")
    if d > budget_delta:
        raise PlanError(
            f"delta={d:g} exceeds the project's total delta {budget_delta:g}; ask for less"
        )
    return d


def _fixed_point_exponent(magnitude: float, l1_rows: int, epsilon_share: float) -> int:
    """``f`` so that ``magnitude·2^f <= 2^32`` and the grid noise scale stays below 2^38.

    Depends only on public parameters (bounds, contribution bound, the budget share).
    """
    if magnitude <= 0:
        return 0
    top = math.floor(_ROW_BITS - math.log2(magnitude))
    # noise scale in grid units ≈ l1_rows · magnitude · 2^f / ε  <= 2^38
    cap = math.floor(_MAX_GRID_SCALE_BITS - math.log2(l1_rows * magnitude / epsilon_share))
    f = min(top, cap)
    return max(min(f, 1000), -1000)


def round_half_away(x: Fraction) -> int:
    """Round to the nearest integer, halves away from zero (DuckDB's ``round`` on DOUBLE)."""
    n = math.floor(abs(x) + Fraction(1, 2))
    return n if x >= 0 else -n


def row_exponent(lo: float, hi: float) -> int:
    """``F``: the finest fixed-point exponent for values in ``[lo, hi]`` (``|x|·2^F <= 2^32``).

    Depends on the bounds only, so the integer column ``round(clamp(x)·2^F)`` can be computed once
    when a table is loaded (see :func:`fixed_column_name`); a query whose budget share asks for a
    coarser grid ``f < F`` shifts those integers right by ``F - f`` (see :func:`shift_round`).
    """
    magnitude = max(abs(lo), abs(hi))
    if magnitude <= 0:
        return 0
    return max(min(math.floor(_ROW_BITS - math.log2(magnitude)), 1000), -1000)


def shift_round(v: int, d: int) -> int:
    """``floor((v + 2^(d-1)) / 2^d)``: ``v·2^-d`` rounded half up; monotone in ``v``.

    The SQL compiled for sums applies exactly this to every row's integer (``>>`` on BIGINT is an
    arithmetic shift in DuckDB); for ``|v| <= 2^32`` and ``d >= 34`` it is 0.
    """
    if d <= 0:
        return v
    if d >= _SHIFT_ZERO:
        return 0
    return (v + (1 << (d - 1))) >> d


_SHIFT_ZERO = 34
FIXED_PREFIX = "__dpfx_"


def fixed_column_name(column: str, lo: float, hi: float) -> str:
    """Name of the hidden, materialised column ``round(clamp(column, lo, hi)·2^F)`` (BIGINT).

    The name is a hash of the column, the exact bounds and ``F``: a column computed for other
    bounds can never be mistaken for this one, so changed bounds can never use stale integers
    (the stale-truncation-bound bug of OpenDP #2949 cannot happen by construction).
    """
    import hashlib

    tag = f"{column}\x00{float(lo).hex()}\x00{float(hi).hex()}\x00{row_exponent(lo, hi)}"
    return FIXED_PREFIX + hashlib.sha256(tag.encode()).hexdigest()[:24]


def unit_rows_column_name(unit: str) -> str:
    """Name of the hidden column holding, on every row, its unit's row count in the table.

    Computed once at load (``COUNT(*) OVER (PARTITION BY unit)``); a query without joins keeps
    every row of a unit whose *total* is at most ``m`` without any per-unit work, because its
    rows after ``WHERE`` are a subset of its rows in the table. Named after the unit column so a
    reload with another privacy unit can never reuse it.
    """
    import hashlib

    return FIXED_PREFIX + "n_" + hashlib.sha256(unit.encode()).hexdigest()[:21]


def fixed_column_sql(col_sql: str, lo: float, hi: float, cls: str) -> str:
    """SQL for ``round(clamp(col)·2^F)`` as BIGINT (NULL for NULL/NaN), ``F = row_exponent``."""
    x = clamp_sql(col_sql, lo, hi, cls)
    return f"CAST(round({x} * {_pow2(row_exponent(lo, hi))}) AS BIGINT)"


def _grid_bound(magnitude: float, f: int) -> int:
    return max(1, math.ceil(math.ldexp(magnitude, f)))


# ------------------------------------------------------------------------------ the plan


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
) -> Plan:
    """The data-independent plan for ``spec`` at the given privacy parameters."""
    if noise not in NOISES:
        raise PlanError(f"noise must be one of {', '.join(NOISES)} (got {noise!r})")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.5 <= level < 1:
        raise PlanError(f"level must lie in [0.5, 1) (got {level!r}); e.g. level=0.95")
    table = catalog[spec.table]
    override = {}
    for col, pair in (bounds or {}).items():
        c = table.column(col)
        override[c.name] = check_bounds(pair, c.name)
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
            conv = gaussian_delta if gaussian_delta else budget_delta
            rho_total = float(zcdp.epsilon_to_rho(eps, conv))
        else:
            if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not (
                math.isfinite(rho) and 0 < rho <= 50
            ):
                raise PlanError(f"rho must be a number in (0, 50] (got {rho!r}); e.g. rho=0.05")
            rho_total = float(rho)
            eps = float("nan")

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
    keys: list[tuple[Any, ...]] | None = None
    if group_mode == "public" and all(s == "domain" for s, _ in key_sources):
        total = math.prod(len(v) for _, v in key_sources)
        if total > MAX_KEYS:
            raise PlanError(
                f"the declared domains give {total} groups (at most {MAX_KEYS}); group by "
                f"fewer columns"
            )
        keys = [tuple(t) for t in itertools.product(*[v for _, v in key_sources])]

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

    select: Measure | None = None
    if group_mode == "select":
        if budget_delta <= 0:
            names = ", ".join(k.column for k in spec.group_by)
            raise PlanError(
                f"GROUP BY {names} needs public group keys or a delta: declare the domain "
                f"(add_table(..., domains={{'{spec.group_by[0].column}': [...]}})), or create the "
                f"project with delta > 0 so that groups can be selected privately"
            )
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
            assert call.column is not None
            mm = measure("nonnull", f"{call.source}.{call.column}")
            mm.label = f"COUNT({call.column})"
            roles["count"] = mm.key
        else:
            assert call.column is not None
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
                c = measure("nonnull", ref)
                c.label = f"COUNT({call.column})"
                s = measure("csum", ref)
                s.label, s.lo, s.hi = f"SUM({call.column} - mid)", lo, hi
                roles["count"], roles["csum"] = c.key, s.key
                if call.func != dsql.AVG:
                    s2 = measure("csq", ref)
                    s2.label, s2.lo, s2.hi = f"SUM(({call.column} - mid)^2)", lo, hi
                    roles["csq"] = s2.key
        agg_plans.append(AggPlan(call=call, measures=roles, lo=lo, hi=hi))

    # A column's bounds must be the same for every measurement that uses it.
    for mm in measures:
        if mm.kind in ("sum", "csum", "csq", "quant"):
            pass

    # --- budget split (equal shares)
    k = len(measures)
    if noise == LAPLACE:
        share_eps = eps / k
        share_rho = 0.0
    else:
        share_rho = rho_total / k
        share_eps = math.sqrt(2.0 * share_rho)  # used for fixed-point sizing and selection
    q_delta = 0.0
    if select is not None:
        q_delta = check_delta(delta, budget_delta) if delta is not None else budget_delta / 10.0
        if q_delta <= 0:
            raise PlanError("partition selection needs delta > 0 (e.g. delta=1e-7)")
    elif delta is not None:
        check_delta(delta, budget_delta)

    # SUM and the centred sum of AVG/VAR share one fixed-point column: the same f
    col_f: dict[str, int] = {}
    for mm in measures:
        if mm.kind in ("sum", "csum"):
            mag = max(abs(mm.lo), abs(mm.hi)) if mm.kind == "sum" else (mm.hi - mm.lo) / 2.0
            fx = _fixed_point_exponent(mag, m, share_eps)
            assert mm.column is not None
            col_f[mm.column] = min(col_f.get(mm.column, fx), fx)
    events: list[ev.Event] = []
    notes: list[str] = []
    for mm in measures:
        if mm.column in col_f and mm.kind in ("sum", "csum"):
            mm.f = min(col_f[mm.column], row_exponent(mm.lo, mm.hi))
        _calibrate(mm, table=table, m=m, l0=l0, noise=noise, share_eps=share_eps,
                   share_rho=share_rho, q_delta=q_delta, grouped=grouped)
        events.append(mm.event)
    event: ev.Event = events[0] if len(events) == 1 else ev.Composed(tuple(events))
    if group_mode == "select":
        notes.append(
            f"groups were selected privately (noisy distinct-unit count >= {select.threshold}; "
            f"delta {q_delta:g}); groups with few units are not shown"
            if select is not None else ""
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
        notes=[n for n in notes if n],
    )


def _dlap_scale(l1: int, epsilon: float) -> float:
    try:
        return discrete_laplace_plan(sensitivity=int(l1), epsilon=epsilon).scale
    except ValueError as exc:
        raise PlanError(str(exc)) from None


def _dgauss_sigma2(l2: float, rho: float) -> float:
    try:
        return discrete_gaussian_plan(sensitivity=l2, rho=rho).sigma2
    except ValueError as exc:
        raise PlanError(str(exc)) from None


def _calibrate(mm: Measure, *, table: TableMeta, m: int, l0: int, noise: str, share_eps: float,
               share_rho: float, q_delta: float, grouped: bool) -> None:
    """Fill in sensitivity, fixed point, noise parameters and the event of one measurement."""
    if mm.kind in ("rows", "nonnull"):
        mm.f, mm.bound, mm.l1, mm.l2 = 0, 1, m, float(m)
    elif mm.kind == "units":
        mm.f, mm.bound, mm.l1, mm.l2 = 0, 1, l0, math.sqrt(l0)
    elif mm.kind in ("sum", "csum"):
        # every row contributes round(clamp(x)·2^f) in [lo_g, hi_g] (exact: scaling by a power
        # of two is exact and rounding is monotone); the centred sum subtracts ``center``
        # row integers: shift_round(round(clamp(x)·2^F), F - f), monotone in x, so every row's
        # integer lies in [lo_g, hi_g] exactly
        big = row_exponent(mm.lo, mm.hi)
        lo_g = shift_round(round_half_away(Fraction(mm.lo) * Fraction(2) ** big), big - mm.f)
        hi_g = shift_round(round_half_away(Fraction(mm.hi) * Fraction(2) ** big), big - mm.f)
        if mm.kind == "sum":
            mm.bound = max(abs(lo_g), abs(hi_g), 1)
        else:
            mm.center = round_half_away(Fraction((mm.lo + mm.hi) / 2.0) * Fraction(2) ** mm.f)
            mm.bound = max(abs(lo_g - mm.center), abs(hi_g - mm.center), 1)
        mm.l1 = m * mm.bound
        mm.l2 = float(m * mm.bound)
    elif mm.kind == "csq":
        magnitude = ((mm.hi - mm.lo) / 2.0) ** 2
        mm.f = _fixed_point_exponent(magnitude, m, share_eps)
        mm.bound = _grid_bound(magnitude, mm.f)
        mm.l1 = m * mm.bound
        mm.l2 = float(m * mm.bound)
    elif mm.kind == "quant":
        assert mm.q is not None
        mm.candidates = quantile_candidates(mm.lo, mm.hi, _col_class(table, mm.column))
        mm.quant_sensitivity = m * max(mm.q, 1.0 - mm.q)
        eps_q = share_eps if noise == LAPLACE else math.sqrt(8.0 * share_rho)
        mm.epsilon = eps_q
        mm.quant_epsilon = eps_q / l0
        mm.noise = "exponential"
        mm.event = (ev.Exponential(mm.quant_epsilon) if l0 == 1
                    else ev.SelfComposed(ev.Exponential(mm.quant_epsilon), l0))
        return
    elif mm.kind == "select":
        eps_s = share_eps
        mm.f, mm.bound, mm.l1, mm.l2 = 0, 1, l0, math.sqrt(l0)
        mm.noise = "threshold"
        mm.epsilon = eps_s
        mm.scale = _dlap_scale(l0, eps_s)
        qd = math.exp(-1.0 / mm.scale)
        # L0 · q^(T-1) / (1+q) <= delta
        t_minus_1 = math.ceil(mm.scale * math.log(l0 / (q_delta * (1.0 + qd))))
        mm.threshold = 1 + max(t_minus_1, 1)
        mm.delta = q_delta
        mm.event = ev.ApproxDP(l0 / mm.scale, q_delta)
        return
    if noise == LAPLACE:
        mm.noise = LAPLACE
        mm.epsilon = share_eps
        mm.scale = _dlap_scale(mm.l1, share_eps)
        mm.event = ev.DiscreteLaplace(mm.scale, mm.l1)
    else:
        mm.noise = GAUSSIAN
        mm.rho = share_rho
        sens = mm.l2
        if not grouped and sens >= 1:
            sens = float(math.floor(sens))
        mm.l2 = sens
        mm.sigma2 = _dgauss_sigma2(sens, share_rho)
        # zCDP holds for a scalar or a vector release alike (CKS 2020); the mechanism reports
        # DiscreteGaussian for a scalar, ZCDP for a vector; either is at most what is charged.
        exact = Fraction(sens) ** 2 / (2 * Fraction(mm.sigma2))
        rho_up = float(exact)
        if Fraction(rho_up) < exact:
            rho_up = math.nextafter(rho_up, math.inf)
        mm.event = ev.ZCDP(rho_up)


def _col_class(table: TableMeta, ref: str | None) -> str:
    assert ref is not None
    _, col = ref.split(".", 1)
    return type_class(table.column(col).type)


def quantile_candidates(lo: float, hi: float, cls: str) -> np.ndarray:
    """Public candidates for quantiles: the integers in [lo, hi] for integer columns with at most
    ``QUANTILE_BINS + 1`` of them, else ``QUANTILE_BINS + 1`` equally spaced points."""
    if cls in ("int", "bool"):
        ilo, ihi = math.ceil(lo), math.floor(hi)
        if ihi - ilo <= QUANTILE_BINS and ihi > ilo:
            return np.arange(ilo, ihi + 1, dtype=np.float64)
    return np.linspace(lo, hi, QUANTILE_BINS + 1)


# ------------------------------------------------------------------------------ SQL


def _lit(value: float) -> str:
    return f"CAST({float(value)!r} AS DOUBLE)"


def _pow2(f: int) -> str:
    return _lit(math.ldexp(1.0, f))


def clamp_sql(col: str, lo: float, hi: float, cls: str) -> str:
    """``col`` clamped into [lo, hi] as DOUBLE; NULL and NaN give NULL (they are ignored).

    ``greatest``/``least`` alone would turn NULL into a bound (DuckDB skips NULL arguments), and
    NaN compares above every number, hence the CASE.
    """
    x = f"CAST({col} AS DOUBLE)"  # a no-op for DOUBLE columns
    nan = f" AND NOT isnan({x})" if cls == "float" else ""
    return (f"(CASE WHEN {x} <= {_lit(hi)} THEN greatest({x}, {_lit(lo)}) "
            f"WHEN {x} > {_lit(hi)}{nan} THEN {_lit(hi)} END)")


def _literal_sql(value: Any, type_: str) -> str:
    if isinstance(value, bool):
        lit = "TRUE" if value else "FALSE"
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        lit = repr(value) if isinstance(value, int) else repr(float(value))
    else:
        lit = exp.Literal.string(str(value)).sql(dialect="duckdb")
    return f"CAST({lit} AS {type_})"


@dataclass
class CompiledSQL:
    text: str
    group_cols: list[str]
    measure_cols: list[str]


def compile_sql(plan: Plan, *, relations: dict[str, str], seed: int,
                fixed_columns: frozenset[str] | set[str] = frozenset()) -> CompiledSQL:
    """The ONE statement that computes every exact measurement (never returned to analysts).

    ``fixed_columns``: hidden columns of the private table (named by :func:`fixed_column_name`)
    that hold ``round(clamp(x)·2^F)`` computed at load time; a SUM/AVG over a column whose current
    bounds name one of them reads it instead of clamping and converting every row again (same
    integers either way).
    """
    spec = plan.spec
    table = plan.table
    value_cols: dict[str, str] = {}  # "alias.col" -> __c{j}
    for mm in plan.measures:
        if mm.column is not None and mm.column not in value_cols:
            value_cols[mm.column] = f"__c{len(value_cols)}"

    def ref(alias_col: str) -> str:
        alias, col = alias_col.split(".", 1)
        return f"{quote_ident(alias)}.{quote_ident(col)}"

    proj: list[str] = []
    unit_level = not table.record_level
    if unit_level:
        proj.append(f"{ref(dsql.PRIVATE_ALIAS + '.' + str(table.privacy_unit))} AS __u")
    group_cols = [f"__g{i}" for i in range(len(spec.group_by))]
    for i, k in enumerate(spec.group_by):
        proj.append(f"{ref(k.source + '.' + k.column)} AS __g{i}")
    for src_col, c in value_cols.items():
        proj.append(f"{ref(src_col)} AS {c}")
    # materialised fixed-point integers for SUM / AVG (private table, current bounds only)
    stored: dict[str, str] = {}  # "alias.col" -> __x{j}
    for mm in plan.measures:
        if mm.kind in ("sum", "csum") and mm.column is not None and mm.column not in stored:
            alias, col = mm.column.split(".", 1)
            name = fixed_column_name(col, mm.lo, mm.hi)
            if alias == dsql.PRIVATE_ALIAS and name in fixed_columns:
                stored[mm.column] = f"__x{len(stored)}"
                proj.append(f"{ref(alias + '.' + name)} AS {stored[mm.column]}")
    # per-unit row totals from load time: only without joins (a join could repeat a row)
    total_name = None
    if unit_level and not spec.joins and table.privacy_unit is not None:
        total_name = unit_rows_column_name(str(table.privacy_unit))
        if total_name in fixed_columns:
            proj.append(f"{ref(dsql.PRIVATE_ALIAS + '.' + total_name)} AS __nt")
        else:
            total_name = None
    if not proj:
        proj.append("1 AS __one")

    frm = f"{relations[table.name]} AS {quote_ident(dsql.PRIVATE_ALIAS)}"
    for j in spec.joins:
        on = " AND ".join(
            f"{quote_ident(dsql.PRIVATE_ALIAS)}.{quote_ident(a)} = "
            f"{quote_ident(j.alias)}.{quote_ident(b)}"
            for a, b in j.on
        )
        frm += f" {'LEFT' if j.kind == 'left' else 'INNER'} JOIN {relations[j.table]} AS " \
               f"{quote_ident(j.alias)} ON {on}"
    conds: list[str] = []
    if spec.where is not None:
        w = spec.where.sql(dialect="duckdb")
        conds.append(f"COALESCE(TRY({w}), FALSE)" if spec.where_risky else f"({w})")
    for i, (kind, values) in enumerate(plan.key_sources):
        # Rows outside a declared domain are dropped before bounding (so they use up no unit's
        # row cap); at record level the join with the key set drops them anyway.
        if kind == "domain" and (not table.record_level or plan.group_mode != "public"):
            k = spec.group_by[i]
            lits = ", ".join(_literal_sql(v, k.type) for v in values)
            conds.append(f"{ref(k.source + '.' + k.column)} IN ({lits})")
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    ctes = [f"__src AS (SELECT {', '.join(proj)} FROM {frm}{where})"]
    current = "__src"

    seed_lit = f"CAST({int(seed)} AS UBIGINT)"
    if unit_level:
        if spec.group_by and plan.g < plan.m:
            gk = ", ".join(group_cols)
            ctes.append(
                f"__gb AS (SELECT * FROM {current} QUALIFY DENSE_RANK() OVER (PARTITION BY __u "
                f"ORDER BY hash(__u, {gk}, {seed_lit}), {gk}) <= {plan.g})"
            )
            current = "__gb"
        cols = ["__u", *group_cols, *value_cols.values()]
        # with nothing filtered out, the stored total *is* the unit's row count here
        exact_total = total_name is not None and not conds and current == "__src"
        bound, current = bounding_ctes(current, cols, list(stored.values()), m=plan.m,
                                       seed_lit=seed_lit,
                                       total_col="__nt" if total_name is not None else None,
                                       total_is_exact=exact_total)
        ctes.extend(bound)

    cls_of = {c: type_class(_col_type(plan, c)) for c in value_cols}
    aggs: list[str] = []
    mcols: list[str] = []
    seen_sql: dict[str, str] = {}
    # one fixed-point integer per row and column for SUM / AVG / VAR: projected once, then
    # COUNT(v) (non-missing rows) and SUM(v) serve every measurement on that column
    fixed: dict[str, tuple[str, str, str]] = {}  # column -> (v, sum col, count col)
    proj_v: list[str] = []
    for mm in plan.measures:
        if mm.kind in ("sum", "csum") and mm.column not in fixed:
            assert mm.column is not None
            j = len(fixed)
            c = value_cols[mm.column]
            if mm.column in stored:
                big_v = stored[mm.column]
            else:
                big_v = fixed_column_sql(c, mm.lo, mm.hi, cls_of[mm.column])
            d = row_exponent(mm.lo, mm.hi) - mm.f
            if d <= 0:
                v = big_v
            elif d >= _SHIFT_ZERO:
                v = f"({big_v} * 0)"  # |v| <= 2^32: every row rounds to 0 (NULL stays NULL)
            else:
                v = f"(({big_v} + {1 << (d - 1)}) >> {d})"
            proj_v.append(f"{v} AS __v{j}")
            fixed[mm.column] = (f"__v{j}", f"__s{j}", f"__n{j}")
            aggs.append(f"SUM(__v{j}) AS __s{j}")
            aggs.append(f"COUNT(__v{j}) AS __n{j}")
            mcols.extend([f"__s{j}", f"__n{j}"])
    if proj_v:
        ctes.append(f"__p AS (SELECT *, {', '.join(proj_v)} FROM {current})")
        current = "__p"
    for mm in plan.measures:
        if mm.kind in ("sum", "csum"):
            assert mm.column is not None
            _, scol, ncol = fixed[mm.column]
            mm.sql_col = scol
            if mm.kind == "csum":
                mm.count_col = ncol
            continue
        if mm.kind == "nonnull" and mm.column in fixed:
            mm.sql_col = fixed[mm.column][2]
            continue
        if mm.kind == "rows":
            expr = "COUNT(*)"
        elif mm.kind in ("units", "select"):
            expr = "COUNT(DISTINCT __u)" if unit_level and plan.m > 1 else "COUNT(*)"
        else:
            assert mm.column is not None
            c = value_cols[mm.column]
            cls = cls_of[mm.column]
            if mm.kind == "nonnull":  # a column without a fixed-point projection
                if cls == "float":
                    expr = f"COUNT(CASE WHEN NOT isnan(CAST({c} AS DOUBLE)) THEN 1 END)"
                else:
                    expr = f"COUNT({c})"
            else:
                x = clamp_sql(c, mm.lo, mm.hi, cls)
                if mm.kind == "csq":
                    # centred where the centred sum is, so that Var = Q/n - (S/n)^2 holds
                    csum = next(o for o in plan.measures
                                if o.kind == "csum" and o.column == mm.column)
                    mid = math.ldexp(float(csum.center), -csum.f)
                    expr = (f"SUM(LEAST(CAST(round(({x} - {_lit(mid)}) * ({x} - {_lit(mid)}) * "
                            f"{_pow2(mm.f)}) AS BIGINT), {mm.bound}))")
                elif mm.kind == "quant":
                    assert mm.candidates is not None
                    cands = mm.candidates
                    if cls in ("int", "bool") and len(cands) > 1 and cands[1] - cands[0] == 1.0:
                        idx = f"CAST({x} AS BIGINT) - {int(cands[0])}"
                        top = len(cands) - 1
                    else:
                        nb = len(cands) - 1
                        width = (mm.hi - mm.lo) / nb
                        idx = f"CAST(floor(({x} - {_lit(mm.lo)}) / {_lit(width)}) AS BIGINT)"
                        top = nb - 1
                    expr = f"histogram(LEAST(GREATEST({idx}, 0), {top}))"
                else:  # pragma: no cover
                    raise AssertionError(mm.kind)
        if expr in seen_sql:
            mm.sql_col = seen_sql[expr]
            continue
        seen_sql[expr] = mm.key
        mm.sql_col = mm.key
        aggs.append(f"{expr} AS {mm.key}")
        mcols.append(mm.key)

    gsel = ", ".join(group_cols)
    if not spec.group_by:
        body = f"SELECT {', '.join(aggs)} FROM {current}"
        text = "WITH " + ", ".join(ctes) + " " + body
        return CompiledSQL(text, [], mcols)
    ctes.append(f"__agg AS (SELECT {gsel}, {', '.join(aggs)} FROM {current} GROUP BY {gsel})")
    if plan.group_mode == "select":
        text = "WITH " + ", ".join(ctes) + f" SELECT {gsel}, {', '.join(mcols)} FROM __agg"
        return CompiledSQL(text, group_cols, mcols)
    # public keys: every key appears, empty groups as zeros
    key_ctes: list[str] = []
    for i, (kind, values) in enumerate(plan.key_sources):
        k = spec.group_by[i]
        if kind == "domain":
            rows = ", ".join(f"({_literal_sql(v, k.type)})" for v in values)
            key_ctes.append(f"__k{i} AS (SELECT * FROM (VALUES {rows}) AS __v(__g{i}))")
        else:
            join = next(j for j in spec.joins if j.alias == k.source)
            key_ctes.append(
                f"__k{i} AS (SELECT DISTINCT {quote_ident(k.column)} AS __g{i} FROM "
                f"{relations[join.table]} WHERE {quote_ident(k.column)} IS NOT NULL)"
            )
    cross = " CROSS JOIN ".join(f"__k{i}" for i in range(len(plan.key_sources)))
    ctes.extend(key_ctes)
    ctes.append(f"__keys AS (SELECT * FROM {cross})")
    on = " AND ".join(f"__keys.__g{i} = __agg.__g{i}" for i in range(len(group_cols)))
    sel = ", ".join([*(f"__keys.__g{i}" for i in range(len(group_cols))),
                     *(f"__agg.{c}" for c in mcols)])
    text = ("WITH " + ", ".join(ctes) + f" SELECT {sel} FROM __keys LEFT JOIN __agg ON {on} "
            f"ORDER BY {', '.join(f'__keys.__g{i}' for i in range(len(group_cols)))}")
    return CompiledSQL(text, group_cols, mcols)


def _col_type(plan: Plan, alias_col: str) -> str:
    alias, col = alias_col.split(".", 1)
    if alias == dsql.PRIVATE_ALIAS:
        return plan.table.column(col).type
    join = next(j for j in plan.spec.joins if j.alias == alias)
    return plan.catalog[join.table].column(col).type


def bounding_ctes(source: str, cols: list[str], derived: list[str], *, m: int,
                  seed_lit: str, total_col: str | None = None,
                  total_is_exact: bool = False) -> tuple[list[str], str]:
    """CTEs keeping at most ``m`` rows per unit of ``source`` (unit column ``__u``).

    ``cols``: the columns the query reads (``__u`` first); ``derived``: columns that are
    functions of ``cols`` (carried along, not hashed). Returns the CTE texts and the name of
    the bounded relation. The rows kept depend only on the unit's own rows and the secret
    ``seed_lit``, so this is a stable transformation: one unit's presence changes at most ``m``
    rows of the output. ``total_col``: a column of ``source`` bounding each unit's row count in
    ``source`` from above (its rows in the table, when ``source`` only filtered them); rows of
    units with ``total_col <= m`` are kept without per-unit work, which leaves the output
    unchanged (such a unit has at most ``m`` rows here) and skips the window for them.
    ``total_is_exact``: ``total_col`` equals the unit's row count in ``source`` (nothing was
    filtered), so no window is needed at all.
    """
    # Only units with more than m rows need a choice. Count each unit's rows (a window
    # without ORDER BY: a hash partition, no sort); for a unit above the cap find t, the
    # m-th smallest keyed hash of its rows (a top-m aggregate over one integer, no sort), and
    # keep its rows hashing below t plus exactly as many rows hashing to t as are needed
    # to make m. Rows sharing a hash are identical in every column the query reads (the
    # hash covers them), so which of them is kept cannot change the answer; the count kept
    # is exactly m even if two different rows collided.
    sel = ", ".join([*cols, *derived])
    hashed = ", ".join([*cols, seed_lit])
    heavy = f" WHERE {total_col} > {m}" if total_col is not None else ""
    light = (f" UNION ALL SELECT {sel} FROM {source} WHERE {total_col} <= {m}"
             if total_col is not None else "")
    count = (total_col if total_is_exact and total_col is not None
             else "COUNT(*) OVER (PARTITION BY __u)")
    return [
        f"__w AS (SELECT {sel}, {count} AS __n FROM {source}{heavy})",
        f"__r AS (SELECT {sel}, hash({hashed}) AS __h FROM __w WHERE __n > {m})",
        f"__l AS (SELECT __u, list_sort(min(__h, {m})) AS __hl FROM __r GROUP BY __u)",
        f"__t AS (SELECT __u, __hl[{m}] AS __th, {m} + 1 - "
        f"list_position(__hl, __hl[{m}]) AS __k FROM __l)",
        "__j AS (SELECT __r.*, __th, __k FROM __r JOIN __t ON __r.__u = __t.__u "
        "WHERE __h <= __th)",
        f"__b AS (SELECT {sel} FROM __j WHERE __h < __th UNION ALL SELECT {sel} FROM "
        f"(SELECT * FROM __j WHERE __h = __th QUALIFY ROW_NUMBER() OVER (PARTITION BY __u) "
        f"<= __k) UNION ALL SELECT {sel} FROM __w WHERE __n <= {m}{light})",
    ], "__b"
