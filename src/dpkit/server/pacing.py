"""Answers released at timing classes: the time an answer takes leaves the service only as
the class it fell in (FINDINGS.md H5, docs/service.md "Answer timing").

An answer's wall time follows the rows its statement scans *before* contribution bounding
drops a unit's extra rows; no accountant term covers that (δ_t covers the samplers' and the
selections' work). So the service holds every answer that touched rows (queries, releases,
fits, and the failures after their charge) until the smallest **class boundary** at or above
the time it took since its request arrived:

    first, first·f, first·f², ...   below the request's timeout (the top class),

each boundary a function of the deployment's settings only (``answer_deadline_ms`` = first,
``answer_class_factor`` = f, and the timeout the request runs under: the service's
``timeout``, or an endpoint's own where it passes one to ``Caller.run``). What leaves the
service is then one of K classes: an answer carries at most log2(K) bits about its own
timing, and carries none unless the work crosses a boundary on one of D, D' and not on the
other. This is a bounded channel, not a DP
guarantee: an analyst who can place its own work near a boundary (a query's shape, a slow
upload) learns at most whether the data's share of the time crossed it. A deployment whose
answers all finish below ``first`` releases every answer at ``first`` exactly (one class, no
bits): set ``first`` above the slowest answer (the audit log's ``work_ms``) for that.

Past the top class the 504 goes out as it comes (its time is the timeout, a setting); any
other answer past the top (the pool's timeout starts after the request arrived: its work ended
in between) waits for the late class below. The 504's late answer
(:mod:`dpkit.server.answers`) becomes readable only at the next boundaries timeout·f,
timeout·f², ... after the request (at the latest at ``late_cap`` after
the 504, so that it is read before the store drops it), whatever the moment its work ended.

The hold is an ``await`` in the ASGI layer (:class:`dpkit.server.limits.Guard`), after the
route's thread returned: it holds neither a thread nor the event loop, so a held answer delays
no other analyst's request. The analyst's own curator (its lock, and its slot of the pool's
``per_caller``) is let go at the same class boundary (:meth:`Pacing.left`, by a timer,
:meth:`Pacing.defer`), not when the work ended: a free request of the same analyst (its
budget, a preview) waits for that lock, and its answer came back at the very end of the work,
the time the class withholds (FINDINGS.md L1). A late work keeps it until its late class.
Refusals the service makes before any curator call (401, 413, 422, 429) go out at once: their
time is a function of the request alone.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["Pacing"]


async def _sleep(seconds: float) -> None:
    import anyio  # the [server] extra's (Starlette's): ServerConfig imports this module without

    await anyio.sleep(seconds)


def _defer(seconds: float, call: Callable[[], None]) -> None:
    if seconds <= 0:
        call()
        return
    timer = threading.Timer(seconds, call)
    timer.daemon = True  # a stopping service does not wait for it: its curators close anyway
    timer.start()


@dataclass(frozen=True)
class Pacing:
    """The class boundaries of one deployment (seconds; ``first`` <= 0: pacing off).

    ``clock`` and ``sleep`` are the monotonic clock and the asynchronous sleep the hold uses,
    ``defer`` calls a function after so many seconds (a timer thread) to let a curator go
    (injected by the tests: a fake clock that a fake sleep advances)."""

    first: float
    factor: float
    top: float
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    sleep: Callable[[float], Awaitable[None]] = field(default=_sleep, compare=False)
    defer: Callable[[float, Callable[[], None]], None] = field(default=_defer, compare=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.first) and self.first >= 0):
            raise ValueError(f"answer_deadline_ms must be a number >= 0 (0: off; got "
                             f"{self.first * 1000!r})")
        if not (math.isfinite(self.factor) and self.factor >= 1.1):
            raise ValueError(f"answer_class_factor must be >= 1.1 (got {self.factor!r})")

    @property
    def on(self) -> bool:
        return self.first > 0

    def classes(self, top: float | None = None) -> list[float]:
        """Every boundary up to the top (the top included): K = len(classes()); none when
        pacing is off. ``top``: this request's own timeout where it has one (a fit's), else
        the service's."""
        if not self.on:
            return []
        top = self.top if top is None else top
        out, b = [], self.first
        while b < top:
            out.append(b)
            b *= self.factor
        return [*out, top]

    def boundary(self, elapsed: float, top: float | None = None) -> float | None:
        """The smallest boundary >= ``elapsed``; None past the top (:meth:`target` says when)."""
        classes = self.classes(top)
        if not classes or elapsed > classes[-1]:
            return None
        return next(b for b in classes if b >= elapsed)

    def target(self, took: float, top: float | None = None,
               keep: float | None = None) -> float | None:
        """The boundary an answer that took ``took`` since its request leaves at: its class;
        past the top, its late class (top·f^k, at most ``top`` + :meth:`late_cap` of
        ``keep`` when given); None when pacing is off."""
        if not self.on:
            return None
        top = self.top if top is None else top
        b = self.boundary(took, top)
        if b is None:
            b = top * self.factor
            while b < took:
                b *= self.factor
            if keep is not None:
                b = min(b, top + self.late_cap(keep))
        return b

    async def hold(self, started: float,
                   top: float | None = None) -> tuple[float, float | None]:
        """Wait until the class boundary of the time since ``started`` (a ``clock`` reading
        taken when the request arrived); the time it took and the boundary (None: pacing
        off). An answer past the top that is not the 504 (its work ended after the top
        counted from the arrival, before the pool's own timeout, which starts later) waits
        for its late class: it went out as it came, its exact time (FINDINGS.md L4)."""
        took = self.clock() - started
        b = self.target(took, top)
        if b is not None:
            left = started + b - self.clock()
            if left > 0:
                await self.sleep(left)
        return took, b

    def left(self, started: float, top: float | None = None,
             keep: float | None = None) -> float:
        """Seconds from now to the class boundary of the time since ``started``: its class,
        or past the top its late class (top·f^k, at the latest ``top`` + :meth:`late_cap` of
        ``keep``); 0 when pacing is off. When a curator is let go after its work."""
        b = self.target(self.clock() - started, top, keep)
        return 0.0 if b is None else max(0.0, started + b - self.clock())

    def late_ready(self, made: float, finished: float, keep: float,
                   top: float | None = None) -> float:
        """When a late answer becomes readable (on the clock of ``made`` and ``finished``):
        ``made``, its 504 (the request arrived ``top`` before: this request's own timeout
        where it has one, else the service's), ``finished``, when its work ended; at the next
        boundary top·f^k (k >= 1) after the request, and at the latest at
        :meth:`late_cap` of ``keep`` (the seconds its store keeps it) after the 504."""
        top = self.top if top is None else top
        arrived, b = made - top, top * self.factor
        while arrived + b < finished:
            b *= self.factor
        return min(arrived + b, made + self.late_cap(keep))

    @staticmethod
    def late_cap(keep: float) -> float:
        """The last late class: nine tenths of the time the answer is kept after its 504."""
        return 0.9 * keep
