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

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, overload

import numpy as np
from sqlglot import exp

from dpkit import events as ev
from dpkit.engine import sql as dsql
from dpkit.engine.tables import TableMeta, check_bounds, quote_ident, type_class
from dpkit.mechanisms.plan import discrete_gaussian_plan, discrete_laplace_plan

__all__ = ["Measure", "Plan", "PlanError", "build_plan"]

LAPLACE = "laplace"
GAUSSIAN = "gaussian"
GAUSSIAN_THRESHOLD = "gaussian_threshold"  # partition selection with discrete Gaussian noise
NOISES = (LAPLACE, GAUSSIAN)
MAX_QUERY_EPSILON = 100.0
MIN_QUERY_EPSILON = 1e-9  # below it the noise scale is beyond any use (and overflows floats)
MIN_QUERY_RHO = 1e-12
MAX_KEYS = 1_000_000
MAX_TOP_K = 10_000  # LIMIT of a top-k by noisy max over undeclared keys (k rounds of eps/k)
# Per-row fixed-point magnitude: at most 2**32 (sums of 2**30 rows stay in int64) and small
# enough that the noise scale in grid units stays below the samplers' limits.
_ROW_BITS = 32
_MAX_GRID_SCALE_BITS = 38
QUANTILE_BINS = 1000
# Share of each quantile's (per group) epsilon spent on its interval: two more exponential
# mechanism releases (low and high end), each getting half of it; the point estimate keeps the
# rest. Powers of two, so the three shares add back to the charged epsilon exactly.
QUANTILE_CI_SHARE = 0.5


