"""Empirical audit of the joint-DP allocation's prices (:func:`dpkit.markets.allocate`).

The DP part of ``allocate`` is its billboard: the noisy counts it releases and the prices
computed from them (``Allocation.level_prices/level_totals``, ``.path/.counts``, ``.prices``).
The audit runs the mechanism many times on neighbouring markets ``D`` and ``D' = D`` plus one
buyer with extreme values (1 for ``good``, 0 for every other good: she names ``good`` at every
price below 1, so she moves every release by exactly its sensitivity, the worst case), with a
seeded source, and certifies a lower bound on ε by Clopper-Pearson intervals
(:func:`dpkit.attacks.audit.clopper_pearson`), on two statistics of the billboard:

* **the likelihood-ratio statistic** (Neyman-Pearson: the strongest test there is). The auditor
  knows ``D``, so for every release he subtracts ``D``'s own demand at the released price and
  weights the residual by ``1/σ²`` of that release; standardised by ``μ = sqrt(Σ 1/σ²)`` it is
  ``N(0, 1)`` on ``D`` and ``N(μ, 1)`` on ``D'`` (a sum of fresh noises with fixed variances,
  whatever the adaptivity). A fixed set of thresholds :data:`THRESHOLDS`, chosen before any
  run, is certified in both directions with a Bonferroni share of the confidence each.
* **the final price of ``good``** (what an onlooker sees): audited by
  :func:`dpkit.attacks.audit.empirical_epsilon` (thresholds selected on a split of the samples).

For a correct mechanism the certified bound is, with probability at least ``confidence``, below
the claimed ε at the claimed δ *and* below the accountant's ε(δ_a) at every δ_a (the whole
privacy profile, ``dpkit.accounting.epsilon(event, δ_a)``). The profile at a large δ_a is what
gives a small audit its power: with half the claimed noise the statistic's shift doubles and
the bound at δ_a = 0.2 exceeds the profile with a few hundred runs (tests/markets).

>>> import numpy as np
>>> import dpkit as dp
>>> from dpkit.attacks.audit_allocation import audit_allocation
>>> v = dp.noise.uniform_float01((20, 2), source=dp.noise.seeded(1))
>>> r = audit_allocation(v, 5, epsilon=4.0, delta=1e-6, rounds=4, trials=100,
...                      deltas=(0.2,), source=dp.noise.seeded(2))
>>> r.epsilon_lower[0.2] <= r.profile[0.2]
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import noise as _noise
from dpkit.accounting import epsilon as _profile_epsilon
from dpkit.attacks.audit import AuditResult, clopper_pearson, empirical_epsilon
from dpkit.markets.allocation import Allocation, NoisePlan, allocate, best_responses, noise_plan

__all__ = ["THRESHOLDS", "AllocationAudit", "audit_allocation", "extreme_neighbour",
           "likelihood_statistic", "threshold_epsilon"]

#: thresholds of the likelihood-ratio tests, in standard deviations of the statistic on D
THRESHOLDS = (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class AllocationAudit:
    """Certified lower bounds on ε beside what the mechanism claims.

    ``epsilon_lower[d]``: the likelihood-ratio audit's bound at δ = d, valid with probability
    at least ``confidence``; ``profile[d]``: the accountant's ε at δ = d for the claimed noise
    (the claim at ``delta`` is ``epsilon``); ``price_audit``: the final price's audit at
    ``delta``; ``mu``: the statistic's shift between D and D' in its standard deviations.
    """

    epsilon: float
    delta: float
    trials: int
    confidence: float
    mu: float
    epsilon_lower: dict[float, float]
    profile: dict[float, float]
    price_audit: AuditResult
    statistics: tuple[np.ndarray, np.ndarray]  # standardised statistic on D, on D'


def extreme_neighbour(values: Any, good: int = 0) -> np.ndarray:
    """``values`` with one buyer added who values ``good`` at 1 and every other good at 0."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or not 0 <= good < v.shape[1]:
        raise ValueError(f"values must be a buyers x goods matrix and good one of its columns "
                         f"(got shape {v.shape}, good {good!r})")
    extra = np.zeros((1, v.shape[1]))
    extra[0, good] = 1.0
    return np.vstack([v, extra])


