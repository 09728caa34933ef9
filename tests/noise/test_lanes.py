"""The public per-lane Bernoulli(exp(-gamma_i)) used by selection mechanisms."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpkit.noise as noise


def test_lanes_match_exp_neg_gamma_within_a_binomial_bound() -> None:
    # 4 distinct gammas x 50_000 lanes each. Each count is Binomial(50_000, exp(-gamma)); a
    # 6-sigma band fails with probability < 2e-9 per gamma, < 1e-8 for the test.
    gammas = [Fraction(0), Fraction(1, 3), Fraction(7, 5), Fraction(9, 2)]
    n = 50_000
    exact = [gammas[i // n] for i in range(4 * n)]
    g = np.array([float(x) for x in exact])
    heads = noise.bernoulli_exp_lanes(g, lambda i: exact[i], source=noise.seeded(7))
    for k, gamma in enumerate(gammas):
        p = math.exp(-float(gamma))
        count = int(heads[k * n : (k + 1) * n].sum())
        sd = math.sqrt(n * p * (1 - p))
        assert abs(count - n * p) <= 6 * sd + 1e-9, (gamma, count, n * p)


def test_non_finite_lanes_are_decided_exactly() -> None:
    g = np.array([np.inf, 0.0])
    heads = noise.bernoulli_exp_lanes(
        g, lambda i: [Fraction(10**6), Fraction(0)][i], source=noise.seeded(1)
    )
    assert heads.tolist() == [False, True]  # exp(-1e6) = 0 to 400k digits; exp(0) = 1


def test_negative_or_non_vector_g_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        noise.bernoulli_exp_lanes(np.array([-1.0]), lambda i: Fraction(0))
    with pytest.raises(ValueError, match="1-D"):
        noise.bernoulli_exp_lanes(np.zeros((2, 2)), lambda i: Fraction(0))
