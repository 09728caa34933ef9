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
from dpkit.attacks.side_channels.draw import Draw
from dpkit.engine.tables import Column, TableMeta
from dpkit.server.fuzz import FAMILIES, References, fuzz_service, key_paths, served_project

VISITS = TableMeta(
    "visits",
    (Column("uid", "BIGINT"), Column("ward", "VARCHAR"), Column("age", "INTEGER"),
     Column("cost", "DOUBLE"), Column("note", "VARCHAR"), Column("day", "DATE")),
    privacy_unit="uid", max_rows_per_unit=2,
    bounds={"age": (0, 120), "cost": (0, 1000)}, domains={"ward": ("A", "B", "C")})
SMALL = TableMeta("t", (Column("uid", "BIGINT"), Column("k", "VARCHAR"), Column("x", "DOUBLE")),
                  privacy_unit="uid", bounds={"x": (0, 10)}, domains={"k": ("a", "b")})


def test_no_side_channels_through_the_service() -> None:
    # 63 comparisons: seven neighbour kinds, the service's families (SQL, filters, DP_CDF and
    # the other SQL release forms, /v1/release/{cdf, quantiles, marginals, synthetic})
    rep = fuzz_service(VISITS, queries=63, seed=11, accountants=("approx",), units=12,
                       max_findings=1)
    assert not rep.skipped, rep.summary()
    assert rep.comparisons == 63, rep.summary()
    assert rep.ok, rep.summary()
    # the run reached answers and refusals alike (else it compared nothing of interest)
    assert rep.outcomes["answer"] >= 20 and rep.outcomes["refusal"] >= 2, rep.summary()
    assert {"quantiles", "marginals", "cdf", "synthetic"} <= set(FAMILIES)


@pytest.mark.slow
def test_no_side_channels_through_the_service_in_a_longer_run() -> None:
    # 441 comparisons: seven neighbour kinds x three accountants, 21 queries each, a public
    # table to join (~1 minute)
    wards = TableMeta("wards", (Column("ward", "VARCHAR"), Column("floor", "INTEGER")),
                      public=True)
    rep = fuzz_service(VISITS, public=[wards], queries=441, seed=31, units=12, max_findings=1)
    assert rep.comparisons == 441 or rep.findings, rep.summary()
    assert rep.ok, rep.summary()


def test_key_paths_are_every_key_at_every_depth() -> None:
    body = {"rows": [[1, 2]], "budget": {"spent": 1.0}, "items": [{"a": 1}, {"b": {"c": 2}}]}
    assert key_paths(body) == {"rows", "budget", "budget.spent", "items", "items[].a",
                               "items[].b", "items[].b.c"}
    # a list's length adds no path (a noisy number of rows must not show)
    assert key_paths({"rows": []}) == key_paths({"rows": [[1], [2], [3]]})


def test_references_must_be_new_and_well_formed() -> None:
    refs = References()
    assert refs.check("urn:dpkit:log:ref-0123abcd") == ()
    assert refs.check("urn:dpkit:log:ref-0123abcd") == ("reference_reused",)
    assert refs.check("urn:dpkit:log:ref-42") == ("reference_malformed",)
    assert refs.check(None) == ("reference_malformed",)


def _pair(tmp_path: Path, table: TableMeta, kind: str = "add") -> tuple[Path, Path]:
    """D and D' (``kind``) as DuckDB files, as the fuzzer writes them."""
    scratch = sc.Scratch(tmp_path, table, [])
    d = Draw(5)
    scratch.generate(d, units=10)
    base = scratch.write("d0", tmp_path / "d.duckdb")
    other = scratch.write(scratch.neighbour(kind, d), tmp_path / f"{kind}.duckdb")
    scratch.close()
    return base, other


def test_the_problem_reference_is_random_on_both_datasets(tmp_path: Path) -> None:
    """A refusal whose text named a path is shown with the path replaced and a log reference
    in ``instance``: the same body on D and D' but for that reference, which is well formed
    and different at every request, on either dataset (a reference drawn from the project's
    seeded source would repeat between D and D')."""
    refs = References()
    files = _pair(tmp_path, SMALL)
    served = [served_project(tmp_path / f"p{i}.dpkit", f, SMALL, [], accountant="approx",
                             seed=7, references=refs) for i, f in enumerate(files)]
    try:
        seen: list[str] = []
        bodies = []
        for _ in range(4):
            for cur in served:
                r = cur.send("/v1/query", {"sql": "SELECT COUNT(*) FROM '/etc/passwd'",
                                           "epsilon": 0.5})
                assert r.status_code == 409, r.text
                body = r.json()
                seen.append(body.pop("instance"))
                bodies.append(body)
        assert all(b == bodies[0] for b in bodies), bodies
        assert "<path>" in bodies[0]["detail"] and "/etc" not in bodies[0]["detail"]
        assert len(set(seen)) == len(seen), seen
        assert all(refs.check(ref) == () for ref in seen), seen
    finally:
        for cur in served:
            cur.close()


