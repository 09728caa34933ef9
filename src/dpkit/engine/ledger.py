"""The curator's ledger: a durable, append-only, hash-chained record of every privacy charge.

The ledger is a SQLite database (WAL mode, ``synchronous=FULL``) inside the project folder. It is
the single source of truth for the budget: the configuration (total budget, accountant), the
registered tables, per-analyst budgets and every charge are rows of one table, ``ledger``, each
row carrying the SHA-256 of the previous row's hash and its own canonical JSON. The chain is
verified in full whenever a ledger is opened, and incrementally inside every charge; a changed,
inserted or deleted row is reported with the sequence number of the first row that no longer
matches.

**Check and charge** happen in one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock): the
history is read, replayed into a :class:`dpkit.accounting.Budget` (the project's accountant:
``pure``, ``approx``, ``zcdp``, ``rdp`` or ``pld``; composition is never re-implemented here),
the new event is charged to it, and the charge is either refused with
:class:`dpkit.accounting.BudgetExceeded` (nothing is written) or appended and committed with
``synchronous=FULL`` before the caller computes any noisy value (DESIGN invariant 3).
Concurrent processes therefore serialise on the write lock and can never overspend; a crash
after the commit loses budget, never privacy.

What the chain cannot show: removal of the *newest* rows leaves a shorter, valid chain. Keep the
head (:meth:`Ledger.head`) somewhere else if that matters (``dpkit budget --json`` prints it);
:meth:`Ledger.verify` accepts an expected head. SQLite triggers refuse UPDATE and DELETE on the
ledger table, so only a deliberate edit of the file (not a bug) can try either.

Row kinds:

==============  ==================================================================================
``genesis``     the project: budget (epsilon, delta, accountant), format version, project id
``table``       a table registered or replaced by the data owner (its metadata as the payload)
``analyst``     a per-analyst budget set by the owner
``charge``      a query: analyst, query text, the event JSON, and the accountant's view after it
==============  ==================================================================================
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpkit import events as ev

__all__ = [
    "ACCOUNTANTS",
    "Entry",
    "Ledger",
    "LedgerConfig",
    "LedgerError",
    "LedgerTampered",
    "Spend",
]

FORMAT = 1
GENESIS_PREV = "0" * 64
ACCOUNTANTS: tuple[str, ...] = ("pure", "approx", "zcdp", "rdp", "pld")


class LedgerError(RuntimeError):
    """The ledger cannot be used (missing, wrong format, locked for too long)."""


class LedgerTampered(LedgerError):  # noqa: N818 - reads as a sentence: "ledger tampered"
    """The hash chain does not verify: a row was changed, inserted or removed after writing."""

    def __init__(self, seq: int, reason: str, path: Path | str) -> None:
        self.seq = seq
        self.reason = reason
        super().__init__(
            f"ledger {path} fails verification at row {seq}: {reason}. The ledger was modified "
            f"after it was written; the budget cannot be trusted. Restore the project folder "
            f"from a backup (or inspect it with sqlite3) before answering more queries."
        )


@dataclass(frozen=True)
class LedgerConfig:
    """The project's total budget and the accountant that composes charges."""

    epsilon: float
    delta: float
    accountant: str
    project_id: str = ""
    neighboring: str = "add_remove"
    orders: tuple[float, ...] | None = None

    def budget_dict(self, epsilon: float | None = None) -> dict[str, Any]:
        """The :meth:`dpkit.accounting.Budget.from_dict` form, without charges."""
        return {
            "version": 1,
            "epsilon": self.epsilon if epsilon is None else epsilon,
            "delta": self.delta,
            "accountant": self.accountant,
            "neighboring": self.neighboring,
            "orders": list(self.orders) if self.orders is not None else None,
            "charges": [],
        }


