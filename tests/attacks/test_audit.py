"""The audit harness itself: valid lower bounds (coverage), power, δ, categorical outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import dpkit as dp
from dpkit.attacks import AuditResult, clopper_pearson, empirical_epsilon
from dpkit.attacks.audit import audit

CONF = 1 - 1e-6  # every certified bound below fails with probability <= 1e-6


def _coins(p: float, n: int, src: dp.noise.Source) -> np.ndarray:
    return dp.noise.bernoulli(p, n, source=src).astype(np.int64)


def test_clopper_pearson_matches_exact_binomial_tails() -> None:
    lo, up = clopper_pearson(np.array([0, 3, 10]), 10, 0.025)
    assert lo[0] == 0.0 and up[2] == 1.0
    # P(X >= 3 | p = lo) = alpha, P(X <= 3 | p = up) = alpha
    assert stats.binom.sf(2, 10, lo[1]) == pytest.approx(0.025, rel=1e-6)
    assert stats.binom.cdf(3, 10, up[1]) == pytest.approx(0.025, rel=1e-6)


def test_two_coins_bound_is_valid_and_tight() -> None:
    """Bernoulli(0.6) vs Bernoulli(0.4): true ε = ln 1.5 = 0.405. With 360k certification draws
    per side the log-ratio of the best test has standard deviation about 2.5e-3 and the
    Clopper-Pearson slack at confidence 1 - 1e-6 with 16 tests is about 5.6 of them (0.014):
    the bound lands near 0.39; failing ``>= ln 1.5 - 0.06`` needs an 18-sigma deviation."""
    src = dp.noise.seeded(1)
    r = empirical_epsilon(_coins(0.6, 400_000, src), _coins(0.4, 400_000, src), confidence=CONF)
    assert isinstance(r, AuditResult)
    assert r.epsilon_lower <= math.log(1.5)
    assert r.epsilon_lower >= math.log(1.5) - 0.06
    assert r.confidence == CONF and r.tests >= 1


def test_the_confidence_statement_holds() -> None:
    """300 independent audits at confidence 0.8 of the two coins (true ε = ln 1.5, n = 4000):
    the number whose bound exceeds the truth is Binomial(300, <= 0.2); the test fails only if
    P(Binomial(300, 0.2) >= observed) < 1e-6."""
    src = dp.noise.seeded(2)
    truth = math.log(1.5)
    above = 0
    for _ in range(300):
        r = empirical_epsilon(_coins(0.6, 4000, src), _coins(0.4, 4000, src), confidence=0.8)
        above += r.epsilon_lower > truth
    assert stats.binom.sf(above - 1, 300, 0.2) > 1e-6


def test_detects_a_broken_mechanism() -> None:
    """A 'geometric mechanism' that claims ε = 1 but uses scale 1/2 (true ε = 2): on inputs 0
    and 1 with 200k trials the certified bound is about 1.9; it stays below 1 only with a
    >25-sigma deviation."""
    src = dp.noise.seeded(3)

    def broken(x: int, n: int) -> np.ndarray:
        return x + dp.noise.discrete_laplace(0.5, n, source=src)

    r = audit(broken, 0, 1, trials=200_000, confidence=CONF)
    assert r.epsilon_lower > 1.0


def test_delta_is_subtracted() -> None:
    """A mechanism that leaks its input with probability 0.01 (output 10**6 only from input 0)
    and is otherwise geometric at ε = 1: without δ the leak certifies a large ε; with
    δ = 0.01 the bound respects ε = 1."""
    src = dp.noise.seeded(4)

    def leaky(x: int, n: int) -> np.ndarray:
        out = x + dp.noise.discrete_laplace(1.0, n, source=src)
        leak = dp.noise.bernoulli(0.01, n, source=src)
        return np.where(leak & (x == 0), 10**6, out) if x == 0 else out

    r0 = audit(leaky, 0, 1, trials=200_000, confidence=CONF)
    assert r0.epsilon_lower > 3.0
    r1 = audit(leaky, 0, 1, trials=200_000, delta=0.01, confidence=CONF)
    assert r1.epsilon_lower <= 1.0


def test_categorical_and_vector_outputs() -> None:
    src = dp.noise.seeded(5)
    p = 0.75  # randomized response at ε = ln 3
    yes = np.where(dp.noise.bernoulli(p, 200_000, source=src), "yes", "no")
    no = np.where(dp.noise.bernoulli(1 - p, 200_000, source=src), "yes", "no")
    r = empirical_epsilon(yes, no, confidence=CONF)
    assert math.log(3) - 0.1 <= r.epsilon_lower <= math.log(3)
    assert "yes" in r.best_test or "no" in r.best_test
    # rows are compared as whole vectors
    a = np.stack([_coins(0.6, 50_000, src), _coins(0.5, 50_000, src)], axis=1)
    b = np.stack([_coins(0.4, 50_000, src), _coins(0.5, 50_000, src)], axis=1)
    r = empirical_epsilon(a, b, confidence=CONF)
    assert 0.0 < r.epsilon_lower <= math.log(1.5)


def test_identical_distributions_give_zero() -> None:
    src = dp.noise.seeded(6)
    r = empirical_epsilon(_coins(0.5, 100_000, src), _coins(0.5, 100_000, src), confidence=CONF)
    assert r.epsilon_lower == 0.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delta": 1.0}, "delta"),
        ({"confidence": 1.0}, "confidence"),
        ({"selection_fraction": 0.0}, "selection_fraction"),
        ({"max_tests": 0}, "max_tests"),
    ],
)
def test_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        empirical_epsilon(np.arange(100), np.arange(100), **kwargs)


def test_rejects_bad_samples() -> None:
    with pytest.raises(ValueError, match="NaN"):
        empirical_epsilon(np.array([1.0, math.nan, 2.0]), np.arange(3.0))
    with pytest.raises(ValueError, match="at least 2"):
        empirical_epsilon(np.array([1.0]), np.arange(3.0))
    with pytest.raises(ValueError, match="must return 10 outputs"):
        audit(lambda d, n: np.zeros(n + 1), 0, 1, trials=10)
