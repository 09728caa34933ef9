"""Allocating scarce goods under joint differential privacy, by private prices.

Kearns-Pai-Roth-Ullman 2014; Hsu, Huang, Roth, Roughgarden, Wu, "Private matchings and
allocations" (STOC 2014). ``n`` unit-demand buyers value ``k`` goods (``values[i, j]`` in
``[0, 1]``), good ``j`` has ``supply[j]`` copies. A price on every good is found from noisy
counts of demand: each round every buyer names the good she likes best at the current prices
(value minus price, if positive), the *count* of buyers naming each good is released with
noise, and prices move up where demand exceeds supply and down where it falls short. Finally
each buyer takes her best good at the released prices.

**Privacy: (ε, δ)-joint DP.** Neighbouring relation: add or remove one buyer. A buyer names at
most one good per round, so every released count vector has L2 (and L1) sensitivity 1; each
release adds exact discrete Gaussian noise, and the releases compose adaptively (each round's
prices are computed from the earlier releases only). The noise of all releases is calibrated
together so that dpkit's privacy-loss-distribution accountant gives ``ε(δ) <= epsilon`` for the
whole composition (``Allocation.event``; the zCDP bound of CKS 2020 Thm. 14 is looser). Adding
a buyer moves one coordinate of a count vector by exactly 1 (or none), so each release's privacy
loss is that of the one-dimensional discrete Gaussian, which the accountant composes. The
prices and every released count (``Allocation.path``, ``.counts``) are post-processing of
those releases: (ε, δ)-DP. Each buyer's good is a function of the public prices and her own
values only, so by the billboard lemma (Hsu et al. 2014, Lemma 4) the allocation is
(ε, δ)-*jointly* DP: what the *other* buyers receive reveals little about any one buyer. (No
mechanism can make a buyer's own good independent of her own values: she must get what she
wants; that is why the guarantee is joint.)

**method="dpkit"** spends the budget in three phases (shares of ρ in zCDP units, then scaled
together by the accountant):

1. *Level* (:data:`LEVEL_SHARE`, :data:`LEVEL_STEPS` releases): bisection on one price for all
   goods, on the noisy *total* demand (one count, sensitivity 1). On an abundant market the
   total demand is flat in the price level, which dual descent crawls along; bisection does not.
2. *Warm-up* (:data:`WARM_SHARE`, a quarter of the rounds): dual descent from that level with
   steps ``step / t^0.75`` relative to supply, at high noise: it moves the goods' relative prices.
3. *Main* (the rest): the same steps at low noise; the final prices are the average of this
   phase's prices (Polyak-Ruppert), whose demand error is about the averaged noise of the phase.

Supply is shaded by a ``margin`` so that the remaining noise errs towards leaving a copy unsold
rather than selling one that does not exist. ``margin="auto"`` holds back
:data:`AUTO_MARGIN_SDS` standard deviations of the main phase's averaged noise per good
(``Allocation.noise_sd``; at most half the supply): a function of (ε, δ, rounds) and the supply
only, so it costs no privacy. ``method="tatonnement"`` is the plain baseline under the same
accounting: equal noise every round, fixed steps, the last prices, no margin.
See docs/beyond.md for what each part buys (``benchmarks/allocation_bench.py``) and for the
empirical audit of the prices' privacy (``benchmarks/allocation_audit.py``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import accounting
from dpkit import events as ev
from dpkit import noise as _noise
from dpkit.accounting.calibrate import calibrate
from dpkit.accounting.zcdp import epsilon_to_rho

__all__ = [
    "AUTO_MARGIN_SDS",
    "LEVEL_SHARE",
    "LEVEL_STEPS",
    "STEP_DECAY",
    "WARM_SHARE",
    "Allocation",
    "NoisePlan",
    "allocate",
    "best_responses",
    "feasible_welfare",
    "noise_plan",
    "welfare_optimum",
]

#: copies held back per good by ``margin="auto"``, in standard deviations of the main phase's
#: averaged demand noise; chosen on the benchmark's instances (docs/beyond.md)
AUTO_MARGIN_SDS = 0.75
#: shares of the budget (zCDP units) of the level search and of the warm-up rounds
LEVEL_SHARE, WARM_SHARE = 0.05, 0.15
#: bisection steps of the level search (price resolution 2^-12)
LEVEL_STEPS = 12
#: how the step shrinks with the round: ``step / t**STEP_DECAY``
STEP_DECAY = 0.75


@dataclass(frozen=True)
class NoisePlan:
    """The noise of every release of one run: public (a function of ε, δ and the rounds)."""

    method: str
    level_steps: int  # bisection releases of the total demand (method "dpkit")
    level_sigma2: float
    warm_rounds: int
    warm_sigma2: float
    main_rounds: int
    main_sigma2: float
    event: ev.Event
    epsilon: float  # of ``event`` at ``delta``, by the tightest accountant

    @property
    def noise_sd(self) -> float:
        """Standard deviation of the main phase's averaged noise per good (buyers)."""
        return math.sqrt(self.main_sigma2 / self.main_rounds)


