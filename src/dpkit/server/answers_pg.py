"""Late answers in PostgreSQL, for a service whose processes run on several hosts.

The folder store (:class:`~dpkit.server.answers.AnswerStore`) is shared by the worker
processes of one host; behind a load balancer a poll may land on another host, which has no
such file. :class:`PostgresAnswers` keeps the same records in one table that every host reads:

``late_answers``  ``name`` (a hash of the id), ``tag`` (its analyst's tag: an HMAC of the
                  name, for the fair share), ``made`` (the 504's wall-clock time: expiry and
                  eviction order), ``size`` and ``sealed`` (the record, AES-256-GCM under a key
                  derived from the id, ``tag.name`` bound as associated data)

exactly what the folder shows of an answer (a file's name, mtime, size and sealed bytes): a
reader of the database learns how many answers are kept, when, how large and which share an
analyst, never what or their ids. The tag key is derived from the project's owner key (every
host has it: it verifies the ledger), so it is not in the database at all.

**Liveness across hosts.** Each process holds a session-level advisory lock (a random 64-bit
key, the record's ``live`` token) on its connection for its life. PostgreSQL drops it when
that connection ends, whether the process closed it, crashed, was killed or lost its host:
a running record whose lock no session holds is *lost* (its analyst's poll says the answer
will not come), never pending for ever. A connection that breaks while the process lives is
reopened and the lock taken again at the next call; polls meanwhile may read its running
answers as lost. Connect directly or through a session pooler: a transaction pooler
(PgBouncer ``pool_mode=transaction``) does not keep a session's locks.

**Bounded** as the folder: each new answer, and each answer when its work ends, sweeps the
expired ones, then, past ``count`` or ``max_bytes``, the oldest of the analyst holding the
most (:func:`~dpkit.server.answers.victims`), all in one transaction under a table lock, so
that two hosts' sweeps never both drop for one excess. Expiry compares the hosts' wall clocks:
keep them synchronised (NTP).

Where: the ledger's own schema when the ledger is in PostgreSQL (``ledger.pg``, its DSN or
``$DPKIT_LEDGER_DSN``), else a schema ``dpkit_answers_<12 hex>`` named from the owner key in
the database ``--answers-dsn`` names. The driver is ``psycopg`` 3 (the ``[postgres]`` extra).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from cryptography.exceptions import InvalidTag

from dpkit.engine.ledger_rows import key_path, read_key
from dpkit.engine.project import LEDGER_FILE, PG_LEDGER_FILE
from dpkit.noise import token_hex
from dpkit.server.answers import (
    FOLDER,
    ID,
    Answer,
    Answers,
    AnswerStore,
    Kept,
    id_name,
    judged,
    record_name,
    rendered,
    seal,
    unseal,
    victims,
)
from dpkit.server.config import STORES

__all__ = ["STORES", "PostgresAnswers", "answers_schema", "open_answers"]

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.late_answers (
    name   TEXT PRIMARY KEY,
    tag    TEXT NOT NULL,
    made   DOUBLE PRECISION NOT NULL,
    size   BIGINT NOT NULL,
    sealed BYTEA NOT NULL
);
"""
_DDL_LOCK = 0x64706B6974414E53  # "dpkitANS": one process at a time makes the table
# whether any session holds the advisory lock of a 64-bit key (pg_locks splits it in two)
_HELD = ("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
         "database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND "
         "classid::bigint = %s AND objid::bigint = %s AND objsubid = 1)")
log = logging.getLogger("dpkit.server")
T = TypeVar("T")
R = TypeVar("R")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ImportError("late answers in PostgreSQL need the psycopg driver: pip install "
                          "'dpkit[postgres]' (or serve with --answers-store folder)") from None
    return psycopg


def _lock_key(token: str) -> int:
    """A liveness token (16 hex digits) as the signed 64-bit advisory lock key."""
    return int.from_bytes(bytes.fromhex(token), "big", signed=True)


