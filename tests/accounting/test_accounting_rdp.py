"""RDP: DP-SGD vectors, agreement with dp_accounting (test-only oracle), closed forms against
direct summation, and the order-near-1 / negative-RDP pitfalls."""

from __future__ import annotations

import logging
import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import events as ev
from dpkit.accounting import UnsupportedEvent, rdp

logging.getLogger("absl").setLevel(logging.ERROR)

DEFAULT = rdp.DEFAULT_ORDERS


def _theirs(event: dpa.DpEvent, delta: float, rel=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE):
    acc = dpa_rdp.RdpAccountant(neighboring_relation=rel)
    acc.compose(event)
    return acc.get_epsilon(delta), acc


# -- DP-SGD reference numbers -------------------------------------------------------------------


def test_dpsgd_vectors() -> None:
    e1 = ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 14062)
    e2 = ev.SelfComposed(ev.PoissonSampled(0.01, ev.Gaussian(1.0)), 10000)
    assert rdp.epsilon(e1, 1e-5, orders=DEFAULT) == pytest.approx(2.5966, abs=5e-5)
    assert rdp.epsilon(e2, 1e-5, orders=DEFAULT) == pytest.approx(6.7128, abs=5e-5)
    # the extended default grid never does worse
    assert rdp.epsilon(e1, 1e-5) <= rdp.epsilon(e1, 1e-5, orders=DEFAULT)


# -- dp_accounting on a grid of events ----------------------------------------------------------

GRID_Q = [1e-4, 0.003, 0.02, 0.1, 0.5, 0.95]
GRID_SIGMA = [0.5, 0.8, 1.1, 2.0, 6.0]


@pytest.mark.parametrize("q", GRID_Q)
@pytest.mark.parametrize("sigma", GRID_SIGMA)
def test_sampled_gaussian_matches_dp_accounting(q: float, sigma: float) -> None:
    for count, delta in ((1, 1e-5), (1000, 1e-6)):
        ours = rdp.epsilon(ev.SelfComposed(ev.PoissonSampled(q, ev.Gaussian(sigma)), count), delta,
                           orders=DEFAULT)
        theirs, acc = _theirs(dpa.SelfComposedDpEvent(
            dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), count), delta)
        if np.all(np.isfinite(acc._rdp)):
            assert ours == pytest.approx(theirs, rel=1e-6)
        else:
            # dp_accounting gives up on slowly converging series (it excludes the order); we sum
            # them (with a tail bound), so we may only be tighter
            assert ours <= theirs * (1 + 1e-6)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (ev.Gaussian(0.7), dpa.GaussianDpEvent(0.7)),
        (ev.SelfComposed(ev.Gaussian(3.0), 50), dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(3.0),
                                                                         50)),
        (ev.Laplace(0.05), dpa.LaplaceDpEvent(0.05)),
        (ev.SelfComposed(ev.Laplace(10.0), 300), dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(10.0),
                                                                         300)),
        (ev.ZCDP(0.3), dpa.ZCDpEvent(0.3)),
        (ev.Composed((ev.Gaussian(2.0), ev.Laplace(3.0), ev.ZCDP(0.05))),
         dpa.ComposedDpEvent([dpa.GaussianDpEvent(2.0), dpa.LaplaceDpEvent(3.0),
                              dpa.ZCDpEvent(0.05)])),
        (ev.PoissonSampled(0.05, ev.Composed((ev.Gaussian(2.0), ev.Gaussian(3.0)))),
         dpa.PoissonSampledDpEvent(0.05, dpa.ComposedDpEvent([dpa.GaussianDpEvent(2.0),
                                                              dpa.GaussianDpEvent(3.0)]))),
        (ev.NoOp(), dpa.NoOpDpEvent()),
    ],
)
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-10])
def test_events_match_dp_accounting(ours: ev.Event, theirs: dpa.DpEvent, delta: float) -> None:
    expected, _ = _theirs(theirs, delta)
    assert rdp.epsilon(ours, delta, orders=DEFAULT) == pytest.approx(expected, rel=1e-6,
                                                                     abs=1e-12)


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
@pytest.mark.parametrize("k", [2, 3, 10])
def test_randomized_response_matches_dp_accounting_replace_one(eps: float, k: int) -> None:
    p = k / (math.exp(eps) + k - 1)  # dp_accounting's noise parameter
    expected, _ = _theirs(dpa.SelfComposedDpEvent(dpa.RandomizedResponseDpEvent(p, k), 20), 1e-6,
                          dpa.NeighboringRelation.REPLACE_ONE)
    ours = rdp.epsilon(ev.SelfComposed(ev.RandomizedResponse(eps, k), 20), 1e-6, orders=DEFAULT)
    assert ours == pytest.approx(expected, rel=1e-6)


def test_conversion_matches_dp_accounting_on_random_curves() -> None:
    orders = np.array(DEFAULT)
    for i in range(50):  # a deterministic spread of slopes (ρ-like) and offsets
        curve = orders * 10 ** (-4 + 4.3 * i / 49) + (0.37 * i) % 1.0
        for delta in (1e-2, 1e-6, 1e-12):
            e_ours, _ = rdp.epsilon_from_rdp(orders, curve, delta)
            e_theirs, _ = dpa_rdp.compute_epsilon(orders, curve, delta)
            assert e_ours == pytest.approx(e_theirs, rel=1e-12, abs=1e-15)
        for eps in (0.5, 3.0, 10.0):
            d_ours, _ = rdp.delta_from_rdp(orders, curve, eps)
            d_theirs, _ = dpa_rdp.compute_delta(orders, curve, eps)
            assert d_ours == pytest.approx(d_theirs, rel=1e-9, abs=1e-300)


