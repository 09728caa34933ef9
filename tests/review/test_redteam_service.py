"""Red-team pass over the service (FINDINGS.md, section F): one analyst must not be able to
hold the threads every analyst's requests share, and a request answered 504 before it started
must never charge afterwards."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("fastapi")

import dpkit as dp
from dpkit.server.auth import Identity
from dpkit.server.pool import Pool
from dpkit.server.problems import Problem


@dataclass
class Served:
    path: Path
    alice: str
    bob: str


def make_project(folder: Path) -> Served:
    path = folder / "p.dpkit"
    with dp.Curator.create(path, epsilon=3.0, source=dp.noise.seeded(7)) as cur:
        cur.add_table("t", pd.DataFrame({"x": [1.0, 2.0, 3.0]}), bounds={"x": (0, 5)})
        return Served(path, cur.add_analyst("alice", epsilon=1.0), cur.add_analyst("bob"))


ALICE = Identity("alice", "analyst", "k-alice")
BOB = Identity("bob", "analyst", "k-bob")


def _status(pool: Pool, who: Identity, token: str, call: Any, out: list[Any]) -> None:
    try:
        pool.run(who, token, call)
        out.append(200)
    except Problem as exc:
        out.append(exc.status)


def test_one_analyst_cannot_starve_another(tmp_path: Path) -> None:
    """F1: alice sends 24 slow requests at once (the rate limiter allows bursts of 60); they
    run one at a time on her curator. Before the fix they held all 16 threads, so bob's
    trivial request waited behind them and was answered 504; now alice's excess gets 429 at
    once and bob is answered."""
    p = make_project(tmp_path)
    pool = Pool(p.path, timeout=2.0)
    try:
        statuses: list[Any] = []
        threads = [threading.Thread(target=_status, args=(
            pool, ALICE, p.alice, lambda cur: time.sleep(0.25), statuses)) for _ in range(24)]
        for t in threads:
            t.start()
        time.sleep(0.1)  # alice's requests are in
        started = time.perf_counter()
        spent = pool.run(BOB, p.bob, lambda cur: cur.budget().spent)
        assert spent == 0.0 and time.perf_counter() - started < 1.0
        for t in threads:
            t.join()
        assert 429 in statuses and 504 not in statuses
        assert statuses.count(200) >= pool.per_caller
    finally:
        pool.close()


def test_a_504_before_the_call_started_never_charges(tmp_path: Path) -> None:
    """A request that timed out while waiting for a thread is cancelled: it must not run (and
    charge) after the analyst was told 504."""
    p = make_project(tmp_path)
    pool = Pool(p.path, timeout=5.0, threads=1)
    try:
        gate = threading.Event()
        first: list[Any] = []
        blocker = threading.Thread(target=_status, args=(
            pool, ALICE, p.alice, lambda cur: gate.wait(5), first))
        blocker.start()
        time.sleep(0.1)
        with pytest.raises(Problem) as info:
            pool.run(BOB, p.bob, lambda cur: cur.sql("SELECT COUNT(*) FROM t", epsilon=0.1),
                     timeout=0.2)
        assert info.value.status == 504
        gate.set()
        blocker.join()
        time.sleep(0.2)  # a call left in the queue would run now
        assert pool.run(BOB, p.bob, lambda cur: cur.budget().spent) == 0.0
    finally:
        pool.close()


def test_the_console_is_served_under_its_content_security_policy(tmp_path: Path) -> None:
    """F3: docs/service.md says the console runs under ``default-src 'self'``; the service
    did not send that header (only the browser test did), nor one refusing to be framed (the
    owner's revoke and cap buttons could be clickjacked). The API sends no CORS header: a page
    of another origin cannot read an answer even with a token."""
    from fastapi.testclient import TestClient

    from dpkit.server.app import create_app

    p = make_project(tmp_path)
    client = TestClient(create_app(p.path))
    page = client.get("/")
    csp = page.headers.get("content-security-policy", "")
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers.get("x-content-type-options") == "nosniff"
    me = client.get("/v1/me", headers={"Origin": "https://elsewhere.example",
                                       "Authorization": f"Bearer {p.alice}"})
    assert me.status_code == 200 and "access-control-allow-origin" not in me.headers
    client.app.state.service.close()


def test_an_expired_analyst_is_refused_through_oidc_too(tmp_path: Path) -> None:
    """F6: ``expires_days`` ends an analyst's access (401 "expired" for its token), but a
    JWT naming the same analyst was still accepted after the end: the OIDC path checked only
    that the analyst was not revoked."""
    import time

    jwt = pytest.importorskip("jwt")
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    from cryptography.hazmat.primitives import serialization
    from fastapi.testclient import TestClient

    from dpkit.server.app import create_app
    from dpkit.server.config import OidcConfig

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "idp.pem"
    pem.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    p = make_project(tmp_path)
    with dp.Curator.open(p.path) as cur:
        cur.add_analyst("temp", expires_days=2e-6)  # 0.17 s
    client = TestClient(create_app(p.path, oidc=OidcConfig(
        public_key=str(pem), audience="dpkit", issuer="https://idp.test", claim="email")))
    body = {"email": "temp", "aud": "dpkit", "iss": "https://idp.test",
            "exp": int(time.time()) + 300}
    auth = {"Authorization": "Bearer " + jwt.encode(body, key, algorithm="RS256")}
    time.sleep(0.3)
    got = client.get("/v1/me", headers=auth)
    assert got.status_code == 401 and "expired" in got.json()["detail"], got.text
    client.app.state.service.close()


def test_a_charge_whose_head_file_cannot_be_written_says_it_was_charged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """F8: the charge is committed, then writing ``ledger.head`` fails (a full disk, a
    read-only head file). Nothing is released (good), but the raw OSError reached the
    analyst, and the service turned it into 503 "nothing was charged by this request" while
    the charge stood. Now the fixed after-charge refusal names the ledger entry."""
    from fastapi.testclient import TestClient

    from dpkit.server.app import create_app

    p = make_project(tmp_path)
    client = TestClient(create_app(p.path))
    auth = {"Authorization": f"Bearer {p.bob}"}
    replace = os.replace

    def full_disk(src: Any, dst: Any) -> None:
        if str(dst).endswith("ledger.head"):
            raise OSError(28, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk)
    got = client.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM t", "epsilon": 0.5},
                      headers=auth)
    monkeypatch.undo()
    spent = client.get("/v1/budget", headers=auth).json()["spent_epsilon"]
    assert spent == pytest.approx(0.5)
    assert got.status_code == 409 and "charged" in got.json()["detail"]
    assert "nothing was charged" not in got.json()["detail"]
    assert "ledger entry #" in got.json()["detail"]
    client.app.state.service.close()


def test_an_analyst_cap_also_bounds_its_share_of_delta(tmp_path: Path) -> None:
    """F9: alice's cap is ε 0.5 of the project's 3; with ε 0.01 per query she spent the
    project's whole δ on private group selections (ten of them, ε 0.1 in all), and bob, with
    ε 2 of his own left, could no longer run any query that needs δ. Now her δ is capped in
    the same proportion (1/6 of the project's) and her queries draw a tenth of *her* δ."""
    path = tmp_path / "p"
    with dp.Curator.create(path, budget=dp.Budget(epsilon=3, delta=1e-6)) as cur:
        cur.add_table("t", pd.DataFrame({"uid": range(40), "k": ["a", "b"] * 20}),
                      privacy_unit="uid", max_rows_per_unit=1)
        alice = dp.Curator.open(path, token=cur.add_analyst("alice", epsilon=0.5))
        bob = dp.Curator.open(path, token=cur.add_analyst("bob", epsilon=2.0))
    for _ in range(12):
        try:
            alice.sql("SELECT k, COUNT(*) FROM t GROUP BY k", epsilon=0.01)
        except dp.accounting.BudgetExceeded:
            break
    assert alice.budget().spent < 0.5
    assert alice.budget().delta_spent <= 1e-6 / 6 * (1 + 1e-9)
    bob.sql("SELECT k, COUNT(*) FROM t GROUP BY k", epsilon=0.5)  # was refused: no δ left
