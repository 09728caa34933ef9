"""Thresholdout: its accounting, its refusals, and the law of its noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkit import events as ev
from dpkit import noise
from dpkit.adaptive import BudgetSpent, Thresholdout


def _make(train: np.ndarray, holdout: np.ndarray, **kw: object) -> Thresholdout:
    args: dict[str, object] = {"threshold": 0.05, "sigma": 0.01, "budget": 5, "max_epsilon": 50.0,
                               "source": noise.seeded(3)}
    args.update(kw)
    return Thresholdout(train, holdout, **args)  # type: ignore[arg-type]


def test_agreement_answers_from_train_and_disagreement_from_a_noisy_holdout() -> None:
    n = 2000
    zeros, ones = np.zeros((n, 1)), np.ones((n, 1))
    th = _make(zeros, zeros, threshold=0.2, sigma=0.001)
    assert th.query(lambda x: x[:, 0]) == 0.0  # exact train mean, nothing spent
    assert th.answered == 0
    th = _make(zeros, ones, threshold=0.2, sigma=0.001)
    got = th.query(lambda x: x[:, 0])
    # |noise| <= 30 sigma fails with probability e^-30 (Laplace tail)
    assert abs(got - 1.0) < 30 * 0.001 and th.answered == 1


def test_epsilon_is_two_budget_over_sigma_n_at_most() -> None:
    n, sigma, budget = 1000, 0.02, 4
    th = _make(np.zeros((n, 1)), np.ones((n, 1)), sigma=sigma, budget=budget)
    for _ in range(budget):
        th.query(lambda x: x[:, 0])
    with pytest.raises(BudgetSpent):
        th.query(lambda x: x[:, 0])
    bound = 2 * budget / (sigma * n)
    assert bound <= th.epsilon <= bound * (1 + 1 / 1024) + 1e-12
    assert all(isinstance(e, ev.PureDP) for e in th.events)
    assert len(th.events) == 2 * budget  # one round and one answer per over-threshold answer


def test_values_are_clamped_so_no_row_can_raise() -> None:
    rows = np.array([[np.nan], [np.inf], [-np.inf], [2.0]])
    th = _make(rows, rows, threshold=0.5, sigma=0.001, max_epsilon=1e6)
    assert th.query(lambda x: x[:, 0]) == pytest.approx(0.5)  # 0, 1, 0, 1
    with pytest.raises(ValueError, match="one value per row"):
        th.query(lambda x: x[:2, 0])
    per_row = _make(rows, rows, threshold=0.5, sigma=0.001, vectorized=False, max_epsilon=1e6)
    assert per_row.query(lambda r: r[0]) == pytest.approx(0.5)


@pytest.mark.parametrize("kw, words", [
    ({"sigma": 0.0}, "sigma"), ({"threshold": -1.0}, "threshold"), ({"budget": 0}, "budget"),
    ({"budget": 1.5}, "budget"), ({"sigma": 1e-4, "max_epsilon": 1.0}, "max_epsilon"),
])
def test_bad_parameters_are_refused_before_any_noise(kw: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        _make(np.zeros((100, 1)), np.zeros((100, 1)), **kw)
    with pytest.raises(ValueError, match="holdout"):
        _make(np.zeros((100, 1)), np.zeros((0, 1)))


def test_answer_noise_has_the_laplace_law() -> None:
    """Noisy holdout answers minus the (gridded) holdout mean: discrete Laplace of scale sigma
    in grid units, so mean 0 and variance ~ 2 sigma^2. N = 3000: the sample variance of Laplace
    draws has relative sd sqrt((6 - 1) / N) = 0.041 (kurtosis 6); |ratio - 1| < 0.25 is 6 sd
    (false failure < 1e-8 under the normal approximation), |mean| < 6 sd of the mean."""
    n, sigma, count = 1000, 0.05, 3000
    th = _make(np.zeros((n, 1)), np.ones((n, 1)), threshold=0.01, sigma=sigma, budget=count,
               max_epsilon=1e6)
    draws_list = []
    for _ in range(count):
        before = th.answered
        got = th.query(lambda x: x[:, 0])
        if th.answered > before:  # over threshold (a query may still fall under it by noise)
            draws_list.append(got - 1.0)
    draws = np.array(draws_list)
    assert len(draws) > 0.99 * count
    var = 2 * sigma**2
    assert abs(draws.mean()) < 6 * math.sqrt(var / len(draws))
    assert abs(draws.var() / var - 1) < 0.25
