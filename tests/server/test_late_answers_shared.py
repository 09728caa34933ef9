"""Late answers across the service's processes (``dpkit serve --workers N``): kept in
``PROJECT/answers/`` where every process reads them; sealed (nothing in the folder names an
analyst, an id or an answer), owner-only, bounded in count and age; an answer whose process
died reads as lost to its own analyst, and as unknown to anyone else. And the fit's own
timeout."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import SQL, Project, live_server, local_client, make_project, stop
from tests.server.test_endpoints import charges
from tests.server.test_late_answers import polled

from dpkit.server.answers import AnswerStore, plain_finish


def _locked(project: Project) -> sqlite3.Connection:
    """The ledger held: a charged request waits past a short timeout."""
    lock = sqlite3.connect(project.path / "ledger.sqlite", timeout=0, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")
    return lock


def _held(client: Any, project: Project, path: str, body: Any, token: str) -> Any:
    """``client``'s answer to ``body`` at ``path`` while the ledger is held (a 504)."""
    lock = _locked(project)
    try:
        return client.post(path, json=body, headers=project.headers(token))
    finally:
        lock.rollback()
        lock.close()


def _done(value: Any) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_result(value)
    return f


def test_two_processes_on_one_project_share_the_answers(make_client: Any, project: Project,
                                                        answers_at: dict[str, Any]) -> None:
    """Two app instances over one project stand for two worker processes (or, with the
    answers in PostgreSQL, two hosts): the 504 comes from A, every poll goes to B; B gives
    202, then the very answer, to its analyst only."""
    a, b = make_client(timeout=0.5, **answers_at), make_client(timeout=0.5, **answers_at)
    h, hb = project.headers(project.alice), project.headers(project.bob)
    lock = _locked(project)
    try:
        r = a.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h)
        assert r.status_code == 504, r.text
        url = r.json()["answer_url"]
        assert b.get(url, headers=h).status_code == 202
        other = b.get(url, headers=hb)
    finally:
        lock.rollback()
        lock.close()
    got = polled(b, url, h)
    assert got.status_code == 200, got.text
    assert got.json()["columns"] == ["g", "n"] and got.json()["charge"]["epsilon"] == 0.1
    assert a.get(url, headers=h).json() == got.json()
    kept = b.app.state.service.pool.answers.get(url.rsplit("/", 1)[1], "alice", owner=False)
    assert kept is not None and kept.limit == 0.5 and kept.finished is not None
    unknown = b.get("/v1/answers/ans_" + "0" * 32, headers=hb)
    assert other.status_code == unknown.status_code == 404
    assert other.json() == unknown.json() == b.get(url, headers=hb).json()
    assert charges(project) == 1


def test_an_answer_whose_process_stopped_reads_as_lost_to_its_analyst_only(
        make_client: Any, project: Project, answers_at: dict[str, Any]) -> None:
    a, b = make_client(timeout=0.3, **answers_at), make_client(timeout=0.3, **answers_at)
    h, hb = project.headers(project.alice), project.headers(project.bob)
    lock = _locked(project)
    try:
        url = a.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=h).headers[
            "Location"]
        assert b.get(url, headers=h).status_code == 202
        a.app.state.service.pool.answers.close()  # A stops: its liveness lock goes
        lost = b.get(url, headers=h)
        assert lost.status_code == 404 and "will not come" in lost.json()["detail"]
        assert "/v1/history" in lost.json()["detail"]
        other = b.get(url, headers=hb)
        unknown = b.get("/v1/answers/ans_" + "1" * 32, headers=hb)
        assert other.json() == unknown.json() and "will not come" not in other.text
    finally:
        lock.rollback()
        lock.close()


def test_the_client_stops_waiting_when_the_answer_will_not_come(
        make_client: Any, project: Project, answers_at: dict[str, Any]) -> None:
    """``wait=True`` polls until the answer comes or the service says it will not (its
    process stopped here; expiry alike), not for the whole 15 minutes."""
    from dpkit.server.client import ServiceError

    a = make_client(timeout=0.3, **answers_at)
    cl = local_client(a, project.alice)
    lock = _locked(project)
    stopper = threading.Timer(1.0, a.app.state.service.pool.answers.close)
    stopper.start()
    try:
        with pytest.raises(ServiceError, match="will not come") as err:
            cl.sql(SQL, epsilon=0.1, wait=True)
        assert err.value.status == 404
    finally:
        stopper.join()
        lock.rollback()
        lock.close()


