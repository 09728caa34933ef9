"""A lost head file rewritten from the ledger's verified rows, on the owner's word.

The head file (``ledger.head``) exists to notice rows removed from the end of the ledger; a
missing or unreadable one is refused on open (:class:`~dpkit.engine.ledger_rows.HeadUnreadable`),
because emptying it is also how a truncation would be hidden. That refusal is never lifted
automatically: :func:`restore_head` is the owner's explicit step. It verifies the whole chain
under the owner key (and, for a PostgreSQL ledger, the head kept in the database with its MAC),
checks the head the owner kept elsewhere when given one, and only then writes the newest row's
head. Without a kept head the owner accepts the ledger's end as it is now: rows removed from
the end together with the head file's loss would go unnoticed (for PostgreSQL, the database's
own head still catches them).
"""

from __future__ import annotations

import hmac
from pathlib import Path

from dpkit.engine.ledger_postgres import PostgresStore
from dpkit.engine.ledger_rows import (
    GENESIS_PREV,
    HeadFile,
    HeadUnreadable,
    LedgerError,
    LedgerTampered,
    head_path,
    key_path,
    match_head,
    read_key,
    verify_rows,
)
from dpkit.engine.ledger_store import SqliteStore, Store

__all__ = ["restore_head"]


def restore_head(path: Path | str, *,
                 expected_head: tuple[int, str] | None = None) -> tuple[int, str]:
    """Rewrite the missing or unreadable head file of the ledger at ``path`` from its verified
    rows; returns the head written ``(seq, hash)``.

    Refused (:class:`LedgerError`) when the head file holds a valid head: then there is nothing
    to restore (a ledger shorter than it was truncated, and stays refused). Refused
    (:class:`LedgerTampered`) when a row does not verify under the owner key, or when the rows
    do not reach ``expected_head`` (a head kept outside the folder, e.g. from
    ``dpkit budget --json``). Spends nothing and writes nothing but the head file.
    """
    path = Path(path)
    key = read_key(key_path(path))
    heads = HeadFile(head_path(path), key, path)
    try:
        current = heads.read()
    except HeadUnreadable:
        current = None
    if current is not None:
        raise LedgerError(
            f"the head file {head_path(path)} is readable and carries the owner key's MAC (row "
            f"{current[0]}): there is nothing to restore. If opening the project fails against "
            f"it, rows were removed from the end of the ledger: restore the folder from a backup"
        )
    store: Store = PostgresStore.open(path) if path.suffix == ".pg" else SqliteStore.open(path)
    try:
        entries = verify_rows(store.rows(0), start_seq=1, prev=GENESIS_PREV, key=key, path=path)
        if not entries:
            raise LedgerTampered(1, "it holds no row (not even the project's first)", path)
        if store.keeps_head:
            in_db = store.read_head()
            if in_db is None or not hmac.compare_digest(heads.mac(*in_db[:2]), in_db[2]):
                raise LedgerTampered(0, f"the head kept in {store.where} is missing or does not "
                                        f"carry the owner key's MAC", path)
            match_head(entries, in_db[:2], "the head kept in the database", path)
        if expected_head is not None:
            match_head(entries, expected_head, "the expected head", path)
        newest = entries[-1].seq, entries[-1].hash
        heads.write(*newest)
        return newest
    finally:
        store.close()
