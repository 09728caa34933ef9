"""Approximate zCDP and RDP: ``ApproxDP(0, δ)`` steps (a constant-work project's timing term)
beside ρ, their δ paid before the conversion; the budget keeps a fixed share of δ for them.

The reported ε must stay a true upper bound: never below the plain conversion at δ − Σδ_t,
and never below the exact optimum of the same pure steps at δ − Σδ_t (Kairouz-Oh-Viswanath, the
approx accountant's ``kov`` method), which any sound bound of the values alone is above.
"""

from __future__ import annotations

import pytest

from dpkit import events as ev
from dpkit.accounting import Budget, BudgetExceeded, UnsupportedEvent, api, rdp, zcdp

DELTA, DT, N = 1e-6, 1e-12, 40
STEP = ev.PureDP(0.1)


def test_the_timing_delta_is_paid_before_the_conversion() -> None:
    values = ev.SelfComposed(STEP, N)
    both = ev.Composed((values, ev.SelfComposed(ev.ApproxDP(0.0, DT), N)))
    rho, d_a = zcdp.rho_delta(both)
    assert rho == zcdp.rho(values) and d_a == pytest.approx(N * DT, rel=1e-12) and d_a >= N * DT
    eps = zcdp.epsilon(both, DELTA)
    assert eps >= zcdp.rho_to_epsilon(rho, DELTA - N * DT)  # the plain conversion
    assert eps >= zcdp.epsilon(values, DELTA)  # a timing term never makes it cheaper
    assert eps >= api.epsilon(values, DELTA - N * DT, method="kov")  # the optimum, at δ − Σδ_t
    assert zcdp.epsilon(both, N * DT) == float("inf")  # nothing left to convert at
    assert zcdp.delta(both, eps) == pytest.approx(zcdp.delta(values, eps) + N * DT, rel=1e-9)
    assert api.epsilon(both, DELTA, method="zcdp") == eps
    with pytest.raises(UnsupportedEvent, match="δ part"):
        zcdp.rho(both)  # plain zCDP still refuses it
    with pytest.raises(UnsupportedEvent):
        zcdp.rho_delta(ev.ApproxDP(0.5, 1e-9))  # (ε, δ) with ε > 0: no rule


@pytest.mark.parametrize("method", ["zcdp", "rdp"])
def test_gaussian_steps_with_timing_stay_above_the_exact_gdp_value(method: str) -> None:
    """Gaussian steps: μ-GDP is exact for them, so the exact ε of the values alone at
    δ − Σδ_t (``gdp``) is below any sound answer for the joint view at δ."""
    values = ev.SelfComposed(ev.Gaussian(3.0), N)
    both = ev.Composed((values, ev.SelfComposed(ev.ApproxDP(0.0, DT), N)))
    exact = api.epsilon(values, DELTA - N * DT, method="gdp")
    assert api.epsilon(both, DELTA, method=method) >= exact > 0
    assert api.epsilon(both, DELTA) >= exact  # the default's pick (the tightest sound one)


def test_a_zcdp_budget_pays_timing_from_its_reserve() -> None:
    reserve = 10 * DT
    charge = ev.Composed((STEP, ev.ApproxDP(0.0, DT)))
    b = Budget(epsilon=3.0, delta=DELTA, accountant="zcdp", approx_delta=reserve)
    for _ in range(10):
        b.charge(charge)
    plain = zcdp.rho_to_epsilon(b.spent.rho or 0.0, DELTA - 10 * DT)
    assert b.spent.epsilon >= plain
    assert b.spent.epsilon >= api.epsilon(ev.SelfComposed(STEP, 10), DELTA - reserve,
                                          method="kov")
    with pytest.raises(BudgetExceeded, match=r"approx_delta=1e-11.*used up"):
        b.charge(charge)  # ρ would fit; the reserve does not
    b.charge(STEP)  # a step without a timing term still fits
    again = Budget.from_dict(b.to_dict())
    assert again.approx_delta == reserve and again.spent == b.spent
    with pytest.raises(UnsupportedEvent, match="approx_delta"):
        Budget(epsilon=3.0, delta=DELTA, accountant="zcdp").charge(charge)
    with pytest.raises(ValueError, match="only applies to accountant='zcdp'"):
        Budget(epsilon=3.0, delta=DELTA, accountant="approx", approx_delta=reserve)
    with pytest.raises(ValueError, match="below delta"):
        Budget(epsilon=3.0, delta=DELTA, accountant="zcdp", approx_delta=DELTA)


def test_approximate_rdp_pays_the_timing_delta_the_same_way() -> None:
    values = ev.SelfComposed(STEP, N)
    both = ev.Composed((values, ev.SelfComposed(ev.ApproxDP(0.0, DT), N)))
    curve, d_a = rdp.rdp_delta(both)
    assert d_a >= N * DT and list(curve) == list(rdp.rdp(values))
    eps = rdp.epsilon(both, DELTA)
    assert eps >= rdp.epsilon(values, DELTA - N * DT) >= rdp.epsilon(values, DELTA)
    assert eps >= api.epsilon(values, DELTA - N * DT, method="kov")
    assert api.epsilon(both, DELTA, method="rdp") == pytest.approx(eps, rel=1e-12)
    b = Budget(epsilon=3.0, delta=DELTA, accountant="rdp", orders=[8.0], approx_delta=10 * DT)
    charge = ev.Composed((STEP, ev.ApproxDP(0.0, DT)))
    for _ in range(10):
        b.charge(charge)
    assert b.spent.epsilon >= rdp.epsilon(ev.SelfComposed(STEP, 10), DELTA - 10 * DT,
                                          orders=[8.0])
    with pytest.raises(BudgetExceeded, match="approximate-RDP"):
        b.charge(charge)
    assert Budget.from_dict(b.to_dict()).spent == b.spent
