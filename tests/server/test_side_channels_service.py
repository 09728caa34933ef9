"""The side-channel fuzzer through the service (dpkit.server.fuzz): every public part of an HTTP
answer -- status, problem type and detail, columns and their kinds, released keys and their
order, the charge and the budget reported -- is the same on neighbouring datasets; a planted
leak in the service is found (so the comparison can fail)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from dpkit.attacks import side_channels as sc
from dpkit.engine.tables import Column, TableMeta
from dpkit.server.fuzz import served_project

VISITS = TableMeta(
    "visits",
    (Column("uid", "BIGINT"), Column("ward", "VARCHAR"), Column("age", "INTEGER"),
     Column("cost", "DOUBLE"), Column("note", "VARCHAR"), Column("day", "DATE")),
    privacy_unit="uid", max_rows_per_unit=2,
    bounds={"age": (0, 120), "cost": (0, 1000)}, domains={"ward": ("A", "B", "C")})
SMALL = TableMeta("t", (Column("uid", "BIGINT"), Column("k", "VARCHAR"), Column("x", "DOUBLE")),
                  privacy_unit="uid", bounds={"x": (0, 10)}, domains={"k": ("a", "b")})
# the families the service serves, the SQL ones weighed up (fits: test_fit_endpoint.py)
FAMILIES = ("sql", "sql", "filter", "dp_cdf", "cdf", "synthetic")


def test_no_side_channels_through_the_service() -> None:
    rep = sc.fuzz(VISITS, queries=80, seed=11, accountants=("approx",), families=FAMILIES,
                  factory=served_project, units=12, max_findings=1)
    assert not rep.skipped, rep.summary()
    assert rep.comparisons == 80, rep.summary()
    assert rep.ok, rep.summary()
    # the run reached answers and refusals alike (else it compared nothing of interest)
    assert rep.outcomes["answer"] >= 20 and rep.outcomes["refusal"] >= 2, rep.summary()


def _leaky_app(path: Path, odd: bool) -> Any:
    """The real app, plus a plant: when the table holds an odd number of rows, grouped
    answers come back in reverse order (a row-order channel in the service layer only)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    from dpkit.server.app import create_app

    app = create_app(path, rate=1e6, burst=10**6, timeout=120.0)

    @app.middleware("http")
    async def reverse_groups(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        if not (odd and request.url.path == "/v1/query" and response.status_code == 200):
            return response
        body = json.loads(b"".join([c async for c in response.body_iterator]))
        body["rows"] = body["rows"][::-1]
        return JSONResponse(body)

    return app


def _leaky(path: Path, data_file: Path, table: TableMeta, public: Any, **kw: Any) -> Any:
    con = duckdb.connect(str(data_file), read_only=True)
    row = con.execute(f'SELECT COUNT(*) FROM "{table.name}"').fetchone()
    con.close()
    odd = row is not None and row[0] % 2 == 1
    return served_project(path, data_file, table, public,
                          app_factory=lambda p: _leaky_app(p, odd), **kw)


def test_a_planted_leak_in_the_service_is_found() -> None:
    rep = sc.fuzz(SMALL, queries=30, seed=3, neighbours=("add", "remove"),
                  accountants=("approx",), families=("sql",), factory=_leaky, units=10,
                  max_findings=1, minimise=False)
    assert "key_order" in rep.by_cause(), rep.summary()


def test_a_planted_work_leak_behind_the_service_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The work trace reaches into the service's worker threads: an extra statement run only
    when a group's exact count is odd (tests/attacks/test_side_channels_trace.py) is found
    through HTTP too, where nothing else the analyst sees changes."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "attacks"))
    from test_side_channels_trace import plant_extra_statement

    plant_extra_statement(monkeypatch)
    rep = sc.fuzz(SMALL, queries=16, seed=3, neighbours=("add",), accountants=("approx",),
                  families=("sql",), factory=served_project, units=10, max_findings=1,
                  minimise=False)
    assert [f.cause() for f in rep.findings] == ["work"], rep.summary()
    assert rep.findings[0].fields == ("statements",), rep.summary()
