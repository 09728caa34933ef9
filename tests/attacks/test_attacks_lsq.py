"""Least-squares reconstruction: issue 4's uniform-noise targets, pinned against a prediction.

Targets (n = 256 people, m = 1024 random subset-sum queries, uniform integer noise on
{-E, …, E}): >= 97% recovered at E = 4, <= 60% at E >= 4 sqrt(n) = 64 (checked at 64 and 128).

The prediction (:func:`dpkit.attacks.reconstruction.lsq_predicted_rate`). Ordinary least squares
gives ``x_hat = x + C A^T z`` with ``C = (A^T A)^{-1}``: unbiased, covariance ``sigma^2 C``,
``sigma^2 = E(E+1)/3`` (uniform on 2E+1 integers). Each coordinate's error is a weighted sum of
1024 independent bounded noise terms, so Gaussian to a good approximation, and rounding at 1/2
recovers bit i with probability ``p_i = Phi(0.5 / (sigma sqrt(C_ii)))``. For random half-subsets
``E[A^T A] = (m/4)(I + 11^T)``, so ``C_ii ~ 4/m`` and ``Phi(0.5 sqrt(3m) / (2E))`` = 99.97% at
E = 4 and 58.6% at E = 64 with the continuous U(-E, E); for the *realised* A, ``C_ii`` is about
``4/(m - n)`` (Wishart inverse), and with the integer variance the prediction is 99.6% (E = 4),
57.4% (E = 64), 53.7% (E = 128), which the test computes from the realised matrices.

Thresholds and false-failure probabilities. One population of 256 bits has a binomial sd of
3.1% at E = 64, so a single run lands above 60% about one time in five even for this attack:
the issue's "<= 60%" is a statement about the expected rate. The tests therefore pool K = 40
fixed populations (10,240 bits; errors of different bits are nearly uncorrelated: off-diagonal
entries of C are ~4% of the diagonal and of random sign, and the measured per-population sd,
2.9% over 40 seeds, matches the binomial 3.1%). With the predicted mean p and sd
s = sqrt(p(1-p)/10240):

* E = 64: p ~ 0.574, s ~ 0.0049; the pooled rate exceeds 0.60 with probability ~5e-8 (z = 5.3).
* E = 128: p ~ 0.537, s ~ 0.0049; z > 12.
* E = 4: expected errors 10240 (1 - 0.9964) ~ 37; >= 97% allows 307; P(Poisson(37) > 307) is
  below 1e-100.
* Agreement with the prediction (the analysis can fail): |pooled - p| <= 5.3 s, two-sided
  false failure 1.2e-7 per level.

Runtime: ~7 s (40 populations x 1024 subsets; one least-squares solve per population and level).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtr

import dpkit as dp
from dpkit.attacks import oracles as orc
from dpkit.attacks import reconstruction as rec

N, M, K = 256, 1024, 40
Z = 5.3  # one-sided normal tail 5.8e-8; two-sided 1.2e-7


Case = tuple[rec.Population, list[rec.SubsetQuery], np.ndarray, np.ndarray]


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    """K populations, their queries, the matrix A and diag((A^T A)^{-1}) (computed once)."""
    out = []
    for k in range(K):
        src = dp.noise.seeded(4000 + k)
        people = rec.make_population(N, source=src)
        qs = rec.random_subsets(people.qid, M, source=src)
        A = rec.subset_matrix(qs)
        out.append((people, qs, A, np.diag(np.linalg.inv(A.T @ A))))
    return out


def _pooled(cases: list[Case], bound: int, *, box: bool = False) -> tuple[float, float]:
    """(pooled recovery rate, pooled predicted rate) over the populations at noise ±bound."""
    rates, predicted = [], []
    var = rec.uniform_noise_variance(bound)
    for k, (people, qs, A, c) in enumerate(cases):
        y = orc.NoisyOracle(people, scale=bound, noise="uniform",
                            source=dp.noise.seeded(9000 + 1000 * bound + k)).ask(qs)
        rates.append(rec.recovery_rate(rec.lsq_attack(A, y, box=box), people.secret))
        predicted.append(float(np.mean(ndtr(0.5 / np.sqrt(var * c)))))  # lsq_predicted_rate
    return float(np.mean(rates)), float(np.mean(predicted))


def _sd(p: float) -> float:
    return float(np.sqrt(p * (1 - p) / (K * N)))


def test_prediction_matches_the_closed_form(cases: list[Case]) -> None:
    """The realised diag of (A^T A)^{-1} is ~4/(m - n), not 4/m; both give the brief's figures."""
    from scipy.stats import norm

    _, _, A, c = cases[0]
    assert rec.lsq_predicted_rate(A, 1386.0) == pytest.approx(np.mean(ndtr(0.5 / np.sqrt(
        1386.0 * c))), rel=1e-9)
    assert 0.9 * 4 / (M - N) < c.mean() < 1.1 * 4 / (M - N)
    # the idealised formula Phi(0.5 sqrt(3m) / (2E)): 99.97% at E = 4, 58.6% at E = 64
    assert norm.cdf(0.5 * np.sqrt(3 * M) / 8) == pytest.approx(0.99973, abs=1e-5)
    assert norm.cdf(0.5 * np.sqrt(3 * M) / 128) == pytest.approx(0.5857, abs=1e-4)
    assert rec.uniform_noise_variance(4) == pytest.approx(((2 * 4 + 1) ** 2 - 1) / 12)
    assert rec.lsq_predicted_rate(A, 0.0) == 1.0