def _demand(values: np.ndarray, prices: np.ndarray) -> np.ndarray:
    return np.bincount(best_responses(values, prices) + 1, minlength=values.shape[1] + 1)[1:]


def likelihood_statistic(a: Allocation, values: np.ndarray, plan: NoisePlan,
                         good: int = 0) -> float:
    """The standardised log-likelihood-ratio statistic of D' (``values`` plus the extreme
    buyer on ``good``) against D (``values``) on one run's billboard: N(0, 1) on D."""
    if a.path is None or a.counts is None or a.level_prices is None or a.level_totals is None:
        raise ValueError("the allocation carries no billboard to audit")
    k = values.shape[1]
    total, weight = 0.0, 0.0
    for mid, released in zip(a.level_prices, a.level_totals, strict=True):
        total += (released - _demand(values, np.full(k, mid)).sum()) / plan.level_sigma2
        weight += 1.0 / plan.level_sigma2
    for t in range(len(a.path)):
        sigma2 = plan.warm_sigma2 if t < plan.warm_rounds else plan.main_sigma2
        total += (a.counts[t, good] - _demand(values, a.path[t])[good]) / sigma2
        weight += 1.0 / sigma2
    return total / math.sqrt(weight)


def threshold_epsilon(s0: np.ndarray, s1: np.ndarray, thresholds: tuple[float, ...], *,
                      delta: float, confidence: float) -> float:
    """Certified lower bound on ε from the fixed tests ``{s >= t}`` (D' against D) and
    ``{s < t}`` (D against D'): each of the 4 bounds per threshold holds at level
    ``(1 - confidence) / (4 T)``, so all hold together with probability >= ``confidence``."""
    alpha = (1.0 - confidence) / (4 * len(thresholds))
    best = 0.0
    for t in thresholds:
        for a, b in ((s1 >= t, s0 >= t), (s0 < t, s1 < t)):
            low, _ = clopper_pearson(float(a.sum()), a.size, alpha)
            _, up = clopper_pearson(float(b.sum()), b.size, alpha)
            if float(low) - delta > 0:
                best = max(best, math.log((float(low) - delta) / float(up)))
    return best


def audit_allocation(values: Any, supply: Any, *, epsilon: float, delta: float, trials: int,
                     rounds: int | None = None, good: int = 0,
                     deltas: tuple[float, ...] = (0.01, 0.05, 0.2),
                     confidence: float = 0.999,
                     source: _noise.Source | None = None) -> AllocationAudit:
    """Run ``allocate`` ``trials`` times on ``values`` (D) and on D' = D plus the extreme buyer
    on ``good`` and certify lower bounds on ε (see the module docstring)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 20:
        raise ValueError(f"trials must be an int >= 20 (got {trials!r})")
    d0 = np.asarray(values, dtype=np.float64)
    d1 = extreme_neighbour(d0, good)
    src = source if source is not None else _noise.default_source()
    stats: list[list[float]] = [[], []]
    prices: list[list[float]] = [[], []]
    plan: NoisePlan | None = None
    for side, d in enumerate((d0, d1)):
        for _ in range(trials):
            a = allocate(d, supply, epsilon=epsilon, delta=delta, rounds=rounds, source=src)
            plan = noise_plan(float(epsilon), float(delta), a.rounds)
            stats[side].append(likelihood_statistic(a, d0, plan, good))
            prices[side].append(float(a.prices[good]))
    assert plan is not None
    s0, s1 = np.asarray(stats[0]), np.asarray(stats[1])
    mu = math.sqrt(sum(c / s2 for c, s2 in ((plan.level_steps, plan.level_sigma2),
                                            (plan.warm_rounds, plan.warm_sigma2),
                                            (plan.main_rounds, plan.main_sigma2)) if c))
    all_deltas = (float(delta), *deltas)
    return AllocationAudit(
        epsilon=float(epsilon), delta=float(delta), trials=trials, confidence=confidence,
        mu=mu, statistics=(s0, s1),
        epsilon_lower={d: threshold_epsilon(s0, s1, THRESHOLDS, delta=d,
                                            confidence=confidence) for d in all_deltas},
        profile={d: float(_profile_epsilon(plan.event, d)) for d in all_deltas},
        price_audit=empirical_epsilon(np.asarray(prices[1]), np.asarray(prices[0]),
                                      delta=float(delta), confidence=confidence))
