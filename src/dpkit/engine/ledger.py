"""The curator's ledger: a durable, append-only, hash-chained record of every privacy charge.

The ledger is a SQLite database (WAL mode, ``synchronous=FULL``) inside the project folder. It is
the single source of truth for the budget: the configuration (total budget, accountant), the
registered tables, per-analyst budgets and every charge are rows of one table, ``ledger``, each
row carrying HMAC-SHA256, under the project's key, of the previous row's hash and its own
canonical JSON. The key (32 bytes from the OS CSPRNG) lives in ``<ledger>.key`` beside the
ledger, mode 0600: it is the owner's credential, and without it no one can write a row that
verifies. The chain is verified in full whenever a ledger is opened, and incrementally inside
every charge; a changed, inserted, reordered or deleted row is reported with the sequence number
of the first row that no longer matches.

**Check and charge** happen in one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock): the
history is read, replayed into a :class:`dpkit.accounting.Budget` (the project's accountant:
``pure``, ``approx``, ``zcdp``, ``rdp`` or ``pld``; composition is never re-implemented here),
the new event is charged to it, and the charge is either refused with
:class:`dpkit.accounting.BudgetExceeded` (nothing is written) or appended and committed with
``synchronous=FULL`` before the caller computes any noisy value (DESIGN invariant 3).
Concurrent processes therefore serialise on the write lock and can never overspend; a crash
after the commit loses budget, never privacy.

What the chain alone cannot show: removal of the *newest* rows leaves a shorter, valid chain.
After every commit the newest head is written, with its own HMAC, to ``<ledger>.head``; opening
refuses a ledger shorter than that head (or a missing or forged head file). Someone who can
write the project's files can still roll the ledger *and* the head file back together to an
older copy: only a head kept outside the folder catches that. Keep :meth:`Ledger.head`
elsewhere if it matters (``dpkit budget --json`` prints it); :meth:`Ledger.verify` and
:meth:`Ledger.open` accept an expected head. SQLite triggers refuse UPDATE and DELETE on the
ledger table, so only a deliberate edit of the file (not a bug) can try either.

**Where the rows live** is a small storage interface (:mod:`dpkit.engine.ledger_store`): the
SQLite file above by default, or a schema in PostgreSQL for a service with several processes or
hosts (:mod:`dpkit.engine.ledger_postgres`: the write lock is a ``SELECT ... FOR UPDATE`` on a
head row, which is updated with its MAC in the same transaction). Everything else here (chain,
check-and-charge, roles) is the same code for both; the key never leaves the project folder.

Format 1 ledgers (dpkit before the keyed chain: plain SHA-256, which anyone can recompute) are
refused on open; :func:`migrate` verifies one and rewrites it as a keyed ledger, keeping the old
file beside it.

Row kinds:

==============  ==================================================================================
``genesis``     the project: budget, format version, project id, noise source (secure/seeded)
``table``       a table registered or replaced by the data owner (its metadata as the payload)
``analyst``     an analyst added (token hash), revoked, or given a per-analyst budget
``charge``      a query: analyst, query text, the event JSON, and the accountant's view after it
``note``        what charge ``payload["charge"]`` released besides its answer (a fit's N̂), after it
==============  ==================================================================================
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dpkit import events as ev
from dpkit import noise as _noise
from dpkit.accounting.budget import charge_each
from dpkit.engine.ledger_analysts import Analysts
from dpkit.engine.ledger_migrate import migrate
from dpkit.engine.ledger_postgres import PostgresStore
from dpkit.engine.ledger_restore import restore_head
from dpkit.engine.ledger_rows import (
    ACCOUNTANTS,
    COLUMNS,
    FORMAT,
    GENESIS_PREV,
    Entry,
    HeadFile,
    LedgerConfig,
    LedgerError,
    LedgerTampered,
    Spend,
    canonical_json,
    config_from_genesis,
    finite,
    head_path,
    key_path,
    match_head,
    new_key,
    noise_record,
    now_iso,
    read_key,
    row_hash,
    verify_rows,
)
from dpkit.engine.ledger_store import SqliteStore, Store

__all__ = [
    "ACCOUNTANTS",
    "Entry",
    "Ledger",
    "LedgerConfig",
    "LedgerError",
    "LedgerTampered",
    "Spend",
    "head_path",
    "key_path",
    "migrate",
    "restore_head",
]

# (the head file's (seq, hash), the database's (seq, hash, mac) where the store keeps one)
_Heads = tuple[tuple[int, str] | None, tuple[int, str, str] | None]


class Ledger:
    """A project's ledger file. Open with :meth:`create` or :meth:`open`; both verify the chain.

    Thread-safe within a process (one lock around the connection); process-safe through the
    store's write lock (:mod:`dpkit.engine.ledger_store`: SQLite's ``BEGIN IMMEDIATE``, or a
    PostgreSQL row lock). ``path`` is the SQLite file, or the ``.pg`` file that names a
    PostgreSQL ledger; the owner key and head file sit beside it either way.
    """

    def __init__(self, path: Path, store: Store, key: bytes) -> None:
        self.path = path
        self._key = key
        self._store = store
        self._pending = 0  # rows appended inside the open write transaction
        self._lock = threading.RLock()
        self._head = HeadFile(head_path(path), key, path)
        self._entries: list[Entry] = []
        # indices over _entries, kept in step with it (every query reads them: a scan of the
        # whole history per query would grow with the project's age)
        self._by_kind: dict[str, list[Entry]] = {}
        self._charges_of: dict[str, list[Entry]] = {}  # analyst -> their charges
        self._analysts = Analysts()
        self._config: LedgerConfig | None = None
        self._budget_cache: dict[str | None, tuple[int, tuple[float, float], Any]] = {}

    # ------------------------------------------------------------------ opening

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
        noise_seed: int | None = None,
        dsn: str | None = None,
        schema: str | None = None, constant_work: bool = False,
    ) -> Ledger:
        """Create a new ledger holding the genesis row (the budget) and a fresh owner key
        (:func:`key_path`, mode 0600). Refuses an existing file.

        ``noise_seed`` records an INSECURE test project whose noise is seeded (None: the OS
        CSPRNG). The budget is validated by :class:`dpkit.accounting.Budget` itself.
        ``dsn``: keep the rows in PostgreSQL (a new ``schema`` there, random by default);
        ``path`` (conventionally ``ledger.pg``) then records where; constant_work: noise_record."""
        from dpkit.accounting import Budget

        path = Path(path)
        if path.exists() or key_path(path).exists():
            raise FileExistsError(f"a ledger already exists at {path}; open it instead")
        probe = Budget(epsilon=epsilon, delta=delta, accountant=accountant,
                       neighboring=neighboring, orders=orders)
        if noise_seed is not None and (isinstance(noise_seed, bool)
                                       or not isinstance(noise_seed, int)):
            raise TypeError(f"noise_seed must be an int or None (got {noise_seed!r})")
        noise = noise_record(noise_seed, probe if constant_work else None)  # may refuse: first
        store: Store = (SqliteStore.create(path) if dsn is None
                        else PostgresStore.create(path, dsn, schema))
        key = new_key(key_path(path))
        led = cls(path, store, key)
        payload = {
            "format": FORMAT,
            "project_id": _noise.token_hex(16),
            "budget": {"epsilon": probe.epsilon, "delta": probe.delta,
                       "accountant": probe.accountant, "neighboring": probe.neighboring,
                       "orders": list(probe.orders) if probe.orders is not None else None},
            "noise": noise,
        }
        with led._write():
            if store.max_seq():
                raise FileExistsError(f"a ledger already exists at {path}; open it instead")
            led._append(kind="genesis", analyst=analyst, query="CREATE PROJECT",
                        event=ev.NoOp(), view={}, payload=payload)
        led._sync()
        led._load_config()
        return led

    @classmethod
    def open(cls, path: Path | str, *, expected_head: tuple[int, str] | None = None) -> Ledger:
        """Open and fully verify an existing ledger under its owner key: :class:`LedgerTampered`
        on any mismatch, including a ledger shorter than its stored head (truncation)."""
        path = Path(path)
        store: Store = (PostgresStore.open(path) if path.suffix == ".pg"
                        else SqliteStore.open(path))
        try:
            led = cls(path, store, read_key(key_path(path)))
            with led._lock:
                stored = led._stored_head()  # before the rows: see _check_stored_head
                led._sync()
                led._check_stored_head(stored)
            if expected_head is not None:
                led.verify(expected_head=expected_head)
        except BaseException:
            store.close()
            raise
        return led

    def close(self) -> None:
        with self._lock:
            self._store.close()

    # ------------------------------------------------------------------ reading and verifying

    @property
    def where(self) -> str:
        """Where the rows live (the SQLite file, or the PostgreSQL database and schema)."""
        return self._store.where

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
                self._analysts.index(e.payload)

    def _reindex(self) -> None:
        self._by_kind, self._charges_of, self._analysts = {}, {}, Analysts()
        self._index(self._entries)

    def head(self) -> tuple[int, str]:
        """``(seq, hash)`` of the newest row: keep it elsewhere to detect tail truncation."""
        with self._lock:
            self._sync()
            last = self._entries[-1]
            return last.seq, last.hash

    def _stored_head(self) -> _Heads:
        """The head file's head and, where the store keeps one, the database's."""
        return self._head.read(), self._store.read_head() if self._store.keeps_head else None

    def _store_head(self) -> None:
        """Write the newest head (never an older one) after a commit."""
        self._head.write(self._entries[-1].seq, self._entries[-1].hash)

    def _check_stored_head(self, heads: _Heads) -> None:
        """Refuse a ledger shorter than its stored head, or one whose row at that head differs
        (rows removed from the end, or the history rewritten). ``heads`` must be read *before*
        the rows: a head is written only after (or with) its row's commit, so every row it names
        is then visible (read after, a concurrent commit would look like a truncation)."""
        stored, in_db = heads
        with self._lock:
            if self._store.keeps_head:
                if in_db is None or not hmac.compare_digest(self._head.mac(*in_db[:2]),
                                                            in_db[2]):
                    raise LedgerTampered(
                        in_db[0] if in_db else 0, f"the head kept in {self._store.where} is "
                        f"missing or does not carry the owner key's MAC", self.path)
                match_head(self._entries, in_db[:2], "the head kept in the database", self.path)
            if stored is None:
                raise LedgerTampered(
                    len(self._entries), f"its head file {head_path(self.path)} is missing "
                    f"(written after every commit; deleting it hides a truncation; `dpkit "
                    f"restore-head {self.path.parent}` rewrites it on the owner's word)", self.path)
            match_head(self._entries, stored, "the head stored beside it", self.path)

    def verify(self, *, expected_head: tuple[int, str] | None = None) -> int:
        """Re-read and re-verify the whole chain from disk; return the number of rows.

        ``expected_head`` (an earlier :meth:`head`) additionally proves that no row up to it
        was removed: the row with that seq must still carry that hash.
        """
        with self._lock:
            stored = self._stored_head()  # before the rows (see _check_stored_head)
            rows = self._store.rows(0)
            entries = verify_rows(rows, start_seq=1, prev=GENESIS_PREV, key=self._key,
                                  path=self.path)
            self._entries = entries
            self._reindex()
            self._budget_cache.clear()
            self._load_config()
            self._check_stored_head(stored)
            if expected_head is not None:
                match_head(self._entries, expected_head, "the expected head", self.path)
            return len(entries)

    def _sync(self) -> None:
        """Append rows written since the last read (by any process), verifying the chain."""
        last_seq = self._entries[-1].seq if self._entries else 0
        prev = self._entries[-1].hash if self._entries else GENESIS_PREV
        rows = self._store.rows(last_seq)
        if rows:
            new = verify_rows(rows, start_seq=last_seq + 1, prev=prev, key=self._key,
                              path=self.path)
            self._entries.extend(new)
            self._index(new)
            if self._config is None:
                self._load_config()
        elif not self._entries:
            raise LedgerTampered(1, "the ledger is empty (the genesis row is missing)", self.path)

    def _load_config(self) -> None:
        self._config = config_from_genesis(self._entries[0].payload, self.path)

    # ------------------------------------------------------------------ budgets

    def analyst_budgets(self) -> dict[str, float]:
        """Per-analyst epsilon budgets (the latest ``analyst`` row for each name wins)."""
        with self._lock:
            self._sync()
            return dict(self._analysts.caps)

    def delta_for(self, analyst: str | None) -> float:
        """The δ an analyst's queries draw from: the project's, or the analyst's own δ cap
        where it has one (the default per-query δ is a tenth of it). On a constant-work
        project that pays its timing terms out of δ (``approx``, ``pld``), less ten of them:
        ten default queries, each charged its ``δ_t`` beside its own δ, still fit."""
        with self._lock:
            self._sync()
            delta = self._delta_of(analyst)
        setting = self.config.constant_work
        if setting is None or self.config.approx_delta:
            return delta
        return max(delta - 10.0 * setting[0], delta / 2.0)

    def _delta_of(self, analyst: str | None) -> float:
        """:meth:`delta_for` on the rows read so far (callers have synced)."""
        cap = self._analysts.delta_caps.get(analyst) if analyst is not None else None
        return self.config.delta if cap is None else min(cap, self.config.delta)

    def analyst_for_token(self, token: str) -> str | None:
        """The active analyst whose token this is (None: unknown or revoked). Tokens are kept
        as SHA-256 hashes only (256-bit random tokens need no slow hash)."""
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
        with self._lock:
            self._sync()
            return self._analysts.for_digest(digest)

    def analysts(self) -> dict[str, dict[str, Any]]:
        """Every analyst ever added: ``{"active": bool, "epsilon": cap or None, "delta": cap
        or None}``."""
        with self._lock:
            self._sync()
            return self._analysts.listing()

    def is_revoked(self, analyst: str) -> bool:
        with self._lock:
            self._sync()
            return analyst in self._analysts.revoked

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
        total = (cfg.epsilon, cfg.delta)
        if analyst is not None:
            # the caps as read by the caller's sync (no second read of the store per budget)
            total = (min(self._analysts.caps.get(analyst, cfg.epsilon), cfg.epsilon),
                     self._delta_of(analyst))
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
        state = cfg.budget_dict(epsilon=total[0], delta=total[1])
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
        caps = self._caps(analyst)
        if not all(b.can_afford(event, delta=share) for b, _ in caps):
            # on copies: raises the refusal charge() would, with its details
            charge_each([(Budget.from_dict(b.to_dict()), d) for b, d in caps], event,
                        delta=share)
            raise AssertionError("unreachable: can_afford and charge disagree")  # pragma: no cover

    def _caps(self, analyst: str | None) -> list[tuple[Any, str]]:
        """The budgets a charge must fit, each with what its refusal says: the project's, and
        the analyst's own cap if it has one (a refusal over both names the tighter one)."""
        caps: list[tuple[Any, str]] = [(self._budget(None), "")]
        if analyst is not None and analyst in self._analysts.caps:
            mine = self._budget(analyst)
            own = f"epsilon {mine.epsilon:g}" + (
                f", delta {mine.delta:g}" if analyst in self._analysts.delta_caps else "")
            # the analyst cannot change it; say who can, and how (a refusal names this cap
            # only when it is the tighter limit)
            caps.append((mine, f"analyst {analyst!r} has a budget of {own}; the data owner "
                               f"can raise it: dpkit analyst cap PROJECT {analyst} --epsilon E"))
        return caps

    # ------------------------------------------------------------------ writing

    @contextmanager
    def _write(self) -> Iterator[None]:
        """The store's write transaction under the thread lock: COMMIT (with the new head in
        the database where it keeps one, then in the head file), or ROLLBACK on any exception
        (and the rows this transaction appended leave the in-memory copy)."""
        with self._lock:
            self._pending = 0
            try:
                with self._store.transaction():
                    yield
                    if self._pending:
                        last = self._entries[-1]
                        self._store.write_head(last.seq, last.hash,
                                               self._head.mac(last.seq, last.hash))
            except BaseException:
                self._entries_rollback()
                raise
            else:
                self._store_head()
            finally:
                self._pending = 0

    def _entries_rollback(self) -> None:
        # _append runs after _sync in every write, so this transaction's rows are the newest
        if self._pending:
            del self._entries[len(self._entries) - self._pending:]
            self._pending = 0
        self._reindex()
        self._budget_cache.clear()

    def _append(self, *, kind: str, analyst: str, query: str,
                event: ev.Event, view: dict[str, Any], payload: dict[str, Any]) -> Entry:
        prev = self._entries[-1].hash if self._entries else GENESIS_PREV
        seq = (self._entries[-1].seq if self._entries else 0) + 1
        now = now_iso()
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
        digest = row_hash(prev, fields, self._key)
        self._store.insert((*[fields[c] for c in COLUMNS], prev, digest))
        entry = Entry(seq, kind, analyst, now, query, event, view, payload, prev, digest)
        self._entries.append(entry)
        self._pending += 1
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
        with self._write():
            self._sync()
            if analyst in self._analysts.revoked:  # under the write lock: no race with revoke
                raise PermissionError(f"analyst {analyst!r} was revoked by the owner; nothing "
                                      f"was charged")
            share = self._share(delta_share)
            # Charge the cached budgets: Budget.charge checks and records atomically and records
            # nothing when it refuses. Afterwards they describe the ledger with this row; if
            # anything below fails (a refusal too), _write rolls back and drops them.
            caps = self._caps(analyst)
            after, mine = caps[0][0], (caps[1][0] if len(caps) > 1 else None)
            cost = charge_each(caps, event, delta=share)[0]
            spent = after.spent
            view: dict[str, Any] = {
                "accountant": self.config.accountant,
                "delta_share": delta_share if self.config.accountant == "approx" else None,
                "epsilon_cost": finite(cost.epsilon), "delta_cost": finite(cost.delta),
                "rho_cost": None if cost.rho is None else finite(cost.rho),
                "epsilon_spent": finite(spent.epsilon),
                "delta_spent": finite(spent.delta),
                "epsilon_budget": self.config.epsilon,
            }
            if details:
                view["details"] = details
            entry = self._append(kind="charge", analyst=analyst, query=query, event=event,
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
        """Append a row that spends nothing: ``table``, ``analyst`` or a charge's ``note``."""
        if kind not in {"table", "analyst", "note"}:
            raise ValueError(f"record() writes 'table', 'analyst' or 'note' rows (got {kind!r})")
        with self._write():
            self._sync()
            return self._append(kind=kind, analyst=analyst, query=query or kind.upper(),
                                event=ev.NoOp(), view={}, payload=payload)
