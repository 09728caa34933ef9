"""The data root's check and the load read the same file (docs/service.md, "Data root").

``confine`` checks a *name*; before, DuckDB then opened that name again, so anyone able to
write inside the root could swap a folder on the path for a symlink in between (TOCTOU) and
have the service publish any file it can read. The swaps below happen at the two moments that
matter: right after the check (before the files are opened) and right before the load (after
they are opened). Each test loaded the outside file (201, its ``stolen`` column published)
before ``paths.opened``. Linux only (``/proc/self/fd``), like the fix itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.server.conftest import Project

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd") or sys.platform == "win32",
                                reason="the pinned load needs /proc/self/fd (Linux)")

CSV = "ward,age,pid\n" + "".join(f"{'AB'[i % 2]},{i % 90},{i // 2}\n" for i in range(200))
STOLEN = "ward,age,pid,stolen\n" + "".join(f"A,{i},{i},s{i}\n" for i in range(50))


def _post(client: Any, project: Project, source: str, **extra: Any) -> Any:
    body = {"name": "w", "source": source, "bounds": {"age": [0, 100]}, **extra}
    return client.post("/v1/tables", json=body, headers=project.headers(project.owner))


def _columns(client: Any, project: Project) -> set[str]:
    got = client.get("/v1/tables", headers=project.headers(project.owner)).json()["tables"]
    return {c["name"] for t in got if t["name"] == "w" for c in t["columns"]}


def _layout(project: Project, tmp_path: Path) -> tuple[Path, Path]:
    """``root/sub/w.csv`` (the file the owner names) and ``outside/w.csv`` (one the service
    can read but must never publish)."""
    root = project.path / "data"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "w.csv").write_text(CSV)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.csv").write_text(STOLEN)
    return root, outside


def _swap(root: Path, outside: Path) -> None:
    """What the attacker does: ``root/sub`` becomes a symlink to the outside folder."""
    os.rename(root / "sub", root / "sub.old")
    os.symlink(outside, root / "sub")


def test_a_folder_swapped_for_a_symlink_after_the_check_is_refused(
        client: Any, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpkit.server import owner

    root, outside = _layout(project, tmp_path)
    real = owner.confine

    def check_then_swap(*args: Any) -> str:
        checked = real(*args)
        _swap(root, outside)
        return checked

    monkeypatch.setattr(owner, "confine", check_then_swap)
    r = _post(client, project, "sub/w.csv")
    assert r.status_code == 409, r.text  # before: 201 with the stolen column
    assert "symbolic link" in r.json()["detail"] and "Nothing was loaded" in r.json()["detail"]
    assert _columns(client, project) == set()


def test_a_swap_after_the_open_changes_nothing_that_is_read(
        client: Any, project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The files are open before the load starts: a swap then is too late, the load reads
    the file that was checked (and records the name the owner gave)."""
    from dpkit.engine.curator import Curator

    root, outside = _layout(project, tmp_path)
    real = Curator.add_table

    def swap_then_load(self: Curator, name: str, source: Any, **kw: Any) -> Any:
        _swap(root, outside)
        return real(self, name, source, **kw)

    monkeypatch.setattr(Curator, "add_table", swap_then_load)
    r = _post(client, project, "sub/w.csv")
    assert r.status_code == 201, r.text
    assert _columns(client, project) == {"ward", "age", "pid"}  # before: "stolen" too


def test_a_dataset_folder_is_opened_file_by_file(client: Any, project: Project,
                                                 tmp_path: Path) -> None:
    """A Parquet folder loads (its ``*.parquet`` files at any depth, as DuckDB reads one);
    a symlink inside it is refused, not followed, even one that stays inside the root."""
    import pandas as pd

    root = project.path / "data"
    ds = root / "w.parquet"
    (ds / "part=1").mkdir(parents=True)
    frame = pd.DataFrame({"ward": ["A", "B"] * 10, "age": range(20), "pid": range(20)})
    frame.to_parquet(ds / "a.parquet")
    frame.to_parquet(ds / "part=1" / "b.parquet")
    (ds / "notes.txt").write_text("skipped, as DuckDB skips it")
    assert _post(client, project, "w.parquet").status_code == 201
    pd.DataFrame({"ward": ["A"], "age": [1], "pid": [1], "stolen": ["s"]}).to_parquet(
        tmp_path / "x.parquet")
    for target in (tmp_path / "x.parquet", ds / "a.parquet"):
        link = ds / "part=1" / "c.parquet"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        r = _post(client, project, "w.parquet", replace=True)
        assert r.status_code == 409 and "symbolic link" in r.json()["detail"], r.text
    assert _columns(client, project) == {"ward", "age", "pid"}


def test_a_database_table_loads_through_its_descriptor(client: Any, project: Project) -> None:
    import duckdb

    root = project.path / "data"
    root.mkdir()
    with duckdb.connect(str(root / "src.duckdb")) as con:
        con.execute("CREATE TABLE other AS SELECT 1 AS z")
        con.execute("CREATE TABLE w AS SELECT 'A' AS ward, 3 AS age, 1 AS pid")
    assert _post(client, project, "src.duckdb::w").status_code == 201
    assert _columns(client, project) == {"ward", "age", "pid"}
    r = _post(client, project, "src.duckdb", replace=True)  # two tables: name one
    assert r.status_code == 409 and "holds 2 tables" in r.json()["detail"], r.text
    (root / "bad.parquet").write_text("not Parquet")  # DuckDB's error names the file it read
    r = _post(client, project, "bad.parquet", replace=True)
    assert r.status_code == 409 and "/proc/self/fd" not in r.text, r.text
    assert str(root / "bad.parquet") in r.json()["detail"], r.text  # the name the owner gave


def test_a_hard_link_to_the_key_and_a_fifo_are_refused(client: Any, project: Project) -> None:
    root = project.path / "data"
    root.mkdir()
    os.link(project.path / "ledger.key", root / "key.csv")
    r = _post(client, project, "key.csv")
    assert r.status_code == 409 and "project's own files" in r.json()["detail"], r.text
    os.mkfifo(root / "pipe.csv")  # a blocking open would hang the service's worker
    r = _post(client, project, "pipe.csv")
    assert r.status_code == 409 and "neither a regular file" in r.json()["detail"], r.text
    assert _columns(client, project) == set()


def test_without_proc_the_service_refuses_rather_than_read_by_name(
        client: Any, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpkit.server import paths

    (project.path / "data").mkdir()
    (project.path / "data" / "w.csv").write_text(CSV)
    monkeypatch.setattr(paths, "FD_DIR", "/no/such/proc/self/fd")
    r = _post(client, project, "w.csv")
    assert r.status_code == 409 and "dpkit add-table" in r.json()["detail"], r.text
