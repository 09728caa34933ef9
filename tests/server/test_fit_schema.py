"""The fit operations' answers match the OpenAPI schema they document, on bodies that train.

``test_fuzz.py``'s generated bodies reach ``/v1/fit`` too, but their SQL and labels are random
text, so they are refused before any training and the schema of a *trained* answer
(``FitOut``, ``FitPreviewOut``) is never checked there. Here schemathesis builds a case per
model from a body that trains, calls the in-process app and validates the answer (status,
content type, body against the schema) with its own checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")

from tests.server.test_fit_endpoint import BODIES, HAS_TORCH, SQL, Served, _frame  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    s = Served(Path(tmp_path_factory.mktemp("fit-schema")), _frame(300))
    yield s
    s.close()


@pytest.mark.parametrize("model", list(BODIES))
def test_trained_answers_match_the_schema(served: Any, model: str) -> None:
    if model == "mlp_classifier" and not HAS_TORCH:
        pytest.skip("the torch extra is not installed")
    schema = schemathesis.openapi.from_asgi("/openapi.json", served.app)
    body = {"model": model, "sql": SQL, "epsilon": 0.5, **BODIES[model]}
    headers = {"Authorization": f"Bearer {served.bob}"}
    for path in ("/v1/fit/preview", "/v1/fit"):
        case = schema[path]["POST"].Case(body=body, media_type="application/json")
        response = case.call(headers=headers)
        assert response.status_code == 200, response.text
        case.validate_response(response)
    models = schema["/v1/fit/models"]["GET"].Case()
    response = models.call(headers=headers)
    assert response.status_code == 200
    models.validate_response(response)
