"""A request past the timeout: 504 naming an answer id; the answer is kept for its analyst
(202 while running, then 200 with the very answer), 404 for anyone else or once expired, and
the charge is in the ledger once."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from tests.server.conftest import SQL, Project
from tests.server.test_endpoints import charges


def test_late_answer_is_kept_for_its_analyst_only(make_client: Any, project: Project) -> None:
    client = make_client(timeout=0.5)
    h, hb = project.headers(project.alice), project.headers(project.bob)
    lock = sqlite3.connect(project.path / "ledger.sqlite", timeout=0)
    lock.execute("BEGIN EXCLUSIVE")  # the ledger held past the timeout: the query waits
    try:
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h)
        assert r.status_code == 504
        body = r.json()
        ident, url = body["answer_id"], body["answer_url"]
        assert url == f"/v1/answers/{ident}" and url in body["detail"]
        assert len(ident) > 20
        running = client.get(url, headers=h)
        assert running.status_code == 202 and running.headers["Retry-After"] == "1"
        assert client.get(url, headers=hb).status_code == 404  # another analyst's
    finally:
        lock.rollback()
        lock.close()
    deadline = time.monotonic() + 20
    got = client.get(url, headers=h)
    while got.status_code == 202 and time.monotonic() < deadline:
        time.sleep(0.05)
        got = client.get(url, headers=h)
    assert got.status_code == 200, got.text
    answer = got.json()
    assert answer["columns"] == ["g", "n"] and answer["charge"]["epsilon"] == 0.1
    assert client.get(url, headers=h).json() == answer  # the same answer, no new charge
    assert client.get(url, headers=project.headers(project.owner)).json() == answer
    other = client.get(url, headers=hb)
    unknown = client.get("/v1/answers/ans_nosuchanswer", headers=hb)
    assert other.status_code == unknown.status_code == 404
    assert other.json() == unknown.json()  # no existence oracle
    assert charges(project) == 1
    client.app.state.service.pool.answers.max_age = 0.0  # expired
    assert client.get(url, headers=h).status_code == 404
