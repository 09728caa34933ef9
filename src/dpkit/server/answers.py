"""Late answers: a request that runs past the service's timeout is answered 504 with an answer
id; its work goes on, and its answer is kept for the analyst who asked, so that a charge
already recorded in the ledger is never paid for nothing.

``GET /v1/answers/{id}`` gives 202 (still running), 200 (the very answer the request would
have given) or 404 (unknown, expired, or another analyst's: one 404 for all, no existence
oracle). The owner may read every answer. A kept answer is a DP release already charged, so
keeping and giving it again is post-processing (no further privacy cost).

**Shared by the service's processes.** ``dpkit serve --workers N`` runs N processes and a poll
may land on any of them, so answers are kept in a folder of the project
(``PROJECT/answers/``, owner-only ``0700``), one file per answer, each written whole (a
temporary file renamed over it). The process that answered 504 writes a *running* record at
once and the answer when the work ends; any process reads either. A running record names its
process's liveness lock (``live-*.lock``, held with ``flock`` for the process's life): when
the lock is free the process is gone (a restart or a crash) and the answer never will come,
which the asker is told (still a 404, nothing more for anyone else). A finished answer survives
a restart, until it expires. Processes on several hosts share a PostgreSQL table instead
(:mod:`dpkit.server.answers_pg`: the same records, seals and bounds; both are
:class:`Answers`).

**Nothing readable without the id.** Ids are 128 bits straight from the OS CSPRNG
(:func:`dpkit.noise.token_hex`, the one door for every random byte, tokens included): not a
DP sample but a capability that must be unguessable. The file's name is a hash of the id after
a tag of its analyst (an HMAC of the name under a key of the folder, ``tag.key``), and its
content is sealed with AES-256-GCM under a key derived from the id (HKDF-SHA256), the file
name bound as associated data: whoever lists or copies the folder (a backup, another account
on the host) learns how many answers are kept, when, how large and which share an analyst,
never what. The analyst's name is inside the seal and checked on every read.

**Bounded.** At most ``count`` answers and ``max_bytes`` of them (sealed, as kept on disk),
each kept ``max_age`` seconds after its 504 (a work that runs longer is lost with it: raise
``--answers-max-age`` above the longest fit). Each new late answer, and each answer when its
work ends, sweeps the expired ones, then, past either bound, the oldest answer of the analyst
holding the most (answers, or bytes): one analyst's many or large late answers never push out
another's unfetched one (FINDINGS.md J3).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response

from dpkit.noise import token_bytes, token_hex
from dpkit.server.problems import MEDIA_TYPE, Problem, problem_of

__all__ = ["FOLDER", "ID", "Answer", "AnswerStore", "Answers", "Kept", "id_name", "judged",
           "plain_finish", "record_name", "rendered", "seal", "unseal", "victims"]

FOLDER = "answers"  # inside the project, beside the ledger: the service's account writes there
ID = re.compile(r"ans_[0-9a-f]{32}")
_SUFFIX, _LIVE, _KEY = ".ans", "live-", "tag.key"
_AAD = b"dpkit late answer v1:"
_OPEN = getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
log = logging.getLogger("dpkit.server")
T = TypeVar("T")
K = TypeVar("K")


@dataclass(frozen=True)
class Answer:
    """A finished request's response, as the request would have sent it."""

    status: int
    media_type: str
    body: bytes
    headers: dict[str, str]

    @classmethod
    def of(cls, out: Any) -> Answer:
        """A route's return value (JSON data or a Response) or a :class:`Problem`."""
        if isinstance(out, Problem):
            return cls(out.status, MEDIA_TYPE, json.dumps(out.body()).encode(),
                       dict(out.headers or {}))
        if not isinstance(out, Response):
            out = JSONResponse(jsonable_encoder(out))
        skip = {"content-length", "content-type"}
        return cls(out.status_code, out.media_type or "application/octet-stream",
                   bytes(out.body), {k: v for k, v in out.headers.items() if k not in skip})

    def response(self) -> Response:
        return Response(self.body, status_code=self.status, media_type=self.media_type,
                        headers=self.headers)


