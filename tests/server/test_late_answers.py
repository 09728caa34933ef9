"""A request past the timeout: 504 naming an answer id; the answer is kept for its analyst
(202 while running, then 200 with the very answer), 404 for anyone else or once expired, and
the charge is in the ledger once."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest
from tests.server.conftest import SQL, Project, ledger_held, local_client
from tests.server.test_endpoints import charges


def polled(client: Any, url: str, headers: dict[str, str]) -> Any:
    """The kept answer at ``url`` once its work is done (20 s at most)."""
    deadline = time.monotonic() + 20
    got = client.get(url, headers=headers)
    while got.status_code == 202 and time.monotonic() < deadline:
        time.sleep(0.05)
        got = client.get(url, headers=headers)
    return got


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
    got = polled(client, url, h)
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


def test_client_waits_for_the_kept_answer(make_client: Any, project: Project) -> None:
    """``Client.sql(..., wait=...)`` follows the 504's answer id; without ``wait`` the 504 is
    raised and names the id. The Client's HTTP goes through the in-process app."""
    from dpkit.server.client import UnavailableError

    app_client = make_client(timeout=0.3)
    cl = local_client(app_client, project.alice)
    lock = sqlite3.connect(project.path / "ledger.sqlite", timeout=0)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        try:
            cl.sql(SQL, epsilon=0.1)
            raise AssertionError("expected a 504")
        except UnavailableError as err:
            assert err.status == 504 and err.answer_id
            assert cl.answer(err.answer_id) is None  # still running
            first = err.answer_id
    finally:
        lock.rollback()
        lock.close()
    deadline = time.monotonic() + 20
    while cl.answer(first) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cl.answer(first) is not None
    # with wait: the ledger held for a second, past the timeout; the client polls it out
    with ledger_held(project.path, 1.0):
        res = cl.sql(SQL, epsilon=0.1, wait=20.0)
    assert res.columns == ["g", "n"] and res.epsilon == 0.1
    assert charges(project) == 2


def test_a_late_synthetic_release_is_kept_as_its_csv(make_client: Any, project: Project) -> None:
    client = make_client(timeout=0.3)
    h = project.headers(project.bob)
    lock = sqlite3.connect(project.path / "ledger.sqlite", timeout=0)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        r = client.post("/v1/release/synthetic", headers=h,
                        json={"table": "t", "columns": ["g"], "epsilon": 0.2, "rows": 10})
        assert r.status_code == 504, r.text
        url = r.headers["Location"]
    finally:
        lock.rollback()
        lock.close()
    got = polled(client, url, h)
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("text/csv")
    assert got.text.splitlines()[0] == "g"
    assert abs(float(got.headers["X-Dpkit-Epsilon"]) - 0.2) < 1e-9
    assert charges(project) == 1


def test_a_late_requests_charge_reaches_the_audit_log(make_client: Any,
                                                       project: Project) -> None:
    """The 504's audit line is written before the work charges; when the work ends a second
    line, marked late, carries the charge and the kept answer's status (FINDINGS J, noted)."""
    import json

    client = make_client(timeout=0.3)
    h = project.headers(project.alice)
    with ledger_held(project.path, 1.0):
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h)
        assert r.status_code == 504
    assert polled(client, r.json()["answer_url"], h).status_code == 200
    audit = client.app.state.service.config.audit_path
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    posts = [x for x in lines if x["endpoint"] == "/v1/query"]
    assert [(x["status"], x.get("late", False)) for x in posts] == [(504, False), (200, True)]
    assert posts[0]["charge"] is None
    assert posts[1]["charge"] == {"epsilon": 0.1, "delta": 0.0}
    assert posts[1]["analyst"] == posts[0]["analyst"] and posts[1]["role"] == posts[0]["role"]
    assert charges(project) == 1


def test_a_late_charge_whose_answer_cannot_be_kept_still_reaches_the_audit_log(
        make_client: Any, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk at the 504: the answer is lost, but the work goes on and charges, and that
    charge gets its late audit line all the same (it was written only with a kept answer)."""
    import json

    client = make_client(timeout=0.3)
    service = client.app.state.service

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(service.pool.answers, "keep", full)
    h = project.headers(project.alice)
    with ledger_held(project.path, 1.0):
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h)
        assert r.status_code == 504 and "cannot be kept" in r.json()["detail"]
    audit = service.config.audit_path
    deadline = time.monotonic() + 20
    posts: list[dict[str, Any]] = []
    while len(posts) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        posts = [x for x in map(json.loads, audit.read_text().splitlines())
                 if x["endpoint"] == "/v1/query"]
    assert [(x["status"], x.get("late", False)) for x in posts] == [(504, False), (200, True)]
    assert posts[1]["charge"] == {"epsilon": 0.1, "delta": 0.0}
    assert charges(project) == 1
