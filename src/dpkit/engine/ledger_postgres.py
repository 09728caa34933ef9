"""The ledger's rows in PostgreSQL, for a service with several processes or hosts.

A project whose ledger lives in PostgreSQL keeps, in its folder, ``ledger.pg`` (JSON: the DSN
and the schema, mode 0600), the owner key ``ledger.key`` and the head file ``ledger.head``;
the database holds one schema per project (``dpkit_<12 hex>`` unless named) with two tables:

``ledger``       the same ten text/integer columns as the SQLite ledger, append-only (triggers
                 refuse UPDATE, DELETE and TRUNCATE)
``ledger_head``  one row: the newest ``(seq, hash)`` and its MAC under the owner key, updated
                 in the same transaction as the rows it names

**The write lock** is ``SELECT ... FROM ledger_head WHERE id = 1 FOR UPDATE`` at the start of
every write transaction (READ COMMITTED): every writer, on every host, queues on that one row;
after it is granted, each later statement sees every row committed before, so the ledger's
check (the budget replayed from all rows) and its append happen on the newest state. A
process killed inside the transaction leaves nothing: PostgreSQL rolls back a transaction
whose connection dies. The key never reaches the database: rows and head are authenticated
by the ledger before they are written, and verified after they are read.

``$DPKIT_LEDGER_DSN`` (when set) replaces the DSN stored in ``ledger.pg`` on open, so a
deployment can keep the password out of the folder (libpq's ``PGPASSWORD`` and ``~/.pgpass``
work too). The driver is ``psycopg`` 3, the ``[postgres]`` extra, imported only when a
PostgreSQL ledger is created or opened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dpkit import noise as _noise
from dpkit.engine.ledger_rows import (
    GENESIS_PREV,
    ChargeOutcomeUnknown,
    LedgerError,
    LedgerTampered,
)
from dpkit.engine.ledger_store import ROW_COLUMNS, Row

__all__ = ["DSN_ENV", "PostgresStore", "is_dsn", "new_schema_name"]

DSN_ENV = "DPKIT_LEDGER_DSN"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_DDL = """
CREATE SCHEMA {s};
CREATE TABLE {s}.ledger (
    seq       BIGINT PRIMARY KEY,
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
CREATE TABLE {s}.ledger_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  BIGINT NOT NULL,
    hash TEXT NOT NULL,
    mac  TEXT NOT NULL
);
INSERT INTO {s}.ledger_head VALUES (1, 0, '{genesis}', '');
CREATE FUNCTION {s}.append_only() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'the dpkit ledger is append-only'; END $$;
CREATE TRIGGER ledger_no_change BEFORE UPDATE OR DELETE ON {s}.ledger
    FOR EACH ROW EXECUTE FUNCTION {s}.append_only();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON {s}.ledger
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.append_only();
"""


def is_dsn(text: str) -> bool:
    """Whether ``text`` names a PostgreSQL database (a URI or libpq ``key=value`` string)."""
    return text.startswith(("postgresql://", "postgres://")) or (
        "=" in text and any(k in text for k in ("dbname=", "host=", "user=", "port=")))


def new_schema_name() -> str:
    """A fresh schema for one project's ledger: ``dpkit_`` and 12 random hex digits."""
    return "dpkit_" + _noise.token_hex(16)[:12]


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ImportError(
            "a PostgreSQL ledger needs the psycopg driver: pip install 'dpkit[postgres]'"
        ) from None
    return psycopg


