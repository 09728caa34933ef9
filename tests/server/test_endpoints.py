"""Every endpoint of the HTTP contract, in-process: answers, refusals as problem details,
nothing charged by a refusal, limits, the audit log."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.server.conftest import SQL, Project

import dpkit as dp
from dpkit.engine.ledger import Ledger

PROBLEM = "application/problem+json"


def charges(project: Project) -> int:
    led = Ledger.open(project.path / "ledger.sqlite")
    try:
        return len(led.entries("charge"))
    finally:
        led.close()


def assert_problem(r: Any, status: int, slug: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    assert body["type"].startswith("https://dpkit.dev/problems/")
    if slug is not None:
        assert body["type"].endswith("/" + slug), body
    return dict(body)


def test_health_and_console_need_no_credential(client: Any) -> None:
    assert client.get("/v1/health").json()["status"] == "ok"
    assert client.get("/").status_code == 200
    assert "html" in client.get("/static/index.html").headers["content-type"]
    assert client.get("/openapi.json").json()["info"]["title"] == "dpkit"


def test_me_names_the_tokens_analyst(client: Any, project: Project) -> None:
    assert client.get("/v1/me", headers=project.headers(project.alice)).json() == {
        "name": "alice", "role": "analyst"}
    assert client.get("/v1/me", headers=project.headers(project.owner)).json() == {
        "name": "owner", "role": "owner"}


def test_tables_show_declarations_only(client: Any, project: Project) -> None:
    body = client.get("/v1/tables", headers=project.headers(project.alice)).json()
    (t,) = body["tables"]
    assert t["name"] == "t" and t["rows_public"] is False and t["privacy_unit"] is None
    cols = {c["name"]: c for c in t["columns"]}
    assert cols["x"]["bounds"] == [0.0, 50.0] and cols["g"]["domain"] == ["a", "b"]
    assert "rows" not in t and "count" not in json.dumps(body)


def test_preview_charges_nothing(client: Any, project: Project) -> None:
    h = project.headers(project.alice)
    r = client.post("/v1/preview", json={"sql": SQL, "epsilon": 0.2}, headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["epsilon"] == 0.2 and body["expected_error"]["n"] > 0 and body["text"]
    acc = client.post("/v1/preview", json={"sql": SQL, "accuracy": 20.0}, headers=h).json()
    assert abs(acc["expected_error"]["n"] - 20.0) < 0.5
    assert charges(project) == 0


def test_query_answers_with_intervals_and_charge(client: Any, project: Project) -> None:
    h = project.headers(project.alice)
    r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.25}, headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["columns"] == ["g", "n"] and [row[0] for row in body["rows"]] == ["a", "b"]
    (lo, hi), n = body["intervals"]["n"][0], body["rows"][0][1]
    assert lo <= n <= hi
    assert body["charge"] == {"epsilon": 0.25, "delta": 0.0}
    assert body["budget"]["analyst"] == "alice"
    assert abs(body["budget"]["spent_epsilon"] - 0.25) < 1e-9
    assert abs(body["budget"]["remaining_epsilon"] - 0.75) < 1e-9
    assert charges(project) == 1


def test_over_budget_is_409_and_charges_nothing(client: Any, project: Project) -> None:
    h = project.headers(project.alice)
    p = assert_problem(client.post("/v1/query", json={"sql": SQL, "epsilon": 1.5}, headers=h),
                       409, "over-budget")
    assert "budget" in p["detail"]
    assert charges(project) == 0


def test_refused_sql_is_409_with_the_curators_text(client: Any, project: Project) -> None:
    from dpkit.engine.curator import Curator

    h = project.headers(project.alice)
    for sql in ("SELECT * FROM t", "SELECT secret FROM t", "SELECT x FROM t WHERE x > 1",
                "DROP TABLE t", "SELECT COUNT(*) FROM nope"):
        body = assert_problem(client.post("/v1/query", json={"sql": sql, "epsilon": 0.1},
                                          headers=h), 409)
        with Curator.open(project.path, token=project.alice) as cur:
            try:
                cur.sql(sql, epsilon=0.1)
            except ValueError as exc:
                assert body["detail"] == str(exc)  # the same text as the library/CLI
    assert charges(project) == 0


def test_bad_bodies_are_422_problems(client: Any, project: Project) -> None:
    h = project.headers(project.alice)
    bad: list[Any] = [
        {"sql": SQL, "epsilon": 0.1, "unknown": 1},  # unknown field
        {"sql": SQL, "epsilon": -1},  # absurd epsilon
        {"sql": SQL, "epsilon": 1e300},
        {"sql": "", "epsilon": 0.1},
        {"epsilon": 0.1},
        {"sql": SQL, "noise": "uniform", "epsilon": 0.1},
        [1, 2],
    ]
    for body in bad:
        assert_problem(client.post("/v1/query", json=body, headers=h), 422, "invalid")
    r = client.post("/v1/query", content=b"{not json", headers={
        **h, "content-type": "application/json"})
    assert "not valid JSON" in assert_problem(r, 422)["detail"]
    # neither epsilon nor accuracy: the curator's own refusal
    assert_problem(client.post("/v1/query", json={"sql": SQL}, headers=h), 409)
    assert charges(project) == 0


def test_unknown_route_and_method_are_problems(client: Any, project: Project) -> None:
    h = project.headers(project.alice)
    assert_problem(client.get("/v1/nope", headers=h), 404, "not-found")
    r = client.delete("/v1/budget", headers=h)
    assert_problem(r, 405)
    assert "GET" in r.headers.get("allow", "")


def test_oversized_body_is_413(make_client: Any, project: Project) -> None:
    client = make_client(max_body=2048)
    h = project.headers(project.alice)
    big = {"sql": "SELECT COUNT(*) FROM t -- " + "x" * 5000, "epsilon": 0.1}
    assert_problem(client.post("/v1/query", json=big, headers=h), 413, "too-large")

    def chunks() -> Any:  # no Content-Length: counted while read
        yield b'{"sql": "SELECT COUNT(*) FROM t --'
        for _ in range(10):
            yield b"x" * 500
        yield b'", "epsilon": 0.1}'

    r = client.post("/v1/query", content=chunks(), headers={
        **h, "content-type": "application/json"})
    assert_problem(r, 413)
    assert charges(project) == 0


def test_rate_limit_is_429_per_credential(make_client: Any, project: Project) -> None:
    client = make_client(rate=0.5, burst=3)
    a, b = project.headers(project.alice), project.headers(project.bob)
    codes = [client.get("/v1/me", headers=a).status_code for _ in range(5)]
    assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
    r = client.get("/v1/me", headers=a)
    assert int(assert_problem(r, 429, "rate-limited") and r.headers["retry-after"]) >= 1
    assert client.get("/v1/me", headers=b).status_code == 200  # bob has his own bucket


def test_releases(client: Any, project: Project) -> None:
    h = project.headers(project.bob)
    cdf = client.post("/v1/release/cdf", json={"table": "t", "column": "x", "epsilon": 0.1},
                      headers=h)
    assert cdf.status_code == 200, cdf.text
    assert cdf.json()["charge"]["epsilon"] > 0
    q = client.post("/v1/release/quantiles", json={
        "table": "t", "column": "x", "probabilities": [0.25, 0.5], "epsilon": 0.1}, headers=h)
    assert q.status_code == 200 and len(q.json()["rows"]) == 2
    m = client.post("/v1/release/marginals", json={"table": "t", "columns": ["g"],
                                                   "epsilon": 0.1}, headers=h)
    assert m.status_code == 200 and m.json()["intervals"]["count"]
    s = client.post("/v1/release/synthetic", json={"table": "t", "columns": ["g"],
                                                   "epsilon": 0.1, "rows": 7}, headers=h)
    assert s.status_code == 200 and s.headers["content-type"].startswith("text/csv")
    assert s.text.splitlines()[0] == "g" and len(s.text.splitlines()) == 8
    assert "attachment" in s.headers["content-disposition"]
    assert_problem(client.post("/v1/release/cdf", json={"table": "t", "column": "nope",
                                                         "epsilon": 0.1}, headers=h), 409)
    assert charges(project) == 4
    # log-scale cells (the "grid" field); an unknown grid is a 422, charged nothing
    q = client.post("/v1/release/quantiles", json={
        "table": "t", "column": "x", "probabilities": [0.5], "epsilon": 0.1, "grid": "log"},
        headers=h)
    assert q.status_code == 200, q.text
    assert "log-scale" in " ".join(q.json()["notes"])
    assert_problem(client.post("/v1/release/cdf", json={"table": "t", "column": "x",
                                                         "epsilon": 0.1, "grid": "geo"},
                               headers=h), 422)
    assert charges(project) == 5


def test_budget_and_history_are_the_callers_own(client: Any, project: Project) -> None:
    a, b = project.headers(project.alice), project.headers(project.bob)
    client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=a)
    client.post("/v1/query", json={"sql": "SELECT COUNT(*) AS n FROM t", "epsilon": 0.2},
                headers=b)
    hist_a = client.get("/v1/history", headers=a).json()["items"]
    hist_b = client.get("/v1/history", headers=b).json()["items"]
    assert [i["sql"] for i in hist_a] == [SQL] and hist_a[0]["kind"] == "query"
    assert [i["epsilon"] for i in hist_b] == [0.2]
    ba = client.get("/v1/budget", headers=a).json()
    assert ba["analyst"] == "alice" and ba["cap_epsilon"] == 1.0
    assert abs(ba["spent_epsilon"] - 0.1) < 1e-9
    assert abs(ba["project_remaining_epsilon"] - 2.7) < 1e-9
    owner = client.get("/v1/history", headers=project.headers(project.owner)).json()
    assert len(owner["items"]) == 2


def test_owner_manages_analysts(client: Any, project: Project) -> None:
    o = project.headers(project.owner)
    r = client.post("/v1/analysts", json={"name": "carol", "epsilon": 0.5}, headers=o)
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    assert client.get("/v1/me", headers=project.headers(token)).json()["name"] == "carol"
    assert_problem(client.post("/v1/analysts", json={"name": "carol"}, headers=o), 409)
    assert_problem(client.post("/v1/analysts", json={"name": "x y"}, headers=o), 409)
    assert_problem(client.post("/v1/analysts", json={"nom": "x"}, headers=o), 422)
    r = client.put("/v1/analysts/carol/budget", json={"epsilon": 0.7}, headers=o)
    assert {a["name"]: a["cap_epsilon"] for a in r.json()["analysts"]}["carol"] == 0.7
    assert {a["name"]: a["cap_delta"] for a in r.json()["analysts"]}["carol"] is None  # δ = 0
    r = client.put("/v1/analysts/carol/budget", json={"epsilon": 0.7, "delta": 0}, headers=o)
    assert {a["name"]: a["cap_delta"] for a in r.json()["analysts"]}["carol"] == 0
    for bad in ({"epsilon": 0.7, "delta": 1e-9}, {"epsilon": None, "delta": 0}):  # pure project
        assert_problem(client.put("/v1/analysts/carol/budget", json=bad, headers=o), 409)
    assert client.delete("/v1/analysts/carol", headers=o).status_code == 204
    assert_problem(client.delete("/v1/analysts/carol", headers=o), 409)
    assert_problem(client.delete("/v1/analysts/zed", headers=o), 404)
    assert_problem(client.put("/v1/analysts/zed/budget", json={"epsilon": 1}, headers=o), 404)
    assert_problem(client.get("/v1/me", headers=project.headers(token)), 401)
    listed = {a["name"]: a["status"] for a in client.get("/v1/analysts", headers=o).json()[
        "analysts"]}
    assert listed == {"alice": "active", "bob": "active", "carol": "revoked"}


def test_audit_log_has_every_request_and_no_answer(client: Any, project: Project) -> None:
    h = project.headers(project.alice)
    ans = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h).json()
    client.post("/v1/query", json={"sql": SQL, "epsilon": 9}, headers=h)
    client.get("/v1/me")
    lines = [json.loads(x) for x in (project.path / "audit.jsonl").read_text().splitlines()]
    assert [(x["endpoint"], x["status"]) for x in lines] == [
        ("/v1/query", 200), ("/v1/query", 409), ("/v1/me", 401)]
    assert lines[0]["analyst"] == "alice" and lines[0]["charge"] == {"epsilon": 0.1,
                                                                     "delta": 0.0}
    assert lines[1]["charge"] is None and lines[2]["analyst"] is None
    text = (project.path / "audit.jsonl").read_text()
    assert str(ans["rows"][0][1]) not in text and project.alice not in text


def test_ledger_down_is_503_nothing_charged_and_service_stays_up(
        client: Any, project: Project, monkeypatch: Any) -> None:
    from contextlib import contextmanager

    from dpkit.engine.ledger_rows import LedgerError

    h = project.headers(project.alice)
    assert client.get("/v1/me", headers=h).status_code == 200

    @contextmanager
    def down(self: Any) -> Any:  # what _write raises when SQLite cannot write the file
        raise LedgerError(f"cannot lock the ledger {self.path}: disk I/O error")
        yield

    monkeypatch.setattr(Ledger, "_write", down)
    r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h)
    assert "nothing was charged" in assert_problem(r, 503, "unavailable")["detail"]
    monkeypatch.undo()
    assert charges(project) == 0
    assert client.get("/v1/health").status_code == 200
    assert client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                       headers=h).status_code == 200
    assert charges(project) == 1


def test_timeout_is_504_and_a_late_charge_is_in_the_history(make_client: Any,
                                                             project: Project) -> None:
    import sqlite3
    import time

    client = make_client(timeout=1.0)
    h = project.headers(project.alice)
    lock = sqlite3.connect(project.path / "ledger.sqlite", timeout=0)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the ledger past the timeout
    try:
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h)
        assert "recorded once" in assert_problem(r, 504, "timeout")["detail"]
    finally:
        lock.rollback()
        lock.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and charges(project) == 0:
        time.sleep(0.1)
    # the query went on once the lock was released: charged (and its answer lost), never
    # answered without its charge; the analyst sees it in its own history
    hist = client.get("/v1/history", headers=h).json()["items"]
    assert len(hist) == charges(project) == 1


def test_curators_are_cached_per_analyst(client: Any, project: Project) -> None:
    pool = client.app.state.service.pool
    a, b = project.headers(project.alice), project.headers(project.bob)
    for _ in range(4):
        client.get("/v1/budget", headers=a)
        client.post("/v1/preview", json={"sql": SQL, "epsilon": 0.1}, headers=b)
    assert pool.opened == 2  # one curator per analyst, opened at its first request
    assert client.get("/v1/me", headers=project.headers(project.owner)).status_code == 200
    assert pool.opened == 2  # the owner's curator is the one that authenticates


def test_database_driver_errors_are_503() -> None:
    from dpkit.server.problems import problem_of

    class OperationalError(Exception):  # what psycopg raises when PostgreSQL is down
        __module__ = "psycopg.errors"

    assert problem_of(OperationalError("connection refused")).status == 503
    assert problem_of(RuntimeError("a bug")).status == 500


def test_ledger_unreadable_at_authentication_is_503(client: Any, project: Project,
                                                    monkeypatch: Any) -> None:
    import sqlite3

    def broken(self: Any, token: str) -> str:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(Ledger, "analyst_for_token", broken)
    assert_problem(client.get("/v1/me", headers=project.headers(project.alice)), 503)


def test_owner_registers_a_table(client: Any, project: Project, tmp_path: Any) -> None:
    import subprocess
    import sys

    o, a = project.headers(project.owner), project.headers(project.alice)
    # alice's curator is open (attached to the data) before the load: it is closed and reopened
    assert client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=a).status_code == 200
    csv = project.path / "data" / "w.csv"  # the service's default data root (PROJECT/data)
    csv.parent.mkdir()
    csv.write_text("ward,age\n" + "".join(f"{'AB'[i % 2]},{i % 90}\n" for i in range(400)))
    body = {"name": "w", "source": str(csv), "bounds": {"age": [0, 100]},
            "domains": {"ward": ["A", "B"]}}
    r = client.post("/v1/tables", json=body, headers=o)
    assert r.status_code == 201, r.text
    assert {c["name"]: c["bounds"] for c in r.json()["columns"]}["age"] == [0.0, 100.0]
    q = client.post("/v1/query", json={"sql": "SELECT ward, COUNT(*) AS n FROM w GROUP BY ward",
                                       "epsilon": 0.1}, headers=a)
    assert q.status_code == 200 and [row[0] for row in q.json()["rows"]] == ["A", "B"]
    assert_problem(client.post("/v1/tables", json=body, headers=o), 409)  # exists: replace
    assert_problem(client.post("/v1/tables", json={**body, "source": str(tmp_path / "no.csv"),
                                                   "name": "x"}, headers=o), 409)
    assert_problem(client.post("/v1/tables", json=body, headers=a), 403)
    # another process reading the data: the load is refused, nothing changes
    reader = subprocess.Popen([sys.executable, "-c",
                               "import duckdb, sys, time; c = duckdb.connect(); "
                               f"c.execute(\"ATTACH '{project.path / 'data.duckdb'}' AS d "
                               "(READ_ONLY)\"); print('up', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "up"
        r = client.post("/v1/tables", json={**body, "replace": True}, headers=o)
        assert "stop the other service processes" in assert_problem(r, 409, "busy")["detail"]
    finally:
        reader.kill()
        reader.wait()
    assert client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=a).status_code == 200


def test_releases_carry_their_diagnostics_and_can_switch_them_off(client: Any,
                                                                   project: Project) -> None:
    """A CDF over a column whose values mostly lie above its declared bounds warns (the
    curator's own warning text, as for a query); diagnostics=false is accepted and spends the
    same epsilon; synthetic data carries its warnings in a header."""
    with dp.Curator.open(project.path) as cur:  # the owner adds a badly bounded table
        cur.add_table("w", pd.DataFrame({"v": np.arange(3000) % 100 * 1.0}),
                      bounds={"v": (0, 10)})
    h = project.headers(project.bob)
    on = client.post("/v1/release/cdf", json={"table": "w", "column": "v", "epsilon": 0.5},
                     headers=h)
    assert on.status_code == 200, on.text
    assert any("bound" in w for w in on.json()["warnings"]), on.json()["warnings"]
    off = client.post("/v1/release/cdf", json={"table": "w", "column": "v", "epsilon": 0.5,
                                               "diagnostics": False}, headers=h)
    assert off.status_code == 200 and off.json()["warnings"] == []
    assert off.json()["charge"]["epsilon"] == pytest.approx(on.json()["charge"]["epsilon"])
    s = client.post("/v1/release/synthetic", json={"table": "w", "columns": ["v"],
                                                   "epsilon": 0.5, "rows": 5}, headers=h)
    assert s.status_code == 200
    assert isinstance(json.loads(s.headers["x-dpkit-warnings"]), list)
