"""The service's side of the analyst's view: the diagnostics switch is a field of the planned
request (a preview prices the query as it will run) and every text names that field; the
budget says whether the project runs with constant work and which timing δ_t each release
carries (``GET /v1/budget``'s ``timing_delta``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.server.conftest import SQL, Project

import dpkit as dp
from dpkit.engine.spec import DIAGNOSTICS_OFF
from dpkit.server.problems import HTTP_DIAGNOSTICS_OFF, http_text

CLAMPED = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g"  # x is bounded: clamp counts


def test_preview_takes_the_switch_and_names_the_field(client: Any, project: Project) -> None:
    h = project.headers(project.bob)
    on = client.post("/v1/preview", json={"sql": CLAMPED, "epsilon": 1.0}, headers=h)
    assert on.status_code == 200, on.text
    notes = on.json()["notes"]
    assert any(f"{HTTP_DIAGNOSTICS_OFF} gives it to the outputs" in n for n in notes), notes
    assert not any(DIAGNOSTICS_OFF in n or "--no-diagnostics" in n for n in notes), notes
    assert DIAGNOSTICS_OFF not in on.json()["text"]
    off = client.post("/v1/preview", json={"sql": CLAMPED, "epsilon": 1.0, "diagnostics": False},
                      headers=h)
    assert off.status_code == 200, off.text
    assert not any(HTTP_DIAGNOSTICS_OFF in n for n in off.json()["notes"])
    # the same epsilon, all of it on the outputs: no expected error is larger, the sum's is
    # smaller (a count's is a whole number of rows at either share)
    assert off.json()["cost"] == pytest.approx(on.json()["cost"])
    errs_on, errs_off = on.json()["expected_error"], off.json()["expected_error"]
    assert all(errs_off[k] <= v for k, v in errs_on.items() if v is not None), (errs_on, errs_off)
    assert errs_off["s"] < errs_on["s"]
    assert client.get("/v1/history", headers=h).json()["items"] == []  # previews are free


def test_a_query_runs_as_its_preview_was_priced(client: Any, project: Project) -> None:
    """The preview's ``cost`` and the charge agree with the switch on and off."""
    h = project.headers(project.bob)
    for diag in (True, False):
        body = {"sql": CLAMPED, "epsilon": 0.3, "diagnostics": diag}
        pv = client.post("/v1/preview", json=body, headers=h).json()
        res = client.post("/v1/query", json=body, headers=h)
        assert res.status_code == 200, res.text
        assert res.json()["charge"]["epsilon"] == pytest.approx(pv["cost"])


def test_http_text_and_the_client_spell_the_switch_for_their_users() -> None:
    from dpkit.server import client as remote

    text = f"(nothing charged; {DIAGNOSTICS_OFF} gives the release the whole budget)"
    assert http_text(text) == ('(nothing charged; "diagnostics": false gives the release the '
                               'whole budget)')
    assert remote.HTTP_DIAGNOSTICS_OFF == HTTP_DIAGNOSTICS_OFF  # the two sides agree
    assert remote.python_text(http_text(text)) == text


def test_the_client_previews_with_the_switch(client: Any, project: Project) -> None:
    """``dpkit.Client.preview`` sends ``diagnostics`` and shows the Python keyword."""
    from dpkit.server.client import Client

    c = Client("http://testserver", project.bob)
    # the TestClient stands in for the network: the Client's own request goes through it
    c.request = lambda method, path, body=None: _through(client, project.bob, method, path, body)
    on, off = c.preview(CLAMPED, epsilon=1.0), c.preview(CLAMPED, epsilon=1.0, diagnostics=False)
    assert any(f"{DIAGNOSTICS_OFF} gives it to the outputs" in n for n in on["notes"])
    assert not any("diagnostics" in n and "outputs" in n for n in off["notes"])


def _through(client: Any, token: str, method: str, path: str, body: Any) -> tuple[int, str, bytes]:
    r = client.request(method, path, json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return r.status_code, r.headers["content-type"], r.content


@pytest.mark.parametrize("constant_work", [None, False])
def test_budget_names_the_timing_delta(tmp_path: Path, constant_work: bool | None) -> None:
    """A default (ε, δ) project runs with constant work: GET /v1/budget gives its δ_t, the
    term each release's δ includes (a pure-ε count's charged δ is δ_t); without constant
    work it is null."""
    from fastapi.testclient import TestClient

    from dpkit.server.app import create_app
    from dpkit.server.auth import new_owner_token, owner_hashes

    path = tmp_path / "p.dpkit"
    with dp.Curator.create(path, epsilon=3.0, delta=1e-6, constant_work=constant_work,
                           source=dp.noise.seeded(1)) as cur:
        cur.add_table("t", pd.DataFrame({"g": np.array(["a", "b"] * 100)}),
                      domains={"g": ["a", "b"]})
        token = cur.add_analyst("alice", epsilon=1.0)
        setting = cur.ledger.config.constant_work
    new_owner_token(path)
    with TestClient(create_app(path, owner_token_sha256=owner_hashes(path)),
                    raise_server_exceptions=False) as client:
        h = {"Authorization": f"Bearer {token}"}
        b = client.get("/v1/budget", headers=h).json()
        if constant_work is None:
            assert setting is not None and b["timing_delta"] == pytest.approx(setting[0])
            res = client.post("/v1/query", json={"sql": "SELECT COUNT(*) AS n FROM t",
                                                 "epsilon": 0.1}, headers=h).json()
            assert res["charge"]["delta"] == pytest.approx(setting[0])
            assert res["budget"]["timing_delta"] == b["timing_delta"]
        else:
            assert setting is None and b["timing_delta"] is None
        client.app.state.service.close()


def test_openapi_documents_the_new_fields(client: Any) -> None:
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    assert "diagnostics" in spec["PreviewIn"]["properties"]
    assert "diagnostics" in spec["QueryIn"]["properties"]
    assert "timing_delta" in spec["BudgetOut"]["properties"]
    assert SQL  # the shared project's query still answers (conftest)