async def _reverse_groups(request: Any, response: Any, odd: bool, count: list[int]) -> Any:
    """Grouped answers in reverse order when the table holds an odd number of rows (a
    row-order channel in the service layer only)."""
    from fastapi.responses import JSONResponse

    if not (odd and request.url.path == "/v1/query" and response.status_code == 200):
        return response
    body = json.loads(b"".join([c async for c in response.body_iterator]))
    body["rows"] = body["rows"][::-1]
    return JSONResponse(body)


async def _parity_header(request: Any, response: Any, odd: bool, count: list[int]) -> Any:
    """A header that says the parity of the table's rows (a cache tag, say)."""
    if request.url.path.startswith("/v1/query"):
        response.headers["X-Cache-Tag"] = "odd" if odd else "even"
    return response


async def _parity_fit_preview(request: Any, response: Any, odd: bool, count: list[int]) -> Any:
    """The same header on a fit's preview only (which reads no data)."""
    if request.url.path == "/v1/fit/preview":
        response.headers["X-Cache-Tag"] = "odd" if odd else "even"
    return response


async def _parity_status(request: Any, response: Any, odd: bool, count: list[int]) -> Any:
    """A refusal answered 400 instead of 409 when the rows are odd (a status channel)."""
    if odd and request.url.path == "/v1/query" and response.status_code == 409:
        response.status_code = 400
    return response


async def _counted_reference(request: Any, response: Any, odd: bool, count: list[int]) -> Any:
    """A problem reference from a per-app counter, not from the OS's randomness: the same
    sequence on D and D' (as a reference drawn from the projects' seeded source would be)."""
    from fastapi.responses import JSONResponse

    if response.status_code < 400 or request.url.path != "/v1/query":
        return response
    body = json.loads(b"".join([c async for c in response.body_iterator]))
    count[0] += 1
    body["instance"] = f"urn:dpkit:log:ref-{count[0]:08x}"
    return JSONResponse(body, status_code=response.status_code,
                        media_type="application/problem+json")


def _planted(plant: Any) -> Any:
    """A factory whose apps are the real one plus ``plant(request, response, odd, count)``
    as a middleware (``odd``: the project's table holds an odd number of rows)."""
    def factory(path: Path, data_file: Path, table: TableMeta, public: Any, **kw: Any) -> Any:
        con = duckdb.connect(str(data_file), read_only=True)
        row = con.execute(f'SELECT COUNT(*) FROM "{table.name}"').fetchone()
        con.close()
        odd = row is not None and row[0] % 2 == 1

        def app(p: Path) -> Any:
            from dpkit.server.app import create_app

            inner = create_app(p, rate=1e6, burst=10**6, timeout=120.0,
                               answer_deadline_ms=0)  # as fuzz.py's apps: faces, not times
            count = [0]

            @inner.middleware("http")
            async def planted(request: Any, call_next: Any) -> Any:
                return await plant(request, await call_next(request), odd, count)

            return inner

        return served_project(path, data_file, table, public, app_factory=app, **kw)
    return factory


_leaky = _planted(_reverse_groups)


def test_a_planted_leak_in_the_service_is_found() -> None:
    rep = sc.fuzz(SMALL, queries=30, seed=3, neighbours=("add", "remove"),
                  accountants=("approx",), families=("sql",), factory=_leaky, units=10,
                  max_findings=1, minimise=False)
    assert "key_order" in rep.by_cause(), rep.summary()


@pytest.mark.parametrize(("plant", "cause"), [(_parity_header, "service"),
                                              (_parity_status, "error_oracle")])
def test_a_planted_header_or_status_is_found(plant: Any, cause: str) -> None:
    """A data-dependent header changes nothing the curator's comparison reads: only the HTTP
    face (``Outcome.http``) sees it; a status changed on refusals shows in the problem text
    and the face alike."""
    rep = sc.fuzz(SMALL, queries=24, seed=3, neighbours=("add", "remove"),
                  accountants=("approx",), families=("sql",), factory=_planted(plant),
                  units=10, max_findings=1, minimise=False)
    assert cause in rep.by_cause(), rep.summary()
    f = rep.by_cause()[cause][0]
    assert "http" in f.fields, rep.summary()
    assert "# http " in f.reproducer(), f.reproducer()


