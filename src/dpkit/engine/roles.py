"""Who is acting: the owner, or the analyst a token names.

The owner opens a project without a token (they hold its files and the key that authenticates
the ledger); an analyst presents a token, ``dpkit_`` + 64 hex digits (256 bits from the OS
CSPRNG, through :func:`dpkit.noise.token_hex`), of which the ledger keeps only the SHA-256. The
name a charge goes to comes from the token alone (:func:`charged_analyst`). Also here: the noise
source a project is created with, and the seeded source an insecure project gets on reopening.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from dpkit import noise as _noise
from dpkit.engine.ledger import Ledger
from dpkit.engine.ledger_rows import Entry, Spend
from dpkit.engine.plan import check_epsilon
from dpkit.engine.results import BudgetStatus, HistoryItem

__all__ = ["OWNER", "TOKEN_ENV", "add_analyst", "analyst_caps", "charged_analyst",
           "check_analyst_name", "expiry_of", "headroom", "identify", "new_token",
           "project_source", "reopen_seed", "revoke_analyst", "set_analyst_caps", "token_expiry",
           "visible_budget"]

OWNER = "owner"  # the name the owner's own charges are recorded under
TOKEN_ENV = "DPKIT_TOKEN"
_TOKEN = re.compile(r"dpkit_[0-9a-f]{64}")
_ANALYST_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def new_token() -> tuple[str, str]:
    """A fresh analyst token and its SHA-256 (hex), the only form the ledger keeps."""
    token = "dpkit_" + _noise.token_hex(32)
    return token, hashlib.sha256(token.encode("ascii")).hexdigest()


def check_analyst_name(name: object) -> str:
    if not isinstance(name, str) or not _ANALYST_NAME.fullmatch(name) or name == OWNER:
        raise ValueError(
            f"analyst name {name!r}: use 1-64 letters, digits or _.@- (and not {OWNER!r})")
    return name


def charged_analyst(own: str, given: object) -> str:
    """The analyst a query is charged to: always the one the curator was opened as (by its
    token, or the owner). A caller-chosen name (the removed ``analyst=``) is refused: it would
    let anyone spend another analyst's budget, or escape their own cap."""
    if given is not None:
        raise TypeError(
            f"analyst= was removed: charges go to the analyst whose token opened the project "
            f"(now {own!r}). Open it as that analyst: dp.Curator.open(path, token=...), or set "
            f"DPKIT_TOKEN (the owner makes tokens with cur.add_analyst / `dpkit analyst add`)"
        )
    return own


def reopen_seed(seed: int, rows: int) -> int:
    """The seed of an insecure project's source after reopening: a function of the recorded
    seed and the ledger's length (reproducible, never the secure source in disguise)."""
    digest = hashlib.sha256(f"dpkit-reopen:{seed}:{rows}".encode("ascii")).hexdigest()
    return int(digest[:15], 16)


def constant_work_source(source: _noise.Source | None,
                         ledger: Ledger) -> _noise.Source | None:
    """The project's source, on fixed plans (``dpkit.noise.ConstantWork``) when the project
    was created with ``constant_work=True`` (recorded in the ledger: reopening keeps it)."""
    setting = ledger.config.constant_work
    if setting is None:
        return source
    return _noise.ConstantWork(source, bits=setting[1])


def project_source(source: Any) -> tuple[_noise.Source | None, int | None]:
    """(source to use now, seed to record) for ``Curator.create(source=...)``."""
    if source is None or isinstance(source, _noise.SecureSource):
        return None, None
    if isinstance(source, _noise.SeededSource):
        return source, source.seed
    raise TypeError(
        f"source= takes dp.noise.secure() (the default) or dp.noise.seeded(seed) for an "
        f"INSECURE test project (got {source!r})"
    )


