"""The plan as data: measurements, aggregates, the plan itself, and the limits on parameters.

The lowest floor of :mod:`dpkit.engine.plan`: records that the other modules fill in
(:mod:`.calibrate`), read (:mod:`.compile`) or assemble (:mod:`.build`); nothing here computes
a sensitivity or draws noise. A plan is computed from public information only (the query
text, the table's declarations, the privacy parameters), never from the data.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from dpkit import events as ev
from dpkit.engine import sql as dsql
from dpkit.engine.tables import TableMeta

LAPLACE = "laplace"
GAUSSIAN = "gaussian"
GAUSSIAN_THRESHOLD = "gaussian_threshold"  # partition selection with discrete Gaussian noise
NOISES = (LAPLACE, GAUSSIAN)
MAX_QUERY_EPSILON = 100.0
MIN_QUERY_EPSILON = 1e-9  # below it the noise scale is beyond any use (and overflows floats)
MIN_QUERY_RHO = 1e-12
MAX_KEYS = 1_000_000
MAX_TOP_K = 10_000  # LIMIT of a top-k by noisy max over undeclared keys (k rounds of eps/k)
QUANTILE_BINS = 1000
# Share of each quantile's (per group) epsilon spent on its interval: two more exponential
# mechanism releases (low and high end), each getting half of it; the point estimate keeps the
# rest. Powers of two, so the three shares add back to the charged epsilon exactly.
QUANTILE_CI_SHARE = 0.5
# Diagnostics (rows dropped by the per-unit cap, values clamped by the bounds): together this
# fraction of the query's epsilon (or rho), equal parts each; the outputs keep the rest. 5% costs
# the outputs ~5% wider intervals and resolves a share of a few percent once the query reads
# some thousands of rows (engine/diagnose.py, docs/curator.md "Answers that say when they
# mislead").
DIAGNOSTICS_SHARE = 0.05
DIAG_KINDS = ("dkept", "ddrop", "dclamp")  # measured once over the whole query, never per group
TOP_K_WEIGHT = "top_k"  # reserved weights= names for the selection measurements
SELECTION_WEIGHT = "partition_selection"


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
    kind: str  # rows | nonnull | units | distinct | sum | csum | csq | quant | select | d*
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
    # ddrop: the column holds each group's part, totalled on the driver, not the whole-query
    # total repeated on every row (set by the compiler: plan.compile.dropped_rows_portable)
    per_group: bool = False
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
    # aggregates over expressions (engine/aggexpr.py): value column "__e.<name>" -> (its SQL
    # over the private table's columns, never raising; its DuckDB type)
    derived_sql: dict[str, tuple[str, str]] = field(default_factory=dict)
    diagnostics: bool = True  # rows-dropped / values-clamped estimates measured (DIAG_KINDS)

    @property
    def top_k(self) -> Measure | None:
        return next((x for x in self.measures if x.kind == "topk"), None)

    def measure(self, key: str) -> Measure:
        for x in self.measures:
            if x.key == key:
                return x
        raise KeyError(key)

    @property
    def diag_measures(self) -> list[Measure]:
        return [x for x in self.measures if x.kind in DIAG_KINDS]

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

