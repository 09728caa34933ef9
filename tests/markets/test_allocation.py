"""Joint-DP allocation by private prices: the solver it is measured against, its accounting."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dpkit as dp
from dpkit import noise
from dpkit.accounting.zcdp import epsilon_to_rho
from dpkit.markets.allocation import (
    AUTO_MARGIN_SDS,
    LEVEL_SHARE,
    LEVEL_STEPS,
    STEP_DECAY,
    WARM_SHARE,
    Allocation,
    allocate,
    best_responses,
    noise_plan,
    welfare_optimum,
)


def test_welfare_optimum_matches_brute_force() -> None:
    v = noise.uniform_float01((5, 3), source=noise.seeded(4))
    supply = [1, 2, 1]
    best = 0.0
    for choice in itertools.product(range(-1, 3), repeat=5):
        counts = np.bincount([c for c in choice if c >= 0], minlength=3)
        if np.all(counts <= supply):
            best = max(best, sum(v[i, c] for i, c in enumerate(choice) if c >= 0))
    opt, assignment = welfare_optimum(v, supply)
    assert opt == pytest.approx(best)
    assert np.all(np.bincount(assignment[assignment >= 0], minlength=3) <= supply)


def test_each_buyer_best_responds_to_the_public_prices() -> None:
    v = np.array([[0.9, 0.2], [0.3, 0.35], [0.1, 0.05]])
    assert best_responses(v, np.array([0.5, 0.1])).tolist() == [0, 1, -1]


def test_the_stated_epsilon_is_met_and_the_run_is_feasible_at_large_epsilon() -> None:
    v = noise.uniform_float01((300, 4), source=noise.seeded(2))
    a = allocate(v, 30, epsilon=1.0, delta=1e-6, rounds=40, source=noise.seeded(3))
    assert a.epsilon <= 1.0 + 1e-9
    assert dp.accounting.epsilon(a.event, 1e-6) <= 1.0 + 1e-9
    # the accountant's calibration is tight (within its 1e-3 search tolerance) and spends less
    # noise than the zCDP conversion would: the main rounds' sigma2 is below rounds/(2 rho)
    assert a.epsilon >= 0.99
    plan = noise_plan(1.0, 1e-6, 40)
    rho = epsilon_to_rho(1.0, 1e-6)
    assert plan.main_sigma2 < plan.main_rounds / (2 * rho * (1 - LEVEL_SHARE - WARM_SHARE))
    assert plan.level_steps + plan.warm_rounds + plan.main_rounds == LEVEL_STEPS + 40
    assert a.assignment.shape == (300,) and a.prices.shape == (4,)
    assert a.path is not None and a.path.shape == (40, 4) and a.counts is not None


@pytest.mark.parametrize("values, supply, kw, words", [
    (np.full((3, 2), 1.5), 1, {}, r"\[0, 1\]"), (np.zeros((0, 2)), 1, {}, "non-empty"),
    (np.zeros((3, 2)), 0, {}, "supply"), (np.zeros((3, 2)), 1.5, {}, "supply"),
    (np.zeros((3, 2)), 1, {"epsilon": 0.0}, "epsilon"), (np.zeros((3, 2)), 1, {"delta": 1.0},
                                                         "delta"),
    (np.zeros((3, 2)), 1, {"method": "x"}, "method"),
    (np.zeros((3, 2)), 1, {"step": 0.0}, "step"), (np.zeros((3, 2)), 1, {"rounds": 2}, "rounds"),
    (np.zeros((3, 2)), 1, {"margin": 1.0}, "margin"), (np.zeros((3, 2)), 1, {"margin": "x"},
                                                       "margin"),
])
def test_bad_markets_are_refused(values: np.ndarray, supply: object, kw: dict[str, object],
                                 words: str) -> None:
    args: dict[str, object] = {"epsilon": 1.0, "delta": 1e-6}
    args.update(kw)
    with pytest.raises(ValueError, match=words):
        allocate(values, supply, **args)  # type: ignore[arg-type]


def test_the_auto_margin_is_public_noise_sds_per_good_capped_at_half_the_supply() -> None:
    """It depends on (epsilon, delta, rounds, supply) only: the same for any values."""
    held = []
    for seed in (1, 2):
        v = noise.uniform_float01((200, 3), source=noise.seeded(seed))
        held.append(allocate(v, 100, epsilon=1.0, delta=1e-6, rounds=20,
                             source=noise.seeded(seed)).held_back)
    assert held[0] == held[1]
    plan = noise_plan(1.0, 1e-6, 20)
    assert held[0] == pytest.approx(AUTO_MARGIN_SDS * np.sqrt(plan.main_sigma2 / plan.main_rounds))
    v = noise.uniform_float01((200, 3), source=noise.seeded(1))
    assert allocate(v, 4, epsilon=0.1, delta=1e-6, rounds=20,
                    source=noise.seeded(1)).held_back == 2.0  # half of 4 copies
    assert allocate(v, 4, epsilon=1.0, delta=1e-6, method="tatonnement",
                    source=noise.seeded(1)).held_back == 0.0


def _replay(a: Allocation, supply: np.ndarray, k: int, step: float = 0.1) -> np.ndarray:
    """The prices recomputed from the released numbers alone (no values): post-processing."""
    assert a.level_totals is not None and a.counts is not None
    target = supply - a.held_back
    lo, hi = 0.0, 1.0
    for total in a.level_totals:
        lo, hi = (0.5 * (lo + hi), hi) if total > target.sum() else (lo, 0.5 * (lo + hi))
    prices, acc, warm = np.full(k, 0.5 * (lo + hi)), np.zeros(k), a.rounds // 4
    for t, c in enumerate(a.counts):
        prices = np.clip(prices + step / (t + 1) ** STEP_DECAY * (c - target) / target, 0, 1)
        acc += prices if t >= warm else 0
    return acc / (a.rounds - warm)


def test_the_prices_are_post_processing_of_the_released_counts() -> None:
    """The billboard argument needs the prices to be a function of the noisy releases only and
    each buyer's good a best response to them: replayed without the values, they agree."""
    v = noise.uniform_float01((400, 3), source=noise.seeded(5))
    a = allocate(v, 60, epsilon=1.0, delta=1e-6, rounds=24, source=noise.seeded(6))
    assert np.allclose(_replay(a, np.full(3, 60.0), 3), a.prices, atol=1e-12)
    assert np.array_equal(a.assignment, best_responses(v, a.prices))


