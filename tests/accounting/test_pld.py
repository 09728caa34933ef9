"""PLD accountant: brackets contain closed-form truths, the reference vectors, robustness, API.

Every bracket test checks ``lower <= truth <= upper`` where the truth comes from a formula
computed here (not from dpkit): analytic Gaussian / mu-GDP (Balle-Wang 2018, Dong-Roth-Su 2019),
Laplace, randomized response, k-fold pure DP (Kairouz-Oh-Viswanath), discrete Laplace and
discrete Gaussian by enumeration, subsampled Gaussian by its likelihood-ratio threshold. The
tolerance on each side is floating-point only (1e-9 relative), since the bracket is rigorous.
"""

from __future__ import annotations

import doctest
import itertools
import math
import time
import warnings

import numpy as np
import pytest
from scipy import optimize, special

import dpkit.events as ev
from dpkit.accounting import pld
from dpkit.accounting.pld_grid import discretize
from dpkit.accounting.pld_laws import (
    DiscreteGaussianLaw,
    DiscreteLaplaceLaw,
    GaussianLaw,
    LaplaceLaw,
    SubsampledLaw,
    approx_dp_law,
    randomized_response_law,
)

REL = 1e-9  # floating-point slack on each side of a bracket


def _inside(bracket: tuple[float, float], truth: float, rel: float = REL) -> bool:
    lo, up = bracket
    tol = rel * max(1.0, abs(truth))
    return lo - tol <= truth <= up + tol


# ---------------------------------------------------------------------------------------------
# Closed forms (computed here, independently of dpkit)
# ---------------------------------------------------------------------------------------------

def _log_delta_gdp(eps: float, mu: float) -> float:
    """log δ(ε) of mu-GDP: Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2), in log space (no cancellation)."""
    a = special.log_ndtr(-eps / mu + mu / 2)
    b = eps + special.log_ndtr(-eps / mu - mu / 2)
    return float(a + math.log(-math.expm1(b - a)))


def _eps_gdp(mu: float, delta: float) -> float:
    if _log_delta_gdp(0.0, mu) <= math.log(delta):
        return 0.0
    return float(optimize.brentq(lambda e: _log_delta_gdp(e, mu) - math.log(delta), 0.0,
                                 10.0 * mu * mu + 100.0, xtol=1e-14, rtol=1e-15))


def _kov_delta(eps: float, k: int, eps_total: float) -> float:
    """δ of k-fold ε-DP at eps_total (binary RR composed k times), exact sum."""
    log_p = eps - math.log1p(math.exp(eps))
    log_q = -math.log1p(math.exp(eps))
    total = 0.0
    for minus in range(k + 1):
        loss = (k - 2 * minus) * eps
        if loss > eps_total:
            log_c = math.lgamma(k + 1) - math.lgamma(minus + 1) - math.lgamma(k - minus + 1)
            total += math.exp(log_c + (k - minus) * log_p + minus * log_q) * -math.expm1(
                eps_total - loss)
    return total


def _eps_from(delta_fn, delta: float, hi: float) -> float:  # type: ignore[no-untyped-def]
    if delta_fn(0.0) <= delta:
        return 0.0
    return float(optimize.brentq(lambda e: delta_fn(e) - delta, 0.0, hi, xtol=1e-14,
                                 rtol=1e-15))


def _sampled_gaussian_delta(q: float, sigma: float, eps: float) -> float:
    """Exact hockey stick of Poisson-subsampled Gaussian (sensitivity 1), worse direction."""
    phi = special.ndtr
    # remove: (1-q) N(0) + q N(1) vs N(0); likelihood ratio increases in x
    x = sigma**2 * math.log((math.exp(eps) - 1 + q) / q) + 0.5
    d_remove = ((1 - q) * phi(-x / sigma) + q * phi(-(x - 1) / sigma)
                - math.exp(eps) * phi(-x / sigma))
    d_add = 0.0
    if math.exp(-eps) > 1 - q:  # add: N(0) vs (1-q) N(0) + q N(1)
        x = sigma**2 * math.log((math.exp(-eps) - 1 + q) / q) + 0.5
        d_add = phi(x / sigma) - math.exp(eps) * ((1 - q) * phi(x / sigma)
                                                  + q * phi((x - 1) / sigma))
    return max(d_remove, d_add)


