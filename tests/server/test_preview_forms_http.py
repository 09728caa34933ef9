"""``POST /v1/preview`` answers every SQL form ``POST /v1/query`` answers (it refused the
DP_ forms: tests/engine/test_preview_forms.py), with the cost the query then charges."""

from __future__ import annotations

from typing import Any

import pytest
from tests.server.conftest import Project

from dpkit.engine.families.sql_forms import FUNCTIONS

FORMS = {"DP_CDF": "SELECT DP_CDF(x, 8) FROM t",
         "DP_QUANTILES": "SELECT DP_QUANTILES(x, 0.5) FROM t",
         "DP_RANGES": "SELECT DP_RANGES(x, (0, 9), (10, 50)) FROM t",
         "DP_MARGINALS": "SELECT DP_MARGINALS(g) FROM t",
         "FILTER": "SELECT COUNT(*) FILTER (WHERE x BETWEEN 0 AND 9) AS low FROM t"}


def test_every_form_is_here() -> None:
    assert set(FORMS) == set(FUNCTIONS) | {"FILTER"}


@pytest.mark.parametrize("form", list(FORMS))
def test_the_preview_answers_each_form_and_prices_it(client: Any, project: Project,
                                                     form: str) -> None:
    body = {"sql": FORMS[form], "epsilon": 0.2}
    headers = project.headers(project.bob)
    pv = client.post("/v1/preview", json=body, headers=headers)
    assert pv.status_code == 200, pv.text
    assert pv.json()["expected_error"] and pv.json()["affordable"]
    res = client.post("/v1/query", json=body, headers=headers)
    assert res.status_code == 200, res.text
    assert res.json()["charge"] == pytest.approx(
        {"epsilon": pv.json()["cost"], "delta": pv.json()["delta"]}, rel=1e-9, abs=0)