def test_a_planted_leak_in_a_fit_preview_is_found() -> None:
    """A fit is previewed first (``POST /v1/fit/preview``, as an SQL query is): its whole
    answer is compared, headers included."""
    rep = sc.fuzz(SMALL, queries=8, seed=3, neighbours=("add", "remove"),
                  accountants=("approx",), families=("fit",),
                  factory=_planted(_parity_fit_preview), units=10, max_findings=1,
                  minimise=False)
    assert "preview" in rep.by_cause(), rep.summary()


def test_a_reference_that_is_not_random_is_found() -> None:
    """References from a counter (the same on D and D') are well formed, and the bodies stay
    equal on D and D' once the reference is left out: only the reference check finds them
    (the same run without the plant finds nothing: test_planted_leaks_need_the_plant)."""
    refs = References()

    def factory(path: Path, data_file: Path, table: TableMeta, public: Any, **kw: Any) -> Any:
        return _planted(_counted_reference)(path, data_file, table, public,
                                            references=refs, **kw)

    rep = sc.fuzz(SMALL, queries=24, seed=3, neighbours=("add",), accountants=("approx",),
                  families=("sql",), factory=factory, units=10, max_findings=1,
                  minimise=False)
    assert [f.cause() for f in rep.findings] == ["reference_reused"], rep.summary()


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


def test_planted_leaks_need_the_plant() -> None:
    """The planted tests' runs, without a plant, find nothing (what they find is the plant)."""
    rep = fuzz_service(SMALL, queries=24, seed=3, neighbours=("add", "remove"),
                       accountants=("approx",), families=("sql",), units=10, max_findings=1,
                       minimise=False)
    assert rep.ok and rep.comparisons == 24, rep.summary()


def test_command_line_via_the_service(tmp_path: Path) -> None:
    from click.testing import CliRunner

    import dpkit as dp
    from dpkit.cli import main

    rows = "uid,k,x\n" + "".join(f"{i},{'ab'[i % 2]},{i % 10}\n" for i in range(30))
    (tmp_path / "t.csv").write_text(rows)
    with dp.Curator.create(tmp_path / "own.dpkit", budget=dp.Budget(epsilon=5.0)) as cur:
        cur.add_table("t", str(tmp_path / "t.csv"), privacy_unit="uid", max_rows_per_unit=1,
                      bounds={"x": (0, 10)}, domains={"k": ["a", "b"]})
    res = CliRunner().invoke(main, ["attack", "side-channels", str(tmp_path / "own.dpkit"),
                                    "--via", "service", "--queries", "6", "--units", "10",
                                    "--neighbours", "add", "--accountants", "approx",
                                    "--seed", "2"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "through the service" in flat and "D/D' comparisons" in flat, res.output


def test_non_finite_group_keys_stay_apart_through_the_service(tmp_path: Path) -> None:
    """Found by the service fuzz's one-sided check: the groups NaN, +inf, -inf and NULL of a
    DOUBLE column (released by private partition selection) were four rows keyed ``null``
    in the JSON answer (JSON has no such numbers), duplicate keys no analyst could tell
    apart, where the curator keeps them apart. Each keeps its name now."""
    meta = TableMeta("t", (Column("u", "BIGINT"), Column("x", "DOUBLE")), privacy_unit="u")
    con = duckdb.connect(str(tmp_path / "d.duckdb"))
    con.execute("CREATE TABLE t (u BIGINT, x DOUBLE)")
    for i, v in enumerate(("'nan'::DOUBLE", "NULL", "'inf'::DOUBLE", "'-inf'::DOUBLE", "1.5")):
        con.execute(f"INSERT INTO t SELECT {i} * 1000 + r, {v} FROM range(300) AS g(r)")
    con.close()
    cur = served_project(tmp_path / "p.dpkit", tmp_path / "d.duckdb", meta, [],
                         accountant="approx", seed=1)
    try:
        q = sc.Query("sql", "t", text="SELECT x, COUNT(*) AS n FROM t GROUP BY x",
                     epsilon=1.0, noise="gaussian", delta=1e-6)
        o = sc.observe(cur, q, (str(cur.path),))
        assert o.kind == "answer", o.short()
        assert sc.self_check(q, o) == (), o.short()  # duplicate_keys before the fix
        assert set(o.keys) == {("NaN",), (None,), ("Infinity",), ("-Infinity",), (1.5,)}
    finally:
        cur.close()


@pytest.mark.slow
def test_fits_through_the_service_compare_no_noisy_warning() -> None:
    """150 fits (seed 8): a diverging MLP's answer warns that some released parameters are not
    finite, a function of the noisy model that may differ on D and D'. The fit face compared
    that text by value and found it 3 times; it compares the key only now (~25 s)."""
    rep = fuzz_service(VISITS, queries=150, seed=8, families=("fit",),
                       accountants=("approx", "zcdp"), units=12, max_findings=1)
    assert rep.ok, rep.summary()
