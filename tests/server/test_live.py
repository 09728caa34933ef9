"""Real ``dpkit serve`` processes on loopback: clients racing for the last of a budget over
two server processes never overspend (the ledger's check-and-charge is one transaction), and
``dpkit.Client`` speaks the contract."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import SQL, live_server, make_project, stop

from dpkit.engine.ledger import Ledger


def test_racing_clients_over_two_processes_never_overspend(tmp_path: Path) -> None:
    import dpkit as dp

    project = make_project(tmp_path, epsilon=1.0, rows=300)
    with dp.Curator.open(project.path) as cur:  # more analysts: more curators in parallel
        tokens = [project.bob, *(cur.add_analyst(f"a{i}") for i in range(3))]
    live = live_server(project.path, workers=2)
    codes: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(12)

    def race(token: str) -> None:
        with dp.Client(live.url, token) as c:
            start.wait()
            for _ in range(2):
                try:
                    c.sql(SQL, epsilon=0.3)
                    code = 200
                except dp.server.client.QueryRefusedError as exc:
                    code = exc.status
                with lock:
                    codes.append(code)

    try:
        threads = [threading.Thread(target=race, args=(tokens[i % 4],)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        stop(live)
    led = Ledger.open(project.path / "ledger.sqlite")
    try:
        led.verify()
        spent = led.spend().spent
        n_charges = len(led.entries("charge"))
    finally:
        led.close()
    assert len(codes) == 24 and set(codes) <= {200, 409}
    assert codes.count(200) == n_charges == 3  # 3 x 0.3 fit in 1.0, a fourth does not
    assert spent <= 1.0 + 1e-12


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Any:
    project = make_project(Path(tmp_path_factory.mktemp("live")))
    server = live_server(project.path)
    yield project, server
    stop(server)


def test_client_has_the_curators_methods(live: Any) -> None:
    import dpkit as dp
    from dpkit.server.client import NotAuthenticatedError, QueryRefusedError

    project, server = live
    c = dp.Client(server.url, project.alice)
    assert c.me() == {"name": "alice", "role": "analyst"}
    assert set(c.tables()) == {"t"}
    p = c.preview(SQL, epsilon=0.1)
    assert p["expected_error"]["n"] > 0 and c.budget()["spent_epsilon"] == 0
    res = c.sql(SQL, epsilon=0.1)
    assert res.columns == ["g", "n"] and len(res) == 2 and res.epsilon == 0.1
    lo, hi = res.ci("n")
    assert all(a <= v <= b for a, v, b in zip(lo, res["n"], hi, strict=True))
    assert list(res.to_dicts()[0]) == ["g", "n", "n_ci_low", "n_ci_high"]
    one = c.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.1)
    assert abs(one.value() - 2000) < 200  # Laplace scale 10: P(|noise| > 200) = e^-20
    assert [h["sql"] for h in c.history()] == [SQL, "SELECT COUNT(*) AS n FROM t"]
    with pytest.raises(QueryRefusedError, match="budget"):
        c.sql(SQL, epsilon=5.0)
    with pytest.raises(ValueError, match="SELECT"):  # QueryRefusedError is a ValueError
        c.sql("SELECT * FROM t", epsilon=0.1)
    assert c.quantiles("t", "x", [0.5], epsilon=0.1).columns == ["probability", "quantile"]
    assert c.synthetic("t", ["g"], epsilon=0.1, rows=3).splitlines()[0] == "g"
    assert abs(c.budget()["spent_epsilon"] - 0.4) < 1e-9
    with pytest.raises(NotAuthenticatedError):
        dp.Client(server.url, "dpkit_" + "0" * 64).budget()
    with pytest.raises(PermissionError):  # ForbiddenError: an analyst at an owner route
        c.analysts()
    owner = dp.Client(server.url, project.owner)
    token = owner.add_analyst("dave", epsilon=0.5)
    assert dp.Client(server.url, token).me()["name"] == "dave"
    owner.set_analyst_budget("dave", 0.6)
    owner.revoke_analyst("dave")
    assert {a["name"]: a["status"] for a in owner.analysts()}["dave"] == "revoked"
    with pytest.raises(ValueError, match="http"):
        dp.Client("ftp://x", token)


def test_tls_through_uvicorn_and_the_client(tmp_path: Path) -> None:
    """``dpkit serve --ssl-keyfile --ssl-certfile`` (a self-signed certificate for
    127.0.0.1), and ``dpkit.Client`` over https trusting it with ``cafile=``."""
    import datetime as dt
    import ipaddress

    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    import dpkit as dp

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    keyfile, certfile = tmp_path / "key.pem", tmp_path / "cert.pem"
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    project = make_project(tmp_path, rows=300)
    live = live_server(project.path, https=(keyfile, certfile))
    try:
        url = live.url.replace("http://", "https://")
        c = dp.Client(url, project.alice, cafile=str(certfile))
        assert c.me() == {"name": "alice", "role": "analyst"}
        with pytest.raises(ConnectionError, match=r"(?i)certificate"):
            dp.Client(url, project.alice).me()  # not trusted without the cafile
    finally:
        stop(live)
