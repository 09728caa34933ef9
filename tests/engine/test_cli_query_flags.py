"""``dpkit query`` / ``dpkit preview`` flags: --noise, --rho, --delta, --level, --weights.

The flags are defined by :func:`dpkit.cli.options.query_options` and passed through to
:func:`dpkit.cli.query.query` / :func:`~dpkit.cli.query.preview`; the tests drive
them through click's CliRunner (a command built from those options, and ``dpkit`` itself once
``dpkit.cli`` carries them).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from dpkit.cli import options
from dpkit.cli import query as commands
from dpkit.engine import Curator
from dpkit.mechanisms.plan import discrete_gaussian_plan, discrete_laplace_plan

QUERY = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g"


@pytest.fixture
def project_path(tmp_path: Path) -> Path:
    path = tmp_path / "p.dpkit"
    cur = Curator.create(path, epsilon=10.0, delta=1e-6, accountant="zcdp")
    cur.add_table("t", {"g": np.array(["a", "b"] * 50, dtype=object), "x": np.arange(100.0)},
                  bounds={"x": (0, 100)}, domains={"g": ["a", "b"]})
    cur.close()
    return path


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=200, force_terminal=False), buf


def _cli() -> click.Group:
    """A click group with query/preview wired exactly as dpkit.cli should wire them."""
    out, _ = _console()

    @click.group()
    def main() -> None:
        pass

    @main.command()
    @click.argument("project")
    @click.argument("sql")
    @click.option("--epsilon", type=float, default=None)
    @click.option("--delta", type=float, default=None)
    @options.query_options
    def query(project: str, sql: str, epsilon: float | None, delta: float | None,
              **flags: Any) -> None:
        res = commands.query(project, sql, epsilon=epsilon, delta=delta, console=out, **flags)
        click.echo(f"rows={len(res)} level={res.level} spent={res.epsilon:.6g}")

    @main.command()
    @click.argument("project")
    @click.argument("sql")
    @click.option("--epsilon", type=float, default=None)
    @click.option("--delta", type=float, default=None)
    @options.query_options
    def preview(project: str, sql: str, epsilon: float | None, delta: float | None,
                **flags: Any) -> None:
        pv = commands.preview(project, sql, epsilon=epsilon, delta=delta, console=out,
                              **flags)
        for o in pv.outputs:
            click.echo(f"{o['name']}={o['halfwidth']}")
        for s in pv.split:
            click.echo(f"{s['measurement']}: rho={s['rho']} eps={s['epsilon']} "
                       f"weight={s['weight']}")

    return main


def test_parse_weights() -> None:
    assert options.parse_weights("n=1, avg_age=3") == {"n": 1.0, "avg_age": 3.0}
    assert options.parse_weights(None) is None and options.parse_weights("") is None
    assert options.parse_weights({"n": 2}) == {"n": 2}
    for bad, match in [("n", "output=number"), ("=2", "output=number"), ("n=x", "number")]:
        with pytest.raises(ValueError, match=match):
            options.parse_weights(bad)


def test_preview_flags_through_click(project_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(_cli(), ["preview", str(project_path), QUERY, "--noise", "gaussian",
                               "--rho", "0.4", "--weights", "n=3,s=1", "--level", "0.9",
                               "--no-diagnostics"])  # the outputs get the whole rho
    assert r.exit_code == 0, r.output
    hw_n = discrete_gaussian_plan(sensitivity=1.0, rho=0.3).halfwidth(0.9)
    assert f"n={float(hw_n)}" in r.output
    assert "COUNT(*): rho=0.3" in r.output and "weight=3.0" in r.output
    assert "diagnostics" not in r.output
    r = runner.invoke(_cli(), ["preview", str(project_path), QUERY, "--rho", "0.4",
                               "--noise", "gaussian"])  # diagnostics on: 5% of rho
    assert r.exit_code == 0, r.output
    assert "COUNT(*): rho=0.19" in r.output and "diagnostics: rows read" in r.output
    r = runner.invoke(_cli(), ["preview", str(project_path), QUERY, "--epsilon", "1"])
    assert r.exit_code == 0, r.output
    hw = discrete_laplace_plan(sensitivity=1, epsilon=0.5).halfwidth(0.95)
    assert f"n={float(hw)}" in r.output
    r = runner.invoke(_cli(), ["preview", str(project_path), QUERY, "--noise", "uniform",
                               "--epsilon", "1"])
    assert r.exit_code == 2 and "uniform" in r.output


def test_query_flags_through_click(project_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(_cli(), ["query", str(project_path), QUERY, "--noise", "gaussian",
                               "--rho", "0.2", "--level", "0.8", "--weights", "s=2"])
    assert r.exit_code == 0, r.output
    assert "rows=2 level=0.8" in r.output
    with Curator.open(project_path) as cur:
        assert cur.budget().rho_spent == pytest.approx(0.2, rel=1e-9)
        entry = cur.ledger.entries("charge")[-1]
        assert entry.view["details"]["weights"] == {"s": 2.0}
        assert entry.view["details"]["level"] == 0.8
    # --rho without --noise gaussian, bad weights: refused, nothing charged
    r = runner.invoke(_cli(), ["query", str(project_path), QUERY, "--rho", "0.1"])
    assert r.exit_code != 0 and "--noise gaussian" in str(r.exception)
    r = runner.invoke(_cli(), ["query", str(project_path), QUERY, "--epsilon", "0.5",
                               "--weights", "zz=2"])
    assert r.exit_code != 0 and "not an output" in str(r.exception)
    with Curator.open(project_path) as cur:
        assert cur.budget().rho_spent == pytest.approx(0.2, rel=1e-9)


def test_functions_print_notes_and_split(project_path: Path) -> None:
    out, buf = _console()
    res = commands.query(project_path, QUERY + " ORDER BY n DESC LIMIT 1", epsilon=1.0,
                         weights="n=1", console=out)
    assert len(res) == 1
    text = " ".join(buf.getvalue().split())
    assert "noisy max" in text and "weight" in text and "share" in text
    with pytest.raises(ValueError, match="--epsilon"):
        commands.preview(project_path, QUERY, console=out)


def test_dpkit_cli_has_the_flags(project_path: Path) -> None:
    from dpkit.cli import main

    names = {p.name for p in main.commands["query"].params}
    if "weights" not in names:
        pytest.skip("dpkit.cli does not wire query_options yet (integrator)")
    r = CliRunner().invoke(main, ["preview", str(project_path), QUERY, "--noise", "gaussian",
                                  "--rho", "0.1", "--weights", "n=2", "--level", "0.9",
                                  "--delta", "1e-7"])
    assert r.exit_code == 0, r.output
    assert "budget weights n=2" in " ".join(r.output.split())
