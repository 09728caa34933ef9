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
bounded in count and age: a restart drops them (the ledger still holds the charge; the
analyst loses that one answer, as before this store existed), a deliberate trade against
writing released answers to disk.
"""

from __future__ import annotations

import hmac
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
    finished: float | None = None  # when its work ended (time.monotonic), for its class

    def ended(self, future: Future[Any]) -> None:
        self.finished = time.monotonic()


class AnswerStore:
    """At most ``count`` answers, each kept ``max_age`` seconds after its 504."""

    def __init__(self, *, count: int = 1000, max_age: float = 900.0) -> None:
        self.count, self.max_age = count, max_age
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
            while len(self._items) > self.count:  # the oldest go first
                self._items.popitem(last=False)
        return ident

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
