"""Budget: refuses overspend and spends nothing when refusing, thread safety, every accountant,
serialisation."""

from __future__ import annotations

import json
import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import events as ev
from dpkit.accounting import Budget, BudgetExceeded, UnsupportedEvent, analytic_gaussian, rdp, zcdp
from dpkit.accounting.calibrate import calibrate, dpsgd_noise_multiplier


def _snapshot(b: Budget) -> tuple:
    return (b.spent, b.remaining, b.history, b.to_dict())


def test_refuses_overspend_and_spends_nothing() -> None:
    b = Budget(epsilon=1.0, accountant="pure")
    b.charge(ev.PureDP(0.6))
    before = _snapshot(b)
    with pytest.raises(BudgetExceeded) as info:
        b.charge(ev.Laplace(2.0))  # ε = 0.5 > 0.4 left
    assert _snapshot(b) == before
    exc = info.value
    assert isinstance(exc, ValueError)
    assert exc.requested.epsilon == pytest.approx(0.5)
    assert exc.remaining.epsilon == pytest.approx(0.4)
    assert exc.missing.epsilon == pytest.approx(0.1)
    assert "requested" in str(exc) and "remaining" in str(exc) and "missing" in str(exc)
    assert "Nothing was spent" in str(exc)
    # and the budget still works for what fits
    b.charge(ev.Laplace(2.5))
    assert b.spent.epsilon == pytest.approx(1.0)
    assert b.history == [ev.PureDP(0.6), ev.Laplace(2.5)]


def test_floating_point_sums_fit() -> None:
    b = Budget(epsilon=0.3, accountant="pure")
    for _ in range(3):
        b.charge(ev.PureDP(0.1))
    assert not b.can_afford(ev.PureDP(1e-6))
    assert len(b.history) == 3  # can_afford records nothing


def test_pure_accountant_refuses_events_without_pure_bound() -> None:
    b = Budget(epsilon=1.0, accountant="pure")
    with pytest.raises(UnsupportedEvent, match="delta>0"):
        b.charge(ev.Gaussian(10.0))
    assert b.history == []


def test_approx_accountant() -> None:
    b = Budget(epsilon=3.0, delta=1e-6)  # accountant="approx" by default
    assert b.accountant == "approx"
    c1 = b.charge(ev.Laplace(2.0))
    assert (c1.epsilon, c1.delta) == (0.5, 0.0)
    with pytest.raises(ValueError, match="delta="):
        b.charge(ev.Gaussian(5.0))  # needs a δ share
    c2 = b.charge(ev.Gaussian(5.0), delta=2e-7)
    assert c2.epsilon == pytest.approx(analytic_gaussian.epsilon_for(5.0, 2e-7))
    c3 = b.charge(ev.ApproxDP(0.5, 3e-7))
    assert c3.delta == 3e-7
    assert b.spent.delta == pytest.approx(5e-7)
    assert b.spent.epsilon == pytest.approx(0.5 + c2.epsilon + c3.epsilon)
    assert b.remaining.delta == pytest.approx(5e-7)
    with pytest.raises(BudgetExceeded) as info:
        b.charge(ev.Gaussian(5.0), delta=6e-7)  # δ would exceed
    assert info.value.missing.delta == pytest.approx(1e-7)
    assert len(b.history) == 3


def test_zcdp_accountant() -> None:
    b = Budget(epsilon=3.0, delta=1e-6, accountant="zcdp")
    rho_budget = zcdp.epsilon_to_rho(3.0, 1e-6)
    assert b.rho == rho_budget
    per = zcdp.rho(ev.Gaussian(10.0))
    n = 0
    with pytest.raises(BudgetExceeded) as info:
        while True:
            b.charge(ev.Gaussian(10.0))
            n += 1
    assert n == math.floor(rho_budget / per * (1 + 1e-12))
    assert info.value.missing.rho > 0
    assert b.spent.epsilon <= 3.0
    with pytest.raises(UnsupportedEvent):
        b.charge(ev.ApproxDP(0.1, 1e-9))


@pytest.mark.parametrize("orders", [None, [8.0]])
def test_rdp_accountant(orders) -> None:  # type: ignore[no-untyped-def]
    b = Budget(epsilon=2.0, delta=1e-5, accountant="rdp", orders=orders)
    step = ev.PoissonSampled(0.01, ev.Gaussian(1.0))
    n = 0
    with pytest.raises(BudgetExceeded):
        while n < 100_000:
            b.charge(step)
            n += 1
    total = ev.SelfComposed(step, n)
    assert rdp.epsilon(total, 1e-5, orders=orders) <= 2.0 * (1 + 1e-12)
    assert rdp.epsilon(ev.SelfComposed(step, n + 1), 1e-5, orders=orders) > 2.0
    assert b.spent.epsilon == pytest.approx(rdp.epsilon(total, 1e-5, orders=orders))


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        Budget(epsilon=0.0)
    with pytest.raises(ValueError, match="epsilon"):
        Budget(epsilon=float("nan"))
    with pytest.raises(ValueError, match="delta"):
        Budget(epsilon=1.0, delta=1.0)
    with pytest.raises(ValueError, match="accountant"):
        Budget(epsilon=1.0, accountant="magic")
    with pytest.raises(ValueError, match="delta > 0"):
        Budget(epsilon=1.0, accountant="zcdp")