@dataclass(frozen=True)
class Kept:
    """What the store holds under an id for its analyst: ``answer`` once the work ended;
    before, ``lost`` says whether the process running it is gone (no answer will come).
    ``made`` and ``finished``: wall-clock times of the 504 and of the work's end; ``limit``:
    the timeout the request ran under (a setting: the request arrived ``limit`` before
    ``made``)."""

    who: str
    made: float
    finished: float | None
    live: str
    limit: float
    answer: Answer | None = None
    lost: bool = False


def plain_finish(future: Future[Any]) -> Answer:
    """The answer of a work as its result's JSON, or its problem as the owner would see it."""
    exc = future.exception()
    return Answer.of(problem_of(exc) if exc is not None else future.result())


class Answers(Protocol):
    """What the service needs of a late answers' store: :class:`AnswerStore` (a folder of the
    project, the default) or :class:`~dpkit.server.answers_pg.PostgresAnswers` (a table, for
    processes on several hosts). Both seal alike, bound alike and say ``lost`` alike."""

    max_age: float

    def keep(self, who: str, future: Future[T], finish: Callable[[Future[T]], Answer], *,
             limit: float) -> str: ...

    def get(self, ident: str, who: str, *, owner: bool) -> Kept | None: ...

    def close(self) -> None: ...


def rendered(finish: Callable[[Future[T]], Answer], future: Future[T], ident: str) -> Answer:
    """``finish(future)``, or a 500 when the renderer itself fails (a bug: the log has it)."""
    try:
        return finish(future)
    except Exception:  # the asker gets a 500, the log the cause
        log.exception("late answer %s could not be rendered", ident[:12])
        return Answer.of(Problem(500, "internal", "internal error; it was logged. A charge "
                                                  "made stays"))