class PostgresStore:
    """One project's ledger schema in a PostgreSQL database (see the module docstring)."""

    keeps_head = True

    def __init__(self, dsn: str, schema: str, locator: Path) -> None:
        if not _SCHEMA_NAME.match(schema):
            raise ValueError(f"a ledger schema name is lower-case letters, digits and _ "
                             f"(got {schema!r})")
        self.locator = locator
        self.schema = schema
        self._dsn = dsn
        self._conn: Any = None
        self._in_tx = False  # inside transaction(): never reconnect (the lock would be lost)
        self._seen = 0  # the newest seq read or written through this store, outside a write
        self._seen_in_tx = 0
        self._prefetched: tuple[int, list[Row]] | None = None
        self._pending: list[Row] = []
        self._pending_head: tuple[int, str, str] | None = None
        self.where = f"PostgreSQL schema {schema}"
        self._connect()

    # ------------------------------------------------------------------ making and finding

    @classmethod
    def create(cls, locator: Path, dsn: str, schema: str | None = None) -> PostgresStore:
        """Make the schema (refused if it exists), then ``locator`` (refused if it exists)."""
        if locator.exists():
            raise FileExistsError(f"a ledger already exists at {locator}; open it instead")
        store = cls(dsn, schema or new_schema_name(), locator)
        psycopg = _psycopg()
        try:
            with store._errors(), store._conn.transaction():
                store._conn.execute(_DDL.format(s=store.schema, genesis=GENESIS_PREV))
        except psycopg.errors.DuplicateSchema:
            store.close()
            raise FileExistsError(f"the schema {store.schema} already exists in the ledger "
                                  f"database; give another schema or open that project") from None
        fd = os.open(locator, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"dsn": dsn, "schema": store.schema}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return store

    @classmethod
    def open(cls, locator: Path) -> PostgresStore:
        """The store ``locator`` names (its DSN replaced by ``$DPKIT_LEDGER_DSN`` when set)."""
        try:
            d = json.loads(locator.read_text())
            dsn, schema = str(d["dsn"]), str(d["schema"])
        except FileNotFoundError:
            raise FileNotFoundError(f"no ledger at {locator}: create the project first") from None
        except (ValueError, KeyError, TypeError):
            raise LedgerError(f"{locator} is not a PostgreSQL ledger locator (JSON with 'dsn' "
                              f"and 'schema'); restore it from the owner's backup") from None
        store = cls(os.environ.get(DSN_ENV) or dsn, schema, locator)
        with store._errors():
            found = store._conn.execute(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name IN ('ledger', 'ledger_head')", (schema,)).fetchone()[0]
        if found != 2:
            store.close()
            raise LedgerError(
                f"the ledger database has no dpkit ledger in schema {schema} (named by "
                f"{locator}): is {DSN_ENV} or the DSN pointing at the right database? To "
                f"restore a backup: psql ... < the pg_dump of that schema")
        return store

    def drop(self) -> None:
        """Remove the schema and everything in it (tests and failed creates only)."""
        with self._errors():
            self._conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    # ------------------------------------------------------------------ the connection

    def _connect(self) -> Any:
        """The connection (autocommit: reads see the newest commits), reopened if it broke."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        psycopg = _psycopg()
        try:
            self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=10,
                                         client_encoding="utf8")
        except psycopg.Error as exc:
            raise LedgerError(
                f"cannot reach the ledger database ({_first_line(exc)}): nothing was read or "
                f"charged. Check that PostgreSQL is up and that the DSN ({DSN_ENV} or "
                f"{self.locator}) is right") from None
        info = self._conn.info
        self.where = f"PostgreSQL {info.host}:{info.port}/{info.dbname} schema {self.schema}"
        return self._conn

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """A lost connection becomes a :class:`LedgerError` (the next call reconnects, but
        never inside a transaction: a new connection would not hold its lock)."""
        psycopg = _psycopg()
        if not self._in_tx:
            self._connect()
        try:
            yield
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise LedgerError(
                f"the ledger database failed ({_first_line(exc)}); the transaction was "
                f"rolled back, nothing was charged") from None

    def _fetch(self, query: str, params: tuple[Any, ...] = ()) -> list[Row]:
        """A read's rows. Outside a transaction a connection found dead (a database restart
        since the last call) is replaced once: a read can be repeated; inside one it cannot
        (the new connection would not hold the lock)."""
        psycopg = _psycopg()
        with self._errors():
            for attempt in (0, 1):
                conn = self._conn
                try:
                    return list(conn.execute(query, params).fetchall())
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    if attempt or self._in_tx or not (conn.closed or conn.broken):
                        raise
                    self._connect()
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ the Store interface

    def rows(self, after: int) -> list[Row]:
        if not self._in_tx:
            got = self._select_rows(after)
            if got:
                self._seen = max(self._seen, int(got[-1][0]))
            return got
        pre, self._prefetched = self._prefetched, None
        if pre is not None and pre[0] == after:
            got = pre[1]  # read under the lock in transaction()'s first batch
        elif pre is None and after >= self._seen_in_tx:
            return []  # the lock is held and every row up to _seen_in_tx was read under it
        else:
            got = self._select_rows(after)
        if got:
            self._seen_in_tx = max(self._seen_in_tx, int(got[-1][0]))
        return got

    def _select_rows(self, after: int) -> list[Row]:
        return self._fetch(f"SELECT {ROW_COLUMNS} FROM {self.schema}.ledger WHERE seq > %s "
                           f"ORDER BY seq", (after,))

    def max_seq(self) -> int:
        return int(self._fetch(f"SELECT COALESCE(MAX(seq), 0) FROM {self.schema}.ledger")[0][0])

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """The write lock: the head row ``FOR UPDATE``, held until COMMIT or ROLLBACK.

        Two round trips while the lock is held, whatever is written, because a waiting writer
        waits for them: BEGIN, the lock and the rows committed since the last read go in one
        pipelined batch (each statement of a READ COMMITTED transaction takes its snapshot when
        it starts, so the rows are read after the lock is granted); the buffered INSERTs, the
        head and COMMIT in another. A process killed before the second batch leaves nothing."""
        with self._errors():
            try:
                conn, locked, newer = self._begin()
                if locked is None:
                    raise LedgerTampered(0, "its head row (ledger_head, id 1) was deleted, so "
                                         "no write can be serialised", self.where)
                self._prefetched = (self._seen, newer)
                self._in_tx, self._seen_in_tx = True, self._seen
                yield
                self._commit(conn)
                self._seen = max([self._seen_in_tx, *(int(r[0]) for r in self._pending)])
            except BaseException:
                if not self._conn.closed and not self._conn.broken:
                    with contextlib.suppress(Exception):
                        self._conn.execute("ROLLBACK")
                raise
            finally:  # rows others committed, read in here, stay read even after a rollback
                self._seen = max(self._seen, self._seen_in_tx)
                self._in_tx, self._prefetched = False, None
                self._pending, self._pending_head = [], None

    def _commit(self, conn: Any) -> None:
        """The buffered rows, the head and COMMIT in one batch. A connection that breaks
        meanwhile leaves the outcome unknown (the COMMIT may have reached the database and
        succeeded, its answer lost): :class:`ChargeOutcomeUnknown`, never "nothing was
        charged". An error the database answered (the connection alive) rolled it back."""
        psycopg = _psycopg()
        s = self.schema
        try:
            with conn.pipeline():
                for row in self._pending:
                    conn.execute(f"INSERT INTO {s}.ledger ({ROW_COLUMNS}) VALUES "
                                 f"(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", row)
                if self._pending_head is not None:
                    conn.execute(f"UPDATE {s}.ledger_head SET seq = %s, hash = %s, "
                                 f"mac = %s WHERE id = 1", self._pending_head)
                conn.execute("COMMIT")
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if self._pending and (conn.closed or conn.broken):
                raise ChargeOutcomeUnknown(int(self._pending[-1][0]), _first_line(exc),
                                           self.where, self.locator.parent) from None
            raise

    def _begin(self) -> tuple[Any, Any, list[Row]]:
        """BEGIN, the lock and the newer rows in one batch. A connection found dead here (the
        database restarted since the last call; nothing that could write was sent) is replaced
        once; any other failure is raised."""
        psycopg = _psycopg()
        s = self.schema
        for attempt in (0, 1):
            conn = self._connect()
            try:
                with conn.pipeline():
                    conn.execute("BEGIN")
                    lock = conn.execute(f"SELECT seq FROM {s}.ledger_head WHERE id = 1 "
                                        f"FOR UPDATE")
                    newer = conn.execute(f"SELECT {ROW_COLUMNS} FROM {s}.ledger WHERE seq > %s "
                                         f"ORDER BY seq", (self._seen,))
                return conn, lock.fetchone(), list(newer.fetchall())
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if attempt or not (conn.closed or conn.broken):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def insert(self, row: Row) -> None:
        """Buffered: sent with the head and COMMIT in one batch (see :meth:`transaction`)."""
        assert self._in_tx, "insert() belongs inside transaction()"
        self._pending.append(row)

    def read_head(self) -> tuple[int, str, str] | None:
        got = self._fetch(f"SELECT seq, hash, mac FROM {self.schema}.ledger_head WHERE id = 1")
        return None if not got else (int(got[0][0]), str(got[0][1]), str(got[0][2]))

    def write_head(self, seq: int, digest: str, mac: str) -> None:
        assert self._in_tx, "write_head() belongs inside transaction()"
        self._pending_head = (seq, digest, mac)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