def test_exact_answers_recover_everything(cases: list[Case]) -> None:
    for people, qs, A, _ in cases[:3]:
        y = orc.ExactOracle(people).ask(qs)
        assert rec.recovery_rate(rec.lsq_attack(A, y), people.secret) == 1.0
        assert rec.recovery_rate(rec.lsq_attack(A, y, box=True), people.secret) == 1.0


def test_uniform_noise_4_recovers_at_least_97_percent(cases: list[Case]) -> None:
    rate, p = _pooled(cases, 4)
    assert rate >= 0.97
    assert abs(rate - p) <= Z * _sd(p)


@pytest.mark.parametrize("bound", [64, 128])
def test_uniform_noise_4_sqrt_n_recovers_at_most_60_percent(cases: list[Case], bound: int) -> None:
    rate, p = _pooled(cases, bound)
    assert p + Z * _sd(p) <= 0.60  # the analysis itself puts the target Z sd away
    assert rate <= 0.60
    assert abs(rate - p) <= Z * _sd(p)


def test_box_constraint_helps_a_little_and_stays_near_the_line(cases: list[Case]) -> None:
    """Box-constrained least squares (secrets in [0, 1]) is a little stronger than plain OLS
    (measured 58.1% vs 57.3% at E = 64 over 40 other seeds); it has no closed form, so only
    bands: >= 97% at E = 4 (4 populations; the box only moves estimates towards [0, 1], and
    OLS alone expects 4 errors of the 31 allowed) and <= 60% at E = 128 (8 populations, 2048
    bits: OLS predicts 53.7%, sd 1.1%; measured box 54.0% over 40 other seeds, so 60% is
    > 5 sd away)."""
    assert _pooled(cases[:4], 4, box=True)[0] >= 0.97
    assert _pooled(cases[:8], 128, box=True)[0] <= 0.60


def test_lsq_through_reconstruct_and_arguments() -> None:
    src = dp.noise.seeded(31)
    people = rec.make_population(64, source=src)
    oracle = orc.NoisyOracle(people, scale=1, noise="uniform", source=src)
    for attack in ("lsq", "lsq-box"):
        res = rec.reconstruct(oracle, people.qid, queries=256, attack=attack, source=src)
        assert res.attack == attack
        assert rec.recovery_rate(res.guess, people.secret) >= 0.95
    with pytest.raises(ValueError, match="attack must be one of"):
        rec.reconstruct(oracle, people.qid, queries=4, attack="nope", source=src)
    with pytest.raises(ValueError, match="m >= n"):
        rec.lsq_predicted_rate(np.ones((2, 3)), 1.0)
    # fewer answers than unknowns: the minimum-norm solution, still a valid guess
    guess = rec.lsq_attack(np.ones((2, 5)), np.array([1.0, np.nan]))
    assert guess.shape == (5,) and set(guess.tolist()) <= {0, 1}