class AnswerStore:
    """At most ``count`` answers and ``max_bytes`` of them in ``folder``, each kept
    ``max_age`` seconds after its 504."""

    def __init__(self, folder: Path, *, count: int = 1000, max_age: float = 900.0,
                 max_bytes: int = 512 * 2**20) -> None:
        self.folder, self.count, self.max_age = Path(folder), count, max_age
        self.max_bytes = max_bytes
        self.folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.folder, 0o700)  # an older, wider folder is narrowed
        self._tag_key = _shared_key(self.folder / _KEY)
        self._live: tuple[str, int] | None = None  # this process's lock: (token, descriptor)
        self._lock = threading.Lock()

    def keep(self, who: str, future: Future[T], finish: Callable[[Future[T]], Answer], *,
             limit: float) -> str:
        """A fresh unguessable id under which ``future``'s answer (``finish(future)`` once it
        is done) is kept for ``who``, its request having run ``limit`` seconds; the running
        record is written before this returns, so any process finds it at once."""
        ident = "ans_" + token_hex(16)
        kept = Kept(who, time.time(), None, self._liveness(), limit)
        path = self._path(ident, who)
        self._sweep(new=path.name)
        self._write(path, _key(ident), kept)

        def done(f: Future[T]) -> None:
            answer = rendered(finish, f, ident)
            if not path.exists():  # expired or evicted meanwhile: not revived
                return
            try:
                self._write(path, _key(ident), replace(kept, finished=time.time(),
                                                       answer=answer))
            except OSError:
                log.exception("late answer %s could not be kept", ident[:12])
                with contextlib.suppress(OSError):  # a stale "running" would say 202 for ever
                    path.unlink()
                return
            try:
                self._sweep()  # its size is known now: the byte bound
            except OSError:  # the answer is kept; the next sweep bounds the folder
                log.exception("the late answers' folder could not be swept")

        future.add_done_callback(done)
        return ident

    def get(self, ident: str, who: str, *, owner: bool) -> Kept | None:
        """What is kept under ``ident`` for ``who`` (``owner``: for anyone), or None when
        unknown, expired or another analyst's."""
        if not ID.fullmatch(ident):
            return None
        path = self._find(ident) if owner else self._path(ident, who)
        if path is None:
            return None
        try:
            raw = path.read_bytes()
            kept = _open(_key(ident), raw, path.name)
        except (OSError, ValueError, InvalidTag):
            return None
        return judged(kept, who, owner=owner, max_age=self.max_age, running=self._running,
                      expire=lambda: _unlink(str(path)))

    def close(self) -> None:
        """Give up this process's liveness lock: its running answers read as lost."""
        with self._lock:
            if self._live is not None:
                token, fd = self._live
                with contextlib.suppress(OSError):
                    (self.folder / f"{_LIVE}{token}.lock").unlink()
                os.close(fd)
                self._live = None

    def _path(self, ident: str, who: str) -> Path:
        """``TAG.NAME.ans``: its analyst's tag (for the sweep's fair share), the id's hash."""
        tag = hmac.new(self._tag_key, who.encode(), hashlib.sha256).hexdigest()[:16]
        return self.folder / record_name(tag, ident)

    def _find(self, ident: str) -> Path | None:
        """The file of ``ident`` whoever's it is (the owner's read)."""
        end = f".{_name(ident)}{_SUFFIX}"
        return next((Path(e.path) for e in os.scandir(self.folder) if e.name.endswith(end)),
                    None)

    def _write(self, path: Path, key: bytes, kept: Kept) -> None:
        """Sealed, whole (a temporary file renamed over the old one), its mtime the 504's."""
        data = _seal(key, kept, path.name)
        tmp = self.folder / f".{path.name}.{token_hex(16)[:8]}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.utime(tmp, (kept.made, kept.made))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def _liveness(self) -> str:
        """This process's liveness token: its lock file is made under a temporary name, locked,
        then renamed, so that no sweep ever sees it unlocked while the process lives."""
        with self._lock:
            if self._live is None:
                token = token_hex(16)[:16]
                tmp = self.folder / f".{_LIVE}{token}.tmp"
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.replace(tmp, self.folder / f"{_LIVE}{token}.lock")
                self._live = (token, fd)
            return self._live[0]

    def _running(self, token: str) -> bool:
        """Whether the process with this liveness token still holds its lock."""
        if not re.fullmatch(r"[0-9a-f]{16}", token):
            return False
        try:
            fd = os.open(self.folder / f"{_LIVE}{token}.lock", os.O_RDONLY | _OPEN)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # also lets go of the shared lock, if it was granted
        return False

    def _sweep(self, new: str | None = None) -> None:
        """Drop expired answers, stale liveness locks and leftovers of interrupted writes;
        then, past ``count`` (room made for ``new``, a file name about to be written) or
        ``max_bytes``, the oldest answer of the analyst holding the most."""
        now, kept = time.time(), []
        for entry in os.scandir(self.folder):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            old = now - st.st_mtime > self.max_age
            if entry.name == _KEY:
                continue
            if entry.name.endswith(_SUFFIX) and not entry.name.startswith(".") and not old:
                kept.append((st.st_mtime, entry.name.split(".", 1)[0], st.st_size, entry.path))
            elif entry.name.startswith(_LIVE) and entry.name.endswith(".lock"):
                token = entry.name[len(_LIVE):-len(".lock")]
                if token != (self._live or ("",))[0] and not self._running(token):
                    _unlink(entry.path)
            elif old:  # an expired answer, or a temporary file a crash left behind
                _unlink(entry.path)
        tag = new.split(".", 1)[0] if new is not None else None
        for victim in victims(kept, self.count, self.max_bytes, new=tag):
            _unlink(victim)


