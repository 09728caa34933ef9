"""The CLI side of issue 14's item 4: add-table asks for the rows-per-unit cap (or refuses in a
script), ``--max-rows-per-unit auto``, ``dpkit suggest-bounds``, query warnings and
``--no-diagnostics``."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import dpkit as dp
from dpkit.cli import main
from dpkit.cli.bounds import ask_max_rows, parse_max_rows


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "p.dpkit"
    dp.Curator.create(path, epsilon=20.0, delta=1e-6, source=dp.noise.seeded(1)).close()
    sizes = np.concatenate([np.ones(2000, int), np.full(1000, 8)])
    u = np.repeat(np.arange(sizes.size), sizes)
    csv = tmp_path / "rows.csv"
    pd.DataFrame({"u": u, "x": np.linspace(-50, 150, u.size)}).to_csv(csv, index=False)
    return path, csv


def test_add_table_refuses_a_unit_without_a_cap_in_a_script(project: tuple[Path, Path]) -> None:
    path, csv = project
    r = CliRunner().invoke(main, ["add-table", str(path), "t", str(csv), "--privacy-unit", "u"])
    assert r.exit_code != 0
    assert "--max-rows-per-unit" in r.output and "Nothing was loaded" in r.output
    with dp.Curator.open(path) as cur:
        assert cur.tables() == {}


def test_the_prompt_takes_a_number_or_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(click, "prompt", lambda *a, **k: "auto")
    assert ask_max_rows("u", None, public=False, interactive=True) == "auto"
    monkeypatch.setattr(click, "prompt", lambda *a, **k: "3")
    assert ask_max_rows("u", None, public=False, interactive=True) == 3
    assert ask_max_rows(None, None, public=False, interactive=False) is None
    assert parse_max_rows("AUTO") == "auto"
    with pytest.raises(click.BadParameter):
        parse_max_rows("lots")


def test_auto_cap_then_query_warns_then_suggest_bounds(project: tuple[Path, Path]) -> None:
    path, csv = project
    runner = CliRunner()
    r = runner.invoke(main, ["add-table", str(path), "t", str(csv), "--privacy-unit", "u",
                             "--max-rows-per-unit", "auto", "--rows-epsilon", "1",
                             "--bounds", "x=0:100"])
    assert r.exit_code == 0, r.output
    assert "chosen privately" in r.output
    with dp.Curator.open(path) as cur:
        m = cur.tables()["t"].max_rows_per_unit
    # a third of the units have 8 rows; the 95th percentile of rows per unit is 8
    assert m == 8
    # a quarter of the values lie outside [0, 100]: the query warns (lower bound >> 5%)
    r = runner.invoke(main, ["query", str(path), "SELECT AVG(x) AS a FROM t",
                             "--epsilon", "1"])
    assert r.exit_code == 0, r.output
    assert "warning:" in r.output and "outside [0, 100]" in r.output
    r = runner.invoke(main, ["query", str(path), "SELECT AVG(x) AS a FROM t",
                             "--epsilon", "1", "--no-diagnostics"])
    assert r.exit_code == 0 and "warning:" not in r.output
    r = runner.invoke(main, ["suggest-bounds", str(path), "t", "x", "--epsilon", "1",
                             "--search", "-1000:1000", "--bins", "2000"])
    assert r.exit_code == 0, r.output
    assert "suggested bounds for t.x" in r.output and "--bounds x=" in r.output


def test_suggest_bounds_rounds_an_integer_column_outward(tmp_path: Path) -> None:
    """The first hour's owner was told `--bounds age=17.8253:144.303` for an integer column:
    the line to type now has whole numbers, rounded outward (floor, ceil)."""
    import re

    path = tmp_path / "p.dpkit"
    dp.Curator.create(path, epsilon=5.0, source=dp.noise.seeded(3)).close()
    csv = tmp_path / "ages.csv"
    pd.DataFrame({"age": np.arange(3000) % 73 + 17}).to_csv(csv, index=False)
    runner = CliRunner()
    assert runner.invoke(main, ["add-table", str(path), "t", str(csv),
                                "--types", "age=INTEGER"]).exit_code == 0
    r = runner.invoke(main, ["suggest-bounds", str(path), "t", "age", "--epsilon", "1",
                             "--search", "0:150", "--bins", "300"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    got = re.search(r"suggested bounds for t\.age: (\S+):(\S+)", flat)
    line = re.search(r"--bounds age=(-?\d+):(-?\d+) --replace", flat)
    assert got and line, flat
    assert int(line[1]) <= float(got[1]) and int(line[2]) >= float(got[2])
    assert int(line[1]) >= float(got[1]) - 1 and int(line[2]) <= float(got[2]) + 1
    # one cell per integer: the suggestion is the cells' first and last integers already
    assert (int(line[1]), int(line[2])) == (float(got[1]), float(got[2]))
    assert "outer edges of the grid cells" in flat and "one cell per integer" in flat


def test_grid_option_of_suggest_bounds_and_quantiles(project: tuple[Path, Path]) -> None:
    """``--grid``: suggest-bounds takes log-scale cells over a signed range spanning four
    orders of magnitude by default (``auto``), equal ones with ``--grid linear``; quantiles
    and cdf take ``--grid log``."""
    path, csv = project
    runner = CliRunner()
    r = runner.invoke(main, ["add-table", str(path), "t", str(csv), "--privacy-unit", "u",
                             "--max-rows-per-unit", "8", "--bounds", "x=-1000000:1000000"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["suggest-bounds", str(path), "t", "x", "--epsilon", "1"])
    assert r.exit_code == 0, r.output
    assert "log-scale" in "".join(r.output.split())
    r = runner.invoke(main, ["suggest-bounds", str(path), "t", "x", "--epsilon", "1",
                             "--grid", "linear"])
    assert r.exit_code == 0, r.output
    assert "log-scale" not in "".join(r.output.split())
    for cmd in (["quantiles", "-p", "0.5"], ["cdf", "--preview"]):
        r = runner.invoke(main, [cmd[0], str(path), "t", "x", *cmd[1:], "--epsilon", "1",
                                 "--grid", "log"])
        assert r.exit_code == 0, r.output
