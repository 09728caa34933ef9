"""Black-box audits of the pure-DP learners on worst-case neighbouring datasets.

``dpkit.attacks.audit_black_box`` certifies a lower bound on ε that holds with probability
>= ``confidence``; at confidence 1 - 1e-6 a bound above the stated ε is a privacy bug with
false-failure probability <= 1e-6. Each test also checks the audit has power: the same
audit on the learner run at 4ε certifies more than ε.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.attacks.audit_vector import audit_black_box
from dpkit.learn import FiniteClassLearner, GaussianNB, Thresholds

CONF = 1 - 1e-6
SRC = dp.noise.seeded(2024)  # one stream for all draws: independent outputs


def _pac(eps: float):  # type: ignore[no-untyped-def]
    def run(data: tuple[np.ndarray, np.ndarray]) -> Any:
        X, y = data
        return FiniteClassLearner(hypotheses=Thresholds(4), epsilon=eps,
                                  random_state=SRC).fit(X, y).index_
    return run


def test_pac_learner_audit() -> None:
    # d1 adds one row (x=0, y=1) to d0: every threshold but t=0 gains one error
    X0, y0 = np.array([[2], [3]]), np.array([1, 1])
    X1, y1 = np.array([[2], [3], [0]]), np.array([1, 1, 1])
    res = audit_black_box(_pac(1.0), (X0, y0), (X1, y1), trials=1000, confidence=CONF)
    assert res.epsilon_lower <= 1.0
    strong = audit_black_box(_pac(4.0), (X0, y0), (X1, y1), trials=1000, confidence=CONF)
    assert strong.epsilon_lower > 1.0


def _nb(eps: float):  # type: ignore[no-untyped-def]
    def run(data: tuple[np.ndarray, np.ndarray]) -> Any:
        X, y = data
        m = GaussianNB(epsilon=eps, bounds=(-1, 1), classes=[0, 1], random_state=SRC).fit(X, y)
        return np.r_[m.theta_[1], m.class_prior_[1]]
    return run


@pytest.mark.slow
def test_gaussian_nb_audit() -> None:
    X0, y0 = np.zeros((4, 1)), np.array([0, 0, 1, 1])
    X1, y1 = np.r_[X0, [[1.0]]], np.r_[y0, 1]
    res = audit_black_box(_nb(1.0), (X0, y0), (X1, y1), trials=3000, confidence=CONF)
    assert res.epsilon_lower <= 1.0