def _dlap_delta(scale: float, sens: int, eps: float) -> float:
    x = np.arange(-4000, 4001)
    logp = -np.abs(x) / scale
    logp -= special.logsumexp(logp)
    logq = -np.abs(x - sens) / scale
    logq -= special.logsumexp(logq)
    return float(np.sum(np.maximum(np.exp(logp) - np.exp(eps + logq), 0.0)))


def _dgauss_delta(sigma2: float, sens: int, eps: float) -> float:
    x = np.arange(-3000, 3001)
    logp = -(x**2) / (2 * sigma2)
    logp -= special.logsumexp(logp)
    logq = -((x - sens) ** 2) / (2 * sigma2)
    logq -= special.logsumexp(logq)
    return float(np.sum(np.maximum(np.exp(logp) - np.exp(eps + logq), 0.0)))


# ---------------------------------------------------------------------------------------------
# The reference vectors
# ---------------------------------------------------------------------------------------------

DPSGD = ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 14062)


def test_dpsgd_reference_is_bracketed_and_upper_is_tight() -> None:
    lo, up = pld.epsilon(DPSGD, 1e-5)
    # true ε = 2.3816 (to 4 decimals: in [2.38155, 2.38165]); the upper end must not exceed 2.3840
    assert lo <= 2.38165 and up >= 2.38155
    assert up <= 2.3840
    assert up - lo < 0.005


def test_second_dpsgd_reference() -> None:
    e = ev.SelfComposed(ev.PoissonSampled(0.01, ev.Gaussian(1.0)), 10_000)
    lo, up = pld.epsilon(e, 1e-5)
    assert lo <= 6.18775 and up >= 6.18765
    assert up - lo < 0.01


def test_dpsgd_with_fewer_steps_is_fast_and_matches_dp_accounting() -> None:
    dpa = pytest.importorskip("dp_accounting")
    e = ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 1000)
    start = time.perf_counter()
    lo, up = pld.epsilon(e, 1e-5)
    seconds = time.perf_counter() - start
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(256 / 60000, dpa.GaussianDpEvent(1.1)), 1000))
    theirs = acc.get_epsilon(1e-5)  # a pessimistic (upper) estimate
    assert lo <= theirs * (1 + REL)
    assert abs(up - theirs) <= 2e-3 * theirs
    assert seconds < 2.0  # typically ~0.1 s; generous for a loaded 2-core machine


@pytest.mark.slow
def test_dpsgd_reference_under_one_second() -> None:
    best = math.inf
    for _ in range(3):
        pld._pmf.cache_clear()
        pld._coarse.cache_clear()
        start = time.perf_counter()
        pld.epsilon(DPSGD, 1e-5)
        best = min(best, time.perf_counter() - start)
    assert best < 1.0


@pytest.mark.parametrize(("delta", "truth"), [(1e-18, 55.70932), (1e-12, 47.04923)])
def test_gaussian_composition_vector_is_finite_and_bracketed(delta: float, truth: float) -> None:
    exact = _eps_gdp(math.sqrt(100) / 2.0, delta)
    assert round(exact, 5) == truth  # the reference sheet's figure
    lo, up = pld.epsilon(ev.SelfComposed(ev.Gaussian(2.0), 100), delta)
    assert math.isfinite(up)
    assert _inside((lo, up), exact)
    assert up - lo < 1e-5


@pytest.mark.parametrize("delta", [1e-18, 1e-12, 1e-5])
def test_gaussian_composition_through_the_fft_power(delta: float) -> None:
    # events merge Gaussians exactly; here 100 copies of the same law go through the tilted FFT
    # power instead, against the same closed form
    g = GaussianLaw(0.5)
    terms = [pld._Term(g, g, 100)]
    up = pld.PrivacyLossDistribution(terms).get_epsilon_for_delta(delta)
    lo = pld.PrivacyLossDistribution(terms, pessimistic=False).get_epsilon_for_delta(delta)
    assert _inside((lo, up), _eps_gdp(5.0, delta))
    assert up - lo < 1e-2


# ---------------------------------------------------------------------------------------------
# Closed-form truths
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m", [0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_single_gaussian_matches_analytic_gaussian(m: float, delta: float) -> None:
    assert _inside(pld.epsilon(ev.Gaussian(m), delta), _eps_gdp(1.0 / m, delta))


