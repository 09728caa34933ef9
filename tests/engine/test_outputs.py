"""Output that fits: 80-column tables that never cut a number, answer files in four formats
(checked before the charge), and pictures of answers and budgets."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from dpkit import events as ev
from dpkit.cli.project import budget as cli_budget
from dpkit.cli.query import query as cli_query
from dpkit.engine import Curator, Result

WIDE = "SELECT ward, COUNT(*) AS n, SUM(cost) AS total, AVG(age) AS mean_age, AVG(cost) AS " \
       "mean_cost, STDDEV(cost) AS sd FROM visits GROUP BY ward"


def _render(obj: Any, width: int) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(obj)
    return buf.getvalue()


def _wide_result() -> Result:
    """Six aggregates of very different sizes: too wide for 80 columns in one table."""
    n = 5
    keys = np.array([f"ward {i}" for i in range(n)], dtype=object)
    data: dict[str, np.ndarray] = {"ward": keys}
    kinds = {"ward": "group"}
    for j, scale in enumerate([1.0, 1e3, 123456.789, -98765432.1, 1e-4, 2.5e9]):
        name = f"aggregate_number_{j}"
        v = np.arange(1, n + 1) * scale + 0.123
        data[name], data[f"{name}_ci_low"], data[f"{name}_ci_high"] = v, v - abs(scale), \
            v + abs(scale)
        kinds.update({name: "value", f"{name}_ci_low": "ci_low", f"{name}_ci_high": "ci_high"})
    return Result(columns=list(data), data=data, kinds=kinds, query="q",
                  event=ev.PureDP(0.1), epsilon=0.1, delta=0.0, level=0.95, split=[])


@pytest.mark.parametrize("width", [80, 60, 36])
def test_result_fits_the_console_and_keeps_every_number(width: int) -> None:
    res = _wide_result()
    text = _render(res, width)
    assert max(len(line) for line in text.splitlines()) <= width
    cells = [c for col in res.table().cols for c in col.cells]
    assert len(cells) == 5 * (1 + 2 * 6)
    for cell in cells:  # every number and interval, whole, on one line
        assert any(cell in line for line in text.splitlines()), (cell, text)
    assert "…" not in text
    assert "-493,827,160" in text or "-4.938e+08" in text  # the text of one value, by hand


def test_a_narrow_table_is_one_table() -> None:
    data = {"n": np.array([12.0]), "n_ci_low": np.array([10.0]), "n_ci_high": np.array([14.0])}
    res = Result(columns=list(data), data=data,
                 kinds={"n": "value", "n_ci_low": "ci_low", "n_ci_high": "ci_high"},
                 query="q", event=ev.PureDP(1.0), epsilon=1.0, delta=0.0, level=0.9, split=[])
    text = _render(res, 80)
    assert "part" not in text and "12.000" in text and "[10.000, 14.000]" in text
    assert "90% CI" in text


def test_a_markup_like_key_is_shown_verbatim() -> None:
    data = {"k": np.array(["[bold]x[/bold]"], dtype=object), "n": np.array([3.0]),
            "n_ci_low": np.array([1.0]), "n_ci_high": np.array([5.0])}
    res = Result(columns=list(data), data=data,
                 kinds={"k": "group", "n": "value", "n_ci_low": "ci_low", "n_ci_high": "ci_high"},
                 query="q", event=ev.PureDP(1.0), epsilon=1.0, delta=0.0, level=0.95, split=[])
    assert "[bold]x[/bold]" in _render(res, 80)


# ------------------------------------------------------------------ files


@pytest.fixture
def clinic(visits_curator: Curator) -> Path:
    visits_curator.close()
    return visits_curator.path


def _spent(path: Path) -> float:
    with Curator.open(path) as cur:
        return cur.budget().spent


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=80)


def _same_rows(got: list[list[Any]], want: list[list[Any]]) -> None:
    assert [r[0] for r in got] == [r[0] for r in want]  # the keys, exactly
    assert np.allclose(np.array([r[1:] for r in got], dtype=float),
                       np.array([r[1:] for r in want], dtype=float), rtol=1e-12, equal_nan=True)


def test_output_formats_from_the_extension(clinic: Path, tmp_path: Path) -> None:
    pytest.importorskip("openpyxl")
    import duckdb
    import openpyxl

    res = cli_query(clinic, WIDE, epsilon=0.5, console=_quiet())
    want = [list(r) for r in res.rows()]
    for name in ("a.csv", "a.parquet", "a.json", "a.xlsx"):
        res.write(tmp_path / name)
    con = duckdb.connect()
    for name in ("a.csv", "a.parquet"):
        rows = con.execute(f"SELECT * FROM '{tmp_path / name}'").fetchall()
        _same_rows([list(r) for r in rows], want)
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["columns"] == res.columns and doc["about"]["epsilon"] == pytest.approx(0.5)
    _same_rows([list(r.values()) for r in doc["rows"]], want)
    sheet = openpyxl.load_workbook(tmp_path / "a.xlsx")["result"]
    cells = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert cells[0] == res.columns
    _same_rows(cells[1:], want)
    # the CLI writes the same way
    cli_query(clinic, "SELECT COUNT(*) AS n FROM visits", epsilon=0.1,
              output=tmp_path / "b.json", console=_quiet())
    assert json.loads((tmp_path / "b.json").read_text())["columns"][0] == "n"


@pytest.mark.parametrize("name, match", [("a.txt", "extension"), ("a", "extension"),
                                         ("missing/a.csv", "does not exist")])
def test_a_bad_output_is_refused_before_the_charge(clinic: Path, tmp_path: Path, name: str,
                                                   match: str) -> None:
    before = _spent(clinic)
    with pytest.raises(ValueError, match=match):
        cli_query(clinic, "SELECT COUNT(*) FROM visits", epsilon=0.5, output=tmp_path / name,
                  console=_quiet())
    assert _spent(clinic) == before


def test_xlsx_without_openpyxl_is_refused_before_the_charge(
        clinic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openpyxl", None)
    before = _spent(clinic)
    with pytest.raises(ImportError, match=r"dpkit\[xlsx\]"):
        cli_query(clinic, "SELECT COUNT(*) FROM visits", epsilon=0.5,
                  output=tmp_path / "a.xlsx", console=_quiet())
    assert _spent(clinic) == before


# ------------------------------------------------------------------ pictures


def test_query_plot_bars_for_categories_lines_for_ordered_keys(clinic: Path,
                                                                tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    res = cli_query(clinic, "SELECT ward, COUNT(*) AS n, AVG(age) AS a FROM visits GROUP BY "
                    "ward", epsilon=0.5, plot=tmp_path / "q.png", console=_quiet())
    assert (tmp_path / "q.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = res.plot()
    assert len(fig.axes) == 2  # one panel per aggregate
    assert fig._repr_png_()[:4] == b"\x89PNG"  # what a notebook shows
    bars = fig.axes[0].patches
    assert len(bars) == len(res) == 5  # the declared domain: A-E
    assert [b.get_height() for b in bars] == pytest.approx(list(res["n"]))
    # an ordered key: a line through the values, whiskers at the interval ends
    data = {"age": np.array([30, 10, 20]), "n": np.array([3.0, 1.0, 2.0]),
            "n_ci_low": np.array([2.0, 0.0, 1.0]), "n_ci_high": np.array([4.0, 2.0, 3.0])}
    line = Result(columns=list(data), data=data,
                  kinds={"age": "group", "n": "value", "n_ci_low": "ci_low",
                         "n_ci_high": "ci_high"},
                  query="q", event=ev.PureDP(1.0), epsilon=1.0, delta=0.0, level=0.95, split=[])
    ax = line.plot().axes[0]
    assert not ax.patches  # no bars
    xs, ys = ax.lines[0].get_data()
    assert list(xs) == [10, 20, 30] and list(ys) == [1.0, 2.0, 3.0]  # sorted by the key
    segments = [s for c in ax.collections for s in getattr(c, "get_segments", list)()]
    ends = sorted((float(s[0][1]), float(s[1][1])) for s in segments if len(s) == 2)
    assert ends == [(0.0, 2.0), (1.0, 3.0), (2.0, 4.0)]


def test_budget_plot(clinic: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    with Curator.open(clinic) as cur:
        token = cur.add_analyst("ann")
    cli_query(clinic, "SELECT COUNT(*) FROM visits", epsilon=0.3, console=_quiet())
    cli_query(clinic, "SELECT COUNT(*) FROM visits", epsilon=0.2, console=_quiet(), token=token)
    status = cli_budget(clinic, console=_quiet(), plot=tmp_path / "b.png")
    assert (tmp_path / "b.png").stat().st_size > 1000
    ax = status.plot().axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == ["owner", "ann"] and "project total" in labels


def test_plot_without_matplotlib_is_refused_before_the_charge(
        clinic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    before = _spent(clinic)
    with pytest.raises(ImportError, match=r"dpkit\[plots\]"):
        cli_query(clinic, "SELECT COUNT(*) FROM visits", epsilon=0.5, plot=tmp_path / "a.png",
                  console=_quiet())
    with pytest.raises(ValueError, match="picture format"):
        cli_query(clinic, "SELECT COUNT(*) FROM visits", epsilon=0.5, plot=tmp_path / "a.csv",
                  console=_quiet())
    assert _spent(clinic) == before


def test_budget_table_fits_80_columns(clinic: Path) -> None:
    long_query = "SELECT COUNT(*) AS n FROM visits WHERE age > 10 AND cost < 900 AND ward <> 'E'"
    cli_query(clinic, long_query, epsilon=0.25, console=_quiet())
    text = _render(Curator.open(clinic).budget(), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "0.25" in text and "…" not in text
    assert all(word in text for word in long_query.split())




def test_the_command_line_says_which_extra_to_install(clinic: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from dpkit.cli import main

    monkeypatch.setitem(sys.modules, "openpyxl", None)
    res = CliRunner().invoke(main, ["query", str(clinic), "SELECT COUNT(*) FROM visits",
                                    "--epsilon", "0.5", "--output", str(tmp_path / "a.xlsx")])
    assert res.exit_code == 2
    assert "pip install 'dpkit[xlsx]'" in res.output.replace("\n", " ")
    assert _spent(clinic) == 0.0