class PostgresAnswers:
    """At most ``count`` answers and ``max_bytes`` of them in ``schema.late_answers``, each
    kept ``max_age`` seconds after its 504 (see the module docstring)."""

    def __init__(self, dsn: str, schema: str, tag_key: bytes, *, count: int = 1000,
                 max_age: float = 900.0, max_bytes: int = 512 * 2**20) -> None:
        if not _SCHEMA.match(schema):
            raise ValueError(f"a schema name is lower-case letters, digits and _ (got "
                             f"{schema!r})")
        self.schema, self.count, self.max_age, self.max_bytes = schema, count, max_age, max_bytes
        self._dsn, self._tag_key = dsn, tag_key
        self._table = f"{schema}.late_answers"
        self._live = token_hex(16)[:16]  # this process's liveness token: its lock's key
        self._conn: Any = None
        self._closed = False
        self._lock = threading.RLock()  # one connection per store; calls come from threads
        self._run(self._make_table)

    # ------------------------------------------------------------------ the Answers interface

    def keep(self, who: str, future: Future[T], finish: Callable[[Future[T]], Answer], *,
             limit: float) -> str:
        """A fresh unguessable id under which ``future``'s answer is kept for ``who``; the
        running record is committed before this returns, so every host finds it at once.
        Raises :class:`OSError` when the database cannot take it."""
        ident = "ans_" + token_hex(16)
        name, tag = id_name(ident), self._tag(who)
        kept = Kept(who, time.time(), None, self._live, limit)
        data = seal(ident, kept, record_name(tag, ident))
        self._run(lambda c: self._sweep(c, new=(name, tag, kept.made, data)))

        def done(f: Future[T]) -> None:
            answer = rendered(finish, f, ident)
            sealed = seal(ident, replace(kept, finished=time.time(), answer=answer),
                          record_name(tag, ident))
            try:
                self._run(lambda c: self._sweep(c, done=(name, sealed)))
            except OSError:
                log.exception("late answer %s could not be kept", ident[:12])
                try:  # a stale "running" of a live process would say 202 until it expires
                    self._drop(name)
                except OSError:
                    log.warning("late answer %s stays 'running' until it expires", ident[:12])

        future.add_done_callback(done)
        return ident

    def get(self, ident: str, who: str, *, owner: bool) -> Kept | None:
        """What is kept under ``ident`` for ``who`` (``owner``: for anyone), or None when
        unknown, expired or another analyst's. Raises :class:`OSError` when the database
        cannot be read (the service says 503: the answer may well be there)."""
        if not ID.fullmatch(ident):
            return None
        name = id_name(ident)
        row = self._run(lambda c: c.execute(f"SELECT tag, sealed FROM {self._table} WHERE "
                                            f"name = %s", (name,)).fetchone())
        if row is None:
            return None
        tag = str(row[0])
        if not (owner or hmac.compare_digest(tag, self._tag(who))):
            return None
        try:
            kept = unseal(ident, bytes(row[1]), record_name(tag, ident))
        except (ValueError, InvalidTag):
            return None
        return judged(kept, who, owner=owner, max_age=self.max_age, running=self._running,
                      expire=lambda: self._drop(name))

    def close(self) -> None:
        """End this process's session: its lock goes, so its running answers read as lost
        (until a work that still ends here writes its answer, as the folder's would)."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                # at once: the server ends a closed session's backend (and drops its locks)
                # a moment after the close returns, and a poll meanwhile would say 202
                with contextlib.suppress(Exception):
                    self._conn.execute("SELECT pg_advisory_unlock_all()")
                self._conn.close()
                self._conn = None

    # ------------------------------------------------------------------ inside

    def _drop(self, name: str) -> None:
        self._run(lambda c: c.execute(f"DELETE FROM {self._table} WHERE name = %s", (name,)))

    def _tag(self, who: str) -> str:
        return hmac.new(self._tag_key, who.encode(), hashlib.sha256).hexdigest()[:16]

    def _running(self, token: str) -> bool:
        """Whether the process with this liveness token still holds its advisory lock."""
        if not re.fullmatch(r"[0-9a-f]{16}", token):
            return False
        if token == self._live:
            return not self._closed
        key = _lock_key(token)
        return bool(self._run(lambda c: c.execute(
            _HELD, ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()[0]))

    def _make_table(self, conn: Any) -> None:
        with conn.transaction():  # concurrent CREATE ... IF NOT EXISTS may still collide
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
            conn.execute(_DDL.format(s=self.schema))

    def _sweep(self, conn: Any, new: tuple[str, str, float, bytes] | None = None,
               done: tuple[str, bytes] | None = None) -> None:
        """In one transaction (one commit), under the table lock that serialises every
        host's: ``done``'s answer over its running record (not revived if expired or evicted
        meanwhile: then nothing more), the expired answers dropped, then the bounds' victims
        (room made for ``new``, which is then inserted). The lock comes first: a row lock
        taken before it would make two hosts' transactions wait on each other."""
        t = self._table
        with conn.transaction():
            conn.execute(f"LOCK TABLE {t} IN SHARE ROW EXCLUSIVE MODE")
            if done is not None and not conn.execute(
                    f"UPDATE {t} SET sealed = %s, size = %s WHERE name = %s",
                    (done[1], len(done[1]), done[0])).rowcount:
                return
            conn.execute(f"DELETE FROM {t} WHERE made < %s", (time.time() - self.max_age,))
            n, size = conn.execute(f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM {t}"
                                   ).fetchone()
            if n + (new is not None) > self.count or size > self.max_bytes:
                rows = conn.execute(f"SELECT made, tag, size, name FROM {t}").fetchall()
                kept = [(float(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows]
                drop = victims(kept, self.count, self.max_bytes,
                               new=new[1] if new is not None else None)
                conn.execute(f"DELETE FROM {t} WHERE name = ANY(%s)", (drop,))
            if new is not None:
                conn.execute(f"INSERT INTO {t} (name, tag, made, size, sealed) VALUES "
                             f"(%s, %s, %s, %s, %s) ON CONFLICT (name) DO NOTHING",
                             (*new[:3], len(new[3]), new[3]))

    def _connect(self) -> Any:
        """The connection, holding this process's liveness lock (taken again on a new one)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        if self._conn is not None:
            self._conn.close()
        self._conn = _psycopg().connect(self._dsn, autocommit=True, connect_timeout=10,
                                        client_encoding="utf8")
        self._conn.execute("SELECT pg_advisory_lock(%s)", (_lock_key(self._live),))
        return self._conn

    def _run(self, work: Callable[[Any], R]) -> R:
        """``work(connection)``, once more on a new connection if the first was found broken
        (a database restart); any database failure raised as :class:`OSError`. After
        :meth:`close` (the service stopping: works still running may end and polls still
        come) each call has a connection of its own, without the lock."""
        psycopg = _psycopg()
        with self._lock:
            for attempt in (0, 1):
                try:
                    if self._closed:
                        with psycopg.connect(self._dsn, autocommit=True, connect_timeout=10,
                                             client_encoding="utf8") as conn:
                            return work(conn)
                    return work(self._connect())
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    broken = self._conn is None or self._conn.closed or self._conn.broken
                    if attempt or not broken or self._closed:
                        raise OSError(f"the late answers' database failed: {_line(exc)}") \
                            from None
                except psycopg.Error as exc:
                    raise OSError(f"the late answers' database failed: {_line(exc)}") from None
        raise AssertionError("unreachable")  # pragma: no cover


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def answers_schema(owner_key: bytes) -> str:
    """The schema of a project's answers in a database named by ``--answers-dsn``: named from
    its owner key, so every host finds the same one, and two projects never share one."""
    return "dpkit_answers_" + hmac.new(owner_key, b"dpkit late answers schema",
                                       hashlib.sha256).hexdigest()[:12]


def open_answers(project: str | Path, *, store: str = "auto", dsn: str | None = None,
                 count: int = 1000, max_age: float = 900.0) -> Answers:
    """The late answers' store of a project: the folder (``PROJECT/answers``) unless
    ``store`` is ``postgres``, or ``auto`` with the ledger in PostgreSQL or a ``dsn`` given
    (``--answers-store``, ``--answers-dsn``; docs/service.md)."""
    project = Path(project)
    locator = project / PG_LEDGER_FILE
    if store not in STORES:
        raise ValueError(f"the answers' store is auto, folder or postgres (got {store!r})")
    if store == "folder" or (store == "auto" and dsn is None and not locator.exists()):
        return AnswerStore(project / FOLDER, count=count, max_age=max_age)
    ledger = locator if locator.exists() else project / LEDGER_FILE
    owner_key = read_key(key_path(ledger))
    schema = answers_schema(owner_key)
    if locator.exists():  # the ledger's database and schema, unless a DSN is given
        from dpkit.engine.ledger_postgres import DSN_ENV

        named = json.loads(locator.read_text())
        schema = str(named["schema"])
        dsn = dsn or os.environ.get(DSN_ENV) or str(named["dsn"])
    if dsn is None:
        raise ValueError("--answers-store postgres needs --answers-dsn, or a project whose "
                         "ledger is in PostgreSQL")
    tag_key = hmac.new(owner_key, b"dpkit late answers tag key", hashlib.sha256).digest()
    return PostgresAnswers(dsn, schema, tag_key, count=count, max_age=max_age)

