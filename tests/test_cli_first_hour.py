"""What a data owner's first hour with the `dpkit` command found (docs/first_hour.md): each
message names the real thing to type next."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from dpkit.cli import main


def test_init_says_the_next_command_with_the_real_project(tmp_path: Path) -> None:
    project = tmp_path / "my adult.dpkit"
    result = CliRunner().invoke(main, ["init", str(project), "--epsilon", "2"])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert f"next: dpkit add-table '{project}' NAME FILE" in flat  # quoted: it has a space


def test_a_column_without_bounds_says_how_to_declare_them(tmp_path: Path) -> None:
    rows = "\n".join(f"{i},{i % 7},{i * 13 % 1000}" for i in range(200))
    (tmp_path / "t.csv").write_text("pid,k,w\n" + rows + "\n")
    project = str(tmp_path / "p.dpkit")
    run = CliRunner().invoke
    assert run(main, ["init", project, "--epsilon", "2"]).exit_code == 0
    assert run(main, ["add-table", project, "t", str(tmp_path / "t.csv"), "--privacy-unit",
                      "pid", "--max-rows-per-unit", "1"]).exit_code == 0
    result = run(main, ["query", project, "SELECT AVG(w) FROM t", "--epsilon", "0.5"])
    assert result.exit_code != 0
    flat = " ".join(result.output.split())
    assert "dpkit add-table ... --bounds w=LOW:HIGH --replace" in flat
    assert "Nothing was charged" in flat
    budget = json.loads(run(main, ["budget", project, "--json"]).output)
    assert budget["spent"] == 0.0 and budget["history"] == []


def test_help_loads_click_and_rich_only() -> None:
    """docs/architecture.md: `dpkit --help` loads click and rich only (cli/release.py imported
    numpy at the top: 0.2 s of the 0.4 s the help took)."""
    import subprocess
    import sys

    code = ("import sys; from dpkit.cli import main\n"
            "heavy = [m for m in ('numpy', 'duckdb', 'sqlglot', 'pyarrow') if m in sys.modules]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ,
                                          "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_replace_without_the_privacy_unit_is_refused(tmp_path: Path) -> None:
    """The owner replaced a table to add bounds and gave only --bounds: the table silently
    became record level (each row its own unit). Now refused, nothing loaded; repeating the
    unit works."""
    from dpkit.engine.curator import Curator

    rows = "\n".join(f"{i // 3},{20 + i % 50}" for i in range(300))
    (tmp_path / "t.csv").write_text("pid,age\n" + rows + "\n")
    project, csv = str(tmp_path / "p.dpkit"), str(tmp_path / "t.csv")
    run = CliRunner().invoke
    assert run(main, ["init", project, "--epsilon", "2"]).exit_code == 0
    unit = ["--privacy-unit", "pid", "--max-rows-per-unit", "3"]
    assert run(main, ["add-table", project, "t", csv, *unit]).exit_code == 0
    result = run(main, ["add-table", project, "t", csv, "--bounds", "age=0:100", "--replace"])
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert "Repeat --privacy-unit pid --max-rows-per-unit 3" in flat
    with Curator.open(project) as cur:
        meta = cur.tables()["t"]
    assert meta.privacy_unit == "pid" and "age" not in meta.bounds
    result = run(main, ["add-table", project, "t", csv, *unit, "--bounds", "age=0:100",
                        "--replace"])
    assert result.exit_code == 0, result.output
    with Curator.open(project) as cur:
        assert cur.tables()["t"].bounds["age"] == (0.0, 100.0)
