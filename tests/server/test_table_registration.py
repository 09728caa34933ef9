"""``POST /v1/tables`` as the third first-hour walk met it (docs/first_hour.md): ``not_null``
and ``"auto"`` rows per unit over HTTP, a folder as a source, and problem titles that name
what was refused (every 409 was titled "Query refused", a table registration's too)."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import SQL, Project

CSV = "ward,age,pid\n" + "".join(f"{'AB'[i % 2]},{i % 90},{i // 2}\n" for i in range(200))


def _post(client: Any, project: Project, **body: Any) -> Any:
    body = {"name": "w", "source": "w.csv", "privacy_unit": "pid", "max_rows_per_unit": 2,
            "bounds": {"age": [0, 100]}, **body}
    return client.post("/v1/tables", json=body, headers=project.headers(project.owner))


def _root(project: Project) -> Any:
    root = project.path / "data"
    root.mkdir(exist_ok=True)
    (root / "w.csv").write_text(CSV)
    return root


def _declared(client: Any, project: Project, token: str) -> dict[str, list[str]]:
    got = client.get("/v1/tables", headers=project.headers(token)).json()["tables"]
    return {t["name"]: t["not_null"] for t in got}


def test_not_null_round_trips_and_a_replace_keeps_what_it_names(client: Any,
                                                                project: Project) -> None:
    """Before, TableIn had no ``not_null`` (422 for the field), so a replace over HTTP always
    dropped the declaration (AVG of the column then measured its own count again)."""
    import dpkit as dp

    _root(project)
    r = _post(client, project, not_null=["age"])
    assert r.status_code == 201 and r.json()["not_null"] == ["age"], r.text
    assert _declared(client, project, project.alice) == {"t": [], "w": ["age"]}  # public
    r = _post(client, project, replace=True, not_null=["age"])
    assert r.status_code == 201 and r.json()["not_null"] == ["age"], r.text
    with dp.Curator.open(project.path) as cur:  # the ledger's declaration, not only the answer
        assert cur.tables()["w"].not_null == ("age",)
    r = _post(client, project, replace=True)  # not named again: dropped, as the CLI does
    assert r.status_code == 201 and r.json()["not_null"] == [], r.text
    assert _declared(client, project, project.owner)["w"] == []


def test_a_not_null_column_holding_nulls_is_refused_before_anything_loads(
        client: Any, project: Project) -> None:
    root = _root(project)
    (root / "n.csv").write_text("pid,age\n1,3\n2,\n")
    r = _post(client, project, name="n", source="n.csv", not_null=["age"])
    assert r.status_code == 409 and "age" in r.json()["detail"], r.text
    assert r.json()["title"] == "Table not registered"
    assert "n" not in _declared(client, project, project.owner)


def test_auto_rows_per_unit_over_http_is_chosen_and_charged_to_the_owner(
        client: Any, project: Project) -> None:
    _root(project)
    before = client.get("/v1/budget", headers=project.headers(project.owner)).json()
    r = _post(client, project, max_rows_per_unit="auto")
    assert r.status_code == 201 and r.json()["max_rows_per_unit"] >= 1, r.text
    after = client.get("/v1/budget", headers=project.headers(project.owner)).json()
    assert after["spent_epsilon"] > before["spent_epsilon"]
    assert _post(client, project, max_rows_per_unit="many").status_code == 422


def test_a_parquet_folder_is_a_source_and_the_schema_says_so(client: Any,
                                                             project: Project) -> None:
    import pandas as pd

    folder = _root(project) / "w.parquet"
    folder.mkdir()
    frame = pd.read_csv(project.path / "data" / "w.csv")
    frame.iloc[:100].to_parquet(folder / "part-0.parquet")
    frame.iloc[100:].to_parquet(folder / "part-1.parquet")
    assert _post(client, project, source="w.parquet").status_code == 201
    spec = client.get("/openapi.json").json()["components"]["schemas"]["TableIn"]
    assert "folder" in spec["properties"]["source"]["description"]


def test_each_refusal_is_titled_by_what_was_refused(client: Any, project: Project) -> None:
    """A title per endpoint (and per cause where the cause says more), never a table's or an
    analyst's refusal titled "Query refused"."""
    _root(project)
    owner, alice = project.headers(project.owner), project.headers(project.alice)
    cases = [
        (client.post("/v1/tables", json={"name": "t", "source": "w.csv"}, headers=owner),
         "Table not registered"),  # the name is taken (tested below)
        (_post(client, project, source="/etc/passwd"), "Source outside the data root"),
        (client.post("/v1/analysts", json={"name": "alice"}, headers=owner),
         "Analyst change refused"),
        (client.post("/v1/query", json={"sql": "SELECT x FROM t", "epsilon": 0.1},
                     headers=alice), "Query refused"),
        (client.post("/v1/preview", json={"sql": "SELECT nope FROM t", "epsilon": 0.1},
                     headers=alice), "Query refused"),
        (client.post("/v1/query", json={"sql": SQL, "epsilon": 50}, headers=alice),
         "Over budget"),
        (client.post("/v1/release/cdf", json={"table": "t", "column": "nope", "epsilon": 0.1},
                     headers=alice), "Release refused"),
    ]
    for r, title in cases:
        assert r.status_code == 409, r.text
        assert r.json()["title"] == title, (title, r.json())


def test_a_refusal_names_the_request_field_not_the_python_keyword(client: Any,
                                                                   project: Project) -> None:
    """The third walk read *pass replace=True to load it again* in a 409 of ``POST
    /v1/tables``, and *... drop_privacy_unit=True* for a replace without the unit."""
    _root(project)
    assert _post(client, project).status_code == 201
    taken = _post(client, project).json()["detail"]
    assert 'pass "replace": true to load it again' in taken and "=True" not in taken, taken
    unit = _post(client, project, privacy_unit=None, max_rows_per_unit=None,
                 replace=True).json()["detail"]
    assert '"drop_privacy_unit": true' in unit and '"replace": true reloads' in unit, unit


def test_l3_types_over_http_read_the_columns_as_declared(client: Any,
                                                          project: Project) -> None:
    """FINDINGS.md L3: TableIn.types reads a CSV's columns as declared; the others are typed
    from the declarations (bounds: DOUBLE), never from the rows; an unknown type is a 409
    before anything loads."""
    _root(project)
    r = _post(client, project, types={"pid": "BIGINT"})
    assert r.status_code == 201, r.text
    got = {c["name"]: c["type"] for c in r.json()["columns"]}
    assert got == {"ward": "VARCHAR", "age": "DOUBLE", "pid": "BIGINT"}
    r = _post(client, project, name="x", types={"pid": "INTEGR"})
    assert r.status_code == 409 and "not a DuckDB type" in r.json()["detail"], r.text
    assert "x" not in _declared(client, project, project.owner)
