"""Curators per analyst, cached per process (opening one verifies the ledger's chain and
attaches the data: milliseconds that a request should not pay each time).

Each analyst's curator is opened as that analyst, so every charge goes through the curator's
own path (check and charge in one ledger transaction, revocation checked under the write lock)
and is recorded under the analyst's name. Calls on one curator are serialised by its lock
(one DuckDB connection each); different analysts run in parallel. A call that runs past the
service's timeout is answered 504; the work goes on in its thread and a charge it made stays
in the ledger, and its answer is kept (:class:`~dpkit.server.answers.AnswerStore`, a folder
of the project that every worker process reads, or a PostgreSQL table that every host reads:
:mod:`dpkit.server.answers_pg`) under the id the 504 names, for
``GET /v1/answers/{id}``; a call still waiting for a thread then is cancelled (nothing
charged, nothing kept).

A call that may read rows lets its curator's lock (and its caller's slot, below) go at its
answer's timing class, not when its work ended (``let_go``; FINDINGS.md L1): the caller's next
request waits for that lock, and would otherwise time the work the class withholds.

One caller may have at most ``per_caller`` calls waiting or running in a process; beyond, 429
``busy`` (nothing charged). Its calls run one at a time anyway (its curator's lock), so more
would only hold the shared threads while they wait for that lock, and the other analysts'
requests queued behind them would time out (found by the red-team pass, FINDINGS.md F1).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, TypeVar

from dpkit.engine.curator import Curator
from dpkit.engine.roles import TOKEN_ENV
from dpkit.server.answers import FOLDER, Answer, Answers, AnswerStore, plain_finish
from dpkit.server.auth import Identity
from dpkit.server.problems import Problem

__all__ = ["Pool"]

T = TypeVar("T")
log = logging.getLogger("dpkit.server")


class Pool:
    """The owner's curator (which also authenticates) and one curator per analyst."""

    def __init__(self, project: str | Path, *, timeout: float = 30.0, threads: int = 16,
                 per_caller: int | None = None, answers: Answers | None = None) -> None:
        if os.environ.get(TOKEN_ENV):
            raise ValueError(f"unset {TOKEN_ENV} before starting the service: it runs as the "
                             f"project's owner and opens each analyst's curator itself")
        self.project = Path(project)
        self.owner = Curator.open(self.project)
        self.timeout = timeout
        self._curators: dict[str, tuple[Curator, threading.Lock]] = {
            self.owner.analyst: (self.owner, threading.Lock())}
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dpkit-q")
        self.opened = 0  # curators opened by this process (the cache's misses)
        # a quarter of the threads per caller: four callers at their limit still leave room
        self.per_caller = per_caller if per_caller is not None else max(1, threads // 4)
        self._pending: dict[str, int] = {}  # calls submitted and not finished, per caller
        # late answers, kept after their 504 where every worker process finds them
        self.answers: Answers = answers or AnswerStore(self.project / FOLDER)

    def curator(self, who: Identity, token: str | None = None) -> tuple[Curator, threading.Lock]:
        """The cached curator acting as ``who`` (opened on first use)."""
        name = who.name if not who.owner else self.owner.analyst
        with self._lock:
            hit = self._curators.get(name)
            if hit is not None:
                return hit
            if token is not None and token.startswith("dpkit_") and token.count(".") == 0:
                cur = Curator.open(self.project, token=token)
            else:  # an OIDC identity: the service authenticated it; act as that analyst
                cur = Curator.open(self.project)
                cur.analyst, cur.is_owner = name, False
            if cur.analyst != name:  # pragma: no cover - the token names the same analyst
                cur.close()
                raise Problem(401, "unauthenticated", "the credential changed meanwhile")
            self.opened += 1
            hit = self._curators[name] = (cur, threading.Lock())
            return hit

    def run(self, who: Identity, token: str | None, call: Callable[[Curator], T], *,
            timeout: float | None = None,
            finish: Callable[[Future[T]], Answer] | None = None,
            let_go: Callable[[Callable[[], None]], None] | None = None) -> T:
        """``call(curator)`` under the curator's lock, answered within the timeout; 429 when
        ``who`` already has :attr:`per_caller` calls in this process. Past the timeout, 504
        naming the id under which the answer will be kept (``finish`` turns the done work into
        the response the request would have given; by default its result's JSON).
        ``let_go``: given the function that releases the curator's lock and the caller's slot
        once the call ended, calls it then or later (at the answer's timing class:
        :meth:`~dpkit.server.pacing.Pacing.left`); by default at once."""
        key = who.name if not who.owner else self.owner.analyst
        with self._lock:
            if self._pending.get(key, 0) >= self.per_caller:
                raise Problem(429, "busy",
                              f"{self.per_caller} of your requests are still running here; "
                              f"wait for their answers, then send the next (nothing was "
                              f"charged)", {"Retry-After": "1"})
            self._pending[key] = self._pending.get(key, 0) + 1

        def locked() -> T:
            held: threading.Lock | None = None
            try:
                while True:  # the curator may be replaced meanwhile (:meth:`exclusive`)
                    hit = self.curator(who, token)
                    hit[1].acquire()
                    if self._curators.get(hit[0].analyst) is hit:
                        held = hit[1]
                        return call(hit[0])
                    hit[1].release()
            finally:
                self._let_go(key, held, let_go)

        try:
            future = self._threads.submit(locked)
        except RuntimeError:  # shut down: nothing will run it, so nothing stays pending
            self._done(key)
            raise Problem(503, "unavailable", "the service is shutting down; nothing was "
                          "charged by this request. Try again when it is back") from None
        try:
            return future.result(timeout=timeout if timeout is not None else self.timeout)
        except FutureTimeout:
            if future.cancel():  # never started: it must not charge after its 504
                self._done(key)
                raise Problem(504, "timeout",
                              f"the request waited past the service's limit of "
                              f"{timeout or self.timeout:g} s for a free thread and was "
                              f"cancelled; nothing was charged. Try again") from None
            raise self._late(key, future, finish or plain_finish,
                             timeout or self.timeout) from None

    def _late(self, key: str, future: Future[T], finish: Callable[[Future[T]], Answer],
              limit: float) -> Problem:
        """The 504 of a call still running past ``limit``, naming where its answer is kept;
        if it cannot be kept (the folder cannot be written), the 504 says so: the call goes
        on all the same, and a charge it makes stays."""
        try:
            ident = self.answers.keep(key, future, finish, limit=limit)
        except OSError:
            log.exception("a late answer could not be kept")
            # its answer is lost, but finish still writes the charge's audit line at its end
            future.add_done_callback(lambda done: _finish_quietly(finish, done))
            return Problem(504, "timeout",
                           f"the request ran past the service's limit of {limit:g} s; it goes "
                           f"on, but its answer cannot be kept (the service could not write "
                           f"it: tell the owner). A charge it makes is recorded once: see "
                           f"/v1/history")
        url = f"/v1/answers/{ident}"
        return Problem(504, "timeout",
                       f"the request ran past the service's limit of {limit:g} s; it goes "
                       f"on, and its answer is kept for you: poll GET {url} (202 while "
                       f"running, then the answer). A charge it makes is recorded once (see "
                       f"/v1/history)",
                       {"Retry-After": "1", "Location": url},
                       {"answer_id": ident, "answer_url": url})

    def _let_go(self, key: str, held: threading.Lock | None,
                let_go: Callable[[Callable[[], None]], None] | None) -> None:
        """Release the curator's lock (``held``, once a call ran) and the caller's slot, now
        or when ``let_go`` says: a lock is a plain Lock, which a timer thread may release."""
        def release() -> None:
            if held is not None:
                held.release()
            self._done(key)

        if held is None or let_go is None:
            release()
            return
        try:
            let_go(release)
        except Exception:  # never a lock left held for ever: the analyst's curator is its own
            log.exception("a curator could not be held to its class; let go at once")
            release()

    def _done(self, key: str) -> None:
        with self._lock:
            left = self._pending.get(key, 1) - 1
            if left > 0:
                self._pending[key] = left
            else:
                self._pending.pop(key, None)

    def exclusive(self, call: Callable[[Curator], T]) -> T:
        """``call(owner's curator)`` with every other curator of this process closed (waiting
        for their calls to end): loading a table takes the data file's write lock, which
        DuckDB grants only while no reader has the file attached. They reopen at their next
        request. Other processes' readers make the load fail (409: stop them)."""
        with self._lock:
            others = {n: hit for n, hit in self._curators.items() if hit[0] is not self.owner}
            for _, lock in others.values():
                lock.acquire()
            try:
                for n, (cur, _) in others.items():
                    cur.close()
                    del self._curators[n]
                with self._curators[self.owner.analyst][1]:
                    return call(self.owner)
            finally:
                for _, lock in others.values():
                    lock.release()

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self.answers.close()
        with self._lock:
            for cur, _ in self._curators.values():
                cur.close()
            self._curators.clear()


def _finish_quietly(finish: Callable[[Future[Any]], Answer], future: Future[Any]) -> None:
    """``finish`` for a late call whose answer cannot be kept: only its side effects (the
    audit line of its charge) matter, and a worker thread's callback must not raise."""
    try:
        finish(future)
    except Exception:
        log.exception("a late call's end could not be recorded")