def identify(ledger: Ledger, token: str) -> str:
    """The analyst a token names, or a refusal that says why (malformed, unknown, revoked)."""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token.strip()):
        raise ValueError(
            "malformed analyst token: expected 'dpkit_' and 64 hex digits, as printed once by "
            "`dpkit analyst add` / cur.add_analyst(...); check DPKIT_TOKEN or --token"
        )
    name = ledger.analyst_for_token(token.strip())
    if name is None:
        raise PermissionError(
            "this analyst token is unknown to the project, or was revoked: ask the project's "
            "owner for a (new) token (`dpkit analyst add`)"
        )
    ends = token_expiry(ledger, name)
    if ends is not None and _dt.datetime.now(_dt.UTC) >= ends:
        raise PermissionError(
            f"this analyst token expired at {ends.isoformat(timespec='seconds')}: ask the "
            f"project's owner for a new one (`dpkit analyst add ... --expires-days N`)"
        )
    return name


def token_expiry(ledger: Ledger, name: str) -> _dt.datetime | None:
    """When analyst ``name``'s token stops opening the project (None: never), as recorded by
    :func:`add_analyst`. Checked when a token is presented (each request of the service);
    a curator opened before the expiry stays open until it is closed."""
    for e in reversed(ledger.entries("analyst")):
        if e.payload.get("analyst") == name and "token_sha256" in e.payload:
            raw = e.payload.get("expires")
            return None if raw is None else _dt.datetime.fromisoformat(str(raw))
    return None


def expiry_of(expires_days: float | None) -> str | None:
    """The ISO-8601 UTC time ``expires_days`` from now (None: no expiry), checked."""
    if expires_days is None:
        return None
    if isinstance(expires_days, bool) or not isinstance(expires_days, (int, float)) or not (
            math.isfinite(expires_days) and 0 < expires_days <= 36_600):
        raise ValueError(f"expires_days must be a number of days in (0, 36600] "
                         f"(got {expires_days!r})")
    ends = _dt.datetime.now(_dt.UTC) + _dt.timedelta(days=float(expires_days))
    return ends.isoformat(timespec="seconds")


def visible_budget(ledger: Ledger, acting: str, *, owner: bool,
                   analyst: str | None = None) -> BudgetStatus:
    """The budget as the caller may see it: project-wide or for one ``analyst`` (the owner),
    or the caller's own (an analyst sees only its own charges and cap).

    An analyst's ``remaining`` is what its next charge may really use: the smaller of what its
    cap leaves and what the project leaves (``Ledger.charge`` checks both), whoever looks. Each
    history item carries its analyst's own running spend (their charges composed under the
    project's accountant), so a report or a plot per analyst needs no second source of truth.
    """
    if not owner:
        if analyst not in (None, acting):
            raise PermissionError(f"analyst {acting!r} may see only its own budget, "
                                  f"not {analyst!r}")
        analyst = acting
    spend = ledger.spend(analyst)
    project = ledger.spend()
    remaining, delta_remaining = spend.remaining, spend.delta_remaining
    rho_remaining = spend.rho_remaining
    if analyst is not None:
        remaining = min(remaining, project.remaining)
        delta_remaining = min(delta_remaining, project.delta_remaining)
        if rho_remaining is not None and project.rho_remaining is not None:
            rho_remaining = min(rho_remaining, project.rho_remaining)
    caps = ledger.analyst_budgets()
    if not owner:
        caps = {k: v for k, v in caps.items() if k == acting}
    charges = [e for e in ledger.entries("charge") if analyst is None or e.analyst == analyst]
    running = analyst_running_spend(ledger, charges)
    # a charge's note (what it released besides its answer) is a later row naming it
    notes = {int(n.payload["charge"]): n.payload for n in ledger.entries("note")}
    history = [
        HistoryItem(seq=e.seq, time=e.time, analyst=e.analyst, query=e.query, event=e.event,
                    epsilon=float(e.view.get("epsilon_cost", 0.0)),
                    delta=float(e.view.get("delta_cost", 0.0)),
                    epsilon_spent=float(e.view.get("epsilon_spent", 0.0)),
                    analyst_spent=running[i], details=e.view.get("details"),
                    note=notes.get(e.seq))
        for i, e in enumerate(charges)
    ]
    names = sorted({e.analyst for e in charges}
                   | (set(ledger.analysts()) if analyst is None and owner else set()))
    return BudgetStatus(
        epsilon=spend.epsilon, delta=spend.delta, accountant=spend.accountant,
        spent=spend.spent, remaining=remaining, delta_spent=spend.delta_spent,
        delta_remaining=delta_remaining, history=history, head=ledger.head(),
        analyst=analyst, rho_spent=spend.rho_spent, rho_remaining=rho_remaining,
        analysts=caps, project_remaining=project.remaining,
        per_analyst={n: analyst_summary(ledger, n, project) for n in names},
        timing_delta=(None if ledger.config.constant_work is None
                      else float(ledger.config.constant_work[0])),
    )


