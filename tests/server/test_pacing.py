"""Answers leave at timing classes (dpkit.server.pacing; FINDINGS.md H5): the time an answer
that read rows takes is released as its class boundary only, the same on D and on D' = D plus
one unit of many rows; late answers become readable at their late class; refusals before any
curator call go out at once.

The D/D' test runs the real service under a fake clock that the hold's sleep advances (no real
waiting): what it asserts is the arithmetic of the hold, not a wall-clock threshold. Its only
real-time allowance is the few lines of code between the outer observer and the service's
middleware (250 ms against microseconds: it fails only if the process stalls that long between
two adjacent awaits). The real-time tests assert lower bounds (an answer never leaves before
its class: asyncio's sleep does not wake early) or an order (a budget read answered within
another answer's 2 s hold: it fails only if that read takes 2 s), no statistics: no false-failure
probability to state beyond a machine stalled for seconds."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.server.conftest import SQL, Project

import dpkit as dp
from dpkit.server.pacing import Pacing

SLACK = 0.25  # seconds of real time between the observer's clock readings and the Guard's


class FakeClock:
    """Monotonic time plus what the hold 'slept': the hold never waits for real."""

    def __init__(self, *, frozen: bool = False) -> None:
        self.offset = 0.0
        self.frozen = frozen  # no real time at all: exact, whatever the machine's load

    def __call__(self) -> float:
        return self.offset if self.frozen else time.monotonic() + self.offset

    async def sleep(self, seconds: float) -> None:
        self.offset += seconds

    @staticmethod
    def defer(seconds: float, call: Any) -> None:
        call()  # a curator let go at once: its class is the answer's hold, checked here


class Observed:
    """ASGI wrapper: (status, the fake clock's time from the request to the answer's start)."""

    def __init__(self, app: Any, clock: FakeClock) -> None:
        self.app, self.clock = app, clock
        self.seen: list[tuple[int, float]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        start = self.clock()

        async def watched(msg: Any) -> None:
            if msg["type"] == "http.response.start":
                self.seen.append((msg["status"], self.clock() - start))
            await send(msg)

        await self.app(scope, receive, watched)


def test_classes_and_boundaries() -> None:
    p = Pacing(0.05, 2.0, 30.0)
    assert p.classes() == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0]
    assert p.boundary(0.0) == p.boundary(0.05) == 0.05
    assert p.boundary(0.0501) == 0.1 and p.boundary(26.0) == 30.0
    assert p.boundary(30.5) is None  # past the top: the 504, sent as it comes
    assert p.target(30.5) == 60.0 and p.target(61.0) == 120.0  # any other: its late class
    assert p.target(800.0, keep=900.0) == 30.0 + 810.0
    off = Pacing(0.0, 2.0, 30.0)
    assert not off.on and off.classes() == [] and off.boundary(1.0) is None
    assert off.target(1.0) is None
    assert Pacing(60.0, 2.0, 30.0).classes() == [30.0]  # a first class past the timeout
    # a request with a timeout of its own (a fit's): its classes go up to that
    assert p.classes(120.0)[-2:] == [102.4, 120.0] and p.boundary(40.0, top=120.0) == 51.2
    # late answers: the request arrived top (30 s) before its 504 at made = 100
    assert p.late_ready(100.0, 100.5, 900.0) == 70.0 + 60.0
    assert p.late_ready(100.0, 130.1, 900.0) == 70.0 + 120.0
    assert p.late_ready(100.0, 800.0, 900.0) == 100.0 + 810.0  # the last late class
    # a fit's 504 at made = 200 came its own timeout (120 s) after the request
    assert p.late_ready(200.0, 201.0, 900.0, top=120.0) == 80.0 + 240.0
    for bad in ({"first": -1.0}, {"first": float("nan")}, {"factor": 1.0}):
        with pytest.raises(ValueError):
            Pacing(**{"first": 0.05, "factor": 2.0, "top": 30.0, **bad})


def _neighbours(folder: Path) -> dict[str, Path]:
    """D: 2,000 units of one row; D': D plus one unit of 40,000 rows (new keys, values far
    out of bounds), bounded to one row and one group, so its answers differ in noise only."""
    base = pd.DataFrame({"uid": np.arange(2000), "g": [f"k{i % 5}" for i in range(2000)],
                         "x": np.arange(2000) % 50 * 1.0})
    many = pd.DataFrame({"uid": [10**9] * 40_000, "g": [f"z{i}" for i in range(40_000)],
                         "x": [1e9] * 40_000})
    out = {}
    for name, df in {"D": base, "D'": pd.concat([base, many])}.items():
        path = folder / name.replace("'", "1")
        with dp.Curator.create(path, budget=dp.Budget(epsilon=50, delta=1e-3),
                               source=dp.noise.seeded(3)) as cur:
            cur.add_table("t", df, privacy_unit="uid", max_rows_per_unit=1,
                          max_groups_per_unit=1, bounds={"x": (0, 50)})
            (path / "token").write_text(cur.add_analyst("a"))
        out[name] = path
    return out


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, tuple[Any, FakeClock, str]]]:
    from fastapi.testclient import TestClient

    from dpkit.server.app import create_app

    out, made = {}, []
    for name, path in _neighbours(tmp_path).items():
        app = create_app(path, answer_deadline_ms=5000)  # far above any answer's real time
        clock = FakeClock()
        app.state.service.pacing = Pacing(5.0, 2.0, 30.0, clock=clock, sleep=clock.sleep,
                                          defer=clock.defer)
        observed = Observed(app, clock)
        client = TestClient(observed, raise_server_exceptions=False)  # type: ignore[arg-type]
        client.__enter__()
        made.append((client, app))
        out[name] = (client, observed, (path / "token").read_text())
    yield out
    for client, app in made:
        client.__exit__(None, None, None)
        app.state.service.close()


def test_answers_leave_at_the_same_class_on_d_and_d_prime(served: Any) -> None:
    """The same queries on D and D' (one unit of 40,000 rows more): each answer leaves exactly
    at the first class boundary (5 s of fake time), whatever its real work took."""
    queries = ["SELECT COUNT(*) AS n FROM t", "SELECT SUM(x) AS s FROM t",
               "SELECT g, COUNT(*) AS n FROM t GROUP BY g"]
    seen: dict[str, list[tuple[int, float]]] = {}
    for name, (client, observed, token) in served.items():
        for sql in queries:
            r = client.post("/v1/query", json={"sql": sql, "epsilon": 0.5, "delta": 1e-6},
                            headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200, r.text
        seen[name] = observed.seen
        audit = [json.loads(line) for line in
                 (client.app.app.state.service.config.audit_path).read_text().splitlines()]
        assert [a["class_ms"] for a in audit] == [5000.0] * 3
        assert all(0 < a["work_ms"] < 5000 for a in audit)
    for name in served:
        for status, took in seen[name]:
            assert status == 200 and 5.0 <= took < 5.0 + SLACK, (name, took)


def test_refusals_before_the_curator_leave_at_once(served: Any) -> None:
    client, observed, token = served["D"]
    assert client.post("/v1/query", json={"sql": SQL}).status_code == 401
    assert client.post("/v1/query", json={"epsilon": 1},
                       headers={"Authorization": f"Bearer {token}"}).status_code == 422
    assert client.get("/v1/budget", headers={"Authorization": f"Bearer {token}"}
                      ).status_code == 200  # reads the ledger, not rows
    assert [s for s, _ in observed.seen] == [401, 422, 200]
    assert all(took < SLACK for _, took in observed.seen)


def test_a_failure_after_the_charge_is_held_too(served: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An internal error while the answer is made (after the charge) leaves at its class,
    as a success would: its time is no signal either."""
    from dpkit.server import routes

    def broken(*args: Any) -> Any:
        raise RuntimeError("after the charge")

    monkeypatch.setattr(routes, "result_json", broken)
    client, observed, token = served["D'"]
    r = client.post("/v1/query", json={"sql": "SELECT COUNT(*) AS n FROM t", "epsilon": 0.5},
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 500
    assert 5.0 <= observed.seen[-1][1] < 5.0 + SLACK


@pytest.mark.parametrize(("paced", "work", "left_at"),
                         [(True, 0.0, 5.0), (60.0, 35.0, 40.0), (True, 35.0, 60.0)])
def test_an_exception_escaping_the_routes_is_held(paced: Any, work: float,
                                                  left_at: float) -> None:
    """The Guard holds a marked request whose exception Starlette answers 500 outside it, up
    to the request's own top class when it has one (a 60 s timeout: 35 s of work leave at
    40 s; under the service's 30 s top the same work is past it, and is no 504: it waits
    for its late class, 60 s, FINDINGS.md L4)."""
    import anyio

    from dpkit.server.limits import Guard

    clock = FakeClock(frozen=True)
    pacing = Pacing(5.0, 2.0, 30.0, clock=clock, sleep=clock.sleep)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scope["state"]["paced"] = paced
        clock.offset += work
        raise RuntimeError("escaped")

    async def main() -> float:
        guard = Guard(app, max_body=1024, audit=None, pacing=lambda: pacing)
        start = clock()
        with pytest.raises(RuntimeError):
            await guard({"type": "http", "headers": []}, None, None)
        return clock() - start

    # in a thread of its own: after a Playwright test in this process (its sync API keeps an
    # event loop running in the main thread), anyio.run here says "Already running asyncio"
    with ThreadPoolExecutor(1) as one:
        assert one.submit(anyio.run, main).result() == pytest.approx(left_at)


def test_the_real_hold_waits_for_the_boundary(make_client: Any, project: Project) -> None:
    """Real time, a small first class: the answer never comes before it (a lower bound only,
    which asyncio's sleep keeps; no upper threshold)."""
    client = make_client(answer_deadline_ms=300)
    start = time.monotonic()
    r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                    headers=project.headers(project.bob))
    assert r.status_code == 200 and time.monotonic() - start >= 0.3 - 1e-3


