"""What one ledger row is: the records, their canonical JSON, the keyed hash that chains them,
and the owner key file (32 bytes from the OS CSPRNG, mode 0600) that keys it.

:mod:`dpkit.engine.ledger` writes and verifies rows with these; nothing here touches a database
beyond the table's schema text.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpkit import events as ev
from dpkit import noise as _noise

__all__ = ["ACCOUNTANTS", "COLUMNS", "FORMAT", "GENESIS_PREV", "SCHEMA", "ChargeOutcomeUnknown",
           "Entry", "HeadFile", "HeadNotWritten", "HeadUnreadable", "LedgerConfig", "LedgerError",
           "LedgerTampered", "Spend", "canonical_json",
           "config_from_genesis", "connect", "constant_work_refusal", "constant_work_setting",
           "finite", "head_path",
           "key_path", "match_head", "new_key", "noise_record", "now_iso", "read_key",
           "replace_durably", "resolve_constant_work", "row_hash", "verify_rows"]


FORMAT = 2  # 1: plain SHA-256 chain (refused; see migrate); 2: HMAC-SHA256 under the owner key
GENESIS_PREV = "0" * 64
ACCOUNTANTS: tuple[str, ...] = ("pure", "approx", "zcdp", "rdp", "pld")


class LedgerError(RuntimeError):
    """The ledger cannot be used (missing, wrong format, locked for too long)."""


class HeadNotWritten(LedgerError):  # noqa: N818 - reads as a sentence
    """A row was committed, then its head file could not be written (a full disk, a
    read-only file): the row stands (a charge stays spent), and nothing may be released on it
    until the head is written again."""

    def __init__(self, seq: int, reason: str) -> None:
        self.seq = seq
        super().__init__(f"ledger row #{seq} was committed but its head file could not be "
                         f"written ({reason})")


class ChargeOutcomeUnknown(LedgerError):  # noqa: N818 - reads as a sentence
    """The connection to the ledger's database broke while a write's COMMIT was on its way:
    the database may have committed it or not, and this process cannot tell. Nothing was
    released on it (noise is drawn only after the commit returned); the row may stand."""

    def __init__(self, seq: int, reason: str, where: str, project: Path | str) -> None:
        self.seq = seq
        super().__init__(
            f"the connection to the ledger database ({where}) broke while ledger row #{seq} was "
            f"being committed ({reason}): whether it was written is unknown, and if this was a "
            f"charge it may stand. Nothing was released. Before you retry (a retry would be "
            f"charged again), run `dpkit budget {project}` (it verifies the ledger and lists "
            f"every charge: look for row #{seq})")


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


class HeadUnreadable(LedgerTampered):
    """The head file is there but holds no head (empty or cut short): a write lost in a power
    cut by a dpkit that did not fsync it, a full disk, or someone hiding a truncation. Refused
    like a missing head; ``dpkit restore-head`` rewrites it on the owner's word."""

    def __init__(self, path: Path, ledger: Path | str) -> None:
        self.seq = 0
        self.reason = f"the head file {path} is unreadable"
        folder = Path(ledger).parent
        LedgerError.__init__(
            self,
            f"the head file {path} is unreadable (empty or cut short). It records the newest "
            f"ledger row so that rows removed from the end of {ledger} are noticed; a power cut "
            f"or a full disk can leave it so (older dpkit wrote it without fsync), and so can "
            f"someone hiding a truncation. Nothing was read or charged. With a head kept outside "
            f"the folder (`dpkit budget --json` prints it): `dpkit restore-head {folder} "
            f"--expected-head SEQ:HASH`; without one, `dpkit restore-head {folder}` rewrites it "
            f"from the ledger's verified rows, accepting the ledger's end as it is now",
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
    noise_seed: int | None = None  # set only for an INSECURE test project (seeded noise)
    #: (δ charged with every release, failure bits per release) of a constant-work project
    constant_work: tuple[float, int] | None = None
    #: the δ a constant-work ``zcdp`` / ``rdp`` project keeps for its timing terms
    #: (``Budget``'s ``approx_delta``); 0 otherwise
    approx_delta: float = 0.0

    def budget_dict(self, epsilon: float | None = None,
                    delta: float | None = None) -> dict[str, Any]:
        """The :meth:`dpkit.accounting.Budget.from_dict` form, without charges."""
        return {
            "version": 1,
            "epsilon": self.epsilon if epsilon is None else epsilon,
            "delta": self.delta if delta is None else delta,
            "accountant": self.accountant,
            "neighboring": self.neighboring,
            "orders": list(self.orders) if self.orders is not None else None,
            **({"approx_delta": self.approx_delta} if self.approx_delta else {}),
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


def finite(x: float) -> float:
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"refusing to record a non-finite cost ({x!r})")
    return x


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces, floats by repr; NaN/inf refused."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def row_hash(prev_hash: str, fields: dict[str, Any], key: bytes | None = None) -> str:
    """``HMAC-SHA256(key, prev_hash || canonical_json(fields))`` as hex (format 2), or the
    plain ``sha256`` of the same bytes when ``key`` is None (format 1, read by migrate only)."""
    data = prev_hash.encode("ascii") + canonical_json(fields).encode("utf-8")
    if key is None:
        return hashlib.sha256(data).hexdigest()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def key_path(ledger: Path | str) -> Path:
    """The owner key file of a ledger: ``ledger.sqlite`` -> ``ledger.key``."""
    p = Path(ledger)
    return p.with_name(p.stem + ".key")


def head_path(ledger: Path | str) -> Path:
    """The authenticated-head file of a ledger: ``ledger.sqlite`` -> ``ledger.head``."""
    p = Path(ledger)
    return p.with_name(p.stem + ".head")


def new_key(path: Path) -> bytes:
    """Write a fresh 256-bit key to ``path`` with mode 0600 (refuses to overwrite one)."""
    key = _noise.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


def read_key(path: Path) -> bytes:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise LedgerError(
            f"the owner key {path} is missing: without it the ledger cannot be verified or "
            f"written. Restore it from the owner's backup (it was created with the project)"
        ) from None
    except PermissionError:
        raise PermissionError(
            f"cannot read the owner key {path}: opening this project needs read access to its "
            f"files (the owner's), or the (future) HTTP service with an analyst token"
        ) from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise LedgerError(f"the owner key {path} is malformed (expected 64 hex digits)")
    return key


COLUMNS = ("seq", "kind", "analyst", "time", "query", "event", "view", "payload")

SCHEMA = """
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


def now_iso() -> str:
    """The time a row records (UTC, microseconds)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


class HeadFile:
    """The ledger's newest head, ``{seq, hash, mac}`` under the owner key, in its own file.

    The chain alone cannot show that its newest rows were removed; a ledger shorter than this
    head is refused. It is written after each commit (atomically and durably, never older than
    the one in the file: a crash before the write leaves an older head, weaker but never a false
    alarm; :func:`replace_durably`),
    and reread only when another process has replaced it since this one wrote it.
    """

    def __init__(self, path: Path, key: bytes, ledger: Path) -> None:
        self.path = path
        self._key = key
        self._ledger = ledger
        # (inode, mtime, size) of the file as this process last wrote it, and its seq
        self._written: tuple[tuple[int, int, int], int] | None = None

    def mac(self, seq: int, digest: str) -> str:
        return hmac.new(self._key, f"dpkit-head:{seq}:{digest}".encode("ascii"),
                        hashlib.sha256).hexdigest()

    def read(self) -> tuple[int, str] | None:
        """The stored head (None if absent); its MAC is checked."""
        try:
            d = json.loads(self.path.read_text())
            seq, digest, mac = int(d["seq"]), str(d["hash"]), str(d["mac"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            raise HeadUnreadable(self.path, self._ledger) from None
        if not hmac.compare_digest(self.mac(seq, digest), mac):
            raise LedgerTampered(seq, f"the head file {self.path} does not carry "
                                 f"the owner key's MAC", self._ledger)
        return seq, digest

    def write(self, seq: int, digest: str) -> None:
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if self._written is not None and stamp is not None and self._written[0] == stamp:
            old_seq: int | None = self._written[1]  # still the file this process wrote
        else:
            old_seq = None
            with contextlib.suppress(LedgerTampered):
                old = self.read()
                old_seq = old[0] if old is not None else None
        if old_seq is not None and old_seq >= seq:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        text = json.dumps({"seq": seq, "hash": digest, "mac": self.mac(seq, digest)})
        try:
            replace_durably(self.path, tmp, text.encode("ascii"))
        except OSError as exc:  # after the row's commit: the caller must not say "not charged"
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise HeadNotWritten(seq, str(exc)) from exc
        with contextlib.suppress(OSError):
            st = os.stat(self.path)
            self._written = ((st.st_ino, st.st_mtime_ns, st.st_size), seq)


def replace_durably(path: Path, tmp: Path, data: bytes, *, mode: int = 0o666) -> None:
    """Put ``data`` in ``path`` so that after a power cut it holds the old bytes or the new
    ones, whole: write ``tmp`` (created with ``mode``), fsync it, rename it over ``path``,
    fsync the folder. (A rename can reach the disk before the file's data, leaving an empty
    file; the folder's fsync makes the rename itself durable, so a head is never older after a
    crash than the caller saw.)"""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if hasattr(os, "O_DIRECTORY"):  # POSIX; Windows cannot open (or fsync) a folder
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the ledger file: WAL, ``synchronous=FULL`` (a commit survives a power
    cut), autocommit so every write is an explicit ``BEGIN IMMEDIATE`` transaction."""
    conn = sqlite3.connect(str(path), timeout=120.0, isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=120000")
    return conn


def verify_rows(rows: Sequence[tuple[Any, ...]], *, start_seq: int, prev: str, key: bytes,
                path: Path) -> list[Entry]:
    """Rows read from the file as entries, each checked against its keyed hash and the chain
    (``start_seq``, ``prev``: where the rows must continue it); :class:`LedgerTampered` at the
    first one that does not fit."""
    out: list[Entry] = []
    expected = start_seq
    for row in rows:
        seq, kind, analyst, when, query, event_text, view, payload, prev_hash, digest = row
        if seq != expected:
            raise LedgerTampered(
                expected, f"row {expected} is missing (next row found is {seq})", path
            )
        if prev_hash != prev:
            raise LedgerTampered(seq, "its prev_hash does not match the previous row's hash",
                                 path)
        fields = dict(zip(COLUMNS, (seq, kind, analyst, when, query, event_text, view,
                                     payload), strict=True))
        if not hmac.compare_digest(row_hash(prev_hash, fields, key), digest):
            raise LedgerTampered(seq, "its content does not match its hash", path)
        try:
            event = ev.from_json(event_text)
            view_d = json.loads(view)
            payload_d = json.loads(payload)
        except ValueError as exc:  # hash matched, so this is a format problem, not tampering
            raise LedgerError(f"ledger row {seq} cannot be decoded: {exc}") from None
        if seq == 1 and kind != "genesis":
            raise LedgerTampered(1, "the first row is not the project's genesis row",
                                 path)
        out.append(Entry(seq, kind, analyst, when, query, event, view_d, payload_d,
                         prev_hash, digest))
        prev = digest
        expected += 1
    if start_seq == 1 and not out:
        raise LedgerTampered(1, "the ledger is empty (the genesis row is missing)", path)
    return out


def match_head(entries: Sequence[Entry], head: tuple[int, str], what: str, path: Path) -> None:
    """Refuse ``entries`` unless the row at ``head``'s seq carries its hash (``what`` names
    where the head came from)."""
    seq, digest = head
    n = len(entries)
    if seq > n:
        raise LedgerTampered(
            n + 1, f"rows after {n} are missing ({what} is at row {seq}): the ledger was "
            f"truncated", path)
    if seq < 1 or not hmac.compare_digest(entries[seq - 1].hash, digest):
        raise LedgerTampered(seq, f"its hash differs from {what}", path)


def config_from_genesis(payload: dict[str, Any], path: Path) -> LedgerConfig:
    """The project's budget parameters as the genesis row records them."""
    budget = payload.get("budget", {})
    if payload.get("format") != FORMAT:
        raise LedgerError(
            f"ledger {path} has format {payload.get('format')!r}; this dpkit reads format "
            f"{FORMAT}"
        )
    orders = budget.get("orders")
    noise = payload.get("noise")
    seed = int(noise["seed"]) if isinstance(noise, dict) and noise.get("source") == "seeded" \
        else None
    return LedgerConfig(
        epsilon=float(budget["epsilon"]),
        delta=float(budget["delta"]),
        accountant=str(budget["accountant"]),
        project_id=str(payload.get("project_id", "")),
        neighboring=str(budget.get("neighboring", "add_remove")),
        orders=tuple(float(a) for a in orders) if orders is not None else None,
        noise_seed=seed,
        constant_work=(float(noise["constant_work"]["delta"]), int(noise["constant_work"]["bits"]))
        if isinstance(noise, dict) and isinstance(noise.get("constant_work"), dict) else None,
        approx_delta=float(noise["constant_work"].get("reserve", 0.0))
        if isinstance(noise, dict) and isinstance(noise.get("constant_work"), dict) else 0.0,
    )


def noise_record(noise_seed: int | None, constant_work: Any = None) -> dict[str, Any]:
    """The genesis row's ``noise`` record: the source (secure, or an INSECURE seed) and, with
    ``constant_work`` (the validated :class:`dpkit.accounting.Budget`), its setting."""
    out: dict[str, Any] = ({"source": "secure"} if noise_seed is None
                           else {"source": "seeded", "seed": noise_seed, "insecure": True})
    if constant_work is not None:
        out["constant_work"] = constant_work_setting(
            constant_work.epsilon, constant_work.delta, constant_work.accountant)
    return out


def constant_work_setting(epsilon: float, delta: float, accountant: str) -> dict[str, Any]:
    """The genesis record of ``Curator.create(..., constant_work=True)``: the δ charged with
    every release for the constant-work failure event, and the failure bits it pays for
    (:mod:`dpkit.noise.constant`); refused, with the fix, where the budget cannot pay it.

    ``approx``/``pld`` pay ``δ_t = min(2^-40, δ/10^6)`` per release out of δ. ``zcdp`` and
    ``rdp`` keep ``reserve = δ/100`` of δ for the timing terms (``Budget(approx_delta=
    reserve)``: ρ or the RDP curve converts at the other 99%, approximate zCDP / RDP) and pay
    ``δ_t = min(2^-40, reserve/10^6)`` per release out of it, so up to 10^6 releases; the
    reserve costs ρ about 0.08% at ε = 3, δ = 1e-6."""
    if accountant not in ("approx", "pld", "zcdp", "rdp") or not delta > 0:
        raise ValueError(
            f"constant_work=True charges a small delta ({_noise.constant.TIMING_DELTA:.3g}) with "
            f"every release: it needs a budget with delta > 0 and the 'approx', 'pld', 'zcdp' "
            f"or 'rdp' accountant (got delta={delta:g}, accountant {accountant!r})")
    if accountant in ("approx", "pld"):
        d = min(_noise.constant.TIMING_DELTA, delta / 1e6)
        return {"delta": d, "bits": _noise.constant.bits_for(epsilon, d)}
    reserve = delta / 100.0
    d = min(_noise.constant.TIMING_DELTA, reserve / 1e6)
    return {"delta": d, "bits": _noise.constant.bits_for(epsilon, d), "reserve": reserve}


def constant_work_refusal(epsilon: float, delta: float, accountant: str) -> str | None:
    """Why a budget cannot pay for constant work (one short clause), or None when it can."""
    if not delta > 0:
        return "the budget has delta = 0: the timing term is a delta"
    if accountant not in ("approx", "pld", "zcdp", "rdp"):
        return f"the {accountant!r} accountant cannot carry the timing term's delta"
    try:
        constant_work_setting(epsilon, delta, accountant)
    except ValueError:
        return (f"epsilon {epsilon:g} is too large: its failure bound would need more than "
                f"{_noise.constant.MAX_BITS} bits")
    return None


def resolve_constant_work(constant_work: bool | None, *, epsilon: float, delta: float,
                          accountant: str) -> tuple[bool, str]:
    """A new project's constant-work setting and why (docs/attacks.md §6): ``None`` (the
    default) is on wherever the budget can pay for it (delta > 0, an accountant other than
    ``pure``, ε small enough for its failure bits, about 27 or less), else off with the
    reason; ``True`` / ``False`` are kept as asked (``True`` on a budget that cannot pay is
    refused later, by :func:`constant_work_setting`, with the fix)."""
    if constant_work is not None and not isinstance(constant_work, bool):
        raise TypeError(f"constant_work takes True, False or None (the default: on where the "
                        f"budget can pay for it) (got {constant_work!r})")
    if constant_work is not None:
        return constant_work, "asked for" if constant_work else "opted out"
    refusal = constant_work_refusal(epsilon, delta, accountant)
    return refusal is None, "the default where the budget can pay" if refusal is None else refusal
