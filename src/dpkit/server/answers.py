"""Late answers: a request that runs past the service's timeout is answered 504 with an answer
id; its work goes on, and its answer is kept here for the analyst who asked, so that a charge
already recorded in the ledger is never paid for nothing.

``GET /v1/answers/{id}`` gives 202 (still running), 200 (the very answer the request would
have given) or 404 (unknown, expired, or another analyst's: one 404 for all, no existence
oracle). The owner may read every answer. A kept answer is a DP release already charged, so
keeping and giving it again is post-processing (no further privacy cost).

Ids are 128 bits straight from the OS CSPRNG (:func:`dpkit.noise.token_hex`, the one door
for every random byte, tokens included): not a DP sample but capabilities that must be
unguessable. Answers live in this process's memory,
bounded in count, bytes and age: a restart drops them (the ledger still holds the charge; the
analyst loses that one answer, as before this store existed), a deliberate trade against
writing released answers to disk.
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from dpkit.noise import token_hex

__all__ = ["AnswerStore", "Late"]


@dataclass
class Late:
    """One request's work still running (or done) after its 504."""

    owner: str  # the caller's key: only they (and the project's owner) may read it
    future: Future[Any]
    made: float
    render: Callable[[Any], Any] | None = None
    size: int = 0  # the answer's bytes, once done (a JSON text's length, near enough)
    finished: float | None = None  # when its work ended (time.monotonic), for its class

    def ended(self, future: Future[Any]) -> None:
        self.finished = time.monotonic()


class AnswerStore:
    """At most ``count`` answers and ``max_bytes`` of them, each kept ``max_age`` seconds
    after its 504; beyond either bound, the oldest of whoever holds the most (answers, or
    bytes) goes first."""

    def __init__(self, *, count: int = 1000, max_age: float = 900.0,
                 max_bytes: int = 512 * 2**20) -> None:
        self.count, self.max_age, self.max_bytes = count, max_age, max_bytes
        self._items: OrderedDict[str, Late] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, owner: str, future: Future[Any],
             render: Callable[[Any], Any] | None = None) -> str:
        """A fresh unguessable id under which ``future``'s answer is kept for ``owner``."""
        ident = "ans_" + token_hex(16)
        late = Late(owner, future, time.monotonic(), render)
        future.add_done_callback(late.ended)
        with self._lock:
            self._expire()
            self._items[ident] = late
            while len(self._items) > self.count:
                self._evict(lambda kept: 1)
        # outside the lock: a future already done calls back at once, in this thread
        future.add_done_callback(lambda done: self._sized(ident, done))
        return ident

    def _sized(self, ident: str, future: Future[Any]) -> None:
        """Record a finished answer's size; past ``max_bytes`` in all, evict (a late synthetic
        release of 1e6 rows is tens of MB: kept by the thousand, they exhausted memory)."""
        size = _size(future)
        with self._lock:
            late = self._items.get(ident)
            if late is None:
                return
            late.size = size
            while self._items and sum(x.size for x in self._items.values()) > self.max_bytes:
                self._evict(lambda x: x.size)

    def _evict(self, weight: Callable[[Late], int]) -> None:
        """Drop the oldest answer of the analyst who holds the most (by ``weight``: answers
        or bytes): one analyst's flood of late requests must not push out another's answer,
        charged and not yet fetched (FINDINGS.md J3)."""
        held: dict[str, int] = {}
        for late in self._items.values():
            held[late.owner] = held.get(late.owner, 0) + weight(late)
        most = max(held.values())
        ident = next(i for i, late in self._items.items() if held[late.owner] == most)
        del self._items[ident]

    def get(self, ident: str, who: str, *, owner: bool) -> Late | None:
        """The kept work, or None when unknown, expired or another analyst's."""
        with self._lock:
            self._expire()
            late = self._items.get(ident)
        if late is None or not (owner or hmac.compare_digest(late.owner, who)):
            return None
        return late

    def _expire(self) -> None:
        now = time.monotonic()
        while self._items:
            ident, late = next(iter(self._items.items()))
            if now - late.made <= self.max_age:
                break
            del self._items[ident]


def _size(future: Future[Any]) -> int:
    """About how many bytes ``future``'s answer holds (0 for a failure or a cancel): a
    text's length, a JSON answer's serialised length (``(text, release)`` of a synthetic
    release: its text)."""
    if future.cancelled() or future.exception() is not None:
        return 0
    answer = future.result()
    if isinstance(answer, tuple) and answer and isinstance(answer[0], (str, bytes)):
        answer = answer[0]
    if isinstance(answer, (str, bytes)):
        return len(answer)
    try:
        return len(json.dumps(answer, default=str))
    except (TypeError, ValueError):  # pragma: no cover - the answers are JSON-ready
        return 0
