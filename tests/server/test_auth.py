"""Hostile callers, by enumeration of the routes: every protected route refuses missing,
malformed, unknown, revoked and expired credentials (401) and an analyst at an owner route
(403); no answer carries a row or another analyst's history."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from tests.server.conftest import SQL, Project, idp_key

OPEN = {"/v1/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/",
        "/static"}
OWNER_ONLY = {("GET", "/v1/analysts"), ("POST", "/v1/analysts"),
              ("DELETE", "/v1/analysts/{name}"), ("PUT", "/v1/analysts/{name}/budget"),
              ("POST", "/v1/tables")}
BODIES = {"/v1/preview": {"sql": SQL, "epsilon": 0.1},
          "/v1/query": {"sql": SQL, "epsilon": 0.1},
          "/v1/release/cdf": {"table": "t", "column": "x", "epsilon": 0.1},
          "/v1/release/quantiles": {"table": "t", "column": "x", "probabilities": [0.5],
                                    "epsilon": 0.1},
          "/v1/release/marginals": {"table": "t", "columns": ["g"], "epsilon": 0.1},
          "/v1/release/synthetic": {"table": "t", "columns": ["g"], "epsilon": 0.1},
          "/v1/analysts": {"name": "mallory", "epsilon": 1.0},
          "/v1/analysts/{name}/budget": {"epsilon": 5.0},
          "/v1/tables": {"name": "t2", "source": "/nonexistent.csv"}}


def _walk(routes: Any) -> Any:
    for r in routes:
        inner = getattr(r, "original_router", None)  # FastAPI >= 0.16x: included routers
        if inner is not None:
            yield from _walk(inner.routes)
        else:
            yield r


def routes(client: Any) -> list[tuple[str, str]]:
    """Every (method, path) the app routes, except the open ones; checked against the
    OpenAPI schema so that a route hidden from one cannot escape the enumeration."""
    out = []
    for r in _walk(client.app.routes):
        path = getattr(r, "path", "")
        for m in sorted(getattr(r, "methods", None) or ()):
            if m not in ("HEAD", "OPTIONS") and path not in OPEN:
                out.append((m, path))
    documented = {(m.upper(), p) for p, ops in client.app.openapi()["paths"].items()
                  for m in ops if p not in OPEN}
    assert set(out) == documented
    return out


def call(client: Any, method: str, path: str, headers: dict[str, str]) -> Any:
    url = path.replace("{name}", "bob")
    body = BODIES.get(path)
    return client.request(method, url, headers=headers,
                          json=body if method in ("POST", "PUT") else None)


def test_every_protected_route_is_enumerated(client: Any) -> None:
    found = {p for _, p in routes(client)}
    assert found >= {"/v1/me", "/v1/tables", "/v1/preview", "/v1/query", "/v1/budget",
                     "/v1/history", *(p for _, p in OWNER_ONLY),
                     *(p for p in BODIES if "release" in p)}
    assert all(p.startswith("/v1/") for p in found)


def test_bad_credentials_are_401_everywhere(client: Any, project: Project) -> None:
    revoked_name = "eve"
    o = project.headers(project.owner)
    revoked = client.post("/v1/analysts", json={"name": revoked_name}, headers=o).json()["token"]
    assert client.delete(f"/v1/analysts/{revoked_name}", headers=o).status_code == 204
    bad = {
        "missing": {},
        "empty bearer": {"Authorization": "Bearer "},
        "basic scheme": {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
        "malformed": {"Authorization": "Bearer dpkit_xyz"},
        "unknown": {"Authorization": "Bearer dpkit_" + "0" * 64},
        "revoked": {"Authorization": f"Bearer {revoked}"},
        "wrong owner": {"Authorization": "Bearer dpkit_owner_" + "1" * 64},
        "token case changed": {"Authorization": f"Bearer {project.alice.upper()}"},
    }
    before = (project.path / "ledger.sqlite").stat().st_size
    for method, path in routes(client):
        for why, headers in bad.items():
            r = call(client, method, path, headers)
            assert r.status_code == 401, (method, path, why, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.headers.get("www-authenticate", "").startswith("Bearer")
    assert (project.path / "ledger.sqlite").stat().st_size == before  # nothing written


def test_analysts_are_403_on_owner_routes(client: Any, project: Project) -> None:
    for method, path in routes(client):
        if (method, path) in OWNER_ONLY:
            r = call(client, method, path, project.headers(project.alice))
            assert r.status_code == 403, (method, path, r.text)
    o = client.get("/v1/analysts", headers=project.headers(project.owner)).json()
    assert {a["name"]: a["cap_epsilon"] for a in o["analysts"]} == {"alice": 1.0, "bob": None}


def test_no_answer_has_a_row_or_another_analysts_history(client: Any,
                                                         project: Project) -> None:
    a, b = project.headers(project.alice), project.headers(project.bob)
    secret_sql = "SELECT COUNT(*) AS n FROM t WHERE secret = 7"
    assert client.post("/v1/query", json={"sql": secret_sql, "epsilon": 0.1},
                       headers=b).status_code == 200
    texts = []
    for method, path in routes(client):
        if (method, path) in OWNER_ONLY:
            continue
        r = call(client, method, path, a)
        assert r.status_code < 500, (method, path, r.text)
        texts.append(r.text)
    blob = "\n".join(texts)
    assert "secret = 7" not in blob and project.bob not in blob  # bob's query, bob's token
    hist = client.get("/v1/history", headers=a).json()["items"]
    assert all(i["sql"] != secret_sql for i in hist)
    # raw values never appear: the secret column's values are multiples of 7 up to 13993;
    # every number answered is a noisy aggregate (COUNT of 2000 rows: ~667 / ~1333)
    for q in ("SELECT secret FROM t", "SELECT g, secret FROM t GROUP BY g, secret",
              "SELECT secret, COUNT(*) FROM t GROUP BY secret", "SELECT * FROM t LIMIT 1"):
        r = client.post("/v1/query", json={"sql": q, "epsilon": 0.01}, headers=a)
        assert r.status_code in (409, 422), (q, r.text)


def test_budget_endpoint_cannot_name_another_analyst(client: Any, project: Project) -> None:
    a = project.headers(project.alice)
    assert client.get("/v1/budget?analyst=bob", headers=a).json()["analyst"] == "alice"
    r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1, "analyst": "bob"},
                    headers=a)
    assert r.status_code == 422  # unknown field: a caller never chooses whom to charge


def test_owner_token_file_and_env(project: Project, tmp_path: Any, monkeypatch: Any) -> None:
    from dpkit.server.auth import OWNER_TOKEN_ENV, new_owner_token, owner_hashes, sha256_hex

    stored = owner_hashes(project.path)
    assert stored == (sha256_hex(project.owner),)
    mode = (project.path / "owner-token.sha256").stat().st_mode & 0o777
    assert mode == 0o600
    other = "dpkit_owner_" + "a" * 64
    f = tmp_path / "tok"
    f.write_text(other + "\n")
    assert sha256_hex(other) in owner_hashes(project.path, token_file=f)
    monkeypatch.setenv(OWNER_TOKEN_ENV, "not-a-token")
    with pytest.raises(ValueError, match="64 hex"):
        owner_hashes(project.path)
    monkeypatch.delenv(OWNER_TOKEN_ENV)
    fresh = new_owner_token(project.path)
    assert re.fullmatch(r"dpkit_owner_[0-9a-f]{64}", fresh) and fresh != project.owner
    assert owner_hashes(project.path) == (sha256_hex(fresh),)  # the old one stops working


# ---------------------------------------------------------------------- OIDC / JWT


@pytest.fixture
def rsa_pem(tmp_path: Any) -> tuple[Any, Any]:
    pytest.importorskip("jwt")
    return idp_key(tmp_path)


def test_oidc_jwt_maps_a_claim_to_the_analyst(make_client: Any, project: Project,
                                              rsa_pem: Any) -> None:
    import time

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from dpkit.server.config import OidcConfig

    key, pub = rsa_pem
    client = make_client(oidc=OidcConfig(public_key=str(pub), audience="dpkit",
                                         issuer="https://idp.test", claim="email"))
    now = int(time.time())

    def token(signer: Any = key, **claims: Any) -> dict[str, str]:
        body = {"email": "alice", "aud": "dpkit", "iss": "https://idp.test",
                "exp": now + 300, **claims}
        return {"Authorization": "Bearer " + jwt.encode(body, signer, algorithm="RS256")}

    assert client.get("/v1/me", headers=token()).json() == {"name": "alice",
                                                           "role": "analyst"}
    r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1}, headers=token())
    assert r.status_code == 200 and r.json()["budget"]["analyst"] == "alice"
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for why, h in {"expired": token(exp=now - 10), "other audience": token(aud="x"),
                   "other issuer": token(iss="https://evil.test"),
                   "other key": token(signer=stranger), "no such analyst": token(
                       email="mallory"), "no exp": {"Authorization": "Bearer " + jwt.encode(
                           {"email": "alice", "aud": "dpkit", "iss": "https://idp.test"},
                           key, algorithm="RS256")},
                   "alg none": {"Authorization": "Bearer " + jwt.encode(
                       {"email": "alice", "aud": "dpkit", "iss": "https://idp.test",
                        "exp": now + 300}, None, algorithm="none")}}.items():
        r = client.get("/v1/me", headers=h)
        assert r.status_code == 401, (why, r.text)
    # revoking the analyst refuses its JWTs too
    o = project.headers(project.owner)
    assert client.delete("/v1/analysts/alice", headers=o).status_code == 204
    assert client.get("/v1/me", headers=token()).status_code == 401
    assert json.loads(client.get("/v1/me", headers=token()).text)["status"] == 401


def test_expired_analyst_token_is_401(client: Any, project: Project) -> None:
    import time

    o = project.headers(project.owner)
    r = client.post("/v1/analysts", json={"name": "temp", "expires_days": 2e-6}, headers=o)
    assert r.status_code == 201 and r.json()["expires"]
    token = r.json()["token"]
    listed = {a["name"]: a for a in client.get("/v1/analysts", headers=o).json()["analysts"]}
    assert listed["temp"]["expires"] == r.json()["expires"] and listed["bob"]["expires"] is None
    time.sleep(0.25)  # 2e-6 days = 0.17 s
    for method, path in routes(client):
        if (method, path) not in OWNER_ONLY:
            got = call(client, method, path, project.headers(token))
            assert got.status_code == 401, (method, path, got.text)
            assert "expired" in got.json()["detail"]
    from dpkit.engine.curator import Curator

    with pytest.raises(PermissionError, match="expired"):  # the library refuses it too
        Curator.open(project.path, token=token)
    long = client.post("/v1/analysts", json={"name": "later", "expires_days": 30},
                       headers=o).json()["token"]
    assert client.get("/v1/me", headers=project.headers(long)).status_code == 200
    assert client.post("/v1/analysts", json={"name": "x", "expires_days": -1},
                       headers=o).status_code == 422


def test_oidc_jwks_url(make_client: Any, project: Project, rsa_pem: Any) -> None:
    """The provider's key set fetched from a JWKS URL (a loopback server here)."""
    import http.server
    import threading
    import time

    import jwt
    from jwt.algorithms import RSAAlgorithm

    from dpkit.server.config import OidcConfig

    key, _ = rsa_pem
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwks = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(jwks)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        client = make_client(oidc=OidcConfig(jwks_url=url, audience="dpkit"))
        good = jwt.encode({"sub": "bob", "aud": "dpkit", "exp": int(time.time()) + 60}, key,
                          algorithm="RS256", headers={"kid": "k1"})
        r = client.get("/v1/me", headers={"Authorization": f"Bearer {good}"})
        assert r.json() == {"name": "bob", "role": "analyst"}, r.text
        other = jwt.encode({"sub": "bob", "aud": "dpkit", "exp": int(time.time()) + 60}, key,
                           algorithm="RS256", headers={"kid": "unknown"})
        assert client.get("/v1/me", headers={"Authorization": f"Bearer {other}"}
                          ).status_code == 401
    finally:
        server.shutdown()
