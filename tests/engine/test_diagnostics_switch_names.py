"""The switch that turns the answer diagnostics off, named as each front end's user sets it.

The engine's texts (a preview's note, a family's refusal) name the Python API's keyword
(``dpkit.engine.spec.DIAGNOSTICS_OFF``) and never a front end's flag; the command line says
``--no-diagnostics`` instead (``dpkit.cli.options.cli_text``). The service's request field
and the console's checkbox: tests/server/test_diagnostics_switch.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpkit.cli import main
from dpkit.cli.options import cli_text
from dpkit.engine import Curator
from dpkit.engine.spec import DIAGNOSTICS_OFF, respell

QUERY = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g"
ENGINE = Path(__file__).resolve().parents[2] / "src" / "dpkit" / "engine"


@pytest.fixture
def project_path(tmp_path: Path) -> Path:
    path = tmp_path / "p.dpkit"
    with Curator.create(path, epsilon=10.0, delta=1e-6) as cur:
        cur.add_table("t", {"g": np.array(["a", "b"] * 50, dtype=object),
                            "x": np.arange(100.0)},
                      bounds={"x": (0, 100)}, domains={"g": ["a", "b"]})
    return path


def test_the_engine_names_the_python_keyword(project_path: Path) -> None:
    with Curator.open(project_path) as cur:
        on = cur.preview(QUERY, epsilon=1.0)
        off = cur.preview(QUERY, epsilon=1.0, diagnostics=False)
    note = [n for n in on.notes if DIAGNOSTICS_OFF in n]
    assert len(note) == 1 and "gives it to the outputs" in note[0], on.notes
    assert not any("--no-diagnostics" in n for n in on.notes)
    assert not any(DIAGNOSTICS_OFF in n for n in off.notes)  # nothing left to switch off


def test_the_command_line_names_its_flag(project_path: Path) -> None:
    r = CliRunner().invoke(main, ["preview", str(project_path), QUERY, "--epsilon", "1"],
                           terminal_width=400)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # rich wraps long notes
    assert "--no-diagnostics gives it to the outputs" in text
    assert DIAGNOSTICS_OFF not in text
    r = CliRunner().invoke(main, ["preview", str(project_path), QUERY, "--epsilon", "1",
                                  "--no-diagnostics"], terminal_width=400)
    assert r.exit_code == 0 and "--no-diagnostics" not in r.output


def test_respell_replaces_the_keyword_only() -> None:
    text = f"x (nothing charged; {DIAGNOSTICS_OFF} gives the release the whole budget)"
    assert cli_text(text) == "x (nothing charged; --no-diagnostics gives the release the " \
                             "whole budget)"
    assert respell("diagnostics: rows read", "--no-diagnostics") == "diagnostics: rows read"


def test_no_engine_text_names_a_front_ends_flag() -> None:
    """The engine does not know which front end asked: no string in it spells the CLI's flag
    (docstrings aside) or the service's field."""
    found = []
    for path in ENGINE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs \
                    and ("--no-diagnostics" in n.value or '"diagnostics": false' in n.value):
                found.append(f"{path.name}:{n.lineno}")
    assert not found, found
