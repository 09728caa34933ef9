"""Discrete Laplace and discrete Gaussian against their exact distributions.

Per test, false-failure probability <= 1e-6: chi-square p-value threshold 1e-6 (bins pooled to
expected counts >= 5), DKW/Massart bound on the CDF distance at level 1e-6, Wilson intervals at
z = 4.892, and moment checks at z = 4.892 (normal approximation, n >= 2e5).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from _noise_helpers import P_FAIL, Z_1E6, wilson
from scipy import special, stats

import dpkit.noise as noise

N = 200_000
DLAP_SCALES = [0.5, 1, 3, 1e3, 1e6, Fraction(7, 3)]
DGAUSS_SIGMA2 = [0.5, 1, 10, 1e4, 1e12, Fraction(10, 3)]


# ------------------------------------------------------------------ exact reference distributions
def dlap_cdf(scale: float) -> Callable[[np.ndarray], np.ndarray]:
    """P(X <= x) for P(x) ∝ q**|x|, q = exp(-1/scale)."""
    lq = -1.0 / scale
    q = math.exp(lq)

    def F(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        neg = np.exp(-x * lq) / (1 + q)  # x < 0: q**(-x) / (1+q)
        pos = 1 - np.exp((x + 1) * lq) / (1 + q)  # x >= 0
        return np.where(x < 0, np.minimum(neg, 1.0), pos)

    return F


def dlap_pmf0(scale: float) -> float:
    return math.tanh(1 / (2 * scale))


def dgauss_table(sigma2: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf of the discrete Gaussian on |x| <= 40 sigma + 5 (outside: mass < 1e-300)."""
    L = int(40 * math.sqrt(sigma2)) + 5
    xs = np.arange(-L, L + 1)
    w = np.exp(-(xs.astype(float) ** 2) / (2 * sigma2))
    return xs, w / w.sum()


def dgauss_cdf(sigma2: float) -> Callable[[np.ndarray], np.ndarray]:
    if sigma2 > 1e6:
        # Euler-Maclaurin: sum_{j <= x} exp(-j^2/2s2) / Z = Phi((x + 1/2)/sigma) up to ~1/(24 s2)
        sigma = math.sqrt(sigma2)
        return lambda x: special.ndtr((np.asarray(x, dtype=float) + 0.5) / sigma)
    xs, p = dgauss_table(sigma2)
    c = np.cumsum(p)

    def F(x: np.ndarray) -> np.ndarray:
        i = np.clip(np.asarray(x) - xs[0], -1, xs.size - 1)
        return np.where(i < 0, 0.0, c[np.maximum(i, 0)])

    return F


# ------------------------------------------------------------------ generic checks
def chi_square_pvalue(x: np.ndarray, F: Callable[[np.ndarray], np.ndarray], spread: float) -> float:
    """Chi-square of x against CDF F on bins (e_{i-1}, e_i], pooled so expected >= 5."""
    cand = np.unique(np.floor(np.linspace(-14, 14, 113) * spread)).astype(np.int64)
    probs = np.diff(np.concatenate([[0.0], F(cand), [1.0]]))
    counts = np.bincount(np.searchsorted(cand, x, side="left"), minlength=cand.size + 1)
    exp = probs * x.size
    pooled_c, pooled_e, acc_c, acc_e = [], [], 0.0, 0.0
    for c, e in zip(counts, exp, strict=True):
        acc_c, acc_e = acc_c + c, acc_e + e
        if acc_e >= 5:
            pooled_c.append(acc_c)
            pooled_e.append(acc_e)
            acc_c = acc_e = 0.0
    pooled_c[-1] += acc_c
    pooled_e[-1] += acc_e
    pe = np.array(pooled_e)
    pe *= np.sum(pooled_c) / pe.sum()  # remove float rounding in the total
    assert len(pooled_c) >= 2
    return float(stats.chisquare(pooled_c, pe).pvalue)


def dkw_distance(x: np.ndarray, F: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float]:
    """sup_x |F_n(x) - F(x)| over the integers, and the DKW-Massart threshold at level 1e-6."""
    v, c = np.unique(x, return_counts=True)
    Fn = np.cumsum(c) / x.size
    d_plus = np.max(Fn - F(v))
    before = np.concatenate([[0.0], Fn[:-1]])
    d_minus = np.max(F(v - 1) - before)
    return float(max(d_plus, d_minus)), math.sqrt(math.log(2 / 1e-6) / (2 * x.size))