def test_analytic_gaussian_vectors_from_the_reference_sheet() -> None:
    lo, up = pld.delta(ev.Gaussian(1.0), 1.0)
    assert _inside((lo, up), 0.126936737507)
    assert _inside(pld.epsilon(ev.Gaussian(1.0), 1e-5), 4.3771780957, rel=1e-8)
    assert _inside(pld.epsilon(ev.Gaussian(3.7306316348), 1e-5), 1.0, rel=1e-8)


@pytest.mark.parametrize("m", [0.25, 1.0, 4.0])
def test_laplace_single_shot_is_exact_at_delta_zero(m: float) -> None:
    assert pld.epsilon(ev.Laplace(m), 0.0) == (1.0 / m, 1.0 / m)


@pytest.mark.parametrize("m", [0.5, 1.0, 4.0])
@pytest.mark.parametrize("delta", [1e-3, 0.1])
def test_laplace_single_shot(m: float, delta: float) -> None:
    # δ(ε) = 1 - e^((ε - 1/m)/2) for 0 <= ε < 1/m
    truth = max(1.0 / m + 2.0 * math.log1p(-delta), 0.0)
    assert _inside(pld.epsilon(ev.Laplace(m), delta), truth)


def test_laplace_composition_exact_at_delta_zero() -> None:
    assert pld.epsilon(ev.SelfComposed(ev.Laplace(2.0), 30), 0.0) == (15.0, 15.0)


@pytest.mark.parametrize(("eps", "k"), [(1.0, 2), (1.0, 5), (2.0, 3), (0.3, 10)])
@pytest.mark.parametrize("delta", [1e-2, 0.1])
def test_randomized_response(eps: float, k: int, delta: float) -> None:
    p_true = math.exp(eps) / (math.exp(eps) + k - 1)
    truth = max(eps + math.log1p(-delta / p_true), 0.0) if delta < p_true else 0.0
    assert _inside(pld.epsilon(ev.RandomizedResponse(eps, k), delta), truth)


@pytest.mark.parametrize(("eps", "k"), [(0.1, 100), (1.0, 10), (0.5, 50)])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_k_fold_pure_dp_matches_kairouz_oh_viswanath(eps: float, k: int, delta: float) -> None:
    truth = _eps_from(lambda g: _kov_delta(eps, k, g), delta, k * eps)
    assert _inside(pld.epsilon(ev.SelfComposed(ev.PureDP(eps), k), delta), truth)


def test_kov_reference_vector() -> None:
    lo, up = pld.epsilon(ev.SelfComposed(ev.PureDP(0.1), 100), 1e-5)
    assert round(up, 6) == 4.306791 and up - lo < 1e-9


@pytest.mark.parametrize(("ms", "delta"), [((1.0, 2.0, 0.5), 1e-5), ((3.0,) * 50, 1e-8)])
def test_mu_gdp_compositions(ms: tuple[float, ...], delta: float) -> None:
    mu = math.sqrt(sum(1.0 / m**2 for m in ms))
    e = ev.Composed(tuple(ev.Gaussian(m) for m in ms))
    assert _inside(pld.epsilon(e, delta), _eps_gdp(mu, delta))
    assert _inside(pld.delta(e, 1.0), math.exp(_log_delta_gdp(1.0, mu)))


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.1, 0.8), (0.5, 2.0)])
@pytest.mark.parametrize("delta", [1e-3, 1e-6])
def test_subsampled_gaussian_single_shot(q: float, sigma: float, delta: float) -> None:
    truth = _eps_from(lambda e: _sampled_gaussian_delta(q, sigma, e), delta, 50.0)
    assert _inside(pld.epsilon(ev.PoissonSampled(q, ev.Gaussian(sigma)), delta), truth)
    lo, up = pld.delta(ev.PoissonSampled(q, ev.Gaussian(sigma)), 0.5)
    assert _inside((lo, up), _sampled_gaussian_delta(q, sigma, 0.5), rel=1e-9)


@pytest.mark.parametrize(("scale", "sens"), [(1.0, 1), (2.5, 3), (0.4, 2)])
@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0])
def test_discrete_laplace_single_shot(scale: float, sens: int, eps: float) -> None:
    truth = _dlap_delta(scale, sens, eps)
    lo, up = pld.delta(ev.DiscreteLaplace(scale, sens), eps)
    assert lo - 1e-12 <= truth <= up + 1e-12