@functools.lru_cache(maxsize=256)
def noise_plan(epsilon: float, delta: float, rounds: int, method: str = "dpkit") -> NoisePlan:
    """The smallest noise, in the phases' fixed proportions, whose composition the accountant
    certifies at ``epsilon(delta) <= epsilon`` (cached: the search takes seconds)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be positive (got {epsilon!r})")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1) (got {delta!r})")
    rho = epsilon_to_rho(epsilon, delta)
    if method == "tatonnement":
        phases = [(0, 1.0), (0, 1.0), (rounds, 1.0)]
    else:
        warm = rounds // 4
        phases = [(LEVEL_STEPS, LEVEL_SHARE), (warm, WARM_SHARE),
                  (rounds - warm, 1.0 - LEVEL_SHARE - WARM_SHARE)]
    # the zCDP split gives each phase count/(2 rho share) per release; one factor m scales
    # them all, m <= 1 found by the (tighter) accountant
    base = [c / (2.0 * rho * share) if c else 0.0 for c, share in phases]

    def family(m: float) -> ev.Event:
        return ev.Composed(tuple(ev.SelfComposed(ev.DiscreteGaussian(m * b, 1), c)
                                 for (c, _), b in zip(phases, base, strict=True) if c))

    # m = 1 meets the target by the zCDP bound (valid for discrete Gaussians), so the search
    # only looks below it; whatever it returns has been checked by the accountant
    m = min(1.0, calibrate(family, target_epsilon=epsilon, delta=delta, rtol=5e-3,
                           lower=0.25, upper=1.0))
    event = family(m)
    return NoisePlan(method=method, level_steps=phases[0][0], level_sigma2=m * base[0],
                     warm_rounds=phases[1][0], warm_sigma2=m * base[1],
                     main_rounds=phases[2][0], main_sigma2=m * base[2], event=event,
                     epsilon=float(accounting.epsilon(event, delta)))


@dataclass(frozen=True)
class Allocation:
    """The goods assigned (``assignment[i]``: a good, or -1 for none) and the prices."""

    assignment: np.ndarray
    prices: np.ndarray  # the (ε, δ)-DP output
    welfare: float  # sum of the assigned buyers' values
    over_allocation: int  # copies assigned beyond supply, summed over goods
    supply: np.ndarray
    epsilon: float
    delta: float
    event: ev.Event
    rounds: int
    method: str
    insecure: bool

    feasible_welfare: float = 0.0  # welfare once each over-sold good keeps its best buyers
    held_back: float = 0.0  # copies per good held back against the noise (the margin)
    noise_sd: float = 0.0  # SD of the averaged demand noise per good, buyers (public)
    # the public billboard, all (ε, δ)-DP: the prices of each round and the noisy counts of
    # demand released at them (rounds x k), the level search's prices and noisy totals
    path: np.ndarray | None = None
    counts: np.ndarray | None = None
    level_prices: np.ndarray | None = None
    level_totals: np.ndarray | None = None

    @property
    def over_allocation_share(self) -> float:
        return self.over_allocation / float(self.supply.sum())


def _check(values: Any, supply: Any) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] == 0 or v.shape[1] == 0:
        raise ValueError("values must be a non-empty matrix: one row per buyer, one column per "
                         f"good (got shape {v.shape})")
    if not np.all(np.isfinite(v)) or v.min() < 0 or v.max() > 1:
        raise ValueError("values must lie in the declared [0, 1]: rescale them first")
    s = np.broadcast_to(np.asarray(supply), (v.shape[1],)).astype(np.float64)
    if not np.all(np.isfinite(s)) or s.min() <= 0 or not np.all(s == np.round(s)):
        raise ValueError(f"supply must be a positive whole number of copies per good (got "
                         f"{supply!r})")
    return v, s.astype(np.int64)


def best_responses(values: np.ndarray, prices: np.ndarray) -> np.ndarray:
    """Each buyer's favourite good at ``prices`` (-1 when no good has positive surplus)."""
    surplus = values - prices[None, :]
    best = np.argmax(surplus, axis=1)
    return np.where(surplus[np.arange(len(values)), best] > 0, best, -1)


