"""The client's wait against the service's timeout: ``GET /v1/health`` publishes the limits,
and a charged request waits at least the service's limit for it (plus ``SLACK``), so that a
client built with a shorter ``timeout`` still sees the 504 that names where its charged answer
is kept (before: it gave up first, and the answer was lost to its analyst)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import SQL, Project, live_server, make_project, stop
from tests.server.test_endpoints import charges
from tests.server.test_late_answers_shared import _locked

from dpkit.server.client import SLACK, Client, UnavailableError


def test_health_publishes_the_limits(make_client: Any) -> None:
    client = make_client(timeout=0.4, fit_timeout=7.0, answers_max_age=60.0,
                         answer_deadline_ms=100.0)
    got = client.get("/v1/health").json()
    assert got["status"] == "ok"
    assert got["limits"] == {"timeout": 0.4, "fit_timeout": 7.0, "answers_max_age": 60.0,
                             "answer_classes_ms": [100.0, 200.0, 400.0]}


def _with(limits: dict[str, Any], **kw: Any) -> Client:
    c = Client("http://127.0.0.1:9", "t", **kw)
    c._limits = limits  # as read from GET /v1/health
    return c


def test_a_charged_request_waits_the_service_s_limit_and_slack() -> None:
    limits = {"timeout": 120.0, "fit_timeout": 300.0}
    assert _with(limits)._read_timeout("/v1/query") == 120.0 + SLACK
    assert _with(limits)._read_timeout("/v1/release/cdf") == 120.0 + SLACK
    assert _with(limits)._read_timeout("/v1/fit") == 300.0 + SLACK
    assert _with(limits, timeout=600.0)._read_timeout("/v1/fit") == 600.0  # longer: kept
    with pytest.warns(RuntimeWarning, match=r"timeout=60\) is shorter than the service's "
                                            r"timeout of 120 s.*up to 130 s"):
        assert _with(limits, timeout=60.0)._read_timeout("/v1/query") == 130.0
    assert _with({})._read_timeout("/v1/query") == 60.0  # a service that does not say


def test_a_client_timeout_below_the_service_s_still_sees_the_504(tmp_path: Path) -> None:
    """A real service (``--timeout 1``) and a client built with ``timeout=0.3``: the charged
    query waits past 0.3 s, gets the 504 and its ``answer_id`` (and a warning saying why it
    waited longer), and the answer comes from the id; one charge."""
    project: Project = make_project(tmp_path, rows=300)
    live = live_server(project.path, extra=("--timeout", "1", "--answer-deadline-ms", "0"))
    try:
        c = Client(live.url, project.alice, timeout=0.3)
        lock = _locked(project)
        try:
            with pytest.warns(RuntimeWarning, match="shorter than the service's timeout"), \
                    pytest.raises(UnavailableError) as err:
                c.sql(SQL, epsilon=0.1)
        finally:
            lock.rollback()
            lock.close()
        assert err.value.status == 504 and err.value.answer_id is not None
        deadline = time.monotonic() + 20
        while (got := c.answer(err.value.answer_id)) is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert b'"charge"' in got
        c.close()
    finally:
        stop(live)
    assert charges(project) == 1
