"""A privacy budget that refuses to overspend: ``Budget`` (a privacy filter) and ``BudgetExceeded``.

``Budget(epsilon=3.0, delta=1e-6, accountant="approx")`` owns a total (ε, δ) and a history of
events. :meth:`Budget.charge` checks that the history plus the new event stays within (ε, δ)
under the chosen accountant and records it, atomically (a lock); a refused charge raises
:class:`BudgetExceeded` and spends **nothing**.

Accountants, and whether they are valid privacy *filters* — i.e. remain valid when each next
mechanism, and whether to run it at all, is chosen adaptively after seeing earlier outputs and
the budget left (the way a curator is used):

==========  =====================================================================  =============
accountant  rule                                                                   filter?
==========  =====================================================================  =============
``pure``    Σ ε_i <= ε (pure events only; others are refused: use δ > 0)           yes (Rogers-
                                                                                   Roth-Ullman-
                                                                                   Vadhan 2016)
``approx``  Σ ε_i <= ε and Σ δ_i <= δ; each step is booked at its tightest         yes (ibid.,
            (ε_i, δ_i): pure steps at (ε_i, 0), (ε, δ) steps at their own δ, steps  basic
            that need a δ share (Gaussian, zCDP, sampled) at ``charge(e, delta=δ_i)`` composition)
``zcdp``    Σ ρ_i <= ρ, ρ the largest with ρ-zCDP ⇒ (ε, δ)-DP (CKS conversion)      yes (Feldman-
            (with ``approx_delta=δ_A``: also Σ δ_i <= δ_A for the ``ApproxDP(0,   Zrnic 2021)
            δ_i)`` steps, and ρ converts at δ − δ_A; approximate zCDP)
``rdp``     the summed RDP curve converts to ε' <= ε at δ, minimising over orders   only with a
                                                                                   single order
``pld``     privacy-loss distribution of the whole history gives ε' <= ε at δ       no
==========  =====================================================================  =============

.. warning::
   ``"pld"`` and multi-order ``"rdp"`` are tight for a sequence of mechanisms **fixed in
   advance**. When queries are chosen adaptively and the budget check itself decides when to
   stop, their guarantee is not proven (the optimal order, or the PLD, depends on the adaptively
   chosen sequence; Feldman-Zrnic 2021, Whitehouse et al. 2023). For adaptive use pick
   ``"approx"``, ``"zcdp"`` or ``"rdp"`` with ``orders=[α]`` (one order).

Floating-point sums are compared with a relative slack of 1e-12 (so three charges of 0.1 fit in
0.3). Costs only ever round *up* (issue 12): ε, δ and ρ are summed exactly (integers in units of
2^-1074) and rounded up, RDP curves are nudged up one ulp per charge, so no positive charge is
ever lost to rounding, however small. The reported ``spent`` never decreases when a charge is
added (composing more cannot lower the privacy loss, so a composed accountant answering less is
a numerical failure, and the larger earlier value stands). For ``"pld"``, compositions the PLD
cannot bound soundly (e.g. a step composed 10^18 times) fall back to the tightest sound method
(``dpkit.accounting.epsilon(..., method=None)``).

Serialisable: :meth:`Budget.to_dict` / :meth:`Budget.from_dict` (events as their JSON form).

>>> from dpkit import events as ev
>>> b = Budget(epsilon=1.0, accountant="pure")
>>> b.charge(ev.PureDP(0.4)).epsilon
0.4
>>> try:
...     b.charge(ev.PureDP(0.7))
... except BudgetExceeded as exc:
...     print(round(exc.missing.epsilon, 6))
0.1
>>> b.spent.epsilon
0.4
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit.accounting import approx as _approx
from dpkit.accounting import rdp as _rdp
from dpkit.accounting import zcdp as _zcdp
from dpkit.accounting._common import (
    UnsupportedEvent,
    check_delta,
    check_epsilon,
    check_neighboring,
    normalize,
)

__all__ = ["ACCOUNTANTS", "Budget", "BudgetExceeded", "Charge", "Cost", "charge_each"]

ACCOUNTANTS: tuple[str, ...] = ("pure", "approx", "zcdp", "rdp", "pld")
_SLACK = 1e-12


@dataclass(frozen=True)
class Cost:
    """An amount of privacy: (ε, δ), and ρ for the zCDP accountant."""

    epsilon: float
    delta: float = 0.0
    rho: float | None = None

    def __str__(self) -> str:
        text = f"ε={self.epsilon:.6g}, δ={self.delta:.3g}"
        return text if self.rho is None else text + f", ρ={self.rho:.6g}"


@dataclass(frozen=True)
class Charge:
    """One recorded charge: the event, the δ share it was charged with, and its own cost."""

    event: ev.Event
    delta: float | None
    cost: Cost


class BudgetExceeded(ValueError):  # noqa: N818 - the name the contract uses
    """A charge would overspend the budget. Nothing was spent.

    Attributes: ``requested`` (cost of this event alone), ``remaining`` (before the charge),
    ``missing`` (how far over the budget the charge would go), ``accountant``, ``event``.
    """

    def __init__(self, *, requested: Cost, remaining: Cost, missing: Cost, accountant: str,
                 event: ev.Event | None = None, detail: str = "") -> None:
        self.requested = requested
        self.remaining = remaining
        self.missing = missing
        self.accountant = accountant
        self.event = event
        self.detail = detail
        message = (
            f"privacy budget exceeded (accountant {accountant!r}): requested {requested}; "
            f"remaining {remaining}; missing {missing}. Nothing was spent; ask for less "
            f"(a larger noise scale or fewer queries) or use a new budget"
        )
        if detail:
            message += f" ({detail})"
        super().__init__(message)


def _approx_epsilon(norm: ev.Event, delta: float, *, leftover: bool) -> float:
    """ε of one charge under 'approx' at its δ share. With no δ left over beyond its (ε, δ)
    steps' own (``leftover``: a pure release beside constant work's ``ApproxDP(0, δ_t)``),
    nothing can trade δ for ε: the pure steps' ε add up, which basic composition says exactly.
    The search over every method (the PLD's included) found the same number, but imported
    scipy.optimize and ran a PLD per new event: ~0.4 s of each `dpkit query` process on a
    default project (docs/first_hour.md)."""
    from dpkit.accounting import api  # as _event_cost does (api imports this module)

    if leftover:
        try:
            return api.epsilon(norm, delta, "basic")
        except UnsupportedEvent:
            pass
    return api.epsilon(norm, delta)


class Budget:
    """A total (ε, δ) privacy budget with a history, refusing any charge that overspends it.

    Parameters are keyword-only: ``epsilon`` (> 0), ``delta`` in [0, 1), ``accountant`` in
    :data:`ACCOUNTANTS`, ``neighboring`` (``"add_remove"`` default, or ``"replace"``),
    ``orders`` (RDP orders for ``accountant="rdp"``; one order makes it a valid filter).
    ``approx_delta`` (``accountant="zcdp"`` or ``"rdp"``, in [0, δ)): the part of δ kept for
    the δ of ``ApproxDP(0, δ_i)`` steps (approximate zCDP / RDP, :mod:`dpkit.accounting.zcdp`;
    a constant-work project's timing term): charges must keep Σ δ_i <= ``approx_delta`` as
    well as Σ ρ_i <= ρ, with ρ the largest that converts to (ε, δ − ``approx_delta``) (``rdp``:
    the curve converts at δ − ``approx_delta``). For ``zcdp`` both are fixed budgets, so the
    filter stays valid under adaptive use, and the history is (ε, δ)-DP. 0 (the default)
    refuses such steps.
    See the module docstring for which accountants are valid under adaptive use.
    """

    def __init__(self, *, epsilon: float, delta: float = 0.0, accountant: str = "approx",
                 neighboring: str = "add_remove", orders: Sequence[float] | None = None,
                 approx_delta: float = 0.0) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"unknown accountant {accountant!r}; choose one of "
                             f"{', '.join(ACCOUNTANTS)}")
        self.accountant = accountant
        self.neighboring = check_neighboring(neighboring)
        if accountant in ("zcdp", "rdp", "pld") and self.delta == 0.0:
            raise ValueError(
                f"accountant {accountant!r} needs delta > 0 (it converts to (ε, δ) at the end); "
                "for a pure ε budget use accountant='pure'"
            )
        if orders is not None and accountant != "rdp":
            raise ValueError("orders= only applies to accountant='rdp'")
        self.orders: tuple[float, ...] | None = (
            tuple(float(a) for a in orders) if orders is not None else None)
        if self.orders is not None:
            _rdp._as_orders(self.orders)
        self._lock = threading.RLock()
        self._charges: list[Charge] = []
        # exact running sums of the recorded costs, as integers in units of 2**-1074 (every
        # finite double is one): O(1) per charge, and the same correctly rounded totals as
        # math.fsum over the whole history
        self._eps_sum = 0
        self._delta_sum = 0
        self._rho_sum = 0  # exact, like the two above
        self._approx_sum = 0  # the δ of approximate-zCDP steps, exact likewise
        self._eps_reported = 0.0  # the largest composed ε reported so far: spent never falls
        self._pld_memo: dict[tuple[int, ev.Event | None], float] = {}
        self._groups: dict[str, list[Any]] = {}  # event JSON -> [event, count] (pld)
        self._rdp_total = np.zeros(len(self._orders())) if accountant == "rdp" else None
        self.approx_delta = _check_approx_delta(approx_delta, self.delta, accountant)
        self._rho_budget = (_zcdp.epsilon_to_rho(self.epsilon, self._conversion_delta)
                            if accountant == "zcdp" else None)

    # ---------------------------------------------------------------- accountant internals

    def _orders(self) -> tuple[float, ...]:
        return self.orders if self.orders is not None else _rdp.ORDERS

    def _event_cost(self, event: ev.Event, delta: float | None) -> tuple[Cost, Any]:
        """Cost of ``event`` alone and the accountant's increment (ρ, RDP curve, …)."""
        from dpkit.accounting import api

        if self.accountant == "pure":
            if delta:
                raise ValueError("accountant 'pure' takes no delta share; use accountant='approx'")
            try:
                eps = api.epsilon(event, 0.0, "pure", neighboring=self.neighboring)
            except UnsupportedEvent as exc:
                raise UnsupportedEvent(
                    "pure", event, exc.reason,
                    "a pure budget cannot pay for it: use Budget(epsilon=..., delta>0, "
                    "accountant='approx' or 'zcdp')") from None
            return Cost(eps, 0.0), eps
        if self.accountant == "approx":
            norm = normalize(event, self.neighboring)
            needs = _approx._weight(norm)
            fixed = min(1.0, _approx._fixed_delta(norm))
            if delta is None:
                if needs:
                    raise ValueError(
                        f"{type(event).__name__} needs a share of δ under accountant 'approx': "
                        f"call charge(event, delta=...) with e.g. delta={self.delta / 10:.3g} "
                        f"(remaining δ is {self.remaining.delta:.3g})")
                delta = fixed
            else:
                delta = check_delta(delta)
                if needs and delta == 0.0:
                    raise ValueError("the δ share must be > 0 for an event with Gaussian or "
                                     "zCDP steps")
                delta = max(delta, fixed)
            eps = _approx_epsilon(norm, delta, leftover=not needs and 0.0 < delta <= fixed)
            return Cost(eps, delta), (eps, delta)
        if delta is not None:
            raise ValueError(f"accountant {self.accountant!r} converts the whole history at the "
                             f"budget's δ; do not pass delta= to charge()")
        if self.accountant == "zcdp":
            rho, d_a = _zcdp.rho_delta(event, neighboring=self.neighboring)
            self._check_delta_part(event, d_a)
            eps = _zcdp_epsilon(rho, self._conversion_delta)
            return Cost(eps, self.delta if rho or d_a else 0.0, rho), (rho, d_a)
        if self.accountant == "rdp":
            curve, d_a = _rdp.rdp_delta(event, self._orders(), neighboring=self.neighboring)
            self._check_delta_part(event, d_a)
            eps = _rdp.epsilon_from_rdp(self._orders(), curve, self._conversion_delta)[0]
            return Cost(eps, self.delta if eps or d_a else 0.0), (curve, d_a)
        # pld: cost of the event alone
        eps = self._pld_cached(0, event)
        return Cost(eps, self.delta if eps else 0.0), None

    def _pld_cached(self, first: int, extra: ev.Event | None) -> float:
        """ε of the first ``first`` recorded charges composed with ``extra``, remembered: charges
        are only ever appended, so the key names the same composition for the budget's life
        (a query's pre-check, charge and the spend shown after it compose it once, not 9 times)."""
        if extra is None and first > 0:  # the same composition as its last step's check
            first, extra = first - 1, self._charges[first - 1].event
        key = (first, extra)
        try:
            hit = self._pld_memo.get(key)
            memoizable = True
        except TypeError:  # an unhashable event: compute it
            hit, memoizable = None, False
        if hit is not None:
            return hit
        eps = self._pld_epsilon(self._grouped(first, extra))
        if memoizable:
            if len(self._pld_memo) >= 64:
                self._pld_memo.clear()
            self._pld_memo[key] = eps
        return eps

    def _grouped(self, first: int, extra: ev.Event | None) -> list[ev.Event]:
        """The first ``first`` charges and ``extra`` as one ``SelfComposed(e, n)`` per distinct
        event: the same composition (it commutes), but the PLD's plan and the memo's key no
        longer grow with the history. O(distinct events) for the full history or all but its
        last charge (what a check, a charge and ``spent`` ask for); a rebuild otherwise."""
        n = len(self._charges)
        if first in (n, n - 1):
            groups = {k: [e, c] for k, (e, c) in self._groups.items()}
            if first == n - 1:
                last = self._charges[-1].event.to_json()
                groups[last][1] -= 1
        else:
            groups = {}
            for charge in self._charges[:first]:
                _count_into(groups, charge.event)
        if extra is not None:
            _count_into(groups, extra)
        return [e if c == 1 else ev.SelfComposed(e, c) for e, c in groups.values() if c > 0]

    def _pld_epsilon(self, events: list[ev.Event]) -> float:
        from dpkit.accounting import api

        composed = ev.Composed(tuple(events))
        try:
            return api.epsilon(composed, self.delta, "pld", neighboring=self.neighboring)
        except UnsupportedEvent:  # beyond the PLD's sound range: the tightest sound method
            return api.epsilon(composed, self.delta, neighboring=self.neighboring)

    @property
    def _rho_total(self) -> float:
        return _exact_float_up(self._rho_sum)

    def _check_delta_part(self, event: ev.Event, d_a: float) -> None:
        if d_a and not self.approx_delta:
            raise UnsupportedEvent(
                self.accountant, event, f"it has a δ part ({d_a:.3g}, its ApproxDP(0, δ) steps)",
                f"keep a share of δ for them: Budget(..., accountant={self.accountant!r}, "
                f"approx_delta=...), or use accountant='approx' or 'pld'")

    @property
    def _conversion_delta(self) -> float:
        """The δ at which ρ converts: δ less the approximate-zCDP reserve (rounded down)."""
        if not self.approx_delta:
            return self.delta
        return math.nextafter(self.delta - self.approx_delta, 0.0)

    def _spent_unlocked(self) -> Cost:
        if not self._charges:
            return Cost(0.0, 0.0, 0.0 if self.accountant == "zcdp" else None)
        if self.accountant in ("pure", "approx"):
            return Cost(_exact_float_up(self._eps_sum),
                        min(1.0, _exact_float_up(self._delta_sum)))
        # composed accountants: the reported ε only ever grows (see the module docstring)
        if self.accountant == "zcdp":
            rho = self._rho_total
            eps = max(self._eps_reported, _zcdp_epsilon(rho, self._conversion_delta))
            self._eps_reported = eps
            return Cost(eps, self.delta if eps else 0.0, rho)
        if self.accountant == "rdp":
            assert self._rdp_total is not None
            eps = _rdp.epsilon_from_rdp(self._orders(), self._rdp_total,
                                        self._conversion_delta)[0]
        else:
            eps = self._pld_cached(len(self._charges), None)
        eps = self._eps_reported = max(self._eps_reported, eps)
        return Cost(eps, self.delta if eps else 0.0)

    def _remaining_from(self, spent: Cost) -> Cost:
        if self.accountant in ("pure", "approx"):
            return Cost(max(0.0, self.epsilon - spent.epsilon), max(0.0, self.delta - spent.delta))
        rho = None
        if self.accountant == "zcdp":
            assert self._rho_budget is not None
            rho = max(0.0, self._rho_budget - self._rho_total)
        return Cost(max(0.0, self.epsilon - spent.epsilon), self.delta, rho)

    def _fits(self, eps: float, budget: float) -> bool:
        return eps <= budget * (1.0 + _SLACK)

    def _try(self, event: ev.Event, delta: float | None, record: bool) -> Cost:
        if not isinstance(event, ev.Event):
            raise TypeError(f"charge() takes a dpkit.events.Event (got {type(event).__name__})")
        cost, inc = self._event_cost(event, delta)
        with self._lock:
            spent = self._spent_unlocked()
            remaining = self._remaining_from(spent)
            acc = self.accountant
            if acc in ("pure", "approx"):
                # an infinite (or NaN) cost has no exact units: it is refused below
                eps_after = (_exact_float_up(self._eps_sum + _exact_units(cost.epsilon))
                             if math.isfinite(cost.epsilon) else cost.epsilon)
                delta_after = (_exact_float_up(self._delta_sum + _exact_units(cost.delta))
                               if math.isfinite(cost.delta) else cost.delta)
                ok = self._fits(eps_after, self.epsilon) and self._fits(delta_after, self.delta)
                missing = Cost(max(0.0, eps_after - self.epsilon),
                               max(0.0, delta_after - self.delta))
            elif acc == "zcdp":
                ok, eps_after, missing, detail = self._zcdp_fits(inc, spent)
            elif acc == "rdp":
                assert self._rdp_total is not None
                total = _add_up(self._rdp_total, inc[0])
                eps_after = max(spent.epsilon, _rdp.epsilon_from_rdp(
                    self._orders(), total, self._conversion_delta)[0])
                ok_d, d_missing, detail = self._approx_fits(inc[1])
                ok = self._fits(eps_after, self.epsilon) and ok_d
                missing = Cost(max(0.0, eps_after - self.epsilon), d_missing)
            else:
                eps_after = max(spent.epsilon, self._pld_cached(len(self._charges), event))
                ok = self._fits(eps_after, self.epsilon)
                missing = Cost(max(0.0, eps_after - self.epsilon), 0.0)
            if not ok or not (math.isfinite(cost.epsilon) and math.isfinite(cost.delta)):
                raise BudgetExceeded(requested=cost, remaining=remaining, missing=missing,
                                     accountant=acc, event=event,
                                     detail=detail if acc in ("zcdp", "rdp") else "")
            if record:
                self._record(Charge(event, delta, cost), inc)
                self._eps_reported = max(self._eps_reported, eps_after)
        return cost

    def _zcdp_fits(self, inc: tuple[float, float], spent: Cost) -> tuple[bool, float, Cost, str]:
        """Whether ρ and the approximate-zCDP δ both fit after ``inc``; ε after, the missing
        part, and a note when it is the δ reserve that is used up."""
        assert self._rho_budget is not None
        rho_inc, d_inc = inc
        rho_after = (_exact_float_up(self._rho_sum + _exact_units(rho_inc))
                     if math.isfinite(rho_inc) else math.inf)
        ok_rho = self._fits(rho_after, self._rho_budget)
        ok_d, d_missing, detail = self._approx_fits(d_inc)
        # the check is on ρ; the ε conversion (a minimisation, ~1 ms) only for the
        # refusal's message: spent converts the (monotone, exact) ρ total on demand
        eps_after = spent.epsilon if ok_rho else max(
            spent.epsilon, _zcdp.rho_to_epsilon(rho_after, self._conversion_delta))
        missing = Cost(max(0.0, eps_after - self.epsilon), d_missing,
                       max(0.0, rho_after - self._rho_budget))
        return ok_rho and ok_d, eps_after, missing, detail

    def _approx_fits(self, d_inc: float) -> tuple[bool, float, str]:
        """Whether the δ part ``d_inc`` fits what is left of ``approx_delta``; how much is
        missing, and the note that says so."""
        d_after = _exact_float_up(self._approx_sum + _exact_units(d_inc))
        if d_inc == 0.0 or self._fits(d_after, self.approx_delta):
            return True, 0.0, ""
        return False, d_after - self.approx_delta, (
            f"the δ kept for approximate-{'zCDP' if self.accountant == 'zcdp' else 'RDP'} "
            f"steps (approx_delta={self.approx_delta:.3g}, the timing term of a constant-work "
            f"project) is used up")

    def _record(self, charge: Charge, inc: Any) -> None:
        self._charges.append(charge)
        if self.accountant == "pld":
            _count_into(self._groups, charge.event)
        self._eps_sum += _exact_units(charge.cost.epsilon)
        self._delta_sum += _exact_units(charge.cost.delta)
        if self.accountant == "zcdp":
            self._rho_sum += _exact_units(float(inc[0]))
            self._approx_sum += _exact_units(float(inc[1]))
        elif self.accountant == "rdp":
            assert self._rdp_total is not None
            self._rdp_total = _add_up(self._rdp_total, inc[0])
            self._approx_sum += _exact_units(float(inc[1]))

    # ---------------------------------------------------------------- public

    def charge(self, event: ev.Event, *, delta: float | None = None) -> Cost:
        """Record ``event`` if it fits, atomically; else raise :class:`BudgetExceeded`.

        ``delta``: for ``accountant="approx"``, the share of δ this event is charged with; needed
        for events with Gaussian / zCDP steps (they have no fixed (ε, δ)), optional otherwise
        (pure steps cost (ε, 0), ``ApproxDP`` steps their own δ; a larger share may lower ε).
        Other accountants take no ``delta``. Returns this event's own cost. Events the
        accountant cannot bound raise :class:`UnsupportedEvent` (also a ValueError).
        """
        return self._try(event, delta, record=True)

    def cost(self, event: ev.Event, *, delta: float | None = None) -> Cost:
        """What :meth:`charge` would return for ``event`` now, recording nothing; raises
        :class:`BudgetExceeded` exactly when it would."""
        return self._try(event, delta, record=False)

    def can_afford(self, event: ev.Event, *, delta: float | None = None) -> bool:
        """Whether :meth:`charge` would accept ``event`` now (records nothing)."""
        try:
            self._try(event, delta, record=False)
        except BudgetExceeded:
            return False
        return True

    @property
    def spent(self) -> Cost:
        """Privacy spent so far under the accountant.

        ``pure``/``approx``: the sums (Σε, Σδ). ``zcdp``/``rdp``/``pld``: the ε of the whole
        history at the budget's δ (δ is a target, not consumed piece by piece).
        """
        with self._lock:
            return self._spent_unlocked()

    @property
    def remaining(self) -> Cost:
        """What is left: ``epsilon - spent.epsilon`` (and δ for ``approx``; ρ for ``zcdp``)."""
        with self._lock:
            return self._remaining_from(self._spent_unlocked())

    @property
    def history(self) -> list[ev.Event]:
        """The charged events, oldest first (a copy)."""
        with self._lock:
            return [c.event for c in self._charges]

    @property
    def charges(self) -> list[Charge]:
        """The charges with their δ shares and costs, oldest first (a copy)."""
        with self._lock:
            return list(self._charges)

    @property
    def rho(self) -> float | None:
        """The total ρ of a ``zcdp`` budget (None for other accountants)."""
        return self._rho_budget

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state: totals, accountant, and every charge (event + δ share + cost)."""
        with self._lock:
            return {
                "version": 1,
                "epsilon": self.epsilon,
                "delta": self.delta,
                "accountant": self.accountant,
                "neighboring": self.neighboring,
                "orders": list(self.orders) if self.orders is not None else None,
                **({"approx_delta": self.approx_delta} if self.approx_delta else {}),
                "charges": [
                    {"event": c.event.to_dict(), "delta": c.delta, "epsilon_cost": c.cost.epsilon,
                     "delta_cost": c.cost.delta, "rho_cost": c.cost.rho}
                    for c in self._charges
                ],
            }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Budget:
        """Rebuild a budget from :meth:`to_dict` (costs as recorded; curves recomputed)."""
        try:
            budget = cls(epsilon=data["epsilon"], delta=data.get("delta", 0.0),
                         accountant=data.get("accountant", "approx"),
                         neighboring=data.get("neighboring", "add_remove"),
                         orders=data.get("orders"),
                         approx_delta=data.get("approx_delta", 0.0))
            for item in data.get("charges", []):
                event = ev.from_dict(item["event"])
                cost = Cost(float(item["epsilon_cost"]), float(item["delta_cost"]),
                            item.get("rho_cost"))
                inc: Any = None
                if budget.accountant == "zcdp":
                    inc = _zcdp.rho_delta(event, neighboring=budget.neighboring)
                elif budget.accountant == "rdp":
                    inc = _rdp.rdp_delta(event, budget._orders(), neighboring=budget.neighboring)
                budget._record(Charge(event, item.get("delta"), cost), inc)
        except KeyError as exc:
            raise ValueError(f"not a Budget.to_dict() mapping: missing {exc}") from None
        return budget

    def __repr__(self) -> str:
        s = self.spent
        return (f"Budget(epsilon={self.epsilon!r}, delta={self.delta!r}, "
                f"accountant={self.accountant!r}, spent=({s}), charges={len(self._charges)})")


def _check_approx_delta(approx_delta: float, delta: float, accountant: str) -> float:
    out = check_delta(approx_delta, name="approx_delta") if approx_delta else 0.0
    if out and accountant not in ("zcdp", "rdp"):
        raise ValueError(f"approx_delta= only applies to accountant='zcdp' or 'rdp' (got "
                         f"{accountant!r}); the 'approx' and 'pld' accountants charge δ steps "
                         f"directly")
    if out and not out < delta:
        raise ValueError(f"approx_delta must be below delta (got {out:g} >= {delta:g}): the "
                         f"rest of δ is what ρ converts at")
    return out


def _count_into(groups: dict[str, list[Any]], event: ev.Event) -> None:
    # keyed by the JSON: PureDP(1) and PureDP(1.0) are the same mechanism, but the grouped
    # composition must contain the very events that were charged
    key = event.to_json()
    if key in groups:
        groups[key][1] += 1
    else:
        groups[key] = [event, 1]


@functools.lru_cache(maxsize=256)
def _zcdp_epsilon(rho: float, delta: float) -> float:
    # a minimisation (~1 ms): a curator charges the same few events and asks for spent often
    return _zcdp.rho_to_epsilon(rho, delta)


_UNIT_BITS = 1074  # every finite double is an integer multiple of 2**-1074


def _exact_units(x: float) -> int:
    """``x`` (a finite double) as an exact integer number of ``2**-1074``."""
    num, den = float(x).as_integer_ratio()  # den is a power of two <= 2**1074
    return num << (_UNIT_BITS - (den.bit_length() - 1))


def _exact_float_up(units: int) -> float:
    """``units · 2**-1074`` rounded up (a sum of charges is never reported below the exact sum)."""
    try:
        out = units / (1 << _UNIT_BITS)  # int / int: correctly rounded, maybe down
    except OverflowError:
        return math.inf if units > 0 else -math.inf
    if math.isfinite(out) and _exact_units(out) < units:
        out = math.nextafter(out, math.inf)
    return out


def _add_up(total: np.ndarray, inc: Any) -> np.ndarray:
    """Elementwise ``total + inc`` nudged one ulp up where ``inc`` > 0: never below the exact
    sum (round-to-nearest may drop up to half an ulp, or a tiny ``inc`` entirely)."""
    inc = np.asarray(inc, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        out = total + inc
        return np.where(inc > 0.0, np.nextafter(out, np.inf), out)


def charge_each(budgets: Sequence[tuple[Budget, str]], event: ev.Event, *,
                delta: float | None = None) -> list[Cost]:
    """Charge ``event`` to every budget (a project's, and an analyst's cap inside it); the
    costs, in order.

    When any refuses, all are tried first and the refusal raised is the one that misses the
    most (ε, then δ), with its budget's detail: the limit that binds, whose remaining the
    caller can then ask for (reporting the other one's would be refused again). Budgets that
    accepted keep their charge: on a refusal the caller discards them (the curator's ledger
    rolls its transaction back and drops its cached budgets).
    """
    costs: list[Cost] = []
    refused: list[tuple[BudgetExceeded, str]] = []
    for budget, detail in budgets:
        try:
            costs.append(budget.charge(event, delta=delta))
        except BudgetExceeded as exc:
            refused.append((exc, detail))
    if refused:
        worst, detail = max(refused, key=lambda r: (r[0].missing.epsilon, r[0].missing.delta))
        raise BudgetExceeded(requested=worst.requested, remaining=worst.remaining,
                             missing=worst.missing, accountant=worst.accountant, event=event,
                             detail="; ".join(d for d in (worst.detail, detail) if d))
    return costs