def _demand(values: np.ndarray, prices: np.ndarray) -> np.ndarray:
    k = values.shape[1]
    return np.bincount(best_responses(values, prices) + 1, minlength=k + 1)[1:]


def welfare_optimum(values: Any, supply: Any) -> tuple[float, np.ndarray]:
    """The exact welfare optimum and an optimal assignment (scipy's assignment solver over the
    goods' copies; non-private, for reference)."""
    from scipy.optimize import linear_sum_assignment

    v, s = _check(values, supply)
    copies = np.repeat(np.arange(v.shape[1]), s)
    rows, cols = linear_sum_assignment(v[:, copies], maximize=True)
    out = np.full(v.shape[0], -1, dtype=np.int64)
    out[rows] = copies[cols]
    out[v[np.arange(len(v)), np.maximum(out, 0)] <= 0] = -1
    return float(v[rows, copies[cols]].sum()), out


def feasible_welfare(values: np.ndarray, assignment: np.ndarray, supply: np.ndarray) -> float:
    """The welfare of ``assignment`` once every over-sold good keeps only its ``supply`` buyers
    of highest value (the most a seller could deliver; an upper bound for any repair)."""
    total = 0.0
    for j in range(values.shape[1]):
        got = np.sort(values[assignment == j, j])[::-1]
        total += float(got[: int(supply[j])].sum())
    return total


def _level(v: np.ndarray, goal: float, plan: NoisePlan,
           source: _noise.Source | None) -> tuple[float, np.ndarray, np.ndarray]:
    """Bisection on one price for all goods: the noisy total demand against ``goal``."""
    lo, hi = 0.0, 1.0
    mids, totals = np.zeros(plan.level_steps), np.zeros(plan.level_steps)
    for i in range(plan.level_steps):
        mids[i] = 0.5 * (lo + hi)
        totals[i] = _demand(v, np.full(v.shape[1], mids[i])).sum() + _noise.discrete_gaussian(
            plan.level_sigma2, 1, source=source)[0]
        lo, hi = (mids[i], hi) if totals[i] > goal else (lo, mids[i])
    return 0.5 * (lo + hi), mids, totals