@pytest.mark.parametrize("accountant", ["pure", "approx", "zcdp", "rdp"])
def test_thread_race_never_overspends(accountant: str) -> None:
    delta = 0.0 if accountant == "pure" else 1e-6
    b = Budget(epsilon=1.0, delta=delta, accountant=accountant)
    # 100 steps fit under pure/approx, a few dozen under zcdp/rdp: fewer than the 480 attempts
    step = ev.PureDP(0.01) if accountant in ("pure", "approx") else ev.Gaussian(30.0)
    wins: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        mine = 0
        for _ in range(60):
            try:
                b.charge(step)
                mine += 1
            except BudgetExceeded:
                pass
        with lock:
            wins.append(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(wins) == len(b.history)
    assert b.spent.epsilon <= 1.0 * (1 + 1e-12)
    # the budget is full: one more step would not fit
    assert not b.can_afford(step)
    if accountant in ("pure", "approx"):
        assert sum(wins) == 100


@pytest.mark.parametrize("accountant", ["pure", "approx", "zcdp", "rdp"])
def test_to_dict_round_trip(accountant: str) -> None:
    delta = 0.0 if accountant == "pure" else 1e-6
    b = Budget(epsilon=5.0, delta=delta, accountant=accountant)
    b.charge(ev.Laplace(2.0))
    b.charge(ev.SelfComposed(ev.PureDP(0.1), 3))
    if accountant != "pure":
        kwargs = {"delta": 1e-7} if accountant == "approx" else {}
        b.charge(ev.Gaussian(4.0), **kwargs)
    data = json.loads(json.dumps(b.to_dict()))
    b2 = Budget.from_dict(data)
    assert b2.history == b.history
    assert b2.spent == b.spent
    assert b2.remaining == b.remaining
    assert b2.accountant == accountant
    with pytest.raises(ValueError, match="missing"):
        Budget.from_dict({"delta": 0.1})


def test_calibrate_matches_analytic_gaussian_and_is_never_below() -> None:
    exact = analytic_gaussian.calibrate_sigma(1.0, 1e-5)
    m = calibrate(lambda m: ev.Gaussian(m), target_epsilon=1.0, delta=1e-5, rtol=1e-8)
    assert exact <= m <= exact * (1 + 1e-8)


def test_calibrate_dpsgd_and_errors() -> None:
    m = dpsgd_noise_multiplier(sampling_probability=256 / 60000, steps=14062,
                               target_epsilon=2.5966, delta=1e-5, method="rdp")
    assert m == pytest.approx(1.1, rel=1e-3)
    e = ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(m)), 14062)
    assert rdp.epsilon(e, 1e-5) <= 2.5966
    with pytest.raises(ValueError, match="upper"):
        calibrate(lambda m: ev.Gaussian(m), target_epsilon=1e-6, delta=1e-12, upper=10.0)
    with pytest.raises(ValueError, match="target_epsilon"):
        calibrate(lambda m: ev.Gaussian(m), target_epsilon=0.0, delta=1e-5)
    # a target that even the least noise meets returns the lower end
    assert calibrate(lambda m: ev.Laplace(m), target_epsilon=1e9, delta=0.0, lower=1e-3) == 1e-3


# --------------------------------------------------------------------- exact running sums


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e3, allow_nan=False,
                          allow_infinity=False), min_size=1, max_size=80))
def test_running_sums_equal_fsum_of_the_history(costs: list[float]) -> None:
    """The O(1) running total (integers in units of 2**-1074) is the exact sum of the history
    rounded *up* (issue 12: never below the exact sum; it was math.fsum's round-to-nearest)."""
    from fractions import Fraction

    from dpkit.accounting.budget import _exact_float_up, _exact_units

    total = _exact_float_up(sum(_exact_units(c) for c in costs))
    exact = sum(map(Fraction, costs), Fraction(0))
    assert Fraction(total) >= exact
    assert total in (math.fsum(costs), math.nextafter(math.fsum(costs), math.inf))
    assert Fraction(total) == exact or Fraction(math.nextafter(total, -math.inf)) < exact


