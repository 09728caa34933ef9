"""A small project served in-process (FastAPI's TestClient) or by real uvicorn processes on
loopback (:func:`live_server`), with two analysts and an owner token."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

import numpy as np
import pandas as pd

import dpkit as dp

SRC = Path(__file__).resolve().parents[2] / "src"
SQL = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"


@dataclass
class Project:
    path: Path
    alice: str  # analyst with a cap of 1.0
    bob: str  # analyst without a cap of its own
    owner: str  # the owner token

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def make_project(folder: Path, *, epsilon: float = 3.0, rows: int = 2000) -> Project:
    from dpkit.server.auth import new_owner_token

    path = folder / "p.dpkit"
    i = np.arange(rows)
    frame = pd.DataFrame({"g": np.where(i % 3 == 0, "a", "b"), "x": (i % 50).astype(float),
                          "secret": i * 7})
    with dp.Curator.create(path, epsilon=epsilon, source=dp.noise.seeded(7)) as cur:
        cur.add_table("t", frame, bounds={"x": (0, 50), "secret": (0, 100_000)},
                      domains={"g": ["a", "b"]})
        alice = cur.add_analyst("alice", epsilon=1.0)
        bob = cur.add_analyst("bob")
    return Project(path, alice, bob, new_owner_token(path))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


@pytest.fixture
def make_client(project: Project) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from dpkit.server.app import create_app
    from dpkit.server.auth import owner_hashes

    made: list[Any] = []

    def make(**settings: Any) -> Any:
        # timing classes on, as deployed, but short: every answer here would wait for the
        # first (the service's 250 ms); test_pacing.py checks the classes themselves
        settings.setdefault("answer_deadline_ms", 10.0)
        app = create_app(project.path, owner_token_sha256=owner_hashes(project.path),
                         **settings)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        made.append(client)
        return client

    yield make
    for c in made:
        c.__exit__(None, None, None)
        c.app.state.service.close()


@pytest.fixture
def client(make_client: Any) -> Any:
    return make_client()


@contextmanager
def ledger_held(path: Path, seconds: float) -> Iterator[None]:
    """Project ``path``'s SQLite ledger locked for ``seconds`` from now: a request made
    meanwhile waits for it past a short service timeout (504), then charges."""
    lock = sqlite3.connect(path / "ledger.sqlite", timeout=0, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(seconds, lock.rollback)
    release.start()
    try:
        yield
    finally:
        release.join()
        lock.close()


def idp_key(folder: Path) -> tuple[Any, Path]:
    """An identity provider's RSA key and its public PEM file (for ``OidcConfig``)."""
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    from cryptography.hazmat.primitives import serialization

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = folder / "idp.pem"
    pem.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, pem


def local_client(app_client: Any, token: str) -> Any:
    """A :class:`dpkit.Client` whose HTTP goes through the in-process app ``app_client``."""
    from dpkit.server.client import Client

    class Local(Client):
        def request(self, method: str, path: str, body: Any = None) -> Any:
            r = app_client.request(method, path, json=body,
                                   headers={"Authorization": f"Bearer {self._token}"})
            if r.status_code >= 400:
                self._raise(r.status_code, r.headers.get("content-type", ""), r.content,
                            r.headers.get("Retry-After"))
            return r.status_code, r.headers.get("content-type", ""), r.content

    return Local("http://local", token)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Live:
    url: str
    proc: subprocess.Popen[bytes]


