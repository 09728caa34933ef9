"""``batch_size="auto"``'s count (:mod:`dpkit.learn.batch_count`): the stated error holds, the
noise is really there at its scale, the split is accounted for, bad input is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import dpkit as dp
from dpkit import events as ev
from dpkit.learn.batch_count import (
    calibrate_with_count,
    check_batch_size,
    check_count_fraction,
    count_plan,
    noisy_divisor,
)

R = 2000  # draws per statistical test


def _draws(n: int, q: float, sens: int, eps: float, seed: int) -> tuple[np.ndarray, list]:
    src = dp.noise.seeded(seed)
    out = [noisy_divisor(n, sample_rate=q, sensitivity=sens, epsilon=eps, source=src)
           for _ in range(R)]
    return np.array([b.divisor for b in out]), out


def test_divisor_within_its_stated_error_with_probability_1_minus_beta() -> None:
    """Each draw misses ``q N`` by more than ``error(β)`` with probability <= β (exact DLap
    tail), so the misses are at most Binomial(R, β): the threshold is its 1 - 1e-6 quantile
    (false-failure probability <= 1e-6)."""
    n, q, beta = 6000, 0.01, 0.05
    div, counts = _draws(n, q, sens=2, eps=0.06, seed=11)
    err = counts[0].error(beta)
    assert err == pytest.approx(q * dp.mechanisms.plan.discrete_laplace_halfwidth(
        2 / 0.06, 1 - beta)[0])
    misses = int(np.sum(np.abs(div - q * n) > err))
    assert misses <= stats.binom.isf(1e-6, R, beta)
    # a noiseless count would pass the line above: the noise must have its stated scale.
    # DLap(s) has variance 2e^{-1/s}/(1 - e^{-1/s})^2 and kurtosis ~6, so the sample variance
    # of R draws has relative s.d. ~sqrt(5/R) = 0.05; 6 of them (normal approx., ~1e-9)
    z = np.array([b.rows.value for b in counts], dtype=float) - n
    s = 2 / 0.06
    var = 2 * math.exp(-1 / s) / (1 - math.exp(-1 / s)) ** 2
    assert abs(z.var() / var - 1) <= 6 * math.sqrt(5 / R)
    assert all(b.rows.event == count_plan(sensitivity=2, epsilon=0.06).event for b in counts[:5])


def test_divisor_is_at_least_one() -> None:
    """max(1, q N̂): an empty or tiny table never divides by zero or a negative number."""
    div, _ = _draws(0, 0.01, sens=1, eps=0.5, seed=3)
    assert div.min() == 1.0


def test_count_event_and_the_split() -> None:
    plan = count_plan(sensitivity=3, epsilon=0.1)
    assert isinstance(plan.event, ev.DiscreteLaplace) and plan.event.sensitivity == 3
    assert 3 / plan.event.scale <= 0.1
    q, steps, eps, delta = 0.05, 200, 2.0, 1e-5
    sigma = calibrate_with_count(plan.event, sampling_probability=q, steps=steps,
                                 target_epsilon=eps, delta=delta)
    sgd = ev.SelfComposed(ev.PoissonSampled(q, ev.Gaussian(sigma)), steps)
    total = dp.accounting.epsilon(ev.Composed((plan.event, sgd)), delta=delta, method="pld")
    assert total <= eps  # the composition meets the target: the count's share is paid
    def sigma_for(target: float) -> float:
        return dp.accounting.calibrate.dpsgd_noise_multiplier(
            sampling_probability=q, steps=steps, target_epsilon=target, delta=delta,
            method="pld")

    # DP-SGD got less than the whole epsilon ...
    assert dp.accounting.epsilon(sgd, delta=delta, method="pld") < eps - 0.01
    # ... but no more noise than giving it what basic composition leaves (PLD is tighter)
    assert sigma <= sigma_for(eps - 0.1) * (1 + 1e-3)


@pytest.mark.parametrize("bad", [0, -3, True, 1.5, "big", 60.0])
def test_bad_batch_size_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="batch_size must be 'auto', None or an int >= 1"):
        check_batch_size(bad)


@pytest.mark.parametrize("good", [None, "auto", 1, np.int64(60)])
def test_good_batch_size(good: object) -> None:
    assert check_batch_size(good) == good


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, float("nan"), True, "0.02"])
def test_count_fraction_outside_0_1_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"count_fraction must lie in \(0, 1\)"):
        check_count_fraction(bad)
