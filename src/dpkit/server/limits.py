"""Request limits and the audit log.

- :class:`RateLimiter`: a token bucket per caller (the analyst, whichever credential it
  signs in with; the owner), per process: ``rate`` requests per second with bursts of
  ``burst``; beyond, 429 with ``Retry-After``. With N worker processes a caller gets at most
  N times the rate (documented).
- :class:`Guard`: ASGI middleware that refuses a body longer than the limit (413, from the
  ``Content-Length`` header or while reading a chunked body) and writes one audit line per
  request: time, analyst, role, method, route, status, charge (epsilon, delta) and the
  duration; never the answer, the SQL's result or a credential. It also holds an answer that
  touched rows until its timing class (:mod:`dpkit.server.pacing`; the audit line then has
  ``work_ms``, the time before the hold, and ``class_ms``, the boundary it left at).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException

from dpkit.server.pacing import Pacing
from dpkit.server.problems import MEDIA_TYPE, Problem

__all__ = ["AuditLog", "Guard", "RateLimiter"]


class RateLimiter:
    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = float(rate), int(burst)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> None:
        """Spend one request of ``key``'s bucket, or raise a 429 problem."""
        now = time.monotonic()
        with self._lock:
            level, last = self._buckets.get(key, (float(self.burst), now))
            level = min(float(self.burst), level + (now - last) * self.rate)
            if level < 1.0:
                wait = (1.0 - level) / self.rate
                self._buckets[key] = (level, now)
                raise Problem(429, "rate-limited",
                              f"more than {self.rate:g} requests/s (bursts of {self.burst}) "
                              f"as this caller; retry after {wait:.2f} s",
                              {"Retry-After": str(max(1, round(wait + 0.5)))})
            self._buckets[key] = (level - 1.0, now)


class AuditLog:
    """Append-only JSON lines; each line is one ``write`` on an ``O_APPEND`` descriptor, so
    the lines of several processes interleave whole."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        # its work_ms are the exact times the timing classes withhold from analysts, and its
        # lines name them: an existing file readable by others is narrowed (FINDINGS.md L5)
        if os.fstat(self._fd).st_mode & 0o077:
            os.fchmod(self._fd, 0o600)
        # a late answer's line comes from a worker thread, possibly after close(): the lock
        # keeps it off a closed descriptor (whose number the process may have reused)
        self._lock = threading.Lock()
        self._closed = False

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if not self._closed:
                os.write(self._fd, line.encode("utf-8"))

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)


async def _send_problem(send: Any, problem: Problem) -> None:
    body = json.dumps(problem.body()).encode()
    headers = [(b"content-type", MEDIA_TYPE.encode()),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": problem.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _hold(pacing: Pacing | None, state: dict[str, Any], arrived: float,
                code: int) -> None:
    """Hold an answer the route marked until its class boundary; a 504 is the top class
    itself (its time is the timeout) and goes out at once."""
    paced = state.get("paced")  # True, or the request's own timeout (its top class)
    if pacing is None or not pacing.on or not paced or code == 504:
        return
    took, boundary = await pacing.hold(arrived, None if paced is True else float(paced))
    state["work_ms"] = round(took * 1000, 2)
    state["class_ms"] = None if boundary is None else round(boundary * 1000, 2)


class Guard:
    """ASGI middleware: body size limit, the answer held to its timing class when the route
    marked it (``request.state.paced``), then the audit line once the answer is sent."""

    def __init__(self, app: Any, *, max_body: int, audit: AuditLog | None,
                 pacing: Callable[[], Pacing] | None = None) -> None:
        self.app, self.max_body, self.audit = app, max_body, audit
        self.pacing = pacing  # read per request: the service's, which a test may replace

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        pacing = self.pacing() if self.pacing is not None else None
        arrived = pacing.clock() if pacing is not None else 0.0
        state = scope.setdefault("state", {})
        if pacing is not None:  # the classes' origin, for the curator's let-go as well
            state["arrived"] = arrived
        status = {"code": 500, "sent": False}
        too_large = Problem(413, "too-large",
                            f"the request body is larger than {self.max_body} bytes; send a "
                            f"shorter query")
        length = dict(scope.get("headers") or []).get(b"content-length")
        seen = 0

        async def limited_receive() -> Any:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_body:  # FastAPI passes its own HTTPException through
                    raise HTTPException(413, too_large.detail)
            return msg

        async def watched_send(msg: Any) -> None:
            if msg["type"] == "http.response.start":
                await _hold(pacing, state, arrived, msg["status"])
                status["code"], status["sent"] = msg["status"], True
            await send(msg)

        try:
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                status["code"] = 413
                await _send_problem(send, too_large)
            else:
                await self.app(scope, limited_receive, watched_send)
        except HTTPException:
            status["code"] = 413
            if not status["sent"]:
                await _send_problem(send, too_large)
        except Exception:  # Starlette answers it 500 outside: held like any other answer
            if not status["sent"]:
                await _hold(pacing, state, arrived, 500)
            raise
        finally:
            self._audit(scope, state, status["code"], started)

    def _audit(self, scope: Any, state: dict[str, Any], code: int, started: float) -> None:
        if self.audit is None:
            return
        route = scope.get("route")
        self.audit.write({
            "time": _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds"),
            "analyst": state.get("analyst"), "role": state.get("role"),
            "method": scope.get("method"),
            "endpoint": getattr(route, "path", None) or scope.get("path"),
            "status": code, "charge": state.get("charge"),
            "ms": round((time.perf_counter() - started) * 1000, 2),
            **{k: state[k] for k in ("work_ms", "class_ms") if k in state},
        })
