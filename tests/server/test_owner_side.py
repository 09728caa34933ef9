"""The owner's side of the service, hardened (docs/service.md): tables only from the data root,
no server path in an analyst's error, no CDN script unless asked (``--api-docs``), an unknown
charge outcome said as such, a replace that keeps the privacy unit, text cut at load, and the
pool's pending count when it cannot take a request."""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import SQL, Project, make_project

CSV = "ward,age,pid\n" + "".join(f"{'AB'[i % 2]},{i % 90},{i // 2}\n" for i in range(200))


def _post_table(client: Any, project: Project, source: str, **extra: Any) -> Any:
    body = {"name": "w", "source": source, "bounds": {"age": [0, 100]}, **extra}
    return client.post("/v1/tables", json=body, headers=project.headers(project.owner))


def _tables(client: Any, project: Project) -> set[str]:
    got = client.get("/v1/tables", headers=project.headers(project.owner)).json()["tables"]
    return {t["name"] for t in got}


# ------------------------------------------------------------------ 1. the data root


def test_tables_are_read_only_from_the_data_root(client: Any, project: Project,
                                                 tmp_path: Path) -> None:
    """Before the root, an owner token read any file the service could (this outside CSV
    loaded with 201): now outside sources, links out of the root, ``..``, globs and the
    project's own files are refused with the root and ``--data-root`` named, nothing loaded."""
    root = project.path / "data"
    root.mkdir()
    outside = tmp_path / "outside.csv"
    outside.write_text(CSV)
    (root / "link.csv").symlink_to(outside)
    for source in (str(outside), str(root / "link.csv"), "../../outside.csv",
                   str(project.path / "data.duckdb") + "::t", str(root / "*.csv")):
        r = _post_table(client, project, source)
        assert r.status_code == 409, (source, r.text)
        detail = r.json()["detail"]
        assert "Nothing was loaded" in detail, detail
        if "*" not in source:
            assert str(root) in detail and "--data-root" in detail, detail
    assert _tables(client, project) == {"t"}
    (root / "w.csv").write_text(CSV)
    assert _post_table(client, project, "w.csv").status_code == 201  # relative: from the root
    assert _post_table(client, project, str(root / "w.csv"), replace=True).status_code == 201


def test_a_wider_root_still_refuses_the_projects_own_files(make_client: Any, project: Project,
                                                          tmp_path: Path) -> None:
    client = make_client(data_root=str(tmp_path))
    (tmp_path / "w.csv").write_text(CSV)
    assert _post_table(client, project, str(tmp_path / "w.csv")).status_code == 201
    (project.path / "key.csv").write_text((project.path / "ledger.key").read_bytes().hex())
    for own in ("ledger.key", "key.csv", "data.duckdb::t"):
        r = _post_table(client, project, str(project.path / own), replace=True)
        assert r.status_code == 409 and "project's own files" in r.json()["detail"], r.text


def test_the_owners_own_process_reads_any_path(tmp_path: Path) -> None:
    import dpkit as dp

    outside = tmp_path / "elsewhere" / "w.csv"
    outside.parent.mkdir()
    outside.write_text(CSV)
    with dp.Curator.create(tmp_path / "p.dpkit", epsilon=1.0) as cur:
        assert cur.add_table("w", str(outside), bounds={"age": (0, 100)}).name == "w"
        assert cur.add_public_table("pw", str(outside)).public


def test_serve_takes_a_data_root_and_api_docs() -> None:
    from click.testing import CliRunner

    from dpkit.cli.serve import serve

    out = CliRunner().invoke(serve, ["--help"]).output
    assert "--data-root" in out and "--api-docs" in out and "CDN" in out
    bad = CliRunner().invoke(serve, [".", "--data-root", "/nonexistent/dir"])
    assert bad.exit_code == 2 and "does not exist" in bad.output


# ------------------------------------------------------------------ 2. no server path for analysts


PLANTED = "PLANTED-server-dir"


@pytest.fixture
def planted(tmp_path: Path) -> Project:
    (tmp_path / PLANTED).mkdir()
    return make_project(tmp_path / PLANTED)