# ------------------------------------------------------------------ discrete Laplace
def test_dlap_reference_vectors() -> None:
    q = math.exp(-1 / 3)
    assert dlap_pmf0(3) == pytest.approx(0.165140, abs=1e-6)
    assert (1 - q) / (1 + q) * q == pytest.approx(0.118328, abs=1e-6)
    assert 2 * q / (1 - q) ** 2 == pytest.approx(17.8342, abs=1e-4)


@pytest.mark.parametrize("scale", DLAP_SCALES, ids=str)
def test_dlap_chi_square_and_cdf(scale: float | Fraction) -> None:
    x = noise.discrete_laplace(scale, N, source=noise.seeded(100))
    F = dlap_cdf(float(scale))
    assert chi_square_pvalue(x, F, max(float(scale), 0.5)) > P_FAIL
    dist, thr = dkw_distance(x, F)
    assert dist < thr


def test_dlap_scale3_vectors_empirically() -> None:
    x = noise.discrete_laplace(3, N, source=noise.seeded(101))
    lo, hi = wilson(int(np.sum(x == 0)), N)
    assert lo <= 0.165140 <= hi
    lo, hi = wilson(int(np.sum(x == 1)), N)
    assert lo <= 0.118328 <= hi
    # sample variance: sd = sqrt((mu4 - var^2)/n); mu4 from the exact pmf
    q = math.exp(-1 / 3)
    k = np.arange(-400, 401)
    p = (1 - q) / (1 + q) * q ** np.abs(k)
    var, mu4 = float(np.sum(p * k**2)), float(np.sum(p * k**4))
    assert var == pytest.approx(17.8342, abs=1e-4)
    assert abs(np.mean(x.astype(float) ** 2) - var) < Z_1E6 * math.sqrt((mu4 - var**2) / N)


@pytest.mark.parametrize("scale", [3, 1e3])
def test_dlap_tail(scale: float) -> None:
    # P(|X| >= 10 scale) = 2 q**m / (1 + q), m = ceil(10 scale)
    n = 1_000_000
    x = noise.discrete_laplace(scale, n, source=noise.seeded(102))
    q = math.exp(-1 / scale)
    m = math.ceil(10 * scale)
    p = 2 * math.exp(-m / scale) / (1 + q)
    lo, hi = wilson(int(np.sum(np.abs(x) >= m)), n)
    assert lo <= p <= hi


def test_dlap_symmetry_mean_zero() -> None:
    x = noise.discrete_laplace(1e6, N, source=noise.seeded(103))
    sd = math.sqrt(2) * 1e6
    assert abs(x.mean()) < Z_1E6 * sd / math.sqrt(N)


def test_dlap_tiny_scale_is_mostly_zero() -> None:
    # scale 2**-70 rounds up to 2**-62: P(X != 0) = 2q/(1+q) ~ 2 exp(-2**62) = 0
    x = noise.discrete_laplace(2.0**-70, 10_000, source=noise.seeded(1))
    assert not x.any()


def test_dlap_effective_scale() -> None:
    assert noise.dlap_effective_scale(3) == 3
    assert noise.dlap_effective_scale(Fraction(7, 3)) == Fraction(7, 3)
    assert noise.dlap_effective_scale(0.1) == Fraction(0.1)  # fits: 2**55 denominator
    for s in (1e-5, 2.0**-70, Fraction(10**20 + 1, 10**20), Fraction(1, 3**50)):
        eff = noise.dlap_effective_scale(s)
        assert eff >= Fraction(s)  # never less noise
        assert eff - Fraction(s) <= Fraction(1, 2**16)
        assert eff.denominator & (eff.denominator - 1) == 0  # dyadic


# ------------------------------------------------------------------ discrete Gaussian
def test_dgauss_reference_vectors() -> None:
    xs, p = dgauss_table(10)
    assert p[xs == 0][0] == pytest.approx(0.126157, abs=1e-6)
    assert float(np.sum(p * xs**2)) == pytest.approx(10.0000, abs=1e-4)


@pytest.mark.parametrize("sigma2", DGAUSS_SIGMA2, ids=str)
def test_dgauss_chi_square_and_cdf(sigma2: float | Fraction) -> None:
    x = noise.discrete_gaussian(sigma2, N, source=noise.seeded(200))
    F = dgauss_cdf(float(sigma2))
    assert chi_square_pvalue(x, F, max(math.sqrt(float(sigma2)) / 3, 0.25)) > P_FAIL
    dist, thr = dkw_distance(x, F)
    assert dist < thr