def live_server(project: Path, *, workers: int = 1, extra: tuple[str, ...] = (),
                env: dict[str, str] | None = None,
                https: tuple[Path, Path] | None = None) -> Live:
    """``dpkit serve`` in a subprocess on a free loopback port, up when this returns
    (``https``: its key and certificate files; ``Live.url`` stays http://, for the probe)."""
    import httpx

    port = free_port()
    tls = ("--ssl-keyfile", str(https[0]), "--ssl-certfile", str(https[1])) if https else ()
    cmd = [sys.executable, "-m", "dpkit.cli", "serve", str(project), "--port", str(port),
           "--workers", str(workers), *tls, *extra]
    full_env = {**os.environ, "PYTHONPATH": str(SRC), **(env or {})}
    full_env.pop("DPKIT_TOKEN", None)
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dpkit serve exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            probe = url.replace("http://", "https://") if https else url
            if httpx.get(probe + "/v1/health", timeout=0.5, verify=False).status_code == 200:
                return Live(url, proc)
        except httpx.HTTPError:
            time.sleep(0.1)
    stop(Live(url, proc))
    raise RuntimeError("dpkit serve did not come up in 30 s")


def stop(live: Live) -> None:
    import signal

    if live.proc.poll() is None:
        os.killpg(live.proc.pid, signal.SIGTERM)
        try:
            live.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(live.proc.pid, signal.SIGKILL)
            live.proc.wait(10)


def pytest_configure(config: pytest.Config) -> None:
    """Load the pytest plugins this folder needs here, not in every pytest process:
    pyproject.toml's addopts block their entry points (``-p no:schemathesis -p no:playwright``),
    ~1.5 s of imports per process that never collects tests/server. schemathesis makes
    test_fuzz.py's ``@schema.parametrize()`` items in its collection hook; pytest-playwright
    gives test_console_browser.py its ``page`` fixture, its ``[chromium]`` parametrization and
    its ``--browser``/``--headed`` options (pytest gives options added now their defaults).
    pytest calls this when it imports this conftest (before collecting the folder); pluggy
    replays each plugin's own ``pytest_configure`` and ``pytest_addoption``. Registered once,
    whether or not an entry point was loaded too. (anyio's plugin is blocked the same way and
    registered nowhere: no test uses its marker.)"""
    import importlib

    for name in ("schemathesis.pytest.plugin", "pytest_playwright.pytest_playwright"):
        try:
            plugin = importlib.import_module(name)
        except ImportError:
            continue  # the tests that need it skip themselves (importorskip)
        if not config.pluginmanager.is_registered(plugin):
            config.pluginmanager.register(plugin, name)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each schemathesis operation's item (test_fuzz.py) its own node id. pytest 9.2
    builds a Function's id from ``originalname`` and its callspec, and schemathesis passes the
    bare test name, so all 16 operations shared one id (xdist's loadfile/loadgroup then ran
    one of them; --durations could not tell them apart). Done here, not by parametrizing the
    test: its signature seeds schemathesis's derandomized examples."""
    for item in items:
        label = getattr(item, "operation_label", None)
        name = getattr(item, "originalname", None)
        if label and name and item.nodeid.endswith("::" + name):
            item._id = item.parent.id.child(name).with_params(label)  # type: ignore[union-attr]


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A PostgreSQL server for the late answers' PostgreSQL store: ``$DPKIT_TEST_PG_DSN``
    (``.ci/run``) or a throwaway cluster, as the PostgreSQL ledger's tests; skipped, with the
    reason, where neither can be had."""
    from tests.engine.pg_cluster import throwaway_cluster, unavailable

    reason = unavailable()
    if reason is not None:
        pytest.skip(f"PostgreSQL answers' store tests skipped: {reason}")
    with throwaway_cluster(fsync=False) as dsn:
        yield dsn


@pytest.fixture(params=["folder", "postgres"])
def answers_at(request: pytest.FixtureRequest, project: Project) -> Iterator[dict[str, Any]]:
    """The service settings of each late answers' store: the folder (``{}``), or a table in
    PostgreSQL (``answers_dsn``; its schema dropped after)."""
    if request.param == "folder":
        yield {}
        return
    import psycopg

    from dpkit.engine.ledger_rows import read_key
    from dpkit.server.answers_pg import answers_schema

    dsn = request.getfixturevalue("pg_dsn")
    yield {"answers_dsn": dsn}
    assert not (project.path / "answers").exists()  # nothing kept in the folder
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema = answers_schema(read_key(project.path / "ledger.key"))
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