class KeyProduct(Sequence[tuple[Any, ...]]):
    """The cross product of declared domains, in ``itertools.product`` order, without building
    it: ``len`` is the product of the domain sizes, indexing and iteration give the tuples."""

    def __init__(self, domains: list[list[Any]]) -> None:
        self._domains = domains
        self._len = math.prod(len(d) for d in domains)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(itertools.product(*self._domains))

    @overload
    def __getitem__(self, index: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[Any, ...]]: ...

    def __getitem__(self, index: int | slice) -> tuple[Any, ...] | list[tuple[Any, ...]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError("key index out of range")
        out: list[Any] = []
        for d in reversed(self._domains):
            i, r = divmod(i, len(d))
            out.append(d[r])
        return tuple(reversed(out))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == self._len and all(
                a == b for a, b in zip(self, other, strict=False))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"KeyProduct({self._len} keys)"


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
    share: float = 0.0  # this measurement's fraction of the query's budget (weight / Σ weights)
    lo_int: int = 0  # sum/csum: every row's integer lies in [lo_int, hi_int] (grid units)
    hi_int: int = 0
    # top-k selection (kind "topk"): k rounds of the exponential mechanism over the groups
    k: int = 0
    score_key: str = ""  # the measurement whose exact per-group values are the scores
    score_shift: int = 0  # scores are the exact integers shifted right by this many bits
    score_sensitivity: float = 0.0  # per-group sensitivity of the (shifted) scores
    monotonic: bool = True
    desc: bool = True
    round_epsilon: float = 0.0  # epsilon of each of the k exponential-mechanism rounds
    score_label: str = ""  # the ordering aggregate as the analyst wrote it

    @property
    def unit(self) -> float:
        return math.ldexp(1.0, -self.f)

    def describe(self) -> dict[str, Any]:
        gauss = self.noise in (GAUSSIAN, GAUSSIAN_THRESHOLD)
        if self.kind == "quant":
            sens: float = self.quant_sensitivity
        elif self.kind == "topk":
            sens = self.score_sensitivity * (2 ** self.score_shift) * self.unit
        else:
            sens = (self.l2 if gauss else self.l1) * self.unit
        d: dict[str, Any] = {
            "measurement": self.label,
            "mechanism": {"laplace": "discrete Laplace", "gaussian": "discrete Gaussian",
                          "exponential": "exponential mechanism",
                          "threshold": "discrete Laplace + threshold",
                          GAUSSIAN_THRESHOLD: "discrete Gaussian + threshold",
                          "topk": "exponential mechanism, k rounds (peeling noisy max)",
                          }[self.noise],
            "epsilon": self.epsilon if not gauss else None,
            "rho": self.rho if gauss else None,
            "sensitivity": sens,
            "weight": self.weight,
            "share": self.share,
        }
        if self.kind == "topk":
            d["split"] = f"{self.k} rounds of epsilon {self.round_epsilon:.6g}"
            d["monotonic"] = self.monotonic
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
    keys: Sequence[tuple[Any, ...]] | None  # public keys known in advance (domains; lazy)
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
    # the delta share to book under the 'approx' accountant (Gaussian noise: the conversion
    # delta plus the partition-selection delta); None: the accountant needs none from the plan
    charge_delta: float | None = None
    weights: dict[str, float] = field(default_factory=dict)  # per output name, as given

    @property
    def top_k(self) -> Measure | None:
        return next((x for x in self.measures if x.kind == "topk"), None)

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
    if e < MIN_QUERY_EPSILON:
        raise PlanError(
            f"{what}={epsilon!r} is below {MIN_QUERY_EPSILON:g}: the noise would be so large "
            f"that the answer carries no information (and its scale overflows). Give at least "
            f"{what}={MIN_QUERY_EPSILON:g}; typical values are 0.1 to 2"
        )
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
            fx = _fixed_point_exponent(mag, m, share_eps[mm.key])
            assert mm.column is not None
            col_f[mm.column] = min(col_f.get(mm.column, fx), fx)
    for mm in measures:
        if mm.kind == "topk":
            continue
        if mm.column in col_f and mm.kind in ("sum", "csum"):
            mm.f = min(col_f[mm.column], row_exponent(mm.lo, mm.hi))
        _calibrate(mm, table=table, m=m, l0=l0, noise=noise, share_eps=share_eps[mm.key],
                   share_rho=share_rho[mm.key], q_delta=q_delta, grouped=grouped)
    if topk is not None:
        _calibrate_topk(topk, next(x for x in measures if x.key == topk.score_key), m=m,
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
    event = _plan_event([mm.event for mm in measures])
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


def _plan_event(events: list[ev.Event]) -> ev.Event:
    """The query's event: the measurements' events composed, with every zCDP part (Gaussian
    measurements, the noise of Gaussian partition selection) merged into one ``ZCDP(Σρ)``.

    zCDP composes by adding ρ (Bun-Steinke 2016), so the merged event is exact for the zCDP
    accountant and lets the ``approx`` accountant convert the Gaussian parts once, at the
    query's whole δ share, instead of each part at a fraction of it.
    """
    flat: list[ev.Event] = []
    for e in events:
        if isinstance(e, ev.Composed):
            flat.extend(e.events)
        else:
            flat.append(e)
    rhos = [e.rho for e in flat if isinstance(e, ev.ZCDP)]
    rest = [e for e in flat if not isinstance(e, ev.ZCDP)]
    if len(rhos) > 1:
        total = Fraction(0)
        for r in rhos:
            total += Fraction(r)
        up = float(total)
        if Fraction(up) < total:
            up = math.nextafter(up, math.inf)
        flat = [ev.ZCDP(up), *rest]
    return flat[0] if len(flat) == 1 else ev.Composed(tuple(flat))


TOP_K_WEIGHT = "top_k"  # reserved weights= names for the selection measurements
SELECTION_WEIGHT = "partition_selection"


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


def measure_weights(spec: dsql.QuerySpec, agg_plans: list[AggPlan], measures: list[Measure],
                    weights: Mapping[str, Any] | None) -> dict[str, float]:
    """Per measurement key, its weight in the budget split.

    ``weights`` maps output names (the result's value columns, case-insensitive) to positive
    numbers; outputs not named weigh 1. A measurement takes the largest weight among the
    outputs that use it (a measurement shared by two outputs is measured once). The selection
    measurements weigh 1 unless named by the reserved names ``"top_k"`` and
    ``"partition_selection"`` (when no output has that name). A measurement's share of the
    query's epsilon (or rho) is its weight over the sum of all weights.
    """
    if weights is not None and not isinstance(weights, Mapping):
        raise PlanError(f"weights must be a dict of output name -> number, e.g. "
                        f"weights={{'n': 1, 'avg_age': 3}} (got {weights!r})")
    weights = weights or {}
    by_name = {o.name.lower(): o for o in spec.outputs}
    valid = [o.name for o in spec.outputs if o.kind != "group"]
    special = {TOP_K_WEIGHT: "topk", SELECTION_WEIGHT: "select"}
    present = {x.kind for x in measures}
    valid += [n for n, kind in special.items() if kind in present and n not in by_name]
    given: dict[str, float] = {}
    for name, w in weights.items():
        if not isinstance(name, str):
            raise PlanError(f"weights are keyed by output names (got {name!r}); valid names: "
                            f"{', '.join(valid)}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (
            math.isfinite(w) and w > 0
        ):
            raise PlanError(f"weights[{name!r}] must be a finite number > 0 (got {w!r}); "
                            f"e.g. weights={{'{name}': 2}}")
        o = by_name.get(name.lower())
        if o is None and not (name.lower() in special and special[name.lower()] in present):
            raise PlanError(f"weights names {name!r}, which is not an output of this query; "
                            f"valid names: {', '.join(valid)}")
        if o is not None and o.kind == "group":
            raise PlanError(f"weights names {name!r}, a GROUP BY column; weights apply to "
                            f"aggregates (valid names: {', '.join(valid)})")
        given[name.lower()] = float(w)
    out: dict[str, float] = {}
    for o in spec.outputs:
        if o.kind == "group":
            continue
        w = given.get(o.name.lower(), 1.0)
        keys: list[str] = []
        if o.kind == "agg":
            assert o.index is not None
            keys = list(agg_plans[o.index].measures.values())
        else:
            assert o.expr is not None
            for n in o.expr.walk():
                if isinstance(n, exp.Column) and n.name.startswith("__a") and \
                        n.name[3:].isdigit():
                    keys.extend(agg_plans[int(n.name[3:])].measures.values())
        for key in keys:
            out[key] = max(out.get(key, 0.0), w)
    for x in measures:
        for name, kind in special.items():
            if x.kind == kind and name in given and name not in by_name:
                out[x.key] = given[name]
        out.setdefault(x.key, 1.0)
    return out


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
        mm.f, mm.bound, mm.l1, mm.l2 = 0, 1, l0, _sqrt_up(l0)
    elif mm.kind in ("sum", "csum"):
        # every row contributes round(clamp(x)·2^f) in [lo_g, hi_g] (exact: scaling by a power
        # of two is exact and rounding is monotone); the centred sum subtracts ``center``
        # row integers: shift_round(round(clamp(x)·2^F), F - f), monotone in x, so every row's
        # integer lies in [lo_g, hi_g] exactly
        big = row_exponent(mm.lo, mm.hi)
        lo_g = shift_round(round_half_away(Fraction(mm.lo) * Fraction(2) ** big), big - mm.f)
        hi_g = shift_round(round_half_away(Fraction(mm.hi) * Fraction(2) ** big), big - mm.f)
        mm.lo_int, mm.hi_int = lo_g, hi_g
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
        mm.f, mm.bound, mm.l1, mm.l2 = 0, 1, l0, _sqrt_up(l0)
        mm.delta = q_delta
        if noise == GAUSSIAN:
            mm.noise = GAUSSIAN_THRESHOLD
            mm.rho = share_rho
            mm.sigma2 = _dgauss_sigma2(mm.l2, share_rho)
            mm.threshold = gaussian_threshold(mm.sigma2, l0, q_delta)
            mm.event = ev.Composed((ev.ZCDP(_rho_up(mm.l2, mm.sigma2)),
                                    ev.ApproxDP(0.0, q_delta)))
            return
        eps_s = share_eps
        mm.noise = "threshold"
        mm.epsilon = eps_s
        mm.scale = _dlap_scale(l0, eps_s)
        qd = math.exp(-1.0 / mm.scale)
        # L0 · q^(T-1) / (1+q) <= delta
        t_minus_1 = math.ceil(mm.scale * math.log(l0 / (q_delta * (1.0 + qd))))
        mm.threshold = 1 + max(t_minus_1, 1)
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
        mm.event = ev.ZCDP(_rho_up(sens, mm.sigma2))


def _sqrt_up(n: int) -> float:
    """``sqrt(n)`` rounded up to a float: the L2 sensitivity ``sqrt(L0)`` of distinct-unit
    counts. ``math.sqrt`` is correctly rounded, so for many ``n`` (3, 6, 11, ...) it is below
    the root, and noise calibrated to it would be charged a ``rho`` below its true cost."""
    r = math.sqrt(n)
    if Fraction(r) ** 2 < n:
        r = math.nextafter(r, math.inf)
    return r


def _rho_up(sensitivity: float, sigma2: float) -> float:
    """``sensitivity² / (2 sigma2)`` rounded up to a float (never below the exact value)."""
    exact = Fraction(sensitivity) ** 2 / (2 * Fraction(sigma2))
    rho_up = float(exact)
    if Fraction(rho_up) < exact:
        rho_up = math.nextafter(rho_up, math.inf)
    return rho_up


# A computed tail is trusted only with this relative margin (float sums of exponentials).
_TAIL_MARGIN = 1.0 + 1e-6


def dgauss_upper_tail(a: int, sigma2: float) -> float:
    """``P(Z >= a)`` for the discrete Gaussian ``P(Z = x) ∝ exp(-x²/(2 sigma2))``, ``a >= 0``,
    from the exact sums (``Σ_{x>=a} e^{-x²/(2σ²)} / Σ_x e^{-x²/(2σ²)}``), times ``1 + 1e-6``
    so that float rounding can only overstate it."""
    from dpkit.mechanisms.accuracy import dgauss_norm, dgauss_upper_sum

    if a <= 0:
        return 1.0
    return min(1.0, dgauss_upper_sum(int(a), sigma2) / dgauss_norm(sigma2) * _TAIL_MARGIN)


def gaussian_selection_delta(threshold: int, sigma2: float, l0: int) -> float:
    """δ of Gaussian thresholding: the probability that at least one of the ``l0`` groups made
    of one unit alone (distinct-unit count 1) shows: ``1 - (1 - P(Z >= T - 1))^l0`` with
    independent discrete Gaussian noise ``Z`` (``<= l0·P(Z >= T-1)``)."""
    p = dgauss_upper_tail(threshold - 1, sigma2)
    if p >= 1.0:
        return 1.0
    return min(1.0, -math.expm1(l0 * math.log1p(-p)))


def gaussian_threshold(sigma2: float, l0: int, delta: float) -> int:
    """Smallest ``T >= 2`` with :func:`gaussian_selection_delta` ``(T) <= delta``.

    **Gaussian partition selection** (Wilson et al. 2020, §3; Google's Gaussian thresholding).
    Each candidate group's number of distinct units gets independent discrete Gaussian noise of
    variance ``sigma2``; a group is shown iff ``count + Z >= T``. Neighbours ``D ⊂ D'`` differ by
    one unit touching at most ``l0`` groups. On the groups both have, the counts differ by at most
    1 in at most ``l0`` coordinates (L2 sensitivity ``√l0``), so that part is the discrete
    Gaussian mechanism: ``ρ = l0/(2 sigma2)``-zCDP, hence ``(ε, δ_g(ε))``-DP for its whole curve
    (CKS 2020). The groups only ``D'`` has are made of that unit alone (count 1) and show with
    probability ``p = 1 - (1 - P(Z >= T-1))^l0 <= δ``. For any output set ``S``:
    ``P_D'(S) <= (1-p)(e^ε P_D(S) + δ_g) + p``, and, ``S`` holding only outputs without new
    groups, ``P_D(S) <= min(1, e^ε P_c(S) + δ_g)`` with ``P_D'(S) = (1-p) P_c(S)``; both give
    ``P(S) - e^ε P'(S) <= δ_g + p - p·δ_g``. So the selection is ``(ε, δ_g(ε) + δ)``-DP: exactly
    what the event ``Composed(ZCDP(ρ), ApproxDP(0, δ))`` states under basic composition.
    """
    if not (0 < delta < 1):
        raise PlanError(f"partition selection needs 0 < delta < 1 (got {delta!r})")
    sigma = math.sqrt(sigma2)
    # continuous guess: l0·P(N >= T-1) ~ delta
    from scipy import special

    guess = 1 + sigma * math.sqrt(2.0) * float(special.erfcinv(2.0 * delta / l0))
    t = max(2, math.floor(guess) - 3)
    while gaussian_selection_delta(t, sigma2, l0) > delta:
        t += 1
    while t > 2 and gaussian_selection_delta(t - 1, sigma2, l0) <= delta:
        t -= 1
    return t


def _calibrate_topk(mm: Measure, score: Measure, *, m: int, noise: str, share_eps: float,
                    share_rho: float, level: float) -> None:
    """Top-k groups by noisy max: ``k`` rounds of the exponential mechanism (peeling).

    **Scores** are the exact per-group values of the ordering aggregate (negated for ASC):
    ``COUNT(*)``/``COUNT(col)`` (rows kept by contribution bounding), ``COUNT(DISTINCT unit)``,
    or ``SUM(col)`` as fixed-point integers shifted right by ``s`` bits (``floor(S/2^s)``, so
    that scores stay exact float64 values; a shift moves a difference ``|S-S'| <= Δ`` to at most
    ``floor(Δ/2^s) + 1``), clipped to ``±2^52`` (1-Lipschitz, monotone).

    **Sensitivity, L∞, independent of how many groups a unit touches.** Under add/remove of one
    unit (the curator's relation), the unit's (bounded) rows are added to or removed from the
    groups they fall in; each group's count moves by at most ``m`` (``max_rows_per_unit``; 1 for
    distinct units) and its sum by at most ``m·B`` (every row's integer in ``[lo_g, hi_g]``,
    ``B = max(|lo_g|, |hi_g|)``). The exponential mechanism's guarantee needs only a bound on
    each score's change (``max_r |q_r(D) - q_r(D')| <= Δ``), not on the number of scores that
    change. All counts move in the same direction (adding a unit never lowers a count), and so
    do sums when ``lo >= 0`` (or ``hi <= 0``): then the scores are **monotone** and each round
    selects ``r`` with probability ``∝ exp(ε_r q_r / Δ)`` (McSherry-Talwar 2007; Dwork-Roth
    2014, Thm 3.10 remark); otherwise ``∝ exp(ε_r q_r / (2Δ))``. Each round is ε_r-DP and
    ε_r-bounded-range (its loss ``(ε_r/Δ)(q_r - q'_r) - ln(Z/Z')`` varies by at most ``ε_r``
    over the outputs in both cases).

    **k rounds** (peeling: remove the winner, repeat) equal in law the one-shot Gumbel top-k
    (Durfee-Rogers 2019) and compose to ``SelfComposed(Exponential(ε_r), k)``: ``k·ε_r``-DP,
    ``k·ε_r²/8``-zCDP (Cesar-Rogers 2021). ``ε_r = ε_sel / k`` with Laplace noise,
    ``√(8 ρ_sel / k)`` with Gaussian noise (so the rounds cost exactly the share ``ρ_sel``).

    **Utility**: in each round the best remaining score is at least the true k-th best; with
    probability ``>= 1 - β/k`` the winner is within ``u = c·(Δ/ε_r)(ln K + ln(k/β))`` of it
    (Dwork-Roth Thm 3.11, ``c = 1`` monotone, 2 otherwise; ``K`` candidates). A union bound over
    the rounds: every selected group's score is within ``u`` of the true k-th best score with
    probability ``>= 1 - β`` (``β = 1 - level``). With a shift ``s > 0`` the bound on the
    unshifted aggregate is ``(u + 1)·2^s`` (``2^s·floor(S/2^s) ∈ (S - 2^s, S]``).
    """
    assert mm.k >= 1
    mm.noise = "topk"
    if score.kind in ("rows", "nonnull"):
        delta_int, monotone = m, True
    elif score.kind in ("units", "select"):
        delta_int, monotone = 1, True
    elif score.kind == "sum":
        delta_int = m * max(abs(score.lo_int), abs(score.hi_int), 1)
        monotone = score.lo_int >= 0 or score.hi_int <= 0
    else:  # pragma: no cover - top_k_request only admits COUNT/SUM orderings
        raise PlanError(f"cannot rank groups by {score.label} with noisy max")
    shift = max(0, delta_int.bit_length() - 11)
    mm.score_shift = shift
    mm.score_sensitivity = float((delta_int >> shift) + 1 if shift else delta_int)
    mm.f = score.f if score.kind == "sum" else 0
    mm.monotonic = monotone
    mm.l1 = int(mm.score_sensitivity)
    if noise == LAPLACE:
        mm.epsilon = share_eps
        mm.round_epsilon = share_eps / mm.k
    else:
        mm.rho = share_rho
        mm.round_epsilon = math.sqrt(8.0 * share_rho / mm.k)
        mm.epsilon = mm.round_epsilon * mm.k
    mm.event = (ev.Exponential(mm.round_epsilon) if mm.k == 1
                else ev.SelfComposed(ev.Exponential(mm.round_epsilon), mm.k))


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def top_k_utility(mm: Measure, candidates: int, level: float) -> float:
    """``u`` (native units of the ordering aggregate) such that, with probability ``>= level``,
    every selected group's score is within ``u`` of the true k-th best (see
    :func:`_calibrate_topk`)."""
    k = max(1, min(mm.k, candidates))
    c = 1.0 if mm.monotonic else 2.0
    beta = 1.0 - level
    u = c * mm.score_sensitivity / mm.round_epsilon * (math.log(max(candidates, 1))
                                                        + math.log(k / beta))
    # the scores are floor(S / 2^s): a shifted score within u of the k-th best shifted score
    # puts S within (u + 1)·2^s of the k-th best S (floor loses less than one step)
    if mm.score_shift:
        u += 1.0
    return math.ldexp(u * (2 ** mm.score_shift), -mm.f)


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
    keys_text: str | None = None  # fill_keys: the declared keys, in output order


def compile_sql(plan: Plan, *, relations: dict[str, str], seed: int,
                fixed_columns: frozenset[str] | set[str] = frozenset(),
                key_tables: Mapping[str, str] | None = None,
                fill_keys: bool = False) -> CompiledSQL:
    """The ONE statement that computes every exact measurement (never returned to analysts).

    ``fixed_columns``: hidden columns of the private table (named by :func:`fixed_column_name`)
    that hold ``round(clamp(x)·2^F)`` computed at load time; a SUM/AVG over a column whose current
    bounds name one of them reads it instead of clamping and converting every row again (same
    integers either way).

    ``key_tables``: per private column, the relation of the hidden key table holding its
    declared domain (stored at load time, named by a hash of the keys:
    :func:`dpkit.engine.tables.domain_table_name`). A GROUP BY over a declared domain then reads
    the keys from it: the row filter is a semi-join (``col IN (SELECT k FROM keys)``) and every
    key is joined from it into the output. Without one (views, older projects) or for domains
    of fewer than ``DOMAIN_TABLE_MIN_KEYS`` keys, the keys are written into the statement as
    typed literals. Both give the same keys of the same type, so the same rows and groups.

    ``fill_keys`` (public keys that are all declared domains; see :func:`can_fill_keys`): the
    statement returns only the groups present in the data, and ``keys_text`` the declared keys
    in output order; the caller fills every key (absent groups as NULL measurements, as the
    LEFT JOIN gives them) with :func:`fill_declared_keys`. Same exact aggregates, one join less.
    """
    spec = plan.spec
    table = plan.table
    key_rel = _key_relations(plan, key_tables)
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
        key = ref(k.source + '.' + k.column)
        if type_class(k.type) == "float":  # -0.0 and 0.0 are one key (one group, one label)
            key = f"(CASE WHEN {key} = 0 THEN CAST(0 AS {k.type}) ELSE {key} END)"
        proj.append(f"{key} AS __g{i}")
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
    for join in spec.joins:
        on = " AND ".join(
            f"{quote_ident(dsql.PRIVATE_ALIAS)}.{quote_ident(a)} = "
            f"{quote_ident(join.alias)}.{quote_ident(b)}"
            for a, b in join.on
        )
        frm += f" {'LEFT' if join.kind == 'left' else 'INNER'} JOIN {relations[join.table]} AS " \
               f"{quote_ident(join.alias)} ON {on}"
    conds: list[str] = []
    w = dsql.where_sql(spec)
    if w is not None:
        conds.append(w)
    for i, (kind, values) in enumerate(plan.key_sources):
        # Rows outside a declared domain are dropped before bounding (so they use up no unit's
        # row cap); at record level the join with the key set (or the key fill) drops them
        # after the aggregate, which costs far less than a filter on every row.
        if kind == "domain" and (not table.record_level or plan.group_mode != "public"):
            k = spec.group_by[i]
            if i in key_rel:
                conds.append(f"{ref(k.source + '.' + k.column)} IN (SELECT {_KEY_COL} FROM "
                             f"{key_rel[i]})")
            else:
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
        bound, current = bounding_ctes(current, cols, list(stored.values()), m=plan.m,
                                       seed_lit=seed_lit,
                                       total_col="__nt" if total_name is not None else None)
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
        if mm.kind == "topk":  # scores are another measurement's exact column
            continue
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
        # groups in key order: DuckDB's aggregation order depends on the rows (one unit's row
        # can move a group), and released rows must be ordered by a public rule
        text = ("WITH " + ", ".join(ctes) + f" SELECT {gsel}, {', '.join(mcols)} FROM __agg "
                f"ORDER BY {gsel}")
        return CompiledSQL(text, group_cols, mcols)
    # public keys: every key appears, empty groups as zeros
    key_ctes = _key_ctes(plan, key_rel, relations)
    order = ", ".join(f"__keys.__g{i}" for i in range(len(group_cols)))
    if fill_keys:
        text = "WITH " + ", ".join(ctes) + f" SELECT {gsel}, {', '.join(mcols)} FROM __agg"
        keys_text = "WITH " + ", ".join(key_ctes) + f" SELECT * FROM __keys ORDER BY {order}"
        return CompiledSQL(text, group_cols, mcols, keys_text=keys_text)
    ctes.extend(key_ctes)
    on = " AND ".join(f"__keys.__g{i} = __agg.__g{i}" for i in range(len(group_cols)))
    sel = ", ".join([*(f"__keys.__g{i}" for i in range(len(group_cols))),
                     *(f"__agg.{c}" for c in mcols)])
    text = ("WITH " + ", ".join(ctes) + f" SELECT {sel} FROM __keys LEFT JOIN __agg ON {on} "
            f"ORDER BY {order}")
    return CompiledSQL(text, group_cols, mcols)


def _key_ctes(plan: Plan, key_rel: dict[int, str], relations: dict[str, str]) -> list[str]:
    """CTEs ``__k{i}`` (the public keys of GROUP BY column i) and ``__keys`` (their product)."""
    spec = plan.spec
    key_ctes: list[str] = []
    for i, (kind, values) in enumerate(plan.key_sources):
        k = spec.group_by[i]
        if kind == "domain" and i in key_rel:
            key_ctes.append(f"__k{i} AS (SELECT {_KEY_COL} AS __g{i} FROM {key_rel[i]})")
        elif kind == "domain":
            rows = ", ".join(f"({_literal_sql(v, k.type)})" for v in values)
            key_ctes.append(f"__k{i} AS (SELECT * FROM (VALUES {rows}) AS __v(__g{i}))")
        else:
            join = next(j for j in spec.joins if j.alias == k.source)
            key_ctes.append(
                f"__k{i} AS (SELECT DISTINCT {quote_ident(k.column)} AS __g{i} FROM "
                f"{relations[join.table]} WHERE {quote_ident(k.column)} IS NOT NULL)"
            )
    cross = " CROSS JOIN ".join(f"__k{i}" for i in range(len(plan.key_sources)))
    key_ctes.append(f"__keys AS (SELECT * FROM {cross})")
    return key_ctes


# Group-column types whose DuckDB equality is Python's equality on the values fetchall gives
# (no NaN, no collations, no values Python cannot hold): the key fill may match them in Python.
_FILL_TYPES = frozenset({
    "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
    "UBIGINT", "UHUGEINT", "BOOLEAN", "VARCHAR",
})
FILL_MAX_KEYS = 256  # above this, the LEFT JOIN in DuckDB is as cheap as the Python fill


def can_fill_keys(plan: Plan, collated: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether the declared keys of a public GROUP BY can be filled in Python (few keys, all
    from declared domains, of types compared alike by DuckDB and Python). ``collated``: the
    private table's columns with a collation (``VARCHAR COLLATE NOCASE`` from a DuckDB source;
    the type name does not show it): DuckDB's equality on them is not Python's, so they keep
    the join."""
    return (plan.group_mode == "public" and bool(plan.spec.group_by)
            and plan.keys is not None and len(plan.keys) <= FILL_MAX_KEYS
            and all(kind == "domain" for kind, _ in plan.key_sources)
            and all(k.type.upper() in _FILL_TYPES for k in plan.spec.group_by)
            and not any(k.source == dsql.PRIVATE_ALIAS and k.column in collated
                        for k in plan.spec.group_by))


def fill_declared_keys(keys: Sequence[tuple[Any, ...]], rows: Iterable[tuple[Any, ...]],
                       n_measures: int) -> tuple[list[tuple[Any, ...]], list[list[Any]]]:
    """Every declared key (in ``keys``' order) with its group's measurements from ``rows``
    (``(*key, *measurements)`` per group present in the data); absent keys get NULL (None)
    measurements, groups outside the keys are dropped: what ``keys LEFT JOIN groups`` gives."""
    ng = len(keys[0]) if keys else 0
    found: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in rows:
        found[tuple(r[:ng])] = r
    empty = (None,) * (ng + n_measures)
    cols: list[list[Any]] = [[] for _ in range(n_measures)]
    for key in keys:
        r = found.get(key, empty)
        for j in range(n_measures):
            cols[j].append(r[ng + j])
    return list(keys), cols


# Declared domains with at least this many keys are read from their hidden key table (when
# there is one); smaller ones are inlined as literals. Measured (benchmarks/
# engine_domains_bench.py --literal, 1M rows, record level): at 10 keys both paths take the
# same time (25 vs 26 ms), at 1000 keys the literals take 57 ms against 17 ms: always the table.
DOMAIN_TABLE_MIN_KEYS = 0
_KEY_COL = '"k"'  # the key column of a hidden key table (backend_duckdb._KEY_COLUMN)


def _key_relations(plan: Plan, key_tables: Mapping[str, str] | None) -> dict[int, str]:
    """GROUP BY position -> key table relation, for declared domains read from key tables."""
    out: dict[int, str] = {}
    if not key_tables:
        return out
    for i, (kind, values) in enumerate(plan.key_sources):
        k = plan.spec.group_by[i]
        if (kind == "domain" and k.source == dsql.PRIVATE_ALIAS and k.column in key_tables
                and len(values) >= DOMAIN_TABLE_MIN_KEYS):
            out[i] = key_tables[k.column]
    return out


def _col_type(plan: Plan, alias_col: str) -> str:
    alias, col = alias_col.split(".", 1)
    if alias == dsql.PRIVATE_ALIAS:
        return plan.table.column(col).type
    join = next(j for j in plan.spec.joins if j.alias == alias)
    return plan.catalog[join.table].column(col).type


def bounding_ctes(source: str, cols: list[str], derived: list[str], *, m: int,
                  seed_lit: str, total_col: str | None = None) -> tuple[list[str], str]:
    """CTEs keeping at most ``m`` rows per unit of ``source`` (unit column ``__u``).

    ``cols``: the columns the query reads (``__u`` first); ``derived``: columns that are
    functions of ``cols`` (carried along, not hashed). Returns the CTE texts and the name of
    the bounded relation. The rows kept depend only on the unit's own rows and the secret
    ``seed_lit``, so this is a stable transformation: one unit's presence changes at most ``m``
    rows of the output. ``total_col``: a column of ``source`` bounding each unit's row count in
    ``source`` from above (its rows in the table, when ``source`` only filtered them); rows of
    units with ``total_col <= m`` are kept without per-unit work, which leaves the output
    unchanged (such a unit has at most ``m`` rows here) and skips the window for them.
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
    if total_col is not None:
        # Units whose table total is <= m keep every row, untouched. The others ("heavy")
        # go through one hash aggregate: their (up to) m smallest keyed hashes, the largest of
        # which is the threshold t (a unit with fewer than m rows here gets all its hashes, so
        # t is its largest and it keeps everything); then a join keeps rows hashing below t
        # and as many hashing to t as complete the list. No window, no sort of the rows.
        return [
            f"__r AS (SELECT {sel}, hash({hashed}) AS __h FROM {source} "
            f"WHERE {total_col} > {m})",
            f"__l AS (SELECT __u, list_sort(min(__h, {m})) AS __hl FROM __r GROUP BY __u)",
            "__t AS (SELECT __u, __hl[-1] AS __th, len(__hl) + 1 - "
            "list_position(__hl, __hl[-1]) AS __k FROM __l)",
            "__j AS (SELECT __r.*, __th, __k FROM __r JOIN __t ON __r.__u = __t.__u "
            "WHERE __h <= __th)",
            f"__b AS (SELECT {sel} FROM __j WHERE __h < __th UNION ALL SELECT {sel} FROM "
            f"(SELECT * FROM __j WHERE __h = __th QUALIFY ROW_NUMBER() OVER (PARTITION BY __u) "
            f"<= __k) UNION ALL SELECT {sel} FROM {source} WHERE {total_col} <= {m})",
        ], "__b"
    return [
        f"__w AS (SELECT {sel}, COUNT(*) OVER (PARTITION BY __u) AS __n FROM {source})",
        f"__r AS (SELECT {sel}, hash({hashed}) AS __h FROM __w WHERE __n > {m})",
        f"__l AS (SELECT __u, list_sort(min(__h, {m})) AS __hl FROM __r GROUP BY __u)",
        f"__t AS (SELECT __u, __hl[{m}] AS __th, {m} + 1 - "
        f"list_position(__hl, __hl[{m}]) AS __k FROM __l)",
        "__j AS (SELECT __r.*, __th, __k FROM __r JOIN __t ON __r.__u = __t.__u "
        "WHERE __h <= __th)",
        f"__b AS (SELECT {sel} FROM __j WHERE __h < __th UNION ALL SELECT {sel} FROM "
        f"(SELECT * FROM __j WHERE __h = __th QUALIFY ROW_NUMBER() OVER (PARTITION BY __u) "
        f"<= __k) UNION ALL SELECT {sel} FROM __w WHERE __n <= {m})",
    ], "__b"