@pytest.mark.parametrize(("sigma2", "sens"), [(1.0, 1), (10.0, 2), (0.3, 1)])
@pytest.mark.parametrize("eps", [0.0, 0.5, 2.0])
def test_discrete_gaussian_single_shot(sigma2: float, sens: int, eps: float) -> None:
    truth = _dgauss_delta(sigma2, sens, eps)
    lo, up = pld.delta(ev.DiscreteGaussian(sigma2, sens), eps)
    assert lo - 1e-12 <= truth <= up + 1e-12


def test_approx_dp_worst_case() -> None:
    # δ(ε') = δ + (1 - δ) δ_RR(ε'), δ_RR(ε') = (e^ε - e^ε')/(1 + e^ε) for ε' < ε
    eps, d = 1.0, 1e-4
    for target in (1e-3, 0.05):
        truth = eps + math.log1p(-(target - d) / (1 - d) * (1 + math.exp(-eps)))
        assert _inside(pld.epsilon(ev.ApproxDP(eps, d), target), truth)
    assert pld.epsilon(ev.ApproxDP(eps, d), 1e-5) == (math.inf, math.inf)


def test_exponential_is_bracketed_between_bounded_range_and_pure_dp() -> None:
    lo, up = pld.epsilon(ev.SelfComposed(ev.Exponential(0.1), 100), 1e-5)
    pure = pld.epsilon(ev.SelfComposed(ev.PureDP(0.1), 100), 1e-5)[1]
    half = pld.epsilon(ev.SelfComposed(ev.PureDP(0.05), 100), 1e-5)[0]
    assert up == pytest.approx(pure, rel=1e-12)
    assert lo == pytest.approx(half, rel=1e-12)
    assert lo <= 1.9885 <= up  # Dong-Durfee-Rogers optimum (reference sheet) lies inside


