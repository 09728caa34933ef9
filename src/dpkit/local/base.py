"""Shared shapes of the local model: reports, tallies, estimates, and the oracle interface.

Flow (clients and server may be different processes, see :mod:`dpkit.local.reports`)::

    reports = oracle.randomize(values)        # client side, n users at once, ε-LDP each
    tally = oracle.aggregate(reports)         # server side, additive: tally_a + tally_b
    est = oracle.estimate(tally)              # unbiased counts + their variance

Privacy: each user's report is ε-LDP: for any two inputs x, x' and any output y,
P[R(x) = y] <= e^ε P[R(x') = y] (the *replace-one* relation on one user's value; the local
model has no add/remove notion for a single report). The per-client event is
:attr:`FrequencyOracle.event`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from dpkit.events import Event, PureDP
from dpkit.mechanisms.release import Release
from dpkit.noise import Source

__all__ = ["FrequencyEstimate", "FrequencyOracle", "PureOracle", "Reports", "Tally"]


@dataclass(frozen=True)
class Reports:
    """A batch of randomized reports: named arrays whose first axis is the user.

    ``kind`` names the oracle that made them; ``insecure`` is True when the randomness came
    from ``dpkit.noise.seeded`` (reproducible, NOT private).
    """

    kind: str
    arrays: Mapping[str, np.ndarray]
    insecure: bool = False

    def __post_init__(self) -> None:
        sizes = {int(np.shape(a)[0]) for a in self.arrays.values()}
        if len(sizes) > 1:
            raise ValueError(f"report arrays have different lengths: {sorted(sizes)}")

    def __len__(self) -> int:
        for a in self.arrays.values():
            return int(np.shape(a)[0])
        return 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def take(self, index: Any) -> Reports:
        """The reports of a subset of users (a slice, boolean mask or index array)."""
        return Reports(self.kind, {k: v[index] for k, v in self.arrays.items()}, self.insecure)

    @staticmethod
    def concat(parts: list[Reports]) -> Reports:
        """Stack batches of the same kind."""
        if not parts:
            raise ValueError("concat needs at least one batch of reports")
        kinds = {p.kind for p in parts}
        if len(kinds) != 1:
            raise ValueError(f"cannot concatenate reports of different kinds {sorted(kinds)}")
        names = parts[0].arrays.keys()
        arrays = {k: np.concatenate([p.arrays[k] for p in parts]) for k in names}
        return Reports(parts[0].kind, arrays, any(p.insecure for p in parts))


@dataclass(frozen=True)
class Tally:
    """Additive sufficient statistics of a batch of reports (``stats``) and the user count."""

    kind: str
    stats: np.ndarray
    n: int
    insecure: bool = False

    def __add__(self, other: Tally) -> Tally:
        if not isinstance(other, Tally) or other.kind != self.kind:
            return NotImplemented
        if other.stats.shape != self.stats.shape:
            raise ValueError(f"tally shapes differ: {self.stats.shape} vs {other.stats.shape}")
        return Tally(self.kind, self.stats + other.stats, self.n + other.n,
                     self.insecure or other.insecure)


@dataclass(frozen=True)
class FrequencyEstimate:
    """Unbiased estimates of how many users hold each value, with their variance.

    ``variance`` is the exact variance formula evaluated at the (clipped) estimates — a
    plug-in; the exact variance at known true counts is ``oracle.count_variance(true_counts)``.
    ``ci(level)`` is a normal-approximation interval (a sum of n independent bounded terms).
    """

    counts: np.ndarray
    variance: np.ndarray
    n: int
    event: Event
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    insecure: bool = False

    @property
    def frequencies(self) -> np.ndarray:
        return self.counts / max(self.n, 1)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.variance)

    def ci(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Normal-approximation (CLT) confidence interval for each count."""
        from scipy.stats import norm

        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1) (got {level})")
        z = float(norm.ppf(0.5 + level / 2))
        return self.counts - z * self.std, self.counts + z * self.std

    def release(self, level: float = 0.95) -> Release:
        """The counts as a :class:`dpkit.Release` (per-client event, normal-approximation CI)."""
        return Release(self.counts, self.event, self.ci(level), level, self.insecure,
                       dict(self.details, variance=self.variance, n=self.n))


