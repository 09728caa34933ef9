"""The charged release: the one place where a query's cost is written before its rows are read.

Every answer the curator gives (a query, a release family) goes through :func:`charged_read`:

1. the caller has planned the query and dry-run its statement over empty tables (every type,
   cast and function error surfaces there, from the schema alone);
2. :meth:`Ledger.charge` checks the budget and durably records the plan's event in one
   transaction (a refusal here writes nothing: over budget, or an event the project's
   accountant cannot price, with the fix named);
3. only then are the rows read, and the noisy answer built from them.

A constant-work project (``Curator.create(..., constant_work=True)``) charges every event
composed with ``ApproxDP(0, δ_t)``, the failure event of its fixed-plan samplers
(:mod:`dpkit.noise.constant`), priced and written like the rest, and runs step 3 inside one
``noise.charge_scope()``, which keeps all of the release's requests within that δ.

:func:`after_charge` lets a caller see the ledger between steps 2 and 3 (the service reads
the budget an answer carries there: read after step 3, it would count every charge made
elsewhere while the rows were read, a clock of the scan; FINDINGS.md L6).

Anything that fails in step 3 keeps the charge and raises one fixed message that names the
ledger entry and nothing else: a refund, or an error text taken from the failure, would make
the *outcome* of the query depend on the rows (an error on D, an answer on D' = D plus one
person), which no noise covers. The compiled statements are total (see
:mod:`dpkit.engine.totality`), so this message marks a resource failure (memory, disk, a
killed connection), not a property of one row.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from dpkit import events as ev
from dpkit import noise
from dpkit.accounting import BudgetExceeded, UnsupportedEvent
from dpkit.engine.ledger import Entry, Ledger
from dpkit.engine.ledger_rows import HeadNotWritten
from dpkit.engine.spec import QueryError

__all__ = ["AFTER_CHARGE", "ChargedQueryError", "after_charge", "charged_event", "charged_read",
           "charged_share", "quote"]

_hooks = threading.local()  # this thread's after_charge hook: a charge runs in its caller's


@contextmanager
def after_charge(hook: Callable[[Entry], None]) -> Iterator[None]:
    """Within this block, ``hook(entry)`` runs in this thread right after each charge is
    recorded and before its rows are read. A hook that fails is ignored (the charge stands
    and the read goes on)."""
    before = getattr(_hooks, "hook", None)
    _hooks.hook = hook
    try:
        yield
    finally:
        _hooks.hook = before

T = TypeVar("T")
R = TypeVar("R")

AFTER_CHARGE = (
    "the {what} could not be completed after its cost was charged (ledger entry #{seq}); "
    "nothing was released and the charge stands (a refund would reveal something about the "
    "rows). Retry, or ask the data owner to check the machine's memory and disk"
)


class ChargedQueryError(QueryError):
    """A failure after the charge: the cost stays spent, nothing was released."""

    def __init__(self, message: str, entry_seq: int) -> None:
        super().__init__(message)
        self.entry_seq = entry_seq


@contextmanager
def _priced(accountant: str, what: str, advice: str) -> Iterator[None]:
    """The accountant's refusals as the analyst should read them (nothing is written)."""
    try:
        yield
    except UnsupportedEvent as exc:
        raise QueryError(
            f"the project's accountant ({accountant}) cannot pay for this {what}: {exc}. "
            f"{advice or 'Use Laplace noise, or a project with an approx accountant'}"
        ) from None
    except BudgetExceeded:
        raise
    except (ValueError, ArithmeticError) as exc:
        raise QueryError(
            f"the project's accountant ({accountant}) failed on this {what}'s event: "
            f"{str(exc).splitlines()[0]}. Nothing was charged"
        ) from None


def charged_event(ledger: Ledger, event: ev.Event) -> ev.Event:
    """``event`` as it is charged: with ``ApproxDP(0, δ_t)`` on a constant-work project."""
    setting = ledger.config.constant_work
    if setting is None:
        return event
    return ev.Composed((event, ev.ApproxDP(0.0, setting[0])))


def charged_share(ledger: Ledger, delta_share: float | None) -> float | None:
    """The δ share a release is charged under ``approx``: on a constant-work project its
    ``δ_t`` beside the share the release asked for, so that the release's own part (its ε,
    calibrated at that share) is priced at the share it was calibrated at."""
    setting = ledger.config.constant_work
    if setting is None or delta_share is None:
        return delta_share
    return delta_share + setting[0]


def quote(ledger: Ledger, event: ev.Event, *, analyst: str, delta_share: float | None,
          what: str = "query", check_only: bool = False, advice: str = "") -> Any:
    """What charging ``event`` would cost now (a ``Cost``; None with ``check_only``), writing
    nothing: :class:`BudgetExceeded` when it does not fit the project's or the analyst's budget,
    a :class:`QueryError` naming the fix when the accountant cannot price it."""
    event, delta_share = charged_event(ledger, event), charged_share(ledger, delta_share)
    with _priced(ledger.config.accountant, what, advice):
        if check_only:
            ledger.check(event, analyst=analyst, delta_share=delta_share)
            return None
        return ledger.cost(event, analyst=analyst, delta_share=delta_share)


def charged_read(ledger: Ledger, event: ev.Event, *, analyst: str, query: str,
                 delta_share: float | None, details: dict[str, Any] | None,
                 read: Callable[[], T], finish: Callable[[T, Entry], R],
                 what: str = "query", advice: str = "") -> R:
    """Charge ``event``, then ``read()`` the exact values and ``finish`` them into the answer.

    ``read`` touches private rows; ``finish`` adds noise and post-processes (it sees only the
    exact aggregates and the committed entry). A :class:`QueryError` raised by ``finish`` comes
    from post-processing the noisy values (HAVING, ORDER BY, expressions): its text depends on
    public things and noisy values only, so it is kept, with the charge named. Any other
    failure gives the fixed :data:`AFTER_CHARGE` message.
    """
    with _priced(ledger.config.accountant, what, advice):  # a refusal writes nothing
        try:
            entry = ledger.charge(charged_event(ledger, event), analyst=analyst, query=query,
                                  delta_share=charged_share(ledger, delta_share),
                                  details=details)
        except HeadNotWritten as exc:  # committed, then the head file failed: fail closed
            raise ChargedQueryError(AFTER_CHARGE.format(what=what, seq=exc.seq),
                                    exc.seq) from None
    # ---- from here on the charge is durable: whatever happens, it stays
    hook = getattr(_hooks, "hook", None)
    if hook is not None:
        with contextlib.suppress(Exception):
            hook(entry)
    try:
        exact = read()
    except Exception:
        raise ChargedQueryError(AFTER_CHARGE.format(what=what, seq=entry.seq),
                                entry.seq) from None
    try:
        with noise.charge_scope():
            return finish(exact, entry)
    except QueryError as exc:
        if isinstance(exc, ChargedQueryError):
            raise
        raise ChargedQueryError(f"{exc} (its cost stays charged: ledger entry #{entry.seq})",
                                entry.seq) from None
    except Exception:
        raise ChargedQueryError(AFTER_CHARGE.format(what=what, seq=entry.seq),
                                entry.seq) from None