def test_noop_and_trivial_events() -> None:
    assert pld.epsilon(ev.NoOp(), 1e-6) == (0.0, 0.0)
    assert pld.delta(ev.NoOp(), 0.0) == (0.0, 0.0)
    assert pld.epsilon(ev.PoissonSampled(0.0, ev.Gaussian(1.0)), 1e-6) == (0.0, 0.0)
    assert pld.epsilon(ev.SelfComposed(ev.Laplace(1.0), 0), 1e-6) == (0.0, 0.0)
    assert pld.epsilon(ev.Gaussian(1.0), 1.0) == (0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# Discretisation: the upper law dominates, the lower law is dominated, at every ε
# ---------------------------------------------------------------------------------------------

def _law_delta_exact(law, eps: float) -> float:  # type: ignore[no-untyped-def]
    if isinstance(law, GaussianLaw):
        return math.exp(_log_delta_gdp(eps, law.eta))
    if isinstance(law, LaplaceLaw):
        return max(0.0, -math.expm1((eps - law.eps0) / 2)) if eps < law.eps0 else 0.0
    if isinstance(law, SubsampledLaw):  # remove direction of a sampled Gaussian
        q, sigma = law.rate, 1.0 / law.base.eta
        x = sigma**2 * math.log((math.exp(eps) - 1 + q) / q) + 0.5
        phi = special.ndtr
        return float((1 - q) * phi(-x / sigma) + q * phi(-(x - 1) / sigma)
                     - math.exp(eps) * phi(-x / sigma))
    if isinstance(law, DiscreteLaplaceLaw):
        return _dlap_delta(law.scale, law.sensitivity, eps)
    if isinstance(law, DiscreteGaussianLaw):
        return _dgauss_delta(law.sigma2, law.sensitivity, eps)
    losses, p = np.array(law.losses), np.array(law.p)
    return float(law.p_inf + np.sum(p[losses > eps] * -np.expm1(eps - losses[losses > eps])))


LAWS = [GaussianLaw(1.0), GaussianLaw(0.2), LaplaceLaw(0.7), SubsampledLaw(GaussianLaw(0.9), 0.05,
        "remove"), DiscreteLaplaceLaw(1.3, 2), DiscreteGaussianLaw(2.0, 1),
        randomized_response_law(0.77, 4), approx_dp_law(0.55, 1e-3)]


@pytest.mark.parametrize("law", LAWS, ids=lambda law: type(law).__name__)
@pytest.mark.parametrize("h", [1e-2, 1.3e-3])
def test_discretisations_bracket_the_hockey_stick(law, h: float) -> None:  # type: ignore[no-untyped-def]
    up = discretize(law, h, 1e-16, True)
    lo = discretize(law, h, 1e-16, False)
    assert up.finite_mass + up.inf_mass == pytest.approx(1.0, abs=1e-12)
    assert lo.finite_mass + lo.inf_mass <= 1.0 + 1e-12
    for eps in np.linspace(0.0, 3.0, 97):
        truth = _law_delta_exact(law, float(eps))
        assert lo.delta(float(eps)) <= truth * (1 + 1e-9) + 1e-15
        assert up.delta(float(eps)) >= truth * (1 - 1e-9) - 1e-15


# ---------------------------------------------------------------------------------------------
# Monotonicity, consistency, robustness
# ---------------------------------------------------------------------------------------------

MONO_EVENTS = [
    ev.SelfComposed(ev.PoissonSampled(0.02, ev.Gaussian(0.9)), 300),
    ev.Composed((ev.SelfComposed(ev.Laplace(3.0), 5), ev.RandomizedResponse(0.5, 3))),
]


@pytest.mark.parametrize("event", MONO_EVENTS, ids=["sampled-gaussian", "laplace+rr"])
def test_monotone_in_delta_and_epsilon(event: ev.Event) -> None:
    deltas = [1e-12, 1e-7, 1e-3, 0.2]
    eps = [pld.epsilon(event, d) for d in deltas]
    for (lo_a, up_a), (lo_b, up_b) in itertools.pairwise(eps):
        assert up_b <= up_a and lo_b <= lo_a
    epsilons = [0.0, 0.7, 2.0, 4.0]
    dls = [pld.delta(event, x) for x in epsilons]
    for (lo_a, up_a), (lo_b, up_b) in itertools.pairwise(dls):
        assert up_b <= up_a and lo_b <= lo_a


def test_epsilon_and_delta_are_consistent() -> None:
    e = MONO_EVENTS[0]
    lo, up = pld.epsilon(e, 1e-6)
    d_lo, d_up = pld.delta(e, up)
    assert d_lo <= 1e-6 * (1 + 1e-6)  # at the upper ε the true δ is at most the target
    d_lo, d_up = pld.delta(e, lo)
    assert d_up >= 1e-6 * (1 - 1e-6)


ROBUST_EVENTS = [
    ev.Gaussian(0.01), ev.Laplace(0.001), ev.PureDP(1000.0), ev.PureDP(1e-6),
    ev.ApproxDP(1.0, 0.5), ev.ApproxDP(500.0, 1e-12), ev.RandomizedResponse(50.0, 100),
    ev.DiscreteGaussian(0.01, 1), ev.DiscreteLaplace(0.01, 5), ev.Exponential(3.0),
    ev.SelfComposed(ev.PoissonSampled(0.999999, ev.Gaussian(0.5)), 100),
    ev.SelfComposed(ev.PoissonSampled(0.01, ev.ApproxDP(1.0, 1e-6)), 100),
    ev.SelfComposed(ev.Laplace(1.0), 10**4),
    ev.Composed((ev.Laplace(1.0), ev.Gaussian(1.0), ev.RandomizedResponse(1.0, 3),
                 ev.DiscreteLaplace(1.0, 1), ev.ApproxDP(0.5, 1e-7))),
]


@pytest.mark.parametrize("event", ROBUST_EVENTS, ids=lambda e: type(e).__name__)
def test_robustness_no_nan_no_negative_no_exception(event: ev.Event) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy overflow/invalid warnings would be bugs too
        for d in (0.0, 1e-18, 0.5):
            lo, up = pld.epsilon(event, d)
            assert isinstance(lo, float) and isinstance(up, float)
            assert 0.0 <= lo <= up and not math.isnan(up)
        for x in (0.0, 1000.0, math.inf):
            lo, up = pld.delta(event, x)
            assert 0.0 <= lo <= up <= 1.0


def test_returns_inf_when_no_finite_epsilon_exists() -> None:
    assert pld.epsilon(ev.ApproxDP(1.0, 1e-3), 1e-4) == (math.inf, math.inf)
    assert pld.epsilon(ev.Gaussian(1.0), 0.0) == (math.inf, math.inf)
    assert pld.epsilon(ev.PoissonSampled(0.1, ev.Gaussian(1.0)), 0.0)[1] == math.inf


# ---------------------------------------------------------------------------------------------
# Cross-check against dp_accounting's PLD accountant
# ---------------------------------------------------------------------------------------------

def _dpa_cases(full: bool):  # type: ignore[no-untyped-def]
    dpa = pytest.importorskip("dp_accounting")
    cases = [
        (ev.SelfComposed(ev.Laplace(1.0), 10),
         dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(1.0), 10)),
        (ev.SelfComposed(ev.PoissonSampled(0.05, ev.Laplace(0.5)), 100),
         dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.05, dpa.LaplaceDpEvent(0.5)), 100)),
        (ev.SelfComposed(ev.PoissonSampled(0.02, ev.Gaussian(0.8)), 300),
         dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(0.8)),
                                 300)),
        (ev.SelfComposed(ev.DiscreteLaplace(2.0, 1), 20),
         dpa.SelfComposedDpEvent(dpa.dp_event.DiscreteLaplaceDpEvent(0.5, 1), 20)),
    ]
    if full:
        cases += [
            (ev.Composed((ev.SelfComposed(ev.Laplace(2.0), 5), ev.Gaussian(1.5))),
             dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(2.0), 5),
                                  dpa.GaussianDpEvent(1.5)])),
            (DPSGD, dpa.SelfComposedDpEvent(
                dpa.PoissonSampledDpEvent(256 / 60000, dpa.GaussianDpEvent(1.1)), 14062)),
            (ev.SelfComposed(ev.PoissonSampled(0.1, ev.Laplace(2.0)), 500),
             dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.LaplaceDpEvent(2.0)),
                                     500)),
        ]
    return dpa, cases