class FrequencyOracle:
    """Interface of a local frequency oracle over the domain ``[0, domain_size)``.

    Subclasses set :attr:`kind`, :attr:`epsilon` (the *stated* ε, a proven upper bound on the
    privacy loss of one report) and implement the four methods below.
    """

    kind: ClassVar[str] = "oracle"
    domain_size: int
    epsilon: float

    @property
    def event(self) -> Event:
        """Per-client privacy event: one report is ``PureDP(ε)`` (replace-one, local)."""
        return PureDP(self.epsilon)

    def randomize(self, values: Any, *, source: Source | None = None) -> Reports:
        raise NotImplementedError

    def aggregate(self, reports: Reports) -> Tally:
        raise NotImplementedError

    def estimate(self, data: Reports | Tally) -> FrequencyEstimate:
        raise NotImplementedError

    def count_variance(self, true_counts: Any) -> np.ndarray:
        """Exact variance of each count estimate when the population's true counts are given."""
        raise NotImplementedError

    @property
    def per_user_variance(self) -> float:
        """Var(count estimate of a value nobody holds) / n: the usual headline constant."""
        return float(self.count_variance(np.zeros(self.domain_size))[0])

    def config(self) -> dict[str, Any]:
        """Public parameters, enough to rebuild the oracle (``from_config``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def _tally(self, data: Reports | Tally) -> Tally:
        if isinstance(data, Reports):
            data = self.aggregate(data)
        if not isinstance(data, Tally) or data.kind != self.kind:
            raise TypeError(f"{type(self).__name__}.estimate needs its own Reports or Tally")
        return data

    def _check_reports(self, reports: Reports) -> None:
        if not isinstance(reports, Reports) or reports.kind != self.kind:
            got = getattr(reports, "kind", type(reports).__name__)
            raise TypeError(f"{type(self).__name__} cannot aggregate reports of kind {got!r}")

    def _values(self, values: Any) -> np.ndarray:
        return check_values(values, self.domain_size)


def is_insecure(source: Source | None) -> bool:
    """Whether reports drawn from ``source`` must say ``insecure`` (a seeded test source)."""
    return bool(source is not None and getattr(source, "insecure", False))


def check_values(values: Any, domain_size: int) -> np.ndarray:
    """``values`` as a 1-d int64 array in ``[0, domain_size)``, or an error naming the fix."""
    x = np.asarray(values)
    if x.ndim != 1:
        raise ValueError(f"values must be a 1-d array of ints (got shape {x.shape})")
    if x.size and x.dtype.kind not in "iub":
        raise TypeError(f"values must be integers in [0, {domain_size}) (got {x.dtype})")
    x = x.astype(np.int64, copy=False)
    if x.size and (x.min() < 0 or x.max() >= domain_size):
        bad = x[(x < 0) | (x >= domain_size)][0]
        raise ValueError(
            f"values must lie in [0, {domain_size}) (got {bad}); map your categories "
            "to indices first"
        )
    return x


def check_domain(domain_size: object, *, minimum: int = 2) -> int:
    if isinstance(domain_size, bool) or not isinstance(domain_size, int | np.integer):
        raise TypeError(f"domain_size must be an int (got {type(domain_size).__name__})")
    d = int(domain_size)
    if d < minimum:
        raise ValueError(f"domain_size must be >= {minimum} (got {d})")
    return d


class PureOracle(FrequencyOracle):
    """A "pure" protocol (Wang et al. 2017): each report *supports* a set of values, and

    P[v ∈ S(report) | x = v] = p*,  P[v ∈ S(report) | x ≠ v] = q*   (independent of x, v).

    With C_v = #reports supporting v, ĉ_v = (C_v - n q*) / (p* - q*) is unbiased and, reports
    being independent, exactly
    Var ĉ_v = [c_v p*(1 - p*) + (n - c_v) q*(1 - q*)] / (p* - q*)².
    """

    p_star: Fraction
    q_star: Fraction

    def estimate(self, data: Reports | Tally) -> FrequencyEstimate:
        t = self._tally(data)
        p, q = float(self.p_star), float(self.q_star)
        counts = (t.stats[: self.domain_size] - t.n * q) / (p - q)
        clipped = np.clip(counts, 0, t.n)
        return FrequencyEstimate(
            counts=counts,
            variance=self._variance(clipped, t.n),
            n=t.n,
            event=self.event,
            details={"oracle": self.kind, "p_star": self.p_star, "q_star": self.q_star},
            insecure=t.insecure,
        )

    def _variance(self, counts: np.ndarray, n: float) -> np.ndarray:
        p, q = float(self.p_star), float(self.q_star)
        return (counts * p * (1 - p) + (n - counts) * q * (1 - q)) / (p - q) ** 2

    def count_variance(self, true_counts: Any) -> np.ndarray:
        c = np.asarray(true_counts, dtype=np.float64)
        return self._variance(c, float(c.sum()))

    @property
    def per_user_variance(self) -> float:
        p, q = self.p_star, self.q_star
        return float(q * (1 - q) / (p - q) ** 2)


def log_ratio(p: Fraction, q: Fraction) -> float:
    """ln(p/q) as a float (informational; stated ε come from ``_exact.stated_epsilon``)."""
    return math.log(p.numerator * q.denominator) - math.log(p.denominator * q.numerator)
