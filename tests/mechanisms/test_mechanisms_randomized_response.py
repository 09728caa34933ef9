"""Randomized response: exact keep probability, report law, unbiased estimator, variance."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from _mech_stats import P_FAIL, chi_square_p
from scipy import stats

import dpkit as dp
from dpkit.events import RandomizedResponse
from dpkit.mechanisms.randomized_response import _RR, keep_probability, rr_variance


@pytest.mark.parametrize("epsilon", [1e-4, 0.1, 1.0, math.log(3), 5.0, 40.0])
@pytest.mark.parametrize("k", [2, 3, 10, 1000])
def test_keep_probability_is_exactly_private(epsilon: float, k: int) -> None:
    p = keep_probability(epsilon, k)
    ratio = Fraction(p) * (k - 1) / (1 - Fraction(p))  # the realised e^eps, exactly
    with localcontext() as ctx:
        ctx.prec = 80
        e = Decimal(epsilon).exp()
        realised = Decimal(ratio.numerator) / Decimal(ratio.denominator)
    assert realised <= e  # both to 80 digits: a tie within 1e-79 would be needed to err
    # and it is not needlessly small
    ideal = 1.0 / (1.0 + (k - 1) * math.exp(-epsilon))
    if ideal < 1 - 1e-12:
        assert p == pytest.approx(ideal, rel=1e-14)


@pytest.mark.parametrize("k", [2, 4])
def test_report_law(k: int) -> None:
    """Reports of 200k units with value 1: chi-square vs (q, p, q, ...) at 1e-6."""
    eps = 0.8
    p = keep_probability(eps, k)
    q = (1 - p) / (k - 1)
    plan = _RR(k=k, p=p)
    rep = plan.sample(np.ones(200_000, dtype=np.int64), 1, dp.noise.seeded(k))[0]
    probs = np.full(k, q)
    probs[1] = p
    assert chi_square_p(np.bincount(rep, minlength=k), probs) > P_FAIL


def test_estimator_is_unbiased_with_the_stated_variance() -> None:
    """R = 2000 independent surveys of n = 400 units (k = 3): the mean of f_hat matches the
    truth (z-test, |z| < 4.89 at 1e-6) and the sample variance matches rr_variance
    ((R-1) s^2/σ^2 ~ χ²_{R-1} approximately; two-sided at 1e-6)."""
    eps, k, n, R = 1.0, 3, 400, 2000
    truth = np.array([0.5, 0.3, 0.2])
    codes = np.repeat(np.arange(k), (truth * n).astype(int))
    plan = _RR(k=k, p=keep_probability(eps, k))
    reports = plan.sample(codes, R, dp.noise.seeded(99))  # (R, n)
    p, q = plan.p, (1 - plan.p) / (k - 1)
    counts = np.stack([np.sum(reports == j, axis=1) for j in range(k)], axis=1)
    f_hat = (counts / n - q) / (p - q)
    var = rr_variance(truth, n, epsilon=eps, k=k)
    z = (f_hat.mean(axis=0) - truth) / np.sqrt(var / R)
    assert np.all(np.abs(z) < 4.89)
    chi = (R - 1) * f_hat.var(axis=0, ddof=1) / var
    pv = 2 * np.minimum(stats.chi2.cdf(chi, R - 1), stats.chi2.sf(chi, R - 1))
    assert np.all(pv > P_FAIL)


def test_rr_estimate_matches_the_formula() -> None:
    reps = dp.mechanisms.randomized_response(["a"] * 600 + ["b"] * 400, epsilon=2.0,
                                             categories=["a", "b", "c"],
                                             source=dp.noise.seeded(5))
    est = dp.mechanisms.rr_estimate(reps.value, epsilon=2.0, categories=["a", "b", "c"])
    p = reps.details["keep_probability"]
    q = (1 - p) / 2
    np.testing.assert_allclose(est.frequencies, (est.counts / 1000 - q) / (p - q))
    assert est.n == 1000 and est.categories == ["a", "b", "c"]
    assert np.all(est.std_error > 0)


def test_variance_matches_reference_formula() -> None:
    # REFERENCES.md: GRR variance per user at f = 0: (d - 2 + e^eps) / (e^eps - 1)^2
    for d, eps in [(2, 1.0), (5, 0.5), (64, 3.0)]:
        ref = (d - 2 + math.exp(eps)) / (math.exp(eps) - 1) ** 2
        assert float(rr_variance(0.0, 1, epsilon=eps, k=d)) == pytest.approx(ref, rel=1e-12)


def test_binary_and_labels() -> None:
    r = dp.mechanisms.randomized_response(np.array([True, False]), epsilon=1.0)
    assert r.value.dtype == bool and r.event == RandomizedResponse(1.0, 2) and not r.insecure
    r = dp.mechanisms.randomized_response([0, 1, 1], epsilon=1.0)
    assert r.value.dtype == np.int64
    r = dp.mechanisms.randomized_response(["x", "y"], epsilon=1.0, categories=["x", "y", "z"])
    assert set(r.value.tolist()) <= {"x", "y", "z"} and r.event.categories == 3


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: dp.mechanisms.randomized_response([0, 2], epsilon=1.0), "bits"),
        (lambda: dp.mechanisms.randomized_response(["q"], epsilon=1.0, categories=["a", "b"]),
         "not one of the categories"),
        (lambda: dp.mechanisms.randomized_response([1], epsilon=1.0, categories=["a", "a"]),
         "distinct"),
        (lambda: dp.mechanisms.randomized_response([1], epsilon=0.0), "epsilon"),
        (lambda: dp.mechanisms.randomized_response([], epsilon=1.0), "no values"),
    ],
)
def test_rr_rejects_bad_arguments(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        call()