@dataclass(frozen=True)
class Entry:
    """One ledger row, as stored (``event`` parsed; ``view`` and ``payload`` decoded)."""

    seq: int
    kind: str
    analyst: str
    time: str
    query: str
    event: ev.Event
    view: dict[str, Any]
    payload: dict[str, Any]
    prev_hash: str
    hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "analyst": self.analyst,
            "time": self.time,
            "query": self.query,
            "event": self.event.to_dict(),
            "view": self.view,
            "payload": self.payload,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


@dataclass(frozen=True)
class Spend:
    """Spent and remaining privacy for the project or one analyst (accountant's view)."""

    epsilon: float  # the total epsilon budget
    delta: float
    spent: float  # epsilon spent under the accountant
    remaining: float  # epsilon remaining
    delta_spent: float
    delta_remaining: float
    charges: int
    accountant: str
    analyst: str | None = None
    rho_spent: float | None = None
    rho_remaining: float | None = None


def _finite(x: float) -> float:
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"refusing to record a non-finite cost ({x!r})")
    return x


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces, floats by repr; NaN/inf refused."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def row_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    """``sha256(prev_hash || canonical_json(fields))`` as hex."""
    h = hashlib.sha256()
    h.update(prev_hash.encode("ascii"))
    h.update(canonical_json(fields).encode("utf-8"))
    return h.hexdigest()


_COLUMNS = ("seq", "kind", "analyst", "time", "query", "event", "view", "payload")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    seq       INTEGER PRIMARY KEY,
    kind      TEXT NOT NULL,
    analyst   TEXT NOT NULL,
    time      TEXT NOT NULL,
    query     TEXT NOT NULL,
    event     TEXT NOT NULL,
    view      TEXT NOT NULL,
    payload   TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS ledger_no_update BEFORE UPDATE ON ledger
BEGIN SELECT RAISE(ABORT, 'the dpkit ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS ledger_no_delete BEFORE DELETE ON ledger
BEGIN SELECT RAISE(ABORT, 'the dpkit ledger is append-only'); END;
"""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Ledger:
    """A project's ledger file. Open with :meth:`create` or :meth:`open`; both verify the chain.

    Thread-safe within a process (one lock around the connection); process-safe through
    SQLite's locking (``BEGIN IMMEDIATE`` for every write).
    """

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._lock = threading.RLock()
        self._entries: list[Entry] = []
        # indices over _entries, kept in step with it (every query reads them: a scan of the
        # whole history per query would grow with the project's age)
        self._by_kind: dict[str, list[Entry]] = {}
        self._charges_of: dict[str, list[Entry]] = {}  # analyst -> their charges
        self._analyst_caps: dict[str, float] = {}
        self._config: LedgerConfig | None = None
        self._budget_cache: dict[str | None, tuple[int, float, Any]] = {}

    # ------------------------------------------------------------------ opening

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(str(path), timeout=120.0, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=120000")
        return conn

    @classmethod
    def create(
        cls,
        path: Path | str,
        *,
        epsilon: float,
        delta: float,
        accountant: str,
        neighboring: str = "add_remove",
        orders: Sequence[float] | None = None,
        analyst: str = "owner",
    ) -> Ledger:
        """Create a new ledger holding the genesis row (the budget). Refuses an existing file.

        The budget is validated by :class:`dpkit.accounting.Budget` itself (same rules)."""
        from dpkit.accounting import Budget

        path = Path(path)
        if path.exists():
            raise FileExistsError(f"a ledger already exists at {path}; open it instead")
        probe = Budget(epsilon=epsilon, delta=delta, accountant=accountant,
                       neighboring=neighboring, orders=orders)
        conn = cls._connect(path)
        conn.executescript(_SCHEMA)
        led = cls(path, conn)
        payload = {
            "format": FORMAT,
            "project_id": uuid.uuid4().hex,
            "budget": {"epsilon": probe.epsilon, "delta": probe.delta,
                       "accountant": probe.accountant, "neighboring": probe.neighboring,
                       "orders": list(probe.orders) if probe.orders is not None else None},
        }
        with led._write() as cur:
            rows = cur.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]
            if rows:
                raise FileExistsError(f"a ledger already exists at {path}; open it instead")
            led._append(cur, kind="genesis", analyst=analyst, query="CREATE PROJECT",
                        event=ev.NoOp(), view={}, payload=payload)
        led._sync()
        led._load_config()
        return led

    @classmethod
    def open(cls, path: Path | str, *, expected_head: tuple[int, str] | None = None) -> Ledger:
        """Open and fully verify an existing ledger (:class:`LedgerTampered` on any mismatch)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no ledger at {path}: create the project first")
        conn = cls._connect(path)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "ledger" not in tables:
            conn.close()
            raise LedgerError(f"{path} is not a dpkit ledger (no 'ledger' table)")
        led = cls(path, conn)
        with led._lock:
            led._sync()
        if expected_head is not None:
            led.verify(expected_head=expected_head)
        return led

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ------------------------------------------------------------------ reading and verifying

    @property
    def config(self) -> LedgerConfig:
        assert self._config is not None
        return self._config

    def entries(self, kind: str | None = None) -> list[Entry]:
        """All rows (after bringing the in-memory copy up to date), optionally of one kind."""
        with self._lock:
            self._sync()
            return list(self._entries if kind is None else self._by_kind.get(kind, ()))

    def _index(self, new: Sequence[Entry]) -> None:
        """Add rows just appended to ``_entries`` to the indices."""
        for e in new:
            self._by_kind.setdefault(e.kind, []).append(e)
            if e.kind == "charge":
                self._charges_of.setdefault(e.analyst, []).append(e)
            elif e.kind == "analyst":
                name = str(e.payload["analyst"])
                eps = e.payload.get("epsilon")
                if eps is None:
                    self._analyst_caps.pop(name, None)
                else:
                    self._analyst_caps[name] = float(eps)

    def _reindex(self) -> None:
        self._by_kind, self._charges_of, self._analyst_caps = {}, {}, {}
        self._index(self._entries)

    def head(self) -> tuple[int, str]:
        """``(seq, hash)`` of the newest row: keep it elsewhere to detect tail truncation."""
        with self._lock:
            self._sync()
            last = self._entries[-1]
            return last.seq, last.hash

    def verify(self, *, expected_head: tuple[int, str] | None = None) -> int:
        """Re-read and re-verify the whole chain from disk; return the number of rows.

        ``expected_head`` (an earlier :meth:`head`) additionally proves that no row up to it
        was removed: the row with that seq must still carry that hash.
        """
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, kind, analyst, time, query, event, view, payload, prev_hash, hash "
                "FROM ledger ORDER BY seq"
            ).fetchall()
            entries = self._verify_rows(rows, start_seq=1, prev=GENESIS_PREV)
            if expected_head is not None:
                seq, digest = expected_head
                if seq > len(entries):
                    raise LedgerTampered(
                        len(entries) + 1,
                        f"rows after {len(entries)} are missing (expected a head at row {seq})",
                        self.path,
                    )
                if entries[seq - 1].hash != digest:
                    raise LedgerTampered(seq, "its hash differs from the recorded head",
                                         self.path)
            self._entries = entries
            self._reindex()
            self._budget_cache.clear()
            self._load_config()
            return len(entries)

    def _verify_rows(self, rows: Sequence[tuple[Any, ...]], *, start_seq: int,
                     prev: str) -> list[Entry]:
        out: list[Entry] = []
        expected = start_seq
        for row in rows:
            seq, kind, analyst, when, query, event_text, view, payload, prev_hash, digest = row
            if seq != expected:
                raise LedgerTampered(
                    expected, f"row {expected} is missing (next row found is {seq})", self.path
                )
            if prev_hash != prev:
                raise LedgerTampered(seq, "its prev_hash does not match the previous row's hash",
                                     self.path)
            fields = dict(zip(_COLUMNS, (seq, kind, analyst, when, query, event_text, view,
                                         payload), strict=True))
            if row_hash(prev_hash, fields) != digest:
                raise LedgerTampered(seq, "its content does not match its hash", self.path)
            try:
                event = ev.from_json(event_text)
                view_d = json.loads(view)
                payload_d = json.loads(payload)
            except ValueError as exc:  # hash matched, so this is a format problem, not tampering
                raise LedgerError(f"ledger row {seq} cannot be decoded: {exc}") from None
            if seq == 1 and kind != "genesis":
                raise LedgerTampered(1, "the first row is not the project's genesis row",
                                     self.path)
            out.append(Entry(seq, kind, analyst, when, query, event, view_d, payload_d,
                             prev_hash, digest))
            prev = digest
            expected += 1
        if start_seq == 1 and not out:
            raise LedgerTampered(1, "the ledger is empty (the genesis row is missing)", self.path)
        return out

    def _sync(self) -> None:
        """Append rows written since the last read (by any process), verifying the chain."""
        last_seq = self._entries[-1].seq if self._entries else 0
        prev = self._entries[-1].hash if self._entries else GENESIS_PREV
        rows = self._conn.execute(
            "SELECT seq, kind, analyst, time, query, event, view, payload, prev_hash, hash "
            "FROM ledger WHERE seq > ? ORDER BY seq", (last_seq,)
        ).fetchall()
        if rows:
            new = self._verify_rows(rows, start_seq=last_seq + 1, prev=prev)
            self._entries.extend(new)
            self._index(new)
            if self._config is None:
                self._load_config()
        elif not self._entries:
            raise LedgerTampered(1, "the ledger is empty (the genesis row is missing)", self.path)

    def _load_config(self) -> None:
        genesis = self._entries[0]
        budget = genesis.payload.get("budget", {})
        if genesis.payload.get("format") != FORMAT:
            raise LedgerError(
                f"ledger {self.path} has format {genesis.payload.get('format')!r}; this dpkit "
                f"reads format {FORMAT}"
            )
        orders = budget.get("orders")
        self._config = LedgerConfig(
            epsilon=float(budget["epsilon"]),
            delta=float(budget["delta"]),
            accountant=str(budget["accountant"]),
            project_id=str(genesis.payload.get("project_id", "")),
            neighboring=str(budget.get("neighboring", "add_remove")),
            orders=tuple(float(a) for a in orders) if orders is not None else None,
        )

    # ------------------------------------------------------------------ budgets

    def analyst_budgets(self) -> dict[str, float]:
        """Per-analyst epsilon budgets (the latest ``analyst`` row for each name wins)."""
        with self._lock:
            self._sync()
            return dict(self._analyst_caps)

    def _charges(self, analyst: str | None) -> list[Entry]:
        """The charge rows (all, or one analyst's), oldest first; do not modify."""
        if analyst is None:
            return self._by_kind.get("charge", [])
        return self._charges_of.get(analyst, [])

    def _budget(self, analyst: str | None) -> Any:
        """The history replayed into a :class:`dpkit.accounting.Budget`, kept up to date.

        Built once with ``Budget.from_dict`` (costs restored as recorded, so a later change in
        an accountant never rewrites what was charged), then advanced charge by charge as new
        rows appear; any surprise rebuilds it from the rows.
        """
        from dpkit.accounting import Budget

        charges = self._charges(analyst)
        last = charges[-1].seq if charges else 0
        cfg = self.config
        total = cfg.epsilon
        if analyst is not None:
            total = min(self.analyst_budgets().get(analyst, cfg.epsilon), cfg.epsilon)
        hit = self._budget_cache.get(analyst)
        if hit is not None and hit[1] == total:
            seq, _, budget = hit
            if seq == last:
                return budget
            if seq < last:
                newer = len(charges)  # the rows after seq: walk back from the newest
                while newer > 0 and charges[newer - 1].seq > seq:
                    newer -= 1
                try:
                    for e in charges[newer:]:
                        budget.charge(e.event, delta=self._share(e.view.get("delta_share")))
                except Exception:  # fall back to a full rebuild from the recorded costs
                    pass
                else:
                    self._budget_cache[analyst] = (last, total, budget)
                    return budget
        state = cfg.budget_dict(epsilon=total)
        state["charges"] = [
            {"event": e.event.to_dict(), "delta": e.view.get("delta_share"),
             "epsilon_cost": e.view["epsilon_cost"], "delta_cost": e.view["delta_cost"],
             "rho_cost": e.view.get("rho_cost")}
            for e in charges
        ]
        budget = Budget.from_dict(state)
        self._budget_cache[analyst] = (last, total, budget)
        return budget

    def _share(self, delta_share: float | None) -> float | None:
        return delta_share if self.config.accountant == "approx" else None

    def spend(self, analyst: str | None = None) -> Spend:
        """Spent and remaining privacy for the project (``analyst=None``) or one analyst."""
        with self._lock:
            self._sync()
            b = self._budget(analyst)
            spent, remaining = b.spent, b.remaining
            return Spend(
                epsilon=b.epsilon,
                delta=b.delta,
                spent=spent.epsilon,
                remaining=remaining.epsilon,
                delta_spent=spent.delta,
                delta_remaining=remaining.delta,
                charges=len(self._charges(analyst)),
                accountant=b.accountant,
                analyst=analyst,
                rho_spent=spent.rho,
                rho_remaining=remaining.rho,
            )

    def cost(self, event: ev.Event, *, analyst: str | None = None,
             delta_share: float | None = None) -> Any:
        """What charging ``event`` now would cost (a ``Cost``), without writing anything.

        Raises :class:`dpkit.accounting.BudgetExceeded` exactly when :meth:`charge` would.
        """
        with self._lock:
            self._sync()
            self.check(event, analyst=analyst, delta_share=delta_share)
            return self._budget(None).cost(event, delta=self._share(delta_share))

    def check(self, event: ev.Event, *, analyst: str | None = None,
              delta_share: float | None = None) -> None:
        """Raise :class:`dpkit.accounting.BudgetExceeded` if ``event`` does not fit now."""
        with self._lock:
            self._sync()
            self._check(event, analyst, delta_share)

    def _check(self, event: ev.Event, analyst: str | None, delta_share: float | None) -> None:
        from dpkit.accounting import Budget

        share = self._share(delta_share)
        project = self._budget(None)
        if not project.can_afford(event, delta=share):
            Budget.from_dict(project.to_dict()).charge(event, delta=share)  # raises the details
            raise AssertionError("unreachable: can_afford and charge disagree")  # pragma: no cover
        if analyst is not None and analyst in self.analyst_budgets():
            mine = self._budget(analyst)
            if not mine.can_afford(event, delta=share):
                _charge_analyst(Budget.from_dict(mine.to_dict()), event, share, analyst)

    # ------------------------------------------------------------------ writing

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Cursor]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` (rollback on any exception), under the thread lock."""
        with self._lock:
            cur = self._conn.cursor()
            deadline = time.monotonic() + 300.0
            while True:
                try:
                    cur.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as exc:  # busy beyond busy_timeout
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise LedgerError(f"cannot lock the ledger {self.path}: {exc}") from exc
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                self._entries_rollback()
                raise
            else:
                cur.execute("COMMIT")

    def _entries_rollback(self) -> None:
        # Rows appended to the in-memory copy inside a rolled-back transaction must go.
        n = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM ledger").fetchone()[0]
        self._entries = [e for e in self._entries if e.seq <= n]
        self._reindex()
        self._budget_cache.clear()

    def _append(self, cur: sqlite3.Cursor, *, kind: str, analyst: str, query: str,
                event: ev.Event, view: dict[str, Any], payload: dict[str, Any]) -> Entry:
        prev = self._entries[-1].hash if self._entries else GENESIS_PREV
        seq = (self._entries[-1].seq if self._entries else 0) + 1
        now = _now()
        fields = {
            "seq": seq,
            "kind": kind,
            "analyst": analyst,
            "time": now,
            "query": query,
            "event": event.to_json(),
            "view": canonical_json(view),
            "payload": canonical_json(payload),
        }
        digest = row_hash(prev, fields)
        cur.execute(
            "INSERT INTO ledger (seq, kind, analyst, time, query, event, view, payload, "
            "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*[fields[c] for c in _COLUMNS], prev, digest),
        )
        entry = Entry(seq, kind, analyst, now, query, event, view, payload, prev, digest)
        self._entries.append(entry)
        self._index([entry])
        return entry

    def charge(self, event: ev.Event, *, analyst: str, query: str,
               delta_share: float | None = None,
               details: dict[str, Any] | None = None) -> Entry:
        """Check the budget and append a charge, durably, in one transaction.

        Raises :class:`dpkit.accounting.BudgetExceeded` (nothing written) when the project's
        budget, or the analyst's, cannot pay for ``event`` under the project's accountant.
        ``delta_share`` is the δ booked for events with Gaussian steps under ``approx``.
        Returns the committed entry; only after this returns may the caller compute noise.
        """

        if not isinstance(event, ev.Event):
            raise TypeError(f"charge needs a dpkit event (got {event!r})")
        with self._write() as cur:
            self._sync()
            share = self._share(delta_share)
            # Charge the cached budgets: Budget.charge checks and records atomically and records
            # nothing when it refuses. Afterwards they describe the ledger with this row; if
            # anything below fails, _write rolls back and drops them.
            after = self._budget(None)
            own = analyst is not None and analyst in self.analyst_budgets()
            mine = self._budget(analyst) if own else None
            cost = after.charge(event, delta=share)
            if mine is not None:
                assert analyst is not None
                _charge_analyst(mine, event, share, analyst)
            spent = after.spent
            view: dict[str, Any] = {
                "accountant": self.config.accountant,
                "delta_share": delta_share if self.config.accountant == "approx" else None,
                "epsilon_cost": _finite(cost.epsilon),
                "delta_cost": _finite(cost.delta),
                "rho_cost": None if cost.rho is None else _finite(cost.rho),
                "epsilon_spent": _finite(spent.epsilon),
                "delta_spent": _finite(spent.delta),
                "epsilon_budget": self.config.epsilon,
            }
            if details:
                view["details"] = details
            entry = self._append(cur, kind="charge", analyst=analyst, query=query, event=event,
                                 view=view, payload={})
            hit = self._budget_cache.get(None)
            if hit is not None:
                self._budget_cache[None] = (entry.seq, hit[1], after)
            if mine is not None and analyst in self._budget_cache:
                self._budget_cache[analyst] = (entry.seq, self._budget_cache[analyst][1], mine)
            # other analysts' caches stay valid: the new row is not theirs
        return entry

    def record(self, kind: str, payload: dict[str, Any], *, analyst: str = "owner",
               query: str = "") -> Entry:
        """Append a configuration row (``table`` or ``analyst``); spends nothing."""
        if kind not in {"table", "analyst"}:
            raise ValueError(f"record() writes 'table' or 'analyst' rows (got {kind!r})")
        with self._write() as cur:
            self._sync()
            return self._append(cur, kind=kind, analyst=analyst, query=query or kind.upper(),
                                event=ev.NoOp(), view={}, payload=payload)

    def pid_note(self) -> str:  # pragma: no cover - debugging aid
        return f"ledger {self.path} (pid {os.getpid()})"


def _charge_analyst(budget: Any, event: ev.Event, share: float | None, analyst: str) -> None:
    """Charge ``event`` to an analyst's own :class:`~dpkit.accounting.Budget`; a refusal
    names the analyst's budget."""
    from dpkit.accounting import BudgetExceeded

    try:
        budget.charge(event, delta=share)
    except BudgetExceeded as exc:
        raise BudgetExceeded(
            requested=exc.requested, remaining=exc.remaining, missing=exc.missing,
            accountant=exc.accountant, event=event,
            detail=f"analyst {analyst!r} has a budget of epsilon {budget.epsilon:g}",
        ) from None