def test_the_folder_is_sealed_and_owner_only(tmp_path: Path) -> None:
    store = AnswerStore(tmp_path / "answers")
    secret = {"value": "SECRET-VALUE-4711", "rows": [[1234567.25]]}
    ident = store.keep("alice-the-analyst", _done(secret), plain_finish, limit=30.0)
    assert stat.S_IMODE((tmp_path / "answers").stat().st_mode) == 0o700
    files = [p for p in (tmp_path / "answers").iterdir()]
    assert len(files) == 3  # the answer, this process's liveness lock, the tag key
    raw = b"".join(p.read_bytes() for p in files) + b"".join(p.name.encode() for p in files)
    for text in ("SECRET-VALUE", "1234567", "alice", ident, ident[4:]):
        assert text.encode() not in raw, text
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    kept = store.get(ident, "alice-the-analyst", owner=False)
    assert kept is not None and kept.answer is not None and kept.answer.status == 200
    assert b"SECRET-VALUE-4711" in kept.answer.body
    assert store.get(ident, "bob", owner=False) is None
    assert store.get(ident, "bob", owner=True) is not None  # the project's owner
    assert store.get("../" + ident, "alice-the-analyst", owner=False) is None
    (answer,) = [p for p in files if p.suffix == ".ans"]
    data = bytearray(answer.read_bytes())
    data[-1] ^= 1  # one bit changed: the seal refuses it
    answer.write_bytes(bytes(data))
    assert store.get(ident, "alice-the-analyst", owner=False) is None
    store.close()
    assert not list((tmp_path / "answers").glob("live-*"))


def test_the_store_is_bounded_in_count_and_age(tmp_path: Path) -> None:
    store = AnswerStore(tmp_path / "answers", count=3, max_age=60.0)
    ids = []
    for i in range(5):
        ids.append(store.keep("alice", _done({"i": i}), plain_finish, limit=30.0))
        time.sleep(0.01)  # distinct mtimes: the oldest goes first
    assert [store.get(x, "alice", owner=False) is not None for x in ids] == [
        False, False, True, True, True]
    assert len(list((tmp_path / "answers").glob("*.ans"))) == 3
    store.max_age = 0.0
    assert store.get(ids[-1], "alice", owner=False) is None  # expired: removed on sight
    assert len(list((tmp_path / "answers").glob("*.ans"))) == 2
    # a new answer sweeps every expired one, a crashed write's leftover too
    (tmp_path / "answers" / ".leftover.tmp").write_bytes(b"x")
    store.max_age = 60.0
    past = time.time() - 120
    for p in (tmp_path / "answers").glob("*.*"):
        if p.name != "tag.key" and not p.name.startswith("live-"):
            os.utime(p, (past, past))
    fresh = store.keep("alice", _done({}), plain_finish, limit=30.0)
    assert [p.name for p in (tmp_path / "answers").glob("*.ans")] == [
        store._path(fresh, "alice").name]
    assert not (tmp_path / "answers" / ".leftover.tmp").exists()
    store.close()


def test_a_running_answer_of_a_crashed_process_is_lost_and_its_lock_swept(
        tmp_path: Path) -> None:
    folder = tmp_path / "answers"
    crashed = AnswerStore(folder)
    running: Future[Any] = Future()  # never ends
    ident = crashed.keep("alice", running, plain_finish, limit=30.0)
    alive = AnswerStore(folder)  # another process
    kept = alive.get(ident, "alice", owner=False)
    assert kept is not None and kept.answer is None and not kept.lost
    token, fd = crashed._live  # type: ignore[misc]
    os.close(fd)  # a crash: the lock is free, its file stays behind
    kept = alive.get(ident, "alice", owner=False)
    assert kept is not None and kept.lost
    alive.keep("bob", _done({}), plain_finish, limit=30.0)  # its sweep: the dead one's lock
    assert not (folder / f"live-{token}.lock").exists()
    assert (folder / f"live-{alive._live[0]}.lock").exists()  # type: ignore[index]
    alive.close()


