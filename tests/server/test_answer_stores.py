"""The late answers' two stores, one behaviour: the folder (``PROJECT/answers``, one host's
processes) and PostgreSQL (a table every host reads, :mod:`dpkit.server.answers_pg`). Each
case runs on both: sealed (nothing stored names an analyst, an id or an answer), the analyst's
own only (the owner: all), bounded in count, bytes and age with the fair share, and liveness
across processes: an answer whose process stopped, closed or was killed -9, reads as lost to
its analyst, never as pending for ever (the service's own behaviour on both stores:
test_late_answers_shared.py, ``answers_at``).

PostgreSQL comes from ``$DPKIT_TEST_PG_DSN`` (``.ci/run`` sets it) or a throwaway cluster
(``tests/engine/pg_cluster.py``, as the PostgreSQL ledger's tests); where neither can be had,
the PostgreSQL cases skip and say why.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import Project

from dpkit.noise import token_hex
from dpkit.server.answers import Answers, AnswerStore, plain_finish

SRC = str(Path(__file__).resolve().parents[2] / "src")
Make = Callable[..., Answers]


@pytest.fixture(params=["folder", "postgres"])
def backing(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Where the stores of one test keep their answers (several stores on one backing stand
    for several processes, or hosts): a folder, or a fresh schema (dropped after)."""
    if request.param == "folder":
        yield {"kind": "folder", "folder": str(tmp_path / "answers")}
        return
    import psycopg

    dsn = request.getfixturevalue("pg_dsn")
    schema = "dpkit_test_" + token_hex(16)[:12]
    yield {"kind": "postgres", "dsn": dsn, "schema": schema, "tag_key": "11" * 32}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _open(where: dict[str, Any], **bounds: Any) -> Answers:
    if where["kind"] == "folder":
        return AnswerStore(Path(where["folder"]), **bounds)
    from dpkit.server.answers_pg import PostgresAnswers

    return PostgresAnswers(where["dsn"], where["schema"], bytes.fromhex(where["tag_key"]),
                           **bounds)


@pytest.fixture
def make(backing: dict[str, Any]) -> Iterator[Make]:
    made: list[Answers] = []

    def opened(**bounds: Any) -> Answers:
        made.append(_open(backing, **bounds))
        return made[-1]

    yield opened
    for store in made:
        store.close()


def _stored(backing: dict[str, Any]) -> list[tuple[str, bytes]]:
    """Everything the backing holds: (name, bytes) of each file, or of each row's columns."""
    if backing["kind"] == "folder":
        return [(p.name, p.read_bytes()) for p in Path(backing["folder"]).iterdir()]
    import psycopg

    with psycopg.connect(backing["dsn"]) as conn:
        rows = conn.execute(f"SELECT name, tag, made, size, sealed FROM "
                            f"{backing['schema']}.late_answers").fetchall()
    return [(f"{r[1]}.{r[0]}", b"%r %r" % (r[2], r[3]) + bytes(r[4])) for r in rows]


def _answers(backing: dict[str, Any]) -> int:
    return len([n for n, _ in _stored(backing) if n.endswith(".ans") or
                backing["kind"] == "postgres"])


def _tamper(backing: dict[str, Any]) -> None:
    """One bit of every stored answer changed."""
    if backing["kind"] == "folder":
        for p in Path(backing["folder"]).glob("*.ans"):
            data = bytearray(p.read_bytes())
            data[-1] ^= 1
            p.write_bytes(bytes(data))
        return
    import psycopg

    with psycopg.connect(backing["dsn"], autocommit=True) as conn:
        conn.execute(f"UPDATE {backing['schema']}.late_answers SET sealed = "
                     f"overlay(sealed placing '\\x00'::bytea from length(sealed))")


def _done(value: Any) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_result(value)
    return f


def test_sealed_and_the_analysts_own(make: Make, backing: dict[str, Any]) -> None:
    store = make()
    secret = {"value": "SECRET-VALUE-4711", "rows": [[1234567.25]]}
    ident = store.keep("alice-the-analyst", _done(secret), plain_finish, limit=30.0)
    raw = b"".join(n.encode() + b" " + data for n, data in _stored(backing))
    assert raw
    for text in ("SECRET-VALUE", "1234567", "alice", ident, ident[4:]):
        assert text.encode() not in raw, text
    kept = store.get(ident, "alice-the-analyst", owner=False)
    assert kept is not None and kept.answer is not None and kept.answer.status == 200
    assert b"SECRET-VALUE-4711" in kept.answer.body and kept.limit == 30.0
    assert store.get(ident, "bob", owner=False) is None
    assert store.get(ident, "bob", owner=True) is not None  # the project's owner
    assert store.get("../" + ident, "alice-the-analyst", owner=False) is None
    assert store.get("ans_" + "0" * 32, "alice-the-analyst", owner=False) is None
    _tamper(backing)
    assert store.get(ident, "alice-the-analyst", owner=False) is None  # the seal refuses it


