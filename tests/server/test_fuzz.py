"""schemathesis against the live app's OpenAPI schema (in-process ASGI): no input a client
can send gives a 5xx, and every answer matches the schema it documents (status codes, content
types, bodies, the Allow header of a 405). Authenticated as an analyst and as the owner (the
unauthenticated paths are enumerated in test_auth.py).

The project is made at collection (schemathesis parametrizes from a schema object; its
``from_fixture`` fails under pytest 9), in a temporary folder removed at exit.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")

from hypothesis import HealthCheck, settings  # noqa: E402
from tests.server.conftest import make_project  # noqa: E402

from dpkit.server.app import create_app  # noqa: E402
from dpkit.server.auth import owner_hashes  # noqa: E402

_FOLDER = tempfile.mkdtemp(prefix="dpkit-fuzz-")
atexit.register(shutil.rmtree, _FOLDER, ignore_errors=True)
PROJECT = make_project(Path(_FOLDER), epsilon=1000.0, rows=300)
# generous limits: the fuzzer's requests must reach the endpoints, not the rate limit; no
# timing classes (the answers' shapes are checked here, their time in test_pacing.py)
APP = create_app(PROJECT.path, owner_token_sha256=owner_hashes(PROJECT.path),
                 rate=1e6, burst=10**6, timeout=20.0, answer_deadline_ms=0)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_5xx_and_answers_match_the_schema(case: Any) -> None:
    for token in (PROJECT.bob, PROJECT.owner):
        response = case.call(headers={"Authorization": f"Bearer {token}"})
        assert response.status_code < 500, (case.method, case.path, response.text[:500])
        case.validate_response(response)