def _descend(v: np.ndarray, start: np.ndarray, target: np.ndarray, plan: NoisePlan, step: float,
             source: _noise.Source | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Noisy dual descent; returns the final prices, the price path and the released counts."""
    plain = plan.method == "tatonnement"
    rounds = plan.warm_rounds + plan.main_rounds
    k = v.shape[1]
    path, counts = np.zeros((rounds, k)), np.zeros((rounds, k))
    prices = start.copy()
    total = np.zeros(k)
    for t in range(rounds):
        sigma2 = plan.warm_sigma2 if t < plan.warm_rounds else plan.main_sigma2
        path[t] = prices
        counts[t] = _demand(v, prices) + _noise.discrete_gaussian(sigma2, k, source=source)
        eta = step if plain else step / (t + 1) ** STEP_DECAY
        prices = np.clip(prices + eta * (counts[t] - target) / target, 0.0, 1.0)
        if t >= plan.warm_rounds:
            total += prices
    final = prices if plain else total / plan.main_rounds
    return final, path, counts


def allocate(values: Any, supply: Any, *, epsilon: float, delta: float,
             rounds: int | None = None, step: float | None = None, margin: float | str = "auto",
             method: str = "dpkit", source: _noise.Source | None = None) -> Allocation:
    """Allocate the goods to unit-demand buyers, (ε, δ)-jointly DP under add/remove of one
    buyer (the prices and released counts are (ε, δ)-DP; see the module docstring).

    ``rounds`` of price updates (default 60 for ``"dpkit"``, 100 for ``"tatonnement"``);
    ``step``: the first step, as a share of the largest value per unit of relative excess
    demand (default 0.1, resp. 0.5); ``margin``: ``"auto"`` (hold back :data:`AUTO_MARGIN_SDS`
    standard deviations of the averaged demand noise per good: public) or a share of supply in
    [0, 1) held back against noise; ``method``: ``"dpkit"`` (level search, warm-up, averaged
    main phase, shaded supply) or ``"tatonnement"`` (plain: equal noise, fixed steps, last
    prices, no margin), both under the same accounting.
    """
    v, s = _check(values, supply)
    if method not in ("dpkit", "tatonnement"):
        raise ValueError(f"method must be 'dpkit' or 'tatonnement' (got {method!r})")
    plain = method == "tatonnement"
    rounds = (100 if plain else 60) if rounds is None else rounds
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < (1 if plain else 4):
        raise ValueError(f"rounds must be an integer >= {1 if plain else 4} (got {rounds!r})")
    step = (0.5 if plain else 0.1) if step is None else step
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0 < step <= 10:
        raise ValueError(f"step must be a number in (0, 10] (got {step!r})")
    _held_back(margin, s, 0.0)  # refuse a bad margin before the (slow) calibration
    plan = noise_plan(float(epsilon), float(delta), rounds, method)
    held = np.zeros(len(s)) if plain else _held_back(margin, s, plan.noise_sd)
    target = s.astype(np.float64) - held
    level, mids, totals = ((0.0, np.zeros(0), np.zeros(0)) if plain
                           else _level(v, float(target.sum()), plan, source))
    final, path, counts = _descend(v, np.full(len(s), level), target, plan, float(step), source)
    assignment = best_responses(v, final)
    got = np.bincount(assignment + 1, minlength=v.shape[1] + 1)[1:]
    welfare = float(v[assignment >= 0, assignment[assignment >= 0]].sum())
    src = source if source is not None else _noise.default_source()
    return Allocation(assignment=assignment, prices=final, welfare=welfare,
                      over_allocation=int(np.maximum(got - s, 0).sum()), supply=s,
                      feasible_welfare=feasible_welfare(v, assignment, s),
                      held_back=float(np.max(held)), noise_sd=plan.noise_sd,
                      epsilon=plan.epsilon, delta=float(delta), event=plan.event,
                      rounds=rounds, method=method, insecure=bool(src.insecure), path=path,
                      counts=counts, level_prices=mids, level_totals=totals)


def _held_back(margin: float | str, supply: np.ndarray, noise_sd: float) -> np.ndarray:
    """Copies held back per good: public (the noise scale and the supply only)."""
    if margin == "auto":
        return np.minimum(AUTO_MARGIN_SDS * noise_sd, 0.5 * supply)
    if isinstance(margin, str) or not (isinstance(margin, (int, float)) and 0 <= margin < 1):
        raise ValueError(f"margin must be 'auto' or a share of supply in [0, 1) "
                         f"(got {margin!r})")
    return float(margin) * supply.astype(np.float64)