def test_another_process_reads_running_then_the_answer(make: Make) -> None:
    a, b = make(), make()
    work: Future[Any] = Future()
    ident = a.keep("alice", work, plain_finish, limit=0.5)
    kept = b.get(ident, "alice", owner=False)
    assert kept is not None and kept.answer is None and not kept.lost
    assert kept.finished is None and kept.limit == 0.5
    assert b.get(ident, "bob", owner=False) is None
    work.set_result({"n": 3})  # the work ends in A: its answer replaces the running record
    kept = b.get(ident, "alice", owner=False)
    assert kept is not None and kept.answer is not None and kept.finished is not None
    assert kept.answer.body == b'{"n":3}'


def test_a_closed_process_s_running_answer_is_lost_to_its_analyst(make: Make) -> None:
    a, b = make(), make()
    ident = a.keep("alice", Future(), plain_finish, limit=30.0)  # a work that never ends
    assert not b.get(ident, "alice", owner=False).lost  # type: ignore[union-attr]
    a.close()
    kept = b.get(ident, "alice", owner=False)
    assert kept is not None and kept.lost and kept.answer is None
    assert a.get(ident, "alice", owner=False).lost  # type: ignore[union-attr]  # itself too
    assert b.get(ident, "bob", owner=False) is None  # anyone else: unknown, as before


def test_bounded_in_count_oldest_of_the_analyst_holding_most(make: Make,
                                                              backing: dict[str, Any]) -> None:
    store = make(count=3, max_age=60.0)
    bob = store.keep("bob", _done({"b": 0}), plain_finish, limit=30.0)
    ids = []
    for i in range(4):
        time.sleep(0.01)  # distinct times: the oldest goes first
        ids.append(store.keep("alice", _done({"i": i}), plain_finish, limit=30.0))
    assert [store.get(x, "alice", owner=False) is not None for x in ids] == [
        False, False, True, True]
    assert store.get(bob, "bob", owner=False) is not None  # older, but not the one holding most
    assert _answers(backing) == 3


def test_bounded_in_bytes(make: Make, backing: dict[str, Any]) -> None:
    big = {"blob": "x" * 4000}
    store = make(count=100, max_age=60.0, max_bytes=13_000)
    ids = []
    for _ in range(4):
        time.sleep(0.01)
        ids.append(store.keep("alice", _done(big), plain_finish, limit=30.0))
    assert [store.get(x, "alice", owner=False) is not None for x in ids] == [
        False, False, True, True]
    assert sum(len(d) for n, d in _stored(backing) if "key" not in n and "live" not in n) \
        <= 13_000


def test_expired_answers_are_gone(make: Make, backing: dict[str, Any]) -> None:
    store = make(max_age=60.0)
    ident = store.keep("alice", _done({}), plain_finish, limit=30.0)
    store.max_age = 0.0
    assert store.get(ident, "alice", owner=False) is None  # expired: removed on sight
    assert _answers(backing) == 0
    other = make(max_age=60.0)
    old = other.keep("alice", _done({}), plain_finish, limit=30.0)
    other.max_age = 0.3
    time.sleep(0.35)
    other.keep("bob", _done({}), plain_finish, limit=30.0)  # its sweep drops the expired
    other.max_age = 60.0
    assert other.get(old, "alice", owner=False) is None and _answers(backing) == 1


_CHILD = textwrap.dedent("""
    import json, sys, time
    from concurrent.futures import Future
    sys.path.insert(0, {src!r})
    from tests.server.test_answer_stores import _open
    from dpkit.server.answers import plain_finish
    store = _open(json.loads(sys.argv[1]))
    print(store.keep("alice", Future(), plain_finish, limit=30.0), flush=True)
    time.sleep(600)
""")