# -- pitfalls -----------------------------------------------------------------------------------


def test_order_near_one_does_not_collapse_epsilon() -> None:
    """tensorflow/privacy#166: an order of 1 + 1e-8 must not turn ε into 0."""
    e = ev.SelfComposed(ev.PoissonSampled(0.01, ev.Gaussian(1.0)), 10000)
    orders = [1 + 1e-8, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0]
    with_tiny = rdp.epsilon(e, 1e-5, orders=orders)
    without = rdp.epsilon(e, 1e-5, orders=orders[1:])
    assert with_tiny == without > 1.0


def test_negative_or_nan_rdp_values_are_excluded_not_used() -> None:
    orders = [1.5, 2.0, 3.0]
    eps, order = rdp.epsilon_from_rdp(orders, [-1e-9, 0.5, float("nan")], 1e-5)
    assert order == 2.0 and eps > 0
    delta, order = rdp.delta_from_rdp(orders, [-1e-9, 0.5, float("nan")], 1.0)
    assert order == 2.0 and 0 < delta < 1


def test_delta_zero() -> None:
    assert rdp.epsilon(ev.Gaussian(1.0), 0.0) == math.inf
    assert rdp.epsilon(ev.NoOp(), 0.0) == 0.0


def test_orders_are_validated() -> None:
    with pytest.raises(ValueError, match="order"):
        rdp.epsilon(ev.Gaussian(1.0), 1e-5, orders=[1.0, 2.0])
    with pytest.raises(ValueError, match="order"):
        rdp.epsilon(ev.Gaussian(1.0), 1e-5, orders=[])


def test_unsupported() -> None:
    with pytest.raises(UnsupportedEvent, match="ApproxDP"):
        rdp.rdp(ev.ApproxDP(1.0, 1e-7))
    assert not rdp.supports(ev.PoissonSampled(0.1, ev.ApproxDP(1.0, 1e-7)))


# -- closed forms -------------------------------------------------------------------------------


def _renyi_log(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    terms = alpha * log_p + (1 - alpha) * log_q
    m = terms.max()
    return float((m + np.log(np.sum(np.exp(terms - m)))) / (alpha - 1))


def _renyi(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    return _renyi_log(np.log(p), np.log(q), alpha)


def _log_normalise(log_w: np.ndarray) -> np.ndarray:
    m = log_w.max()
    return log_w - (m + np.log(np.sum(np.exp(log_w - m))))


@pytest.mark.parametrize(("scale", "sensitivity"), [(0.7, 1), (3.0, 1), (2.0, 3), (25.0, 4)])
def test_discrete_laplace_closed_form_against_summation(scale: float, sensitivity: int) -> None:
    x = np.arange(-4000, 4001)
    alphas = np.array([1.5, 2.0, 5.0, 20.0])
    worst = np.zeros_like(alphas)
    p0 = _log_normalise(-np.abs(x) / scale)
    for d in range(1, sensitivity + 1):
        pd = _log_normalise(-np.abs(x - d) / scale)
        worst = np.maximum(worst, [max(_renyi_log(p0, pd, a), _renyi_log(pd, p0, a))
                                   for a in alphas])
    ours = rdp.rdp(ev.DiscreteLaplace(scale, sensitivity), alphas)
    assert ours == pytest.approx(worst, rel=1e-9)


@pytest.mark.parametrize("eps", [0.01, 0.5, 2.0, 50.0])
@pytest.mark.parametrize("k", [2, 4])
def test_randomized_response_against_distributions(eps: float, k: int) -> None:
    z = math.exp(eps) + k - 1
    p = np.full(k, 1 / z)
    q = np.full(k, 1 / z)
    p[0], q[1] = math.exp(eps) / z, math.exp(eps) / z
    alphas = np.array([1.1, 2.0, 7.0, 64.0])
    expected = [_renyi(p, q, a) for a in alphas]
    assert rdp.rdp(ev.RandomizedResponse(eps, k), alphas) == pytest.approx(expected, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(1e-3, 100.0), alpha=st.floats(1.01, 1e4))
def test_pure_bound_is_valid_and_below_generic_bounds(eps: float, alpha: float) -> None:
    r = float(rdp.rdp(ev.PureDP(eps), [alpha])[0])
    assert 0.0 <= r <= min(eps, alpha * eps * eps / 2) * (1 + 1e-9) + 1e-15
    lap = float(rdp.rdp(ev.Laplace(1 / eps), [alpha])[0])
    assert lap <= r * (1 + 1e-9) + 1e-15  # Laplace is an ε-DP mechanism
    expo = float(rdp.rdp(ev.Exponential(eps), [alpha])[0])
    assert expo <= alpha * eps * eps / 8 * (1 + 1e-12)


@settings(max_examples=20, deadline=None)
@given(q=st.floats(1e-5, 0.99), sigma=st.floats(0.3, 20.0), count=st.integers(1, 10**6),
       delta=st.floats(1e-18, 0.5))
def test_sampled_gaussian_never_nan_or_negative(q: float, sigma: float, count: int,
                                                delta: float) -> None:
    e = ev.SelfComposed(ev.PoissonSampled(q, ev.Gaussian(sigma)), count)
    eps = rdp.epsilon(e, delta)
    assert eps >= 0.0 and not math.isnan(eps)
    # sampling never hurts, and the conversion is monotone in δ
    assert eps <= rdp.epsilon(ev.SelfComposed(ev.Gaussian(sigma), count), delta) * (1 + 1e-9)
    assert rdp.epsilon(e, min(0.9, delta * 10)) <= eps * (1 + 1e-12)
