"""Every mechanism, audited: the certified lower bound on ε never exceeds the claimed ε.

Each audit runs a mechanism's vectorised sampler (the same code path as the public function:
see the ``test_public_function_uses_the_audited_sampler`` tests) on a worst-case-style pair of
neighbouring inputs and certifies ``ε >= ln((P0(S) - δ)/P1(S))`` with Clopper-Pearson bounds at
confidence ``1 - 1e-6`` (:mod:`dpkit.attacks.audit`). A bound above the claim is a privacy bug,
or a false alarm with probability at most 1e-6 per test.

For Laplace, geometric and randomized response the pair is tight, so the bound must also come
close to the claim, which catches over-noising (e.g. a doubled scale would give ≈ ε/2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpkit as dp
from dpkit.accounting import zcdp
from dpkit.attacks.audit import audit
from dpkit.mechanisms._sampling import exponential_sample
from dpkit.mechanisms.exponential import _plan_exponential
from dpkit.mechanisms.gaussian import _plan_discrete_gaussian, _plan_gaussian
from dpkit.mechanisms.histogram import true_counts
from dpkit.mechanisms.laplace import _plan_geometric, _plan_laplace
from dpkit.mechanisms.noisy_max import _plan_noisy_max
from dpkit.mechanisms.randomized_response import _RR, keep_probability
from dpkit.mechanisms.sparse_vector import _plan_numeric_sparse, _plan_svt

CONF = 1 - 1e-6
TRIALS = 200_000


def _src(seed: int) -> dp.noise.Source:
    return dp.noise.seeded(seed)


# ------------------------------------------------------------------ tight: Laplace, geometric
def test_laplace_audit_is_valid_and_tight() -> None:
    """Inputs 0 and 1, Δ = 1, ε = 1, 10^6 trials each.

    Claimed ε = 1; the true loss of this pair on the grid is ε·D/(D+1) = 1024/1025 ε, reached by
    every set {o <= t}, t <= 0. Derivation of the 0.9ε floor: with 9e5 certification draws the
    best test has P0 ≈ 0.5, P1 ≈ 0.18, so the log-ratio has standard deviation
    sqrt(0.5/(0.5·9e5) + 0.82/(0.18·9e5)) ≈ 2.6e-3 and the Clopper-Pearson slack at
    1e-6/32 per bound is about 5.6 of them (≈ 0.015): the bound lands near 0.98. Falling to 0.9
    would take a ~30-sigma deviation on the certification half (or, for the selection half with
    1e5 draws, an 8-sigma one that would make a test with true value < 0.9 look best):
    probability far below 1e-6. Over-noising by 10% or more fails the floor.
    """
    plan = _plan_laplace(1.0, 1.0, 1)
    src = _src(10)
    r = audit(lambda d, n: plan.sample(np.float64(d), n, src), 0.0, 1.0, trials=1_000_000,
              confidence=CONF)
    assert r.epsilon_lower <= 1.0
    assert r.epsilon_lower >= 0.9


@pytest.mark.parametrize(("sens", "eps"), [(1, 1.0), (2, 0.5)])
def test_geometric_audit_is_valid_and_tight(sens: int, eps: float) -> None:
    """Inputs 0 and Δ: every {o <= t}, t <= 0, has ratio exactly e^ε. Same derivation as for
    Laplace (P1 ≈ 0.14-0.25): the bound lands within ~0.02 of ε; 0.9ε is > 20 sigma away."""
    plan = _plan_geometric(sens, eps)
    src = _src(11 + sens)
    r = audit(lambda d, n: plan.sample(np.int64(d), n, src), 0, sens, trials=1_000_000,
              confidence=CONF)
    assert r.epsilon_lower <= eps
    assert r.epsilon_lower >= 0.9 * eps


def test_laplace_vector_audit() -> None:
    """Vectors (0, 0) and (0.5, 0.5) (L1 distance 1 = Δ), audited through the sum of the
    released coordinates (post-processing cannot raise ε)."""
    plan = _plan_laplace(1.0, 1.0, 2)
    src = _src(14)
    r = audit(lambda d, n: plan.sample(np.array(d), n, src).sum(axis=1), [0.0, 0.0], [0.5, 0.5],
              trials=TRIALS, confidence=CONF)
    assert r.epsilon_lower <= 1.0


# ------------------------------------------------------------------ Gaussian family at delta
@pytest.mark.parametrize(
    "kind",
    [
        # its calibration asks the accountant (PLD) about sigma ~ 2600 grid units: slow
        pytest.param("gaussian", marks=pytest.mark.slow),
        "discrete_gaussian",
    ],
)
def test_gaussian_audit_at_its_delta(kind: str) -> None:
    """(ε, δ) = (1, 1e-3) calibration on inputs 0 and 1: bound at δ = 1e-3 stays <= 1."""
    src = _src(15)
    if kind == "gaussian":
        plan = _plan_gaussian(1.0, 1, None, 1.0, 1e-3)
        r = audit(lambda d, n: plan.sample(np.float64(d), n, src), 0.0, 1.0, trials=TRIALS,
                  delta=1e-3, confidence=CONF)
    else:
        dplan = _plan_discrete_gaussian(1.0, 1, None, 1.0, 1e-3, None)
        r = audit(lambda d, n: dplan.sample(np.int64(d), n, src), 0, 1, trials=TRIALS,
                  delta=1e-3, confidence=CONF)
    assert r.epsilon_lower <= 1.0


def test_gaussian_rho_audit() -> None:
    """ρ = 0.5 zCDP implies (ε, 1e-3)-DP with ε = rho_to_epsilon(0.5, 1e-3) (CKS 2020)."""
    plan = _plan_gaussian(1.0, 1, 0.5, None, None)
    claimed = zcdp.rho_to_epsilon(0.5, 1e-3)
    src = _src(16)
    r = audit(lambda d, n: plan.sample(np.float64(d), n, src), 0.0, 1.0, trials=TRIALS,
              delta=1e-3, confidence=CONF)
    assert r.epsilon_lower <= claimed


# ------------------------------------------------------------------ selection mechanisms
M = 20  # many low candidates make the normaliser move against the winner: near-worst case
Q0 = np.concatenate([[1.0], np.zeros(M)])
Q1 = np.concatenate([[0.0], np.ones(M)])


def test_exponential_mechanism_audit() -> None:
    """Scores (1, 0, ..., 0) vs (0, 1, ..., 1), Δ = 1, ε = 1: the loss of output 0 is
    0.5 + ln((1 + 20 e^0.5)/(e^0.5 + 20)) = 0.95 ε; the bound must stay <= ε."""
    src = _src(17)

    def sampler(q: np.ndarray, n: int) -> np.ndarray:
        return exponential_sample(_plan_exponential(q, 1.0, 1.0, False), n, src)

    r = audit(sampler, Q0, Q1, trials=TRIALS, confidence=CONF)
    assert r.epsilon_lower <= 1.0
    assert r.epsilon_lower >= 0.8  # the pair is near-worst; catches a halved ε by mistake


def test_exponential_mechanism_monotonic_audit() -> None:
    """Monotonic scores: (1, 0, ..., 0) vs (1, 1, ..., 1) (all move up by <= 1), factor ε/Δ."""
    src = _src(18)
    q1 = np.ones(M + 1)

    def sampler(q: np.ndarray, n: int) -> np.ndarray:
        return exponential_sample(_plan_exponential(q, 1.0, 1.0, True), n, src)

    r = audit(sampler, Q0, q1, trials=TRIALS, confidence=CONF)
    assert r.epsilon_lower <= 1.0


@pytest.mark.parametrize("noise", ["exponential", "gumbel", "laplace"])
def test_noisy_max_audit(noise: str) -> None:
    src = _src(19)

    def sampler(q: np.ndarray, n: int) -> np.ndarray:
        return _plan_noisy_max(q, 1.0, 1.0, noise, False).sample(q, n, src)

    for q0, q1 in [(Q0, Q1), (np.array([0.0, 1.0]), np.array([1.0, 0.0]))]:
        r = audit(sampler, q0, q1, trials=TRIALS // 2, confidence=CONF)
        assert r.epsilon_lower <= 1.0


# ------------------------------------------------------------------ sparse vector
def test_above_threshold_audit() -> None:
    """All queries 0 vs all 1 (Δ = 1), threshold 0.5, ε = 1: outputs index or -1."""
    plan = _plan_svt(1.0, 1.0, 1, False)
    src = _src(20)
    r = audit(lambda q, n: plan.first_index(np.array(q), 0.5, n, src), [0.0] * 5, [1.0] * 5,
              trials=TRIALS, confidence=CONF)
    assert r.epsilon_lower <= 1.0
    r = audit(lambda q, n: plan.first_index(np.array(q), 0.5, n, src), [1.0, 0.0, 0.0],
              [0.0, 1.0, 1.0], trials=TRIALS, confidence=CONF)
    assert r.epsilon_lower <= 1.0


def test_numeric_sparse_audit() -> None:
    """Queries (0, 1, 0, 1) vs (1, 0, 1, 0) shifted by Δ = 1, threshold 0.5, c = 2, ε = 1,
    audited through (indices above, first answer rounded to an integer): post-processing."""
    plan = _plan_numeric_sparse(1.0, 1.0, 2, False, 0.5)
    src = _src(21)
    k = plan.svt.k

    def sampler(q: list[float], n: int) -> np.ndarray:
        top, noisy = plan.sample(np.array(q), 0.5, n, src)
        first = np.where(top.any(axis=1), noisy[np.arange(n), np.argmax(top, axis=1)], 0)
        code = top.astype(np.int64) @ (1 << np.arange(top.shape[1]))
        return code * 10**6 + np.clip(np.round(np.ldexp(first, k)), -1000, 1000).astype(np.int64)

    r = audit(sampler, [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0], trials=TRIALS, confidence=CONF)
    assert r.epsilon_lower <= 1.0


# ------------------------------------------------------------------ local and histogram
@pytest.mark.parametrize("k", [2, 5])
def test_randomized_response_audit_is_valid_and_tight(k: int) -> None:
    """One unit with value 0 vs 1: every report's ratio is e^ε or e^-ε (exactly, up to the
    realised p). With 1.8e5 certification draws and P ≈ 0.73/0.27 (k = 2) the slack is ≈ 0.03;
    0.85ε is > 8 sigma below the expected bound."""
    eps = 1.0
    plan = _RR(k=k, p=keep_probability(eps, k))
    src = _src(22 + k)
    r = audit(lambda x, n: plan.sample(np.array([x]), n, src)[:, 0], 0, 1, trials=TRIALS,
              confidence=CONF)
    assert r.epsilon_lower <= eps
    assert r.epsilon_lower >= 0.85 * eps


def test_histogram_audit() -> None:
    """Datasets {} + base vs base + {one unit in bin 0}: the released count of bin 0."""
    src = _src(30)
    base = [1.5, 1.5, 0.2]

    def sampler(values: list[float], n: int) -> np.ndarray:
        counts, _ = true_counts(values, bins=[0, 1, 2])
        scale = 1.0  # max_contributions / epsilon with epsilon = 1
        return counts[0] + dp.noise.discrete_laplace(scale, n, source=src)

    r = audit(sampler, base, [*base, 0.5], trials=TRIALS, confidence=CONF)
    assert r.epsilon_lower <= 1.0
    # the public function's event says exactly this scale
    rel = dp.mechanisms.histogram(base, bins=[0, 1, 2], epsilon=1.0)
    assert rel.event.scale == 1.0 and rel.event.sensitivity == 1
    assert math.isclose(rel.event.sensitivity / rel.event.scale, 1.0)


@pytest.mark.parametrize("monotonic", [False, True])
def test_exponential_rows_audit(monotonic: bool) -> None:
    """exponential_rows, one row per trial, on the exponential mechanism's worst-style pairs
    (as above): the certified per-instance ε stays under the claimed ε = 1."""
    src = _src(23 + int(monotonic))
    q1 = np.ones(M + 1) if monotonic else Q1

    def sampler(q: np.ndarray, n: int) -> np.ndarray:
        rows = np.broadcast_to(q, (n, q.size))
        return dp.mechanisms.exponential_rows(rows, sensitivity=1.0, epsilon=1.0,
                                              monotonic=monotonic, source=src).value

    r = audit(sampler, Q0, q1, trials=TRIALS, confidence=CONF)
    assert r.epsilon_lower <= 1.0
    if not monotonic:
        assert r.epsilon_lower >= 0.8  # near-worst pair, as for exponential(): not over-noised
