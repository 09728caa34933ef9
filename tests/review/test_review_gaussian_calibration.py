"""Red-team review: an (epsilon, delta) Gaussian release must cost at most (epsilon, delta) by
the accountant a budget uses.

A budget charges ``accounting.epsilon(event, delta)`` (``Budget(accountant="approx")`` with the
δ share δ, the curator likewise), but the calibration only checked ``accounting.delta(event,
epsilon) <= delta * (1 + 1e-9)``. The two need not agree: with the PLD accountant the scalar
grid release ``gaussian(x, sensitivity=1, epsilon=1, delta=1e-6)`` got ``delta(event, 1) =
9.99999798e-7`` but ``epsilon(event, 1e-6) = 1.0000000277 > 1``, so a budget of exactly
(1, 1e-6) refused the release it was calibrated for.
"""

from __future__ import annotations

import importlib
import types

import pytest

import dpkit as dp
from dpkit.events import DiscreteGaussian, Event

g = importlib.import_module("dpkit.mechanisms.gaussian")


class _SkewedAccountant:
    """An upper-bound accountant whose two directions disagree slightly (as a discretised PLD
    does): δ(ε) is the exact scalar curve, ε(δ) is 1e-7 larger than the exact inverse."""

    def delta(self, event: Event, epsilon: float) -> float:
        assert isinstance(event, DiscreteGaussian)
        return g.dgauss_delta(event.sigma2, int(event.sensitivity), epsilon)

    def epsilon(self, event: Event, delta: float) -> float:
        assert isinstance(event, DiscreteGaussian)
        lo, hi = 0.0, 50.0
        for _ in range(200):  # exact inverse of delta(.) by bisection, rounded up
            mid = 0.5 * (lo + hi)
            if self.delta(event, mid) <= delta:
                hi = mid
            else:
                lo = mid
        return hi + 1e-7


def test_calibration_meets_the_epsilon_a_budget_charges(monkeypatch: pytest.MonkeyPatch) -> None:
    acc = _SkewedAccountant()
    monkeypatch.setattr(g, "accounting",
                        types.SimpleNamespace(delta=acc.delta, epsilon=acc.epsilon))
    g._sigma2.cache_clear()
    try:
        plan = g._plan_discrete_gaussian(3.0, 1, None, 1.0, 1e-6, None)
        assert acc.delta(plan.event, 1.0) <= 1e-6
        assert acc.epsilon(plan.event, 1e-6) <= 1.0
    finally:
        g._sigma2.cache_clear()


@pytest.mark.slow
def test_grid_release_fits_a_budget_of_exactly_what_was_asked() -> None:
    r = dp.mechanisms.gaussian(0.0, sensitivity=1.0, epsilon=1.0, delta=1e-6,
                               source=dp.noise.seeded(1))
    assert dp.accounting.epsilon(r.event, 1e-6) <= 1.0
    assert dp.accounting.delta(r.event, 1.0) <= 1e-6
    budget = dp.accounting.Budget(epsilon=1.0, delta=1e-6)
    budget.charge(r.event, delta=1e-6)  # must not raise BudgetExceeded