def test_a_long_history_spends_what_fsum_says() -> None:
    b = Budget(epsilon=100.0)
    costs = [0.1, 1e-17, 0.2, 1e-300, 0.3, 5e-324] * 50
    for c in costs[:300]:
        if c:
            b.charge(ev.PureDP(c))
    # the exact sum rounded up (issue 12), within one ulp of math.fsum's round-to-nearest
    from fractions import Fraction

    exact = sum((Fraction(c) for c in costs[:300] if c), Fraction(0))
    assert Fraction(b.spent.epsilon) >= exact
    assert b.spent.epsilon <= math.nextafter(math.fsum(c for c in costs[:300] if c), math.inf)


@pytest.mark.parametrize("accountant", ["pure", "approx", "zcdp", "rdp"])
def test_cost_quotes_what_charge_would_take_and_records_nothing(accountant: str) -> None:
    delta = 0.0 if accountant == "pure" else 1e-6
    b = Budget(epsilon=3.0, delta=delta, accountant=accountant)
    b.charge(ev.PureDP(0.3))
    spent = b.spent
    event = ev.PureDP(0.2)
    quoted = b.cost(event)
    assert b.spent == spent and len(b.charges) == 1  # nothing recorded
    assert b.charge(event) == quoted
    with pytest.raises(BudgetExceeded):
        b.cost(ev.PureDP(50.0))
    assert len(b.charges) == 2


def test_pld_compositions_are_remembered_not_redone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A curator query asks the pld budget can_afford, charge and spent: the composition of the
    history with the new event is computed once, and the answers equal a fresh budget's."""
    calls: list[int] = []
    real = Budget._pld_epsilon

    def counting(self: Budget, events: list[ev.Event]) -> float:
        calls.append(len(events))
        return real(self, events)

    monkeypatch.setattr(Budget, "_pld_epsilon", counting)
    b = Budget(epsilon=5.0, delta=1e-6, accountant="pld")
    events = [ev.DiscreteLaplace(10.0, 1), ev.Gaussian(3.0), ev.DiscreteLaplace(10.0, 1)]
    for e in events:
        calls.clear()
        assert b.can_afford(e)
        b.charge(e)
        _ = b.spent, b.remaining
        # at most the event alone and the whole history with it, each once
        assert len(calls) <= 2 and len(set(calls)) == len(calls)
        # the history is composed as one SelfComposed per distinct event (issue 12: the PLD
        # plan no longer grows with the history), so the last call has that many events
        assert calls[-1] == len({c.event.to_json() for c in b.charges})
    fresh = Budget(epsilon=5.0, delta=1e-6, accountant="pld")
    for e in events:
        fresh.charge(e)
    assert b.spent == fresh.spent


def test_pld_memo_still_refuses_overspending() -> None:
    """The remembered compositions never let a charge through that a fresh budget refuses:
    the same event, asked twice near the edge, is refused both times and records nothing."""
    b = Budget(epsilon=1.0, delta=1e-6, accountant="pld")
    small = ev.DiscreteLaplace(4.0, 1)  # epsilon 0.25 alone
    while b.can_afford(small):
        b.charge(small)
    spent = b.spent
    for _ in range(2):
        with pytest.raises(BudgetExceeded):
            b.charge(small)
    assert b.spent == spent and b.spent.epsilon <= 1.0
    fresh = Budget(epsilon=1.0, delta=1e-6, accountant="pld")
    for _ in b.charges:
        fresh.charge(small)
    assert not fresh.can_afford(small)


def test_charge_each_raises_the_refusal_that_misses_most() -> None:
    """A project's budget and an analyst's cap inside it: over both, the refusal names the
    tighter (its remaining is what the caller may still ask for); within both, both pay."""
    from dpkit.accounting.budget import charge_each

    project, cap = Budget(epsilon=1.0), Budget(epsilon=0.3)
    costs = charge_each([(project, ""), (cap, "cap")], ev.PureDP(0.2))
    assert [c.epsilon for c in costs] == pytest.approx([0.2, 0.2])
    with pytest.raises(BudgetExceeded, match=r"\(cap\)") as info:
        charge_each([(Budget.from_dict(project.to_dict()), ""),
                     (Budget.from_dict(cap.to_dict()), "cap")], ev.PureDP(2.0))
    assert info.value.remaining.epsilon == pytest.approx(0.1)  # the cap's, not the project's 0.8
    with pytest.raises(BudgetExceeded) as info:  # the project binds
        charge_each([(Budget(epsilon=0.5), "project"), (Budget(epsilon=0.9), "cap")],
                    ev.PureDP(1.0))
    assert "(project)" in str(info.value) and info.value.remaining.epsilon == pytest.approx(0.5)