def _client(project: Project) -> Any:
    from fastapi.testclient import TestClient

    from dpkit.server.app import create_app
    from dpkit.server.auth import owner_hashes

    app = create_app(project.path, owner_token_sha256=owner_hashes(project.path))
    return TestClient(app, raise_server_exceptions=False)


def test_a_missing_data_file_shows_analysts_no_path(planted: Project,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The real thing: the project's data file gone. Before, the analyst's 503 quoted
    ``cannot open the project's data /…/PLANTED-server-dir/p.dpkit/data.duckdb: IO Error…``;
    now a fixed text with a reference under which the service logged the detail. The owner
    still sees the detail."""
    client = _client(planted)
    os.rename(planted.path / "data.duckdb", planted.path / "data.moved")
    with caplog.at_level(logging.ERROR, logger="dpkit.server"):
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                        headers=planted.headers(planted.alice))
    assert r.status_code == 503
    detail = r.json()["detail"]
    assert PLANTED not in r.text and "/" not in detail and "IO Error" not in detail, detail
    assert "nothing was charged" in detail
    ref = r.json()["instance"].rsplit(":", 1)[1]
    assert ref.startswith("ref-") and any(ref in m and PLANTED in m for m in caplog.messages)
    owner = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                        headers=planted.headers(planted.owner))
    assert owner.status_code == 503 and PLANTED in owner.json()["detail"]
    client.app.state.service.close()


def test_no_analyst_error_quotes_a_server_path(planted: Project, monkeypatch: Any) -> None:
    """Each kind of failure a request can meet, with a path planted in its text: the analyst's
    answer has no path (nor the exception's text for a 5xx), the owner's keeps it."""
    import sqlite3

    from dpkit.engine import Curator
    from dpkit.engine.ledger_rows import LedgerError

    where = f"{planted.path}/ledger.sqlite"
    client = _client(planted)
    for error in (LedgerError(f"ledger {where} is locked"),
                  sqlite3.OperationalError(f"unable to open database file {where}"),
                  FileNotFoundError(f"source file {where} does not exist"),
                  RuntimeError(f'Could not set lock on file "{where}": Conflicting lock'),
                  ValueError(f"format-1 ledger at {where}: run dpkit migrate"),
                  KeyError(where)):
        def broken(*a: Any, _e: Exception = error, **k: Any) -> Any:
            raise _e

        monkeypatch.setattr(Curator, "sql", broken)
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                        headers=planted.headers(planted.alice))
        assert r.status_code in (409, 500, 503), r.text
        assert PLANTED not in r.text and "ledger.sqlite" not in r.text, (error, r.text)
        owner = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                            headers=planted.headers(planted.owner))
        assert owner.status_code == r.status_code and PLANTED in owner.text, owner.text
    client.app.state.service.close()


def test_an_unauthenticated_caller_sees_no_path_either(planted: Project,
                                                       monkeypatch: Any) -> None:
    from dpkit.engine.ledger import Ledger
    from dpkit.engine.ledger_rows import LedgerError

    def broken(*a: Any, **k: Any) -> Any:
        raise LedgerError(f"cannot read {planted.path}/ledger.sqlite")

    client = _client(planted)
    monkeypatch.setattr(Ledger, "analyst_for_token", broken)
    r = client.get("/v1/me", headers=planted.headers("dpkit_" + "0" * 64))
    assert r.status_code == 503 and PLANTED not in r.text, r.text
    client.app.state.service.close()


def test_the_path_filter_keeps_the_api_routes_and_the_sql() -> None:
    from dpkit.server.problems import Problem, for_analyst

    p = Problem(504, "timeout", "ran past 30 s (see /v1/history); a / b and 1/2 stay")
    assert for_analyst(p, "ref-1") is p
    q = for_analyst(Problem(409, "refused", "cannot read /srv/x/y.csv or ~/k and ./z"), "r")
    assert q.detail == "cannot read <path> or <path> and <path>"


# ------------------------------------------------------------------ 3. no CDN asset by default


def test_docs_are_off_by_default_and_marked_when_on(make_client: Any) -> None:
    client = make_client()
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404
    assert client.get("/openapi.json").status_code == 200
    page = client.get("/")
    assert page.headers["content-security-policy"] == "default-src 'self'; frame-ancestors 'none'"
    assert "cdn" not in page.text.lower()
    docs = make_client(api_docs=True).get("/docs")
    assert docs.status_code == 200
    assert "loaded from cdn.jsdelivr.net" in docs.text and "third party" in docs.text
    csp = docs.headers["content-security-policy"]
    inline = docs.text.rsplit("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
    assert f"script-src https://cdn.jsdelivr.net 'sha256-{digest}';" in csp
    assert "frame-ancestors 'none'" in csp
    hosts = {h.split("/")[0] for h in docs.text.split("https://")[1:]}
    assert hosts == {"cdn.jsdelivr.net"}, hosts  # no favicon from another site


# ------------------------------------------------------------------ 4. outcome unknown


def test_an_unknown_charge_outcome_never_says_nothing_was_charged(project: Project,
                                                                  monkeypatch: Any) -> None:
    from dpkit.engine import Curator
    from dpkit.engine.ledger_rows import ChargeOutcomeUnknown

    def lost(*a: Any, **k: Any) -> Any:
        raise ChargeOutcomeUnknown(7, "server closed the connection", "PostgreSQL x",
                                   project.path)

    monkeypatch.setattr(Curator, "sql", lost)
    client = _client(project)
    for token in (project.alice, project.owner):
        r = client.post("/v1/query", json={"sql": SQL, "epsilon": 0.1},
                        headers=project.headers(token))
        body = r.json()
        assert r.status_code == 503 and body["type"].endswith("/outcome-unknown"), r.text
        assert "unknown" in body["detail"] and "/v1/history" in body["detail"]
        assert "nothing was charged" not in body["detail"].lower()
    client.app.state.service.close()


# ------------------------------------------------------------------ 5. replace keeps the unit


def test_a_replace_over_http_keeps_the_privacy_unit(client: Any, project: Project) -> None:
    root = project.path / "data"
    root.mkdir()
    (root / "w.csv").write_text(CSV)
    assert _post_table(client, project, "w.csv", privacy_unit="pid",
                       max_rows_per_unit=2).status_code == 201
    r = _post_table(client, project, "w.csv", replace=True)
    assert r.status_code == 409 and "drop_privacy_unit" in r.json()["detail"], r.text
    got = client.get("/v1/tables", headers=project.headers(project.owner)).json()["tables"]
    assert {t["name"]: t["privacy_unit"] for t in got}["w"] == "pid"  # nothing loaded
    again = _post_table(client, project, "w.csv", replace=True, drop_privacy_unit=True)
    assert again.status_code == 201 and again.json()["privacy_unit"] is None


# ------------------------------------------------------------------ 6. text bound over HTTP


def test_the_text_bound_is_public_and_settable_over_http(client: Any, project: Project) -> None:
    root = project.path / "data"
    root.mkdir()
    (root / "w.csv").write_text(CSV)
    r = _post_table(client, project, "w.csv")
    assert r.status_code == 201 and r.json()["max_text_length"] == 1000
    r = _post_table(client, project, "w.csv", replace=True, max_text_length=None)
    assert r.status_code == 201 and r.json()["max_text_length"] is None
    seen = client.get("/v1/tables", headers=project.headers(project.alice)).json()["tables"]
    assert {t["name"]: t["max_text_length"] for t in seen} == {"t": 1000, "w": None}
    assert _post_table(client, project, "w.csv", replace=True,
                       max_text_length=0).status_code == 422


# ------------------------------------------------------------------ 7. the pool's pending count


def test_a_refused_submit_leaves_nothing_pending(project: Project) -> None:
    """Before the fix, a submit that raised (the pool shut down) left the caller's count up:
    after ``per_caller`` of them the caller was refused 429 'busy' for good."""
    from dpkit.server.auth import Identity
    from dpkit.server.pool import Pool
    from dpkit.server.problems import Problem

    pool = Pool(project.path, per_caller=2)
    who = Identity("bob", "analyst", "x")
    pool._threads.shutdown(wait=True)
    for _ in range(3):
        with pytest.raises(Problem) as info:
            pool.run(who, project.bob, lambda cur: cur.budget())
        assert info.value.status == 503 and "shutting down" in info.value.detail
    assert pool._pending == {}
    pool.close()