def test_feasible_welfare_keeps_the_best_buyers_of_an_over_sold_good() -> None:
    from dpkit.markets.allocation import feasible_welfare

    v = np.array([[0.9, 0.0], [0.5, 0.0], [0.7, 0.0], [0.0, 0.4]])
    assert feasible_welfare(v, np.array([0, 0, 0, 1]), np.array([2, 1])) == pytest.approx(2.0)


def test_the_margin_keeps_over_allocation_small_at_epsilon_1() -> None:
    """n = 300, 3 goods with 100 copies each, eps = 1: the main phase's averaged demand noise
    has SD 4.7 buyers per good and the auto margin holds back 0.75 of it. Measured over 40
    seeds: 0.77% of supply over-allocated on average, per-run SD about 1.2%; the mean of 6 runs
    exceeds 2.5% only if it lands 3.5 standard errors high (< 1e-3 even allowing for skew)."""
    over = []
    for seed in range(6):
        v = noise.uniform_float01((300, 3), source=noise.seeded(seed))
        a = allocate(v, 100, epsilon=1.0, delta=1e-6, source=noise.seeded(100 + seed))
        over.append(a.over_allocation_share)
    assert np.mean(over) <= 0.025


@pytest.mark.slow
@pytest.mark.parametrize("supply, welfare, over", [(50, 0.9, 0.02), (100, 0.9, 0.02)])
def test_the_issue_targets_at_epsilon_1(supply: int, welfare: float, over: float) -> None:
    """Issue 16's targets on the benchmark's instances (n = 1,000, k = 10, U[0, 1], delta = 1e-6,
    the same seeds as benchmarks/allocation_bench.py): mean feasible welfare >= 0.9 OPT and mean
    over-allocation <= 2% of supply over 20 runs (measured 0.916 / 1.4% with 50 copies, 0.978 /
    1.6% with 100)."""
    w, o = [], []
    for r in range(20):
        values = noise.uniform_float01((1000, 10), source=noise.seeded(r))
        opt, _ = welfare_optimum(values, supply)
        a = allocate(values, supply, epsilon=1.0, delta=1e-6, source=noise.seeded(10**6 + r))
        w.append(a.feasible_welfare / opt)
        o.append(a.over_allocation_share)
    assert np.mean(w) >= welfare and np.mean(o) <= over
