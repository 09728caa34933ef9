"""Randomized smoothing: the certificate's coverage by simulation, abstention, validation, torch."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _robust_helpers import CountingSource, wrong_certificates
from scipy import stats

import dpkit.noise as noise
from dpkit.robust import (
    ABSTAIN,
    Smoothed,
    binomial_pvalue,
    clopper_pearson_lower,
    cohen_radius,
    pixeldp_radius,
)


def half_space(batch: np.ndarray) -> np.ndarray:
    """Class 1 where x[0] > 0: under N(0, sigma² I), pA = Phi(x[0] / sigma), true radius x[0]."""
    return (batch[:, 0] > 0).astype(np.int64)



def test_clopper_pearson_closed_forms() -> None:
    # all successes: alpha ** (1/n); the bound never exceeds the point estimate
    assert clopper_pearson_lower(50, 50, 0.01) == pytest.approx(0.01 ** (1 / 50))
    assert clopper_pearson_lower(0, 10, 0.05) == 0.0
    assert clopper_pearson_lower(700, 1000, 0.001) < 0.7
    assert cohen_radius(2.0, 0.5) == 0.0
    assert cohen_radius(2.0, stats.norm.cdf(1.5)) == pytest.approx(3.0)
    assert binomial_pvalue(60, 40) == pytest.approx(stats.binomtest(60, 100).pvalue)


@pytest.mark.parametrize(("float32", "seed"), [(False, 11), (True, 21)])
def test_certificate_coverage_on_a_half_space(float32: bool, seed: int) -> None:
    """Over T independent certifications, the certified radius exceeds the true radius (or the
    class is wrong) with probability <= alpha each (Cohen et al. 2019, Theorem 1 + Clopper-Pearson).
    The test fails if more than k of T do, where P(Binomial(T, alpha) > k) < 1e-6: the
    false-failure probability of this test is below 1e-6 (each of the float64 and the float32
    Monte Carlo noise)."""
    sigma, alpha, trials, d = 1.0, 0.1, 300, 0.4  # pA = Phi(0.4) = 0.655: the bound is often close
    k = int(stats.binom.isf(1e-6, trials, alpha))
    g = Smoothed(half_space, sigma, 2, source=noise.seeded(seed), float32=float32)
    bad = wrong_certificates(g, d, trials, alpha)
    assert bad <= k, f"{bad} of {trials} certificates wrong (allowed {k})"


def test_certificate_is_close_to_the_true_radius_with_many_samples() -> None:
    # power check (the coverage test would pass for a radius of 0): n = 100k at pA = Phi(1)
    # puts the Clopper-Pearson bound within ~4 standard errors (0.005) of 0.841: radius > 0.95
    g = Smoothed(half_space, 0.5, 2, source=noise.seeded(12))
    label, radius = g.certify(np.array([0.5, 3.0, -1.0]), n0=100, n=100_000, alpha=0.001,
                              batch_size=25_000)
    assert label == 1
    assert 0.95 * 0.5 < radius <= 0.5


def test_abstains_on_the_boundary() -> None:
    # at x[0] = 0, pA = 1/2: CERTIFY returns a class only if the 1 - alpha bound exceeds 1/2,
    # and PREDICT only if the test rejects a true null; each has probability <= alpha = 1e-6
    g = Smoothed(half_space, 1.0, 2, source=noise.seeded(13))
    for _ in range(5):
        assert g.certify(np.zeros(4), n0=20, n=2000, alpha=1e-6) == (ABSTAIN, 0.0)
        assert g.predict(np.zeros(4), n=2000, alpha=1e-6) == ABSTAIN


def test_predict_far_from_the_boundary() -> None:
    g = Smoothed(half_space, 1.0, 2, source=noise.seeded(14))
    assert g.predict(np.array([3.0, 0.0]), n=1000, alpha=0.001) == 1  # pA = 0.9987
    assert g.predict(np.array([-3.0, 0.0]), n=1000, alpha=0.001) == 0


def test_scores_are_argmaxed() -> None:
    def scores(batch: np.ndarray) -> np.ndarray:  # 3 classes, class 2 where x[0] > 0
        return np.stack([-batch[:, 0], np.full(len(batch), -5.0), batch[:, 0]], axis=1)

    label, radius = Smoothed(scores, 1.0, 3, source=noise.seeded(15)).certify(
        np.array([2.0]), n0=50, n=2000, alpha=0.01)
    assert label == 2 and 1.5 < radius < 2.0


def test_pixeldp_radius_is_below_cohen() -> None:
    for pa in (0.6, 0.9, 0.99, 0.999):
        r = pixeldp_radius(1.0, pa, 1 - pa, delta=1e-5)
        assert 0.0 <= r < cohen_radius(1.0, pa)
    assert pixeldp_radius(1.0, 0.5, 0.5, delta=1e-5) == 0.0


BAD_CLASSIFIERS: list[tuple[Callable[[np.ndarray], np.ndarray], str]] = [
    (lambda b: np.zeros((len(b), 3)), r"shape \(1, 3\)"),
    (lambda b: np.zeros(len(b) + 1, dtype=int), r"shape \(2,\)"),
    (lambda b: np.full(len(b), 2), r"outside \[0, 2\)"),
    (lambda b: np.full(len(b), -1), r"outside \[0, 2\)"),
    (lambda b: np.full(len(b), 0.5), "non-integer"),
]


@pytest.mark.parametrize(("clf", "match"), BAD_CLASSIFIERS)
def test_bad_classifier_fails_before_noise(clf: Callable[[np.ndarray], np.ndarray],
                                           match: str) -> None:
    src = CountingSource(1)
    g = Smoothed(clf, 1.0, 2, source=src)
    with pytest.raises(ValueError, match=match):
        g.certify(np.zeros(2), n0=10, n=100, alpha=0.01)
    with pytest.raises(ValueError, match=match):
        g.predict(np.zeros(2), n=100, alpha=0.01)
    assert src.draws == 0


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n0": 0}, "n0 must be"), ({"n": 0}, "n must be"), ({"n": 2.5}, "n must be"),
    ({"alpha": 0.0}, "alpha must be"), ({"alpha": 1.0}, "alpha must be"),
    ({"batch_size": 0}, "batch_size"), ({"x": np.array([np.nan, 0.0])}, "finite"),
])
def test_bad_arguments_fail_before_noise(kwargs: dict, match: str) -> None:
    src = CountingSource(2)
    g = Smoothed(half_space, 1.0, 2, source=src)
    args = {"x": np.zeros(2), "n0": 10, "n": 100, "alpha": 0.01} | kwargs
    with pytest.raises(ValueError, match=match):
        g.certify(**args)
    assert src.draws == 0


@pytest.mark.parametrize("sigma", [0.0, -1.0, math.inf, math.nan])
def test_bad_sigma(sigma: float) -> None:
    with pytest.raises(ValueError, match="sigma must be"):
        Smoothed(half_space, sigma, 2)


def test_bad_num_classes_and_classifier() -> None:
    with pytest.raises(ValueError, match="num_classes"):
        Smoothed(half_space, 1.0, 1)
    with pytest.raises(TypeError, match="callable"):
        Smoothed(42, 1.0, 2)


def test_torch_module_matches_numpy() -> None:
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():  # logits (-x0, x0): the half-space again
        lin.weight.copy_(torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
        lin.bias.zero_()
    x = np.array([0.8, 0.1, -0.2])
    via_torch = Smoothed(lin, 0.5, 2, source=noise.seeded(5)).certify(x, n0=50, n=5000, alpha=0.01)
    via_numpy = Smoothed(half_space, 0.5, 2, source=noise.seeded(5)).certify(x, 50, 5000, 0.01)
    assert via_torch.label == via_numpy.label == 1
    # the same noise; float32 may move a sample that sits within 1e-7 of the boundary (rare)
    assert via_torch.radius == pytest.approx(via_numpy.radius, abs=0.01)
    with pytest.raises(ValueError, match="shape"):
        Smoothed(torch.nn.Linear(3, 4), 0.5, 2).certify(x, 10, 10, 0.1)


def test_import_does_not_load_torch() -> None:
    code = "import sys, dpkit.robust; assert 'torch' not in sys.modules, 'torch imported eagerly'"
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
