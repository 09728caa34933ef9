"""Where a ledger's rows live: the small storage interface :class:`dpkit.engine.ledger.Ledger`
writes through, and its embedded SQLite implementation.

The ledger's logic (the keyed chain, check-and-charge, budgets, roles) is written once, in
:mod:`dpkit.engine.ledger`; a store only keeps rows and gives it a write lock. Two stores exist:
:class:`SqliteStore` (one file in the project folder, the default) and
:class:`dpkit.engine.ledger_postgres.PostgresStore` (a schema in a PostgreSQL database, for a
service with several processes or hosts). Both give the same guarantees to the ledger:

* :meth:`Store.transaction` holds a lock that serialises every writer of this ledger (all
  processes, all hosts) until it commits or rolls back; rows committed by others before the
  lock was taken are visible to :meth:`Store.rows` inside it;
* a commit is durable before :meth:`Store.transaction` returns (``synchronous=FULL`` for
  SQLite; PostgreSQL's ``fsync``/``synchronous_commit`` defaults); a process killed inside the
  transaction leaves no row of it;
* rows are append-only (triggers refuse UPDATE and DELETE: only a deliberate edit can try,
  and the keyed chain reports it).

No key and no hash is computed here: a store never sees the owner key.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from dpkit.engine.ledger_migrate import refuse_old_format
from dpkit.engine.ledger_rows import SCHEMA, LedgerError, connect

__all__ = ["ROW_COLUMNS", "Row", "SqliteStore", "Store"]

Row = tuple[Any, ...]  # seq, kind, analyst, time, query, event, view, payload, prev_hash, hash
ROW_COLUMNS = "seq, kind, analyst, time, query, event, view, payload, prev_hash, hash"


class Store(Protocol):
    """What the ledger needs from a database (see the module docstring for the guarantees)."""

    where: str  # names the store in messages (a file path, or a database and schema)
    keeps_head: bool  # True: the newest head (with its MAC) is also kept inside the database

    def rows(self, after: int) -> list[Row]:
        """Rows with ``seq > after``, oldest first."""
        ...

    def max_seq(self) -> int:
        """The newest seq (0 when empty)."""
        ...

    def transaction(self) -> Any:
        """A context manager: the write lock, COMMIT on exit, ROLLBACK on an exception."""
        ...

    def insert(self, row: Row) -> None:
        """Append one row (inside :meth:`transaction`)."""
        ...

    def read_head(self) -> tuple[int, str, str] | None:
        """``(seq, hash, mac)`` kept in the database (None: none kept, or it is missing)."""
        ...

    def write_head(self, seq: int, digest: str, mac: str) -> None:
        """Record the newest head inside the current transaction (a no-op where not kept)."""
        ...

    def close(self) -> None: ...


class SqliteStore:
    """The ledger table in one SQLite file (WAL, ``synchronous=FULL``); the write lock is
    ``BEGIN IMMEDIATE``. The head is kept beside it in a file (``keeps_head`` is False)."""

    keeps_head = False

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.where = str(path)
        self._conn = conn

    @classmethod
    def create(cls, path: Path) -> SqliteStore:
        conn = connect(path)
        conn.executescript(SCHEMA)
        return cls(path, conn)

    @classmethod
    def open(cls, path: Path) -> SqliteStore:
        """Open an existing ledger file; refuses a file that is not one, or format 1."""
        if not path.exists():
            raise FileNotFoundError(f"no ledger at {path}: create the project first")
        conn = connect(path)
        try:
            tables = {r[0] for r in
                      conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "ledger" not in tables:
                raise LedgerError(f"{path} is not a dpkit ledger (no 'ledger' table)")
            refuse_old_format(conn, path)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn)

    def rows(self, after: int) -> list[Row]:
        return self._conn.execute(
            f"SELECT {ROW_COLUMNS} FROM ledger WHERE seq > ? ORDER BY seq", (after,)
        ).fetchall()

    def max_seq(self) -> int:
        return int(self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM ledger").fetchone()[0])

    @contextmanager
    def transaction(self) -> Iterator[None]:
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
            yield
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        else:
            cur.execute("COMMIT")

    def insert(self, row: Row) -> None:
        self._conn.execute(f"INSERT INTO ledger ({ROW_COLUMNS}) VALUES "
                           f"(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def read_head(self) -> tuple[int, str, str] | None:
        return None

    def write_head(self, seq: int, digest: str, mac: str) -> None:
        return None

    def close(self) -> None:
        self._conn.close()
