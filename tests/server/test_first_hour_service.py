"""What the second first-hour walk found on the service (docs/first_hour.md)."""

from __future__ import annotations

import inspect
from typing import Any

from tests.server.conftest import Project
from tests.server.test_endpoints import charges

AVG = "SELECT AVG(x) AS a FROM t"


def test_an_accuracy_target_for_an_average_takes_accuracy_rows(
        client: Any, project: Project) -> None:
    """docs/service.md's own example, `c.preview("SELECT AVG(age) ...", accuracy=1.0)`, was
    refused ("... or give accuracy_rows=") and the service had no such field. Now it has,
    for preview and query, as Curator.sql's `accuracy_rows`."""
    h = project.headers(project.alice)
    refused = client.post("/v1/preview", json={"sql": AVG, "accuracy": 1.0}, headers=h)
    assert refused.status_code == 409 and "accuracy_rows" in refused.json()["detail"]
    ok = client.post("/v1/preview", json={"sql": AVG, "accuracy": 1.0, "accuracy_rows": 500},
                     headers=h)
    assert ok.status_code == 200, ok.text
    eps = ok.json()["epsilon"]
    assert 0 < eps < 1  # a 50-wide clamp, ±1 in a group of 500 rows: well under alice's cap
    assert charges(project) == 0
    ran = client.post("/v1/query", json={"sql": AVG, "accuracy": 1.0, "accuracy_rows": 500},
                      headers=h)
    assert ran.status_code == 200, ran.text
    assert abs(ran.json()["charge"]["epsilon"] - eps) < 1e-9 and charges(project) == 1
    bad = client.post("/v1/preview", json={"sql": AVG, "accuracy": 1.0, "accuracy_rows": 0},
                      headers=h)
    assert bad.status_code == 422


def test_the_client_passes_accuracy_rows() -> None:
    from dpkit.server.client import Client

    for method in (Client.sql, Client.preview):
        assert "accuracy_rows" in inspect.signature(method).parameters
