"""Joint-DP allocation by private prices: the solver it is measured against, its accounting."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpkit import noise
from dpkit.accounting.zcdp import rho_to_epsilon
from dpkit.markets.allocation import allocate, best_responses, welfare_optimum


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
    rho = 40 / (2 * a.event.event.sigma2)  # type: ignore[attr-defined]
    assert rho_to_epsilon(rho, 1e-6) <= 1.0 + 1e-9
    assert a.assignment.shape == (300,) and a.prices.shape == (4,)


@pytest.mark.parametrize("values, supply, kw, words", [
    (np.full((3, 2), 1.5), 1, {}, r"\[0, 1\]"), (np.zeros((0, 2)), 1, {}, "non-empty"),
    (np.zeros((3, 2)), 0, {}, "supply"), (np.zeros((3, 2)), 1.5, {}, "supply"),
    (np.zeros((3, 2)), 1, {"epsilon": 0.0}, "epsilon"), (np.zeros((3, 2)), 1, {"delta": 1.0},
                                                         "delta"),
    (np.zeros((3, 2)), 1, {"method": "x"}, "method"),
])
def test_bad_markets_are_refused(values: np.ndarray, supply: object, kw: dict[str, object],
                                 words: str) -> None:
    args: dict[str, object] = {"epsilon": 1.0, "delta": 1e-6}
    args.update(kw)
    with pytest.raises(ValueError, match=words):
        allocate(values, supply, **args)  # type: ignore[arg-type]