def _cross_check(full: bool) -> None:
    dpa, cases = _dpa_cases(full)
    deltas = (1e-3, 1e-7, 1e-10) if full else (1e-3, 1e-7)
    for ours, theirs_event in cases:
        acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(theirs_event)
        for delta in deltas:
            theirs = acc.get_epsilon(delta)  # pessimistic: >= truth >= our lower end
            lo, up = pld.epsilon(ours, delta)
            assert lo <= theirs * (1 + REL), (ours, delta, lo, theirs)
            # our upper end is within dp_accounting's own discretisation error at 1e-4
            assert abs(up - theirs) <= 1e-3 * max(1.0, theirs), (ours, delta, up, theirs)


def test_cross_check_with_dp_accounting() -> None:
    _cross_check(full=False)


@pytest.mark.slow
def test_cross_check_with_dp_accounting_full() -> None:
    _cross_check(full=True)


# ---------------------------------------------------------------------------------------------
# API
# ---------------------------------------------------------------------------------------------

def test_supports() -> None:
    assert pld.supports(DPSGD)
    assert pld.supports(ev.PoissonSampled(0.1, ev.Laplace(1.0)))
    assert pld.supports(ev.PoissonSampled(0.1, ev.SelfComposed(ev.Gaussian(1.0), 3)))
    assert not pld.supports(ev.ZCDP(0.1))
    assert not pld.supports(ev.SampledWithoutReplacement(100, 10, ev.Gaussian(1.0)))
    assert not pld.supports(ev.DiscreteGaussian(2.0, 1.5))
    assert not pld.supports(ev.PoissonSampled(0.1, ev.Composed((ev.Laplace(1.0),
                                                               ev.Laplace(2.0)))))
    with pytest.raises(pld.UnsupportedByPLD, match="zcdp"):
        pld.epsilon(ev.ZCDP(0.1), 1e-6)


def test_argument_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match=r"delta must lie in \[0, 1\]"):
        pld.epsilon(ev.Gaussian(1.0), -1e-6)
    with pytest.raises(ValueError, match="epsilon must be >= 0"):
        pld.delta(ev.Gaussian(1.0), -1.0)
    with pytest.raises(ValueError, match="neighboring must be"):
        pld.epsilon(ev.Gaussian(1.0), 1e-6, neighboring="swap")
    with pytest.raises(ValueError, match="discretization must be"):
        pld.epsilon(ev.Gaussian(1.0), 1e-6, discretization=0.0)
    with pytest.raises(TypeError, match=r"dpkit\.events\.Event"):
        pld.epsilon("Gaussian", 1e-6)  # type: ignore[arg-type]


