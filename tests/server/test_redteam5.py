"""Fifth red-team pass (FINDINGS.md L): exploit tests through the HTTP service.

Timing tests here assert lower bounds only (an answer never leaves before its class:
asyncio's and the timer's sleeps do not wake early) and orders; no statistics, so no
false-failure probability beyond a machine stalled for seconds."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.server.conftest import SQL, Project

from dpkit.server.pacing import Pacing


def test_l1_a_free_read_does_not_time_the_query_it_waited_behind(make_client: Any,
                                                                   project: Project) -> None:
    """L1: alice's query is held until its class (0.8 s); her own GET /v1/budget sent while
    the answer is held waited for her curator's lock, which her query let go of when its
    work ended: the budget came back at the work's end, its exact time, a class defeated
    by a free request. The curator is now kept until the class boundary: the budget, sent
    at once after the query, comes no earlier than the query's class."""
    client = make_client(answer_deadline_ms=800)
    holding = threading.Event()
    pacing = client.app.state.service.pacing

    async def sleep(seconds: float) -> None:
        holding.set()
        import anyio

        await anyio.sleep(seconds)

    client.app.state.service.pacing = Pacing(pacing.first, pacing.factor, pacing.top,
                                             sleep=sleep)
    h = project.headers(project.alice)
    sent: dict[str, float] = {}

    def query() -> None:
        sent["query"] = time.monotonic()
        assert client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                           headers=h).status_code == 200

    t = threading.Thread(target=query)
    t.start()
    assert holding.wait(20)  # the query's work ended: its answer is being held
    r = client.get("/v1/budget", headers=h)
    answered = time.monotonic()
    t.join()
    assert r.status_code == 200
    assert answered - sent["query"] >= 0.8 - 1e-3


def test_l1_a_late_work_keeps_its_curator_until_its_late_class(make_client: Any,
                                                                project: Project) -> None:
    """L1, past the timeout: the 504 leaves at 0.3 s, the work ends soon after (the ledger
    is let go); alice's budget, asked at once, waited for the work's end before. Now it
    waits for the late class, 2 x 0.3 s after the query was sent."""
    import sqlite3

    client = make_client(timeout=0.3, answer_deadline_ms=50)
    h = project.headers(project.alice)
    lock = sqlite3.connect(project.path / "ledger.sqlite", timeout=0)
    lock.execute("BEGIN EXCLUSIVE")  # the ledger held past the timeout: the query waits
    sent = time.monotonic()
    try:
        assert client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                           headers=h).status_code == 504
    finally:
        lock.rollback()
        lock.close()
    assert client.get("/v1/budget", headers=h).status_code == 200
    assert time.monotonic() - sent >= 0.6 - 1e-3


def test_l1_left_is_the_class_or_the_late_class() -> None:
    clock = [100.0]
    p = Pacing(0.05, 2.0, 30.0, clock=lambda: clock[0])
    clock[0] = 100.03
    assert abs(p.left(100.0) - 0.02) < 1e-9  # its class, 0.05 s after it arrived
    clock[0] = 131.0
    assert abs(p.left(100.0) - 29.0) < 1e-9  # past the top: the late class, 60 s
    assert abs(p.left(100.0, keep=20.0) - 17.0) < 1e-9  # at most top + 0.9 x keep
    assert Pacing(0.0, 2.0, 30.0, clock=lambda: clock[0]).left(100.0) == 0.0