def test_a_fit_has_its_own_timeout(make_client: Any, project: Project) -> None:
    """A fit waits for the ledger past the query timeout and still answers 200 within the
    fit timeout; a query under the same wait is answered 504."""
    client = make_client(timeout=0.3, fit_timeout=60.0)
    h = project.headers(project.bob)
    body = {"model": "gaussian_nb", "sql": "SELECT x, g FROM t", "label": "g",
            "epsilon": 0.5}
    lock = _locked(project)
    release = threading.Timer(1.0, lock.rollback)
    release.start()
    try:
        fit = client.post("/v1/fit", json=body, headers=h)
    finally:
        release.join()
    assert fit.status_code == 200, fit.text
    lock.close()
    late = _held(client, project, "/v1/query", {"sql": SQL, "epsilon": 0.1}, project.bob)
    assert late.status_code == 504
    assert polled(client, late.headers["Location"], h).status_code == 200
    with pytest.raises(ValueError, match="fit_timeout"):
        make_client(fit_timeout=0)
    with pytest.raises(ValueError, match="answers_kept"):
        make_client(answers_kept=0)


def test_real_worker_processes_answer_each_others_polls(tmp_path: Path) -> None:
    """``dpkit serve --workers 2``: the rate limiter is per process (burst 4, no refill to
    speak of), so once a credential has had more than 4 answers, two processes answered it.
    Every poll on any process says 202 while the work runs, then the answer."""
    import httpx

    project = make_project(tmp_path, rows=300)
    live = live_server(project.path, workers=2, extra=(
        "--timeout", "0.5", "--rate", "0.001", "--burst", "4",
        "--answer-deadline-ms", "0"))  # no timing classes: readable once written

    def answers(token: str, path: str, n: int) -> list[int]:
        """The statuses of ``n`` polls that were answered (429s: that process's bucket is
        empty, ask again: the next connection may land on the other one)."""
        out: list[int] = []
        for _ in range(400):
            r = httpx.get(live.url + path, headers=project.headers(token), timeout=10)
            if r.status_code != 429:
                out.append(r.status_code)
                if len(out) == n:
                    break
        return out

    lock = _locked(project)
    try:
        r = httpx.post(live.url + "/v1/query", json={"sql": SQL, "epsilon": 0.1},
                       headers=project.headers(project.alice), timeout=10)
        assert r.status_code == 504, r.text
        url = r.json()["answer_url"]
        # the 504 and 4 polls: 5 answers for alice, so both processes answered her
        assert answers(project.alice, url, 4) == [202] * 4
        assert answers(project.bob, url, 5) == [404] * 5  # not his, on either process
    finally:
        lock.rollback()
        lock.close()
    try:
        deadline = time.monotonic() + 20  # the work ends: its record grows into the answer
        folder = project.path / "answers"
        while (max((p.stat().st_size for p in folder.glob("*.ans")), default=0) < 500
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert answers(project.owner, url, 5) == [200] * 5  # the owner reads every answer
    finally:
        stop(live)
    assert charges(project) == 1


def test_an_answer_that_cannot_be_kept_is_still_a_504(make_client: Any, project: Project,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk at the 504: the answer says it cannot be kept (not a 503 saying that
    nothing was charged: the work goes on and charges)."""
    client = make_client(timeout=0.3)

    def full(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(client.app.state.service.pool.answers, "_write", full)
    r = _held(client, project, "/v1/query", {"sql": SQL, "epsilon": 0.1}, project.alice)
    assert r.status_code == 504 and "answer_id" not in r.json()
    assert "cannot be kept" in r.json()["detail"] and "/v1/history" in r.json()["detail"]
    deadline = time.monotonic() + 20
    while charges(project) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert charges(project) == 1