def judged(kept: Kept, who: str, *, owner: bool, max_age: float,
           running: Callable[[str], bool], expire: Callable[[], None]) -> Kept | None:
    """A record opened under its id, as ``who`` may see it: None when expired (``expire``
    drops it) or another analyst's (``owner``: anyone's may be read); ``lost`` when its work
    has not ended and the process running it is gone (``running`` asks by liveness token)."""
    if time.time() - kept.made > max_age:
        expire()
        return None
    if not (owner or hmac.compare_digest(kept.who.encode(), who.encode())):
        return None
    if kept.answer is None and not running(kept.live):
        return replace(kept, lost=True)
    return kept


def victims(kept: list[tuple[float, str, int, K]], count: int, max_bytes: int, *,
             new: str | None = None) -> list[K]:
    """What to drop of ``kept`` (``(made, tag, size, key)`` of the unexpired answers) to be
    within ``count`` (room made for ``new``, the tag of an answer about to be added) and
    ``max_bytes``: each time the oldest answer of the tag holding the most (answers past the
    count, else bytes), so that one analyst's many late answers never push out another's."""
    kept, out = sorted(kept, key=lambda k: (k[0], k[1], k[2])), []
    room = 1 if new is not None else 0
    while kept:
        by_count = len(kept) + room > count
        if not by_count and sum(k[2] for k in kept) <= max_bytes:
            break
        held: dict[str, int] = {}
        for _, tag, size, _ in kept:
            held[tag] = held.get(tag, 0) + (1 if by_count else size)
        if by_count and new is not None and new in held:
            held[new] += 1
        most = max(held.values())
        victim = next(k for k in kept if held[k[1]] == most)
        out.append(victim[3])
        kept.remove(victim)
    return out


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _name(ident: str) -> str:
    return hashlib.sha256(b"dpkit late answer name:" + ident.encode()).hexdigest()[:32]


def id_name(ident: str) -> str:
    """What a store may show of an id: a hash (the id, the key to its seal, stays out)."""
    return _name(ident)


def record_name(tag: str, ident: str) -> str:
    """A record's name, ``TAG.NAME.ans`` (its analyst's tag, the id's hash): bound into its
    seal, so that a record moved under another name or tag does not open."""
    return f"{tag}.{_name(ident)}{_SUFFIX}"


def seal(ident: str, kept: Kept, name: str) -> bytes:
    """``kept`` sealed under the id's key, ``name`` (:func:`record_name`) bound to it."""
    return _seal(_key(ident), kept, name)


def unseal(ident: str, raw: bytes, name: str) -> Kept:
    """What :func:`seal` sealed; raises ``InvalidTag`` (or ``ValueError``) for anything else."""
    return _open(_key(ident), raw, name)


def _shared_key(path: Path) -> bytes:
    """The folder's tag key, made once by whichever process comes first (linked into place,
    never over another's: every process tags alike)."""
    with contextlib.suppress(OSError):
        data = path.read_bytes()
        if len(data) == 32:
            return data
    tmp = path.with_name(f".{path.name}.{token_hex(16)[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(token_bytes(32))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        _unlink(str(tmp))
    return path.read_bytes()


def _key(ident: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=b"dpkit late answer key").derive(ident.encode())


def _seal(key: bytes, kept: Kept, name: str) -> bytes:
    record = asdict(kept)
    if kept.answer is not None:
        record["answer"]["body"] = base64.b64encode(kept.answer.body).decode()
    nonce = token_bytes(16)[:12]  # a fresh nonce per write: one key seals two records
    return nonce + AESGCM(key).encrypt(nonce, json.dumps(record).encode(),
                                       _AAD + name.encode())


def _open(key: bytes, raw: bytes, name: str) -> Kept:
    record = json.loads(AESGCM(key).decrypt(raw[:12], raw[12:], _AAD + name.encode()))
    answer = record.pop("answer")
    if answer is not None:
        answer = Answer(answer["status"], answer["media_type"],
                        base64.b64decode(answer["body"]), dict(answer["headers"]))
    return Kept(**record, answer=answer)