def test_a_process_killed_9_leaves_its_running_answer_lost(make: Make,
                                                           backing: dict[str, Any]) -> None:
    """No close, no clean-up: the kernel drops the process's flock, PostgreSQL its session
    (and the advisory lock with it) when the connection dies."""
    import json

    root = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen([sys.executable, "-c", _CHILD.format(src=SRC), json.dumps(backing)],
                             stdout=subprocess.PIPE, text=True, cwd=root,
                             env={**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{root}"})
    try:
        assert child.stdout is not None
        ident = child.stdout.readline().strip()
        alive = make()
        kept = alive.get(ident, "alice", owner=False)
        assert kept is not None and not kept.lost
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 10  # the server notices the closed socket at once
    while not alive.get(ident, "alice", owner=False).lost:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "a killed process's answer still reads running"
        time.sleep(0.05)
    assert alive.get(ident, "bob", owner=False) is None


# ---------------------------------------------------------------- choosing the store


def test_the_store_is_chosen_by_the_ledger_or_the_flag(tmp_path: Path,
                                                       project: Project) -> None:
    from dpkit.server.answers_pg import open_answers

    folder = open_answers(project.path)
    assert isinstance(folder, AnswerStore)
    folder.close()
    with pytest.raises(ValueError, match="answers-dsn"):
        open_answers(project.path, store="postgres")
    with pytest.raises(ValueError, match="auto, folder or postgres"):
        open_answers(project.path, store="redis")


def test_a_postgres_ledger_keeps_its_late_answers_beside_it(tmp_path: Path,
                                                            pg_dsn: str) -> None:
    """``auto`` with the ledger in PostgreSQL: the table goes into the ledger's own schema
    (every host that reaches the ledger reaches it); ``folder`` still opts out."""
    import json

    import psycopg

    import dpkit as dp
    from dpkit.server.answers_pg import PostgresAnswers, open_answers

    path = tmp_path / "pg.dpkit"
    dp.Curator.create(path, epsilon=1.0, source=dp.noise.seeded(0), ledger=pg_dsn).close()
    schema = json.loads((path / "ledger.pg").read_text())["schema"]
    try:
        store = open_answers(path)
        assert isinstance(store, PostgresAnswers) and store.schema == schema
        ident = store.keep("alice", _done({"n": 1}), plain_finish, limit=30.0)
        store.close()
        again = open_answers(path)  # another process (host), the same table
        kept = again.get(ident, "alice", owner=False)
        assert kept is not None and kept.answer is not None and kept.answer.body == b'{"n":1}'
        again.close()
        folder = open_answers(path, store="folder")
        assert isinstance(folder, AnswerStore)
        folder.close()
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# ---------------------------------------------------------------- two hosts, end to end


@pytest.mark.slow  # two real services (~13 s); the same behaviour in-process runs always
def test_two_hosts_behind_one_balancer_share_late_answers(tmp_path: Path, pg_dsn: str) -> None:
    """Two ``dpkit serve`` processes over two copies of a project whose ledger is in
    PostgreSQL (two hosts, no shared folder): the 504 from host 1, the polls to host 2 (202,
    then the answer; another analyst's 404); then host 1 killed -9 while a work runs: host 2
    tells its analyst the answer will not come, instead of 202 for ever."""
    import json
    import shutil

    import httpx
    import psycopg
    from tests.server.conftest import SQL, live_server, stop

    import dpkit as dp
    from dpkit.server.auth import new_owner_token

    one = tmp_path / "host1"
    with dp.Curator.create(one, epsilon=3.0, source=dp.noise.seeded(7), ledger=pg_dsn) as cur:
        cur.add_table("t", {"g": ["a", "b"] * 50, "x": [1.0] * 100}, bounds={"x": (0, 5)},
                      domains={"g": ["a", "b"]})
        alice, bob = cur.add_analyst("alice", epsilon=1.0), cur.add_analyst("bob")
    new_owner_token(one)
    shutil.copytree(one, tmp_path / "host2")
    schema = json.loads((one / "ledger.pg").read_text())["schema"]
    flags = ("--timeout", "0.5", "--answer-deadline-ms", "0")
    hosts = [live_server(one, extra=flags), live_server(tmp_path / "host2", extra=flags)]
    h, hb = {"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {bob}"}

    def held() -> Any:
        """The ledger's write lock, held: a charged request waits past the timeout."""
        lock = psycopg.connect(pg_dsn)
        lock.execute(f"SELECT seq FROM {schema}.ledger_head WHERE id = 1 FOR UPDATE")
        return lock

    def late() -> str:
        r = httpx.post(hosts[0].url + "/v1/query", json={"sql": SQL, "epsilon": 0.1},
                       headers=h, timeout=10)
        assert r.status_code == 504, r.text
        return str(r.json()["answer_url"])

    try:
        lock = held()
        try:
            url = late()
            assert httpx.get(hosts[1].url + url, headers=h).status_code == 202
            assert httpx.get(hosts[1].url + url, headers=hb).status_code == 404
        finally:
            lock.rollback()
            lock.close()
        deadline = time.monotonic() + 20
        while (r := httpx.get(hosts[1].url + url, headers=h)).status_code == 202:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert r.status_code == 200 and r.json()["charge"]["epsilon"] == 0.1, r.text
        lock = held()
        try:
            url = late()
            assert httpx.get(hosts[1].url + url, headers=h).status_code == 202
            os.killpg(hosts[0].proc.pid, signal.SIGKILL)  # host 1 is gone, mid-work
            hosts[0].proc.wait(10)
            deadline = time.monotonic() + 10
            while (r := httpx.get(hosts[1].url + url, headers=h)).status_code == 202:
                assert time.monotonic() < deadline, "a dead host's answer still reads running"
                time.sleep(0.05)
            assert r.status_code == 404 and "will not come" in r.json()["detail"]
        finally:
            lock.rollback()
            lock.close()
    finally:
        for live in hosts:
            stop(live)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