def headroom(ledger: Ledger, analyst: str | None = None) -> float:
    """The epsilon the next charge of ``analyst`` may use: what its cap leaves, bounded by
    what the project leaves (``Ledger.charge`` checks both); the project's for None."""
    project = float(ledger.spend().remaining)
    if analyst is None or analyst not in ledger.analyst_budgets():
        return project
    return min(project, float(ledger.spend(analyst).remaining))


def analyst_summary(ledger: Ledger, name: str, project: Spend) -> dict[str, float | None]:
    """``{"cap", "spent", "remaining"}`` of one analyst: its own charges composed, and what
    its next charge may use (its cap's headroom, bounded by the project's)."""
    own = ledger.spend(name)
    return {"cap": ledger.analyst_budgets().get(name), "spent": own.spent,
            "remaining": min(own.remaining, project.remaining)}


def analyst_running_spend(ledger: Ledger, charges: Sequence[Entry]) -> list[float]:
    """Each charge's analyst's own spend after it: their charges replayed, in order, into a
    fresh budget of the project's accountant (the same composition ``Ledger.spend`` does, one
    charge at a time). NaN where the accountant refuses to replay a row (a history written by
    an older accountant), and, under ``pld``, before an analyst's latest charge (each point is
    a PLD composition, ~0.1 s: the report would grow slow with the ledger); the totals
    elsewhere never depend on this."""
    if ledger.config.accountant == "pld":
        return _pld_running(ledger, charges)
    if ledger.config.accountant in ("pure", "approx"):
        # the accountant's rule is the sum of the recorded costs (Budget.from_dict restores
        # them as recorded): summed here, not recomputed (an (eps, delta) conversion per
        # Gaussian row doubled the report's time)
        # exact running sums (Fraction holds every float exactly), rounded once per row
        sums: dict[str, Fraction] = {}
        out_sum: list[float] = []
        for e in charges:
            total = sums.get(e.analyst, Fraction(0)) + Fraction(float(e.view.get(
                "epsilon_cost", 0.0)))
            sums[e.analyst] = total
            out_sum.append(float(total))
        return out_sum
    from dpkit.accounting import Budget

    cfg = ledger.config
    budgets: dict[str, Any] = {}
    out: list[float] = []
    for e in charges:
        b = budgets.get(e.analyst)
        if b is None:
            b = budgets[e.analyst] = Budget.from_dict(cfg.budget_dict())
        share = e.view.get("delta_share") if cfg.accountant == "approx" else None
        try:
            b.charge(e.event, delta=share)
            out.append(float(b.spent.epsilon))
        except ValueError:  # BudgetExceeded, UnsupportedEvent: both ValueErrors
            out.append(math.nan)
    return out


def _pld_running(ledger: Ledger, charges: Sequence[Entry]) -> list[float]:
    """Under PLD: each analyst's total at its latest charge (``Ledger.spend``, which the
    report composes anyway), NaN before it."""
    last = {e.analyst: i for i, e in enumerate(charges)}
    out = [math.nan] * len(charges)
    for name, i in last.items():
        out[i] = float(ledger.spend(name).spent)
    return out