def test_sampled_composition_of_gaussians_is_one_sampled_gaussian() -> None:
    a = pld.epsilon(ev.PoissonSampled(0.05, ev.Composed((ev.Gaussian(2.0), ev.Gaussian(2.0)))),
                    1e-6)
    b = pld.epsilon(ev.PoissonSampled(0.05, ev.Gaussian(math.sqrt(2.0))), 1e-6)
    assert a == pytest.approx(b, rel=1e-12)


def test_replace_one_neighbouring() -> None:
    # sensitivity doubles: Gaussian(m) under replacement is Gaussian(m/2) under add/remove
    assert pld.epsilon(ev.Gaussian(2.0), 1e-6, neighboring="replace") == pytest.approx(
        pld.epsilon(ev.Gaussian(1.0), 1e-6), rel=1e-12)
    assert pld.epsilon(ev.Laplace(1.0), 0.0, neighboring="replace") == (2.0, 2.0)
    # randomized response is defined by changing one unit's value: unchanged
    assert pld.epsilon(ev.RandomizedResponse(1.0, 3), 0.01, neighboring="replace") == \
        pld.epsilon(ev.RandomizedResponse(1.0, 3), 0.01)
    # PureDP(ε): the upper end is 2ε-DP's worst case; the lower end a Laplace sum (realisable)
    lo, up = pld.epsilon(ev.PureDP(1.0), 0.0, neighboring="replace")
    assert (lo, up) == (2.0, 2.0)
    lo, up = pld.epsilon(ev.PureDP(1.0), 0.01, neighboring="replace")
    assert lo < up and up == pytest.approx(pld.epsilon(ev.PureDP(2.0), 0.01)[1], rel=1e-12)
    # subsampling: amplification is credited only in the lower end (bracket stays honest)
    e = ev.PoissonSampled(0.01, ev.Gaussian(1.0))
    lo, up = pld.epsilon(e, 1e-6, neighboring="replace")
    truth_add_remove = _eps_from(lambda x: _sampled_gaussian_delta(0.01, 1.0, x), 1e-6, 50.0)
    assert truth_add_remove * (1 - 1e-6) <= lo <= truth_add_remove * (1 + REL)
    assert _eps_gdp(2.0, 1e-6) <= up <= _eps_gdp(2.0, 1e-6) * (1 + 1e-6)  # Gaussian(0.5)


def test_privacy_loss_distribution_object() -> None:
    step = pld.from_event(ev.PoissonSampled(0.01, ev.Gaussian(1.0)))
    composed = step.self_compose(10_000)
    up = composed.get_epsilon_for_delta(1e-5)
    low = pld.from_event(ev.PoissonSampled(0.01, ev.Gaussian(1.0)),
                         pessimistic=False).self_compose(10_000).get_epsilon_for_delta(1e-5)
    assert low <= 6.18775 and up >= 6.18765
    a = pld.from_event(ev.Laplace(1.0), value_discretization_interval=1e-4)
    b = pld.from_event(ev.Gaussian(2.0), value_discretization_interval=1e-4)
    both = a.compose(b).self_compose(3)
    direct = pld.epsilon(ev.SelfComposed(ev.Composed((ev.Laplace(1.0), ev.Gaussian(2.0))), 3),
                         1e-6)
    assert direct[0] - 1e-6 <= both.get_epsilon_for_delta(1e-6) <= direct[1] + 1e-6
    d = both.get_delta_for_epsilon(2.0)
    assert 0.0 < d < 1.0
    assert both.value_discretization_interval == 1e-4
    assert "pessimistic" in repr(both)
    with pytest.raises(ValueError, match="pessimistic"):
        a.compose(pld.from_event(ev.Laplace(1.0), pessimistic=False))
    with pytest.raises(ValueError, match="count"):
        a.self_compose(-1)
    [(pmf, count)] = a.discretized()
    assert count == 1 and pmf.finite_mass == pytest.approx(1.0)


def test_docstring_examples() -> None:
    from dpkit.accounting import pld_fft, pld_grid, pld_laws

    for module in (pld, pld_laws, pld_grid, pld_fft):
        assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
