"""Fifth red-team pass (FINDINGS.md L): exploit tests through the HTTP service.

Timing tests here assert lower bounds only (an answer never leaves before its class:
asyncio's and the timer's sleeps do not wake early) and orders; no statistics, so no
false-failure probability beyond a machine stalled for seconds."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import SQL, Project, ledger_held

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
    client = make_client(timeout=0.3, answer_deadline_ms=50)
    h = project.headers(project.alice)
    sent = time.monotonic()
    with ledger_held(project.path, 0.35):  # the query waits past the timeout, then charges
        assert client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                           headers=h).status_code == 504
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


PROBES = ["SELECT COUNT(*) AS n FROM t WHERE CAST(s AS INTEGER) > 0",
          "SELECT COUNT(*) AS n FROM t WHERE 1/(x) > 0",
          "SELECT COUNT(*) AS n FROM t WHERE regexp_matches(s, '(')",
          "SELECT COUNT(*) AS n FROM t WHERE g = 'zz' AND CAST(s AS INTEGER) = 0",
          "SELECT g, COUNT(*) AS n FROM t GROUP BY g ORDER BY n DESC LIMIT 9223372036854775807",
          "SELECT g, COUNT(*) AS n FROM t GROUP BY g LIMIT 100000000000",
          "SELECT g, SUM(x) AS s FROM t GROUP BY g"]


@pytest.mark.slow
def test_the_four_original_leaks_through_http_and_the_cli(tmp_path: Path) -> None:
    """Checked safe, again: D and D' = D plus one unit (a new key, a text that casts, x = 0)
    answer each probe alike through HTTP and `dpkit query`: the same status, charge,
    refusal text and group order (errors as an oracle, a huge LIMIT, group order)."""
    import re

    import numpy as np
    import pandas as pd
    from click.testing import CliRunner
    from fastapi.testclient import TestClient

    import dpkit as dp
    from dpkit.cli import main
    from dpkit.server.app import create_app

    base = pd.DataFrame({"uid": np.arange(300), "g": [f"k{i % 4}" for i in range(300)],
                         "x": (np.arange(300) % 50) * 1.0, "s": ["abc"] * 300})
    one = pd.DataFrame({"uid": [10**6], "g": ["zz"], "x": [0.0], "s": ["0"]})
    seen = {}
    for name, frame in {"D": base, "D1": pd.concat([base, one])}.items():
        path = tmp_path / f"{name}.dpkit"
        with dp.Curator.create(path, epsilon=1000, delta=1e-3,
                               source=dp.noise.seeded(5)) as cur:
            cur.add_table("t", frame, privacy_unit="uid", max_rows_per_unit=1,
                          bounds={"x": (0, 50)})
            token = cur.add_analyst("a")
        app = create_app(path, answer_deadline_ms=1)
        out: list[tuple[Any, ...]] = []
        with TestClient(app, raise_server_exceptions=False) as client:
            for sql in PROBES:
                r = client.post("/v1/query", json={"sql": sql, "epsilon": 0.5},
                                headers={"Authorization": f"Bearer {token}"})
                b = r.json()
                keys = ([row[0] for row in b["rows"]] if "GROUP BY" in sql  # the values
                        else len(b["rows"])) if r.status_code == 200 else None  # may differ
                out.append((r.status_code, b.get("charge"), keys,
                            re.sub(r"ref-\w+", "", b.get("detail", ""))))
                cli = CliRunner().invoke(main, ["query", str(path), sql, "--epsilon", "0.5",
                                                "--token", token])
                out.append((cli.exit_code, "".join(cli.output.split()) if cli.exit_code
                            else None))
        app.state.service.close()
        seen[name] = out
    assert seen["D"] == seen["D1"]


def test_l4_an_answer_past_the_top_but_not_504_is_held_to_the_late_class(
        make_client: Any, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """L4: the pool's timeout starts when the route calls it, after the request arrived
    (authentication, a queue for a thread): an answer whose work ended past the top class
    *from the arrival* but before the pool's own timeout was no 504, and the Guard sent it
    "as it comes", its exact time. Here the authentication takes 0.25 s (a busy ledger, a
    loaded service), the top is 0.5 s and the work waits 0.4 s for the ledger: the answer
    came at 0.65 s; it now leaves at the late class, 2 x 0.5 s after the request."""
    client = make_client(timeout=0.5, answer_deadline_ms=100)
    service = client.app.state.service
    authenticate = service.auth

    def slow(token: str | None) -> Any:
        time.sleep(0.25)
        return authenticate(token)

    monkeypatch.setattr(service, "auth", slow)
    h = project.headers(project.alice)
    sent = time.monotonic()
    with ledger_held(project.path, 0.6):  # 0.25 s + 0.4 s of work: past 0.5 s, no 504
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h)
    assert r.status_code == 200, r.text
    assert time.monotonic() - sent >= 1.0 - 1e-3


def test_l5_an_audit_log_readable_by_others_is_narrowed(tmp_path: Path) -> None:
    """L5: `--audit-log` naming a file that exists with mode 0644 (made by a log rotation,
    an earlier run as another umask) stayed readable by every account on the host: each
    answer's `work_ms`, the exact time its timing class withholds, and the late lines' times.
    Opening it now narrows it to 0600 (a new one was always made 0600)."""
    import os
    import stat

    from dpkit.server.limits import AuditLog

    path = tmp_path / "audit.jsonl"
    path.write_text("")
    os.chmod(path, 0o644)
    log = AuditLog(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        log.close()


def test_l6_an_answers_budget_is_the_ledger_as_of_its_own_charge(
        make_client: Any, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """L6: the budget an answer carries (`project_remaining_epsilon`, and the analyst's own
    `remaining_epsilon` under several worker processes) is read when the answer is made, after
    its rows were scanned: every charge another process made meanwhile is in it, so an
    analyst with a second account (or its own requests on another worker) charging at known
    moments reads off when the scan ended, the time the class withholds. Here alice's scan
    waits (deterministically, no clock) until bob, on another service process, has charged:
    her answer counted bob's charge (2.4 left); it is now the ledger as of her own (2.9)."""
    import threading

    from dpkit.engine import query_methods

    first, second = make_client(), make_client()  # two processes on one project
    scanning, charged = threading.Event(), threading.Event()
    read = query_methods.read_exact
    blocked = [True]

    def slow_read(*args: Any) -> Any:
        if blocked[0]:
            blocked[0] = False
            scanning.set()
            assert charged.wait(20)
        return read(*args)

    monkeypatch.setattr(query_methods, "read_exact", slow_read)
    out: dict[str, Any] = {}

    def alice() -> None:
        out["alice"] = first.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                                  headers=project.headers(project.alice)).json()

    t = threading.Thread(target=alice)
    t.start()
    assert scanning.wait(20)  # alice's charge is in the ledger, her rows are being read
    bob = second.post("/v1/query", json={"sql": SQL, "epsilon": 0.5},
                      headers=project.headers(project.bob))
    assert bob.status_code == 200, bob.text
    charged.set()
    t.join()
    budget = out["alice"]["budget"]
    assert budget["project_remaining_epsilon"] == pytest.approx(3.0 - 0.1)
