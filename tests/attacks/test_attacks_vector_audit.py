"""Vector-output and black-box auditing (audit_vector) and the one-run calculator (one_run).

Validity: each certified bound holds with probability >= confidence; the assertions that a
bound is <= the true ε use confidence 1 - 1e-6, so they fail falsely with probability <= 1e-6.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import dpkit as dp
from dpkit.attacks import one_run
from dpkit.attacks.audit_vector import audit_black_box, empirical_epsilon_vector

CONF = 1 - 1e-6


def test_vector_laplace_best_coordinate() -> None:
    src = dp.noise.seeded(51)
    z0 = dp.noise.discrete_laplace(1.0, (40_000, 4), source=src)
    z1 = dp.noise.discrete_laplace(1.0, (40_000, 4), source=src)
    z1[:, 2] += 1  # sensitivity-1 change in one coordinate: exactly ε = 1
    r = empirical_epsilon_vector(z0, z1, confidence=CONF)
    assert r.details["projection"] == "coordinate 2"
    assert 0.7 <= r.epsilon_lower <= 1.0


def test_vector_gaussian_needs_a_projection() -> None:
    """Shift (1, 1, 1, 1) / 2 (L2 norm 1) under N(0, 0.5^2 I): each coordinate sees a 1-sd
    shift, the mean-difference / LDA projection a 2-sd shift, so it must win."""
    src = dp.noise.seeded(52)
    z0 = dp.noise.discrete_gaussian(2**16, (20_000, 4), source=src) / 2**9
    z1 = dp.noise.discrete_gaussian(2**16, (20_000, 4), source=src) / 2**9 + 0.5
    r = empirical_epsilon_vector(z0, z1, confidence=0.95)
    assert r.details["projection"] in ("mean difference", "LDA direction")
    single = empirical_epsilon_vector(z0[:, :1], z1[:, :1], confidence=0.95)
    assert r.epsilon_lower > single.epsilon_lower


def test_black_box_catches_a_broken_mechanism() -> None:
    """Claims ε = 0.5, but adds noise of scale 1 (true ε = 1)."""
    src = dp.noise.seeded(53)

    def broken(d: int) -> int:
        return d + int(dp.noise.discrete_laplace(1.0, 1, source=src)[0])

    r = audit_black_box(broken, 0, 1, trials=4000, confidence=CONF)
    assert r.epsilon_lower > 0.5


def test_black_box_releases_labels_and_vectors() -> None:
    src = dp.noise.seeded(54)
    rr = audit_black_box(lambda d: dp.mechanisms.randomized_response(d, epsilon=1.0, source=src),
                         [0], [1], trials=3000, confidence=CONF)
    assert 0.4 <= rr.epsilon_lower <= 1.0
    label = audit_black_box(lambda d: "yes" if dp.noise.bernoulli(0.5 + 0.2 * d, 1,
                                                                   source=src)[0] else None,
                            0, 1, trials=3000, confidence=CONF)
    assert label.epsilon_lower <= math.log(0.7 / 0.3)  # the true ε of this coin pair: 0.847


def test_vector_input_validation() -> None:
    with pytest.raises(ValueError, match="dimension"):
        empirical_epsilon_vector(np.zeros((100, 2)), np.zeros((100, 3)))
    with pytest.raises(ValueError, match="trials"):
        empirical_epsilon_vector(np.zeros((5, 2)), np.zeros((5, 2)))


# --------------------------------------------------------------------------- one run
def test_one_run_thousand_perfect_guesses() -> None:
    """REFERENCES.md: 1000 perfect guesses certify at most ε ~ 5.8 at 95%. Pure DP: the bound
    solves q^1000 = 0.05 with q = e^ε/(1+e^ε), i.e. ε = ln(q/(1-q)) = 5.8091."""
    q = 0.05 ** (1 / 1000)
    closed = math.log(q / (1 - q))
    got = one_run.one_run_epsilon(canaries=1000, guesses=1000, correct=1000)
    assert got == pytest.approx(closed, abs=1e-5)
    assert 5.80 < got < 5.82


def test_one_run_monotone_and_delta() -> None:
    kw = {"canaries": 1000, "guesses": 500}
    bounds = [one_run.one_run_epsilon(correct=v, **kw) for v in (250, 300, 400, 500)]
    assert bounds[0] == 0.0 and all(a < b for a, b in itertools.pairwise(bounds))
    pure = one_run.one_run_epsilon(canaries=1000, guesses=1000, correct=950)
    approx = one_run.one_run_epsilon(canaries=1000, guesses=1000, correct=950, delta=1e-5)
    assert 0 < approx < pure
    # the p-value at the bound crosses 1 - confidence
    p = one_run.one_run_p_value(canaries=1000, guesses=1000, correct=950, epsilon=pure + 1e-4)
    assert p >= 0.05
    with pytest.raises(ValueError, match="correct <= guesses"):
        one_run.one_run_epsilon(canaries=10, guesses=5, correct=6)


def test_one_run_audit_of_randomized_response() -> None:
    """One run of ε-RR on 20,000 canaries: each coin is reported truthfully with probability
    e/(1+e) = 73.1%, so guessing every canary gives ~14,621 right and a bound close to (and
    with probability >= 1 - 1e-6, below) ε = 1."""
    src = dp.noise.seeded(55)
    m = 20_000
    included = dp.noise.bernoulli(0.5, m, source=src)
    report = np.asarray(dp.mechanisms.randomized_response(included.astype(int), epsilon=1.0,
                                                          source=src).value)
    r = one_run.one_run_audit(report.astype(float), included, guess_in=m // 2,
                              guess_out=m // 2, confidence=CONF)
    assert r.guesses == m
    assert 0.8 <= r.epsilon_lower <= 1.0