def add_analyst(ledger: Ledger, owner: str, name: str, epsilon: float | None,
                expires_days: float | None = None, delta: float | None = None) -> str:
    """Record analyst ``name`` (with its own caps, see :func:`analyst_caps`; a token that
    expires ``expires_days`` from now, or never) and return its new token; the caller has
    checked that the owner acts."""
    check_analyst_name(name)
    if name in ledger.analysts():
        raise ValueError(f"analyst {name!r} exists already (names are never reused, so "
                         f"the history stays theirs); choose another name")
    caps = analyst_caps(ledger, epsilon, delta)
    expires = expiry_of(expires_days)
    token, digest = new_token()
    payload: dict[str, Any] = {"analyst": name, **caps, "token_sha256": digest}
    if expires is not None:  # only when asked: older rows and readers stay as they were
        payload["expires"] = expires
    ledger.record("analyst", payload, analyst=owner,
                  query=f"ADD ANALYST {name} ({_caps_text(caps)}"
                        + (f", expires {expires})" if expires else ")"))
    return token


def set_analyst_caps(ledger: Ledger, owner: str, name: str, epsilon: float | None,
                     delta: float | None = None) -> None:
    """Record ``name``'s new own caps (:func:`analyst_caps`; epsilon None removes both).

    An unknown name is refused, nothing recorded: a mistyped name was written as a cap of
    nobody, and the analyst meant kept the old one."""
    known = ledger.analysts()
    if name not in known:
        raise ValueError(f"no analyst {name!r}; analysts: {sorted(known)} (add one with "
                         f"dpkit analyst add PROJECT NAME --epsilon E)")
    caps = analyst_caps(ledger, epsilon, delta)
    ledger.record("analyst", {"analyst": name, **caps}, analyst=owner,
                  query=f"SET BUDGET {name} = {_caps_text(caps)}")


def analyst_caps(ledger: Ledger, epsilon: float | None,
                 delta: float | None) -> dict[str, float | None]:
    """An analyst's own caps as recorded: ``epsilon`` (None: only the project's budget) and,
    beside it, a δ: ``delta`` as given (at most the project's), or by default, on an 'approx'
    project, the project's δ in the same proportion as the ε cap (an ε cap alone left the
    project's whole δ to one analyst: FINDINGS.md F9). Other accountants convert the project's
    δ into their own currency, so they take a δ cap only when one is given."""
    cfg = ledger.config
    if epsilon is None:
        if delta is not None:
            raise ValueError("a delta cap goes with an epsilon cap: give epsilon= too")
        return {"epsilon": None}
    check_epsilon(epsilon, "epsilon")
    if delta is not None:
        d = float(delta)
        if not (math.isfinite(d) and 0.0 <= d <= cfg.delta):
            raise ValueError(f"an analyst's delta cap must lie in [0, {cfg.delta:g}] (the "
                             f"project's delta) (got {delta!r})")
        return {"epsilon": float(epsilon), "delta": d}
    if cfg.accountant == "approx" and cfg.delta > 0:
        return {"epsilon": float(epsilon),
                "delta": cfg.delta * min(1.0, float(epsilon) / cfg.epsilon)}
    return {"epsilon": float(epsilon)}


def _caps_text(caps: dict[str, float | None]) -> str:
    d = caps.get("delta")
    return f"epsilon {caps['epsilon']}" + (f", delta {d:.3g}" if d is not None else "")


def revoke_analyst(ledger: Ledger, owner: str, name: str) -> None:
    """Record that ``name``'s token opens nothing from now on (its history stays)."""
    info = ledger.analysts().get(name)
    if info is None or not info["active"]:
        active = sorted(n for n, i in ledger.analysts().items() if i["active"])
        raise ValueError(f"no active analyst {name!r}; active ones: {active}")
    ledger.record("analyst", {"analyst": name, "revoked": True}, analyst=owner,
                  query=f"REVOKE ANALYST {name}")