def test_a_late_answer_is_readable_at_its_late_class(make_client: Any,
                                                     project: Project) -> None:
    """A 504 (timeout 0.3 s) goes out at the timeout; its answer turns 202 -> 200 no earlier
    than its first late class, 2 x 0.3 s after the request, although the work ended soon
    after the 504."""
    client = make_client(timeout=0.3, answer_deadline_ms=50)
    h = project.headers(project.alice)
    lock = sqlite3.connect(project.path / "ledger.sqlite", timeout=0)
    lock.execute("BEGIN EXCLUSIVE")  # the ledger held past the timeout: the query waits
    sent = time.monotonic()
    try:
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h)
        assert r.status_code == 504
    finally:
        lock.rollback()
        lock.close()
    url = r.json()["answer_url"]
    got = client.get(url, headers=h)
    while got.status_code == 202 and time.monotonic() - sent < 20:
        time.sleep(0.02)
        got = client.get(url, headers=h)
    # what the store holds once read (a record of the project's folder, not a live object)
    late = client.app.state.service.pool.answers.get(url.rsplit("/", 1)[1], "alice",
                                                     owner=False)
    assert got.status_code == 200, got.text
    assert late is not None and late.finished is not None
    assert time.monotonic() - sent >= 0.6 - 1e-3


def test_a_held_answer_delays_no_other_request(make_client: Any, project: Project) -> None:
    """While alice's answer is held (a 2 s class, real time), bob's budget is answered: the
    hold is an await, not a blocked event loop or a held thread. Checked by order, not by a
    time threshold: bob asks once alice's hold has begun and must be answered before her."""
    import threading

    import anyio

    client = make_client(answer_deadline_ms=2000)
    holding = threading.Event()

    async def sleep(seconds: float) -> None:
        holding.set()
        await anyio.sleep(seconds)

    client.app.state.service.pacing = Pacing(2.0, 2.0, 30.0, sleep=sleep)
    done: dict[str, float] = {}

    def alice() -> None:
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                        headers=project.headers(project.alice))
        assert r.status_code == 200
        done["alice"] = time.monotonic()

    t = threading.Thread(target=alice)
    t.start()
    assert holding.wait(20)
    r = client.get("/v1/budget", headers=project.headers(project.bob))
    done["bob"] = time.monotonic()
    t.join()
    assert r.status_code == 200 and done["bob"] < done["alice"]
