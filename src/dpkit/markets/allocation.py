"""Allocating scarce goods under joint differential privacy, by private prices.

Kearns-Pai-Roth-Ullman 2014; Hsu, Huang, Roth, Roughgarden, Wu, "Private matchings and
allocations" (STOC 2014). ``n`` unit-demand buyers value ``k`` goods (``values[i, j]`` in
``[0, 1]``), good ``j`` has ``supply[j]`` copies. A price on every good is found by noisy dual
(sub)gradient descent: each round every buyer names the good she likes best at the current
prices (value minus price, if positive), the *count* of buyers naming each good is released
with noise, and prices move up where demand exceeds supply and down where it falls short.
Finally each buyer takes her best good at the released prices.

**Privacy: (ε, δ)-joint DP.** Neighbouring relation: add or remove one buyer. A buyer names at
most one good per round, so the demand vector has L2 sensitivity 1; each round adds exact
discrete Gaussian noise of variance ``σ² = rounds/(2ρ)`` (ρ-zCDP for all rounds together,
CKS 2020 Thm. 14, composed adaptively), ρ the largest with ``ε(ρ, δ) <= epsilon``. The prices are
post-processing of those counts: (ε, δ)-DP. Each buyer's good is a function of the public prices
and her own values only, so by the billboard lemma (Hsu et al. 2014, Lemma 4) the allocation is
(ε, δ)-*jointly* DP: what the *other* buyers receive reveals little about any one buyer. (No
mechanism can make a buyer's own good independent of her own values: she must get what she
wants; that is why the guarantee is joint.)

**What is improved over plain noisy tâtonnement** (``method="tatonnement"``: fixed steps, the last
prices): the price steps are relative to supply and shrink as ``1/sqrt(t)``; the final prices
are the *average* of the second half of the rounds (averaging cancels the independent noise of
the rounds, by ``1/sqrt(rounds)``); and supply is shaded by a small ``margin`` so that the
remaining noise errs towards leaving a copy unsold rather than selling one that does not exist.

**The margin, from public numbers.** The averaged prices carry the noise of the averaged demand
counts, whose standard deviation is ``sqrt(σ²/(rounds/2)) = 1/sqrt(ρ)`` buyers per good whatever
the number of rounds. ``margin="auto"`` holds back :data:`AUTO_MARGIN_SDS` of those per good
(capped at half the supply): a function of (ε, δ) and the supply only, so it costs no privacy.
See docs/beyond.md for what it buys (``benchmarks/allocation_bench.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit import noise as _noise
from dpkit.accounting.zcdp import epsilon_to_rho, rho_to_epsilon

__all__ = ["AUTO_MARGIN_SDS", "Allocation", "allocate", "best_responses", "feasible_welfare",
           "welfare_optimum"]

#: copies held back per good by ``margin="auto"``, in standard deviations of the averaged
#: demand noise (1/sqrt(rho)); chosen on the benchmark's instance (docs/beyond.md)
AUTO_MARGIN_SDS = 1.75


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


def _noise_sigma2(epsilon: float, delta: float, rounds: int) -> tuple[float, ev.Event]:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be positive (got {epsilon!r})")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1) (got {delta!r})")
    rho = epsilon_to_rho(epsilon, delta)
    sigma2 = rounds / (2.0 * rho)
    return sigma2, ev.SelfComposed(ev.DiscreteGaussian(sigma2, 1), rounds)


def allocate(values: Any, supply: Any, *, epsilon: float, delta: float, rounds: int = 100,
             step: float = 0.5, margin: float | str = "auto", method: str = "dpkit",
             source: _noise.Source | None = None) -> Allocation:
    """Allocate the goods to unit-demand buyers, (ε, δ)-jointly DP (see the module docstring).

    ``rounds`` of price updates; ``step``: the first step, as a share of the largest value per
    unit of relative excess demand; ``margin``: ``"auto"`` (hold back :data:`AUTO_MARGIN_SDS`
    standard deviations of the averaged demand noise per good: public) or a share of supply in
    [0, 1) held back against noise; ``method``: ``"dpkit"`` (averaged, shaded, shrinking steps)
    or ``"tatonnement"`` (plain: fixed steps, last prices, no margin), both under the same
    privacy.
    """
    v, s = _check(values, supply)
    if method not in ("dpkit", "tatonnement"):
        raise ValueError(f"method must be 'dpkit' or 'tatonnement' (got {method!r})")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer (got {rounds!r})")
    sigma2, event = _noise_sigma2(float(epsilon), float(delta), rounds)
    plain = method == "tatonnement"
    held = np.zeros(len(s)) if plain else _held_back(margin, s, sigma2, rounds)
    target = s.astype(np.float64) - held
    prices = np.zeros(v.shape[1])
    kept: list[np.ndarray] = []
    for t in range(rounds):
        demand = np.bincount(best_responses(v, prices) + 1, minlength=v.shape[1] + 1)[1:]
        noisy = demand + _noise.discrete_gaussian(sigma2, v.shape[1], source=source)
        eta = step if plain else step / math.sqrt(t + 1)
        prices = np.clip(prices + eta * (noisy - target) / target, 0.0, 1.0)
        if t >= rounds // 2:
            kept.append(prices)
    final = prices if plain else np.mean(kept, axis=0)
    assignment = best_responses(v, final)
    got = np.bincount(assignment + 1, minlength=v.shape[1] + 1)[1:]
    welfare = float(v[assignment >= 0, assignment[assignment >= 0]].sum())
    src = source if source is not None else _noise.default_source()
    return Allocation(assignment=assignment, prices=final, welfare=welfare,
                      over_allocation=int(np.maximum(got - s, 0).sum()), supply=s,
                      feasible_welfare=feasible_welfare(v, assignment, s),
                      held_back=float(np.max(held)),
                      epsilon=float(rho_to_epsilon(rounds / (2.0 * sigma2), delta)),
                      delta=float(delta), event=event, rounds=rounds, method=method,
                      insecure=bool(src.insecure))


def _held_back(margin: float | str, supply: np.ndarray, sigma2: float,
               rounds: int) -> np.ndarray:
    """Copies held back per good: public (the noise scale and the supply only)."""
    if margin == "auto":
        sd = math.sqrt(sigma2 / max(1, rounds - rounds // 2))  # the averaged rounds' noise
        return np.minimum(AUTO_MARGIN_SDS * sd, 0.5 * supply)
    if isinstance(margin, str) or not (isinstance(margin, (int, float)) and 0 <= margin < 1):
        raise ValueError(f"margin must be 'auto' or a share of supply in [0, 1) "
                         f"(got {margin!r})")
    return float(margin) * supply.astype(np.float64)
