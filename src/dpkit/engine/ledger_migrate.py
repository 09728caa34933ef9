"""Format-1 ledgers (a plain SHA-256 chain): refused on open, migrated once by the owner.

A format-1 chain can be rewritten undetected by anyone who can write the file; :func:`migrate`
verifies it and rewrites it as a keyed (HMAC) ledger, keeping the old file beside it. Kept apart
from :mod:`dpkit.engine.ledger` (the live chain and the charge): it runs once per project, on
rows and files only.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from dpkit.engine.ledger_rows import (
    COLUMNS,
    FORMAT,
    GENESIS_PREV,
    SCHEMA,
    HeadFile,
    LedgerError,
    LedgerTampered,
    canonical_json,
    connect,
    head_path,
    key_path,
    new_key,
    read_key,
    row_hash,
)

__all__ = ["migrate", "refuse_old_format"]


def refuse_old_format(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse to open a format-1 (unkeyed) ledger; the message says how to migrate it."""
    row = conn.execute("SELECT payload FROM ledger WHERE seq = 1").fetchone()
    if row is None:
        return  # empty: reported as tampering by the verification
    try:
        fmt = json.loads(row[0]).get("format")
    except (ValueError, AttributeError):
        return  # undecodable: the verification reports it
    if fmt == 1:
        raise LedgerError(
            f"ledger {path} has the unkeyed format 1 (plain SHA-256 chain: anyone who can write "
            f"the file could rewrite it undetected). Migrate it once, as the owner: `dpkit "
            f"migrate {path.parent}` (Python: dpkit.engine.ledger.migrate({str(path)!r})); the "
            f"old file is kept as {path.stem}.v1{path.suffix}"
        )


def migrate(path: Path | str) -> Path:
    """Rewrite a format-1 (unkeyed) ledger as a keyed one; returns the old file's new name.

    The old chain is verified first (a broken one is refused); every row keeps its seq, time,
    analyst, query, event and payload, and is chained anew under a fresh owner key. The genesis
    row records the old head, so the old file (kept as ``<stem>.v1<suffix>``) can be matched
    to it. History written before the migration is only as trustworthy as the unkeyed chain was.
    """
    path = Path(path)
    if not path.is_file():  # sqlite3.connect would create an empty file (e.g. a PostgreSQL project)
        raise FileNotFoundError(f"no SQLite ledger at {path}; only those can be format 1")
    old_conn = sqlite3.connect(str(path))
    try:
        rows = old_conn.execute(
            "SELECT seq, kind, analyst, time, query, event, view, payload, prev_hash, hash "
            "FROM ledger ORDER BY seq").fetchall()
        old_conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        old_conn.close()
    if not rows or json.loads(rows[0][7]).get("format") != 1:
        raise LedgerError(f"{path} is not a format-1 ledger; nothing to migrate")
    prev = GENESIS_PREV
    for r in rows:
        fields = dict(zip(COLUMNS, r[:8], strict=True))
        if r[8] != prev or row_hash(prev, fields) != r[9]:
            raise LedgerTampered(int(r[0]), "the unkeyed chain does not verify; refusing to "
                                 "migrate (and so to bless) a modified history", path)
        prev = r[9]
    new_path = path.with_name(f".{path.stem}.migrating{path.suffix}")
    with contextlib.suppress(FileNotFoundError):
        new_path.unlink()
    # a key left by an interrupted migration is reused (nothing was signed with it yet)
    key = read_key(key_path(path)) if key_path(path).exists() else new_key(key_path(path))
    _write_keyed(new_path, rows, key, old_head=prev)
    kept = path.with_name(f"{path.stem}.v1{path.suffix}")
    for leftover in (path, new_path):
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(str(leftover) + suffix).unlink()
    os.replace(path, kept)
    os.replace(new_path, path)
    HeadFile(head_path(path), key, path).write(*_last_head(path))
    return kept


def _write_keyed(new_path: Path, rows: list[tuple[Any, ...]], key: bytes, old_head: str) -> None:
    """The old rows chained anew under ``key`` into a fresh file, in one transaction."""
    conn = connect(new_path)
    try:
        conn.executescript(SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        row_prev = GENESIS_PREV
        for r in rows:
            payload = json.loads(r[7])
            if r[0] == 1:
                payload = {**payload, "format": FORMAT,
                           "migrated_from": {"seq": len(rows), "hash": old_head}}
            fields = dict(zip(COLUMNS, (*r[:7], canonical_json(payload)), strict=True))
            digest = row_hash(row_prev, fields, key)
            conn.execute("INSERT INTO ledger (seq, kind, analyst, time, query, event, view, "
                         "payload, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (*[fields[c] for c in COLUMNS], row_prev, digest))
            row_prev = digest
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _last_head(path: Path) -> tuple[int, str]:
    conn = sqlite3.connect(str(path))
    try:
        seq, digest = conn.execute("SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1"
                                   ).fetchone()
    finally:
        conn.close()
    return int(seq), str(digest)