def test_dgauss_sigma2_10_vectors_empirically() -> None:
    x = noise.discrete_gaussian(10, N, source=noise.seeded(201))
    lo, hi = wilson(int(np.sum(x == 0)), N)
    assert lo <= 0.126157 <= hi
    xs, p = dgauss_table(10)
    var, mu4 = float(np.sum(p * xs**2)), float(np.sum(p * xs.astype(float) ** 4))
    assert abs(np.mean(x.astype(float) ** 2) - var) < Z_1E6 * math.sqrt((mu4 - var**2) / N)


def test_dgauss_tail() -> None:
    n = 1_000_000
    x = noise.discrete_gaussian(1e4, n, source=noise.seeded(202))
    xs, p = dgauss_table(1e4)
    pt = float(p[np.abs(xs) >= 400].sum())  # P(|X| >= 4 sigma) ~ 6.3e-5
    lo, hi = wilson(int(np.sum(np.abs(x) >= 400)), n)
    assert lo <= pt <= hi


def test_dgauss_tiny_and_huge_sigma2() -> None:
    assert not noise.discrete_gaussian(1e-30, 1000, source=noise.seeded(1)).any()
    x = noise.discrete_gaussian(2**80, 1000, source=noise.seeded(1))
    assert np.abs(x).max() < 2**46


# ------------------------------------------------------------------ shapes, dtypes, errors
@pytest.mark.parametrize("f", [noise.discrete_laplace, noise.discrete_gaussian])
def test_shapes_and_dtype(f: Callable[..., np.ndarray]) -> None:
    src = noise.seeded(0)
    assert f(2, 5, source=src).shape == (5,)
    assert f(2, (2, 3), source=src).shape == (2, 3)
    assert f(2, (), source=src).shape == ()
    assert f(2, 0, source=src).shape == (0,)
    assert f(2, np.int64(4), source=src).dtype == np.int64


def test_error_messages_name_the_fix() -> None:
    with pytest.raises(ValueError, match=r"scale must be > 0 \(got -1\.0\)"):
        noise.discrete_laplace(-1.0, 3)
    with pytest.raises(ValueError, match=r"sigma2 must be > 0 \(got 0\)"):
        noise.discrete_gaussian(0, 3)
    with pytest.raises(ValueError, match=r"scale must be <= 2\*\*40.*coarser grid"):
        noise.discrete_laplace(2.0**41, 3)
    with pytest.raises(ValueError, match=r"sigma2 must be <= 2\*\*80"):
        noise.discrete_gaussian(2.0**81, 3)
    with pytest.raises(ValueError, match="scale must be finite"):
        noise.discrete_laplace(float("inf"), 3)
    with pytest.raises(TypeError, match=r"scale must be an int, fractions\.Fraction or float"):
        noise.discrete_laplace("3", 3)  # type: ignore[arg-type]


# ------------------------------------------------------------------ larger runs (-m slow)
@pytest.mark.slow
@pytest.mark.parametrize("scale", DLAP_SCALES, ids=str)
def test_dlap_chi_square_large(scale: float | Fraction) -> None:
    x = noise.discrete_laplace(scale, 5_000_000, source=noise.seeded(300))
    F = dlap_cdf(float(scale))
    assert chi_square_pvalue(x, F, max(float(scale), 0.5)) > P_FAIL
    assert dkw_distance(x, F)[0] < dkw_distance(x, F)[1]


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", DGAUSS_SIGMA2, ids=str)
def test_dgauss_chi_square_large(sigma2: float | Fraction) -> None:
    x = noise.discrete_gaussian(sigma2, 5_000_000, source=noise.seeded(301))
    F = dgauss_cdf(float(sigma2))
    assert chi_square_pvalue(x, F, max(math.sqrt(float(sigma2)) / 3, 0.25)) > P_FAIL
    assert dkw_distance(x, F)[0] < dkw_distance(x, F)[1]


@pytest.mark.slow
def test_secure_source_distribution() -> None:
    x = noise.discrete_laplace(3, 2_000_000)
    F = dlap_cdf(3.0)
    assert chi_square_pvalue(x, F, 3.0) > P_FAIL
