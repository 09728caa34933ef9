"""What the first hours with the `dpkit` command found (docs/first_hour.md: the owner's, the
researcher's): each message names the real thing to type next."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

import dpkit as dp
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
                      "pid", "--max-rows-per-unit", "1", "--types", "k=INTEGER,w=INTEGER"]
               ).exit_code == 0
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


# ---------------------------------------------------------------- the second walk (journey2)


def _adult_like(tmp_path: Path, cap: str = "0.3") -> tuple[str, str]:
    """A project over a small CSV with one analyst capped at ``cap``; (project, token)."""
    rows = "\n".join(f"{i},{20 + i % 50},{'MF'[i % 2]}" for i in range(300))
    (tmp_path / "t.csv").write_text("pid,age,sex\n" + rows + "\n")
    project = str(tmp_path / "p.dpkit")
    run = CliRunner().invoke
    assert run(main, ["init", project, "--epsilon", "3", "--delta", "1e-6"]).exit_code == 0
    assert run(main, ["add-table", project, "t", str(tmp_path / "t.csv"), "--privacy-unit",
                      "pid", "--max-rows-per-unit", "1", "--bounds", "age=0:100",
                      "--domain", "sex=M,F"]).exit_code == 0
    added = run(main, ["analyst", "add", project, "raj", "--epsilon", cap])
    assert added.exit_code == 0, added.output
    token = next(w for w in added.output.split() if w.startswith("dpkit_"))
    return project, token


def test_a_refusal_over_the_analysts_cap_names_the_command_that_raises_it(
        tmp_path: Path) -> None:
    """Raj's second query passed his cap: the refusal said "use a new budget", which an
    analyst cannot do, and no command changed a cap (only Python and HTTP did). Now the
    refusal names `dpkit analyst cap`, which raises it; what he spent stays spent."""
    project, token = _adult_like(tmp_path)
    run = CliRunner().invoke
    query = ["query", project, "SELECT COUNT(*) FROM t", "--epsilon", "0.2", "--token", token]
    assert run(main, query).exit_code == 0
    refused = run(main, query)
    assert refused.exit_code != 0
    flat = " ".join(refused.output.split())
    assert "analyst 'raj' has a budget of epsilon 0.3" in flat
    assert "the data owner can raise it: dpkit analyst cap PROJECT raj --epsilon E" in flat
    raised = run(main, ["analyst", "cap", project, "raj", "--epsilon", "1"])
    assert raised.exit_code == 0, raised.output
    assert "raj: epsilon 1" in raised.output and "spent epsilon 0.2" in raised.output
    assert run(main, query).exit_code == 0  # fits the new cap
    from dpkit.engine.curator import Curator

    def cap() -> float | None:
        with Curator.open(project) as cur:
            return cur.analysts()["raj"]["epsilon"]  # type: ignore[no-any-return]

    assert cap() == 1.0
    # --none removes the cap; neither flag (or both) is a usage error, nothing recorded
    assert run(main, ["analyst", "cap", project, "raj", "--none"]).exit_code == 0
    assert cap() is None
    for bad in ([], ["--epsilon", "1", "--none"], ["--none", "--delta", "1e-9"]):
        out = run(main, ["analyst", "cap", project, "raj", *bad])
        assert out.exit_code == 2 and "--epsilon E" in out.output, out.output
    unknown = run(main, ["analyst", "cap", project, "nobody", "--epsilon", "1"])
    assert unknown.exit_code != 0 and "nobody" in unknown.output


def test_add_table_heading_is_one_line(tmp_path: Path) -> None:
    """A two-column public table's heading, the table's title, wrapped to its width:
    "table education_levels (copy, 0.2" and "s)" on the next line."""
    (tmp_path / "levels.csv").write_text("education,level\nBachelors,higher\nHS-grad,school\n")
    project = str(tmp_path / "p.dpkit")
    run = CliRunner().invoke
    assert run(main, ["init", project, "--epsilon", "1"]).exit_code == 0
    out = run(main, ["add-table", project, "education_levels", str(tmp_path / "levels.csv"),
                     "--public"])
    assert out.exit_code == 0, out.output
    heading = [line for line in out.output.splitlines() if "education_levels (" in line]
    assert len(heading) == 1 and heading[0].rstrip().endswith(" s)"), out.output


def test_membership_model_progress_lines_are_sentences() -> None:
    """`dpkit attack membership-model` printed each run's raw dict, cut at 160 characters
    ("{'epsilon': inf, 'train_accuracy': 0.88..., 'online_tpr@0.00"). Now one sentence."""
    import numpy as np

    from dpkit.attacks.model_experiments import lira_study

    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 3)) * 0.3
    y = (X[:, 0] > 0).astype(int)
    lines: list[str] = []
    lira_study("adult", epsilons=(1.0,), population=40, shadow_models=4, seed=1,
               data=(X[:40], y[:40], X[40:], y[40:]), log=lines.append)
    assert len(lines) == 2
    assert lines[0].startswith("adult non-private: 4 models trained, test accuracy 0.")
    assert "online LiRA AUC" in lines[1] and "{" not in "".join(lines)


def test_a_source_in_a_missing_folder_says_the_folder_is_missing(tmp_path: Path) -> None:
    """`dpkit serve` reads tables from PROJECT/data/, which nobody had made yet: the owner's
    POST /v1/tables said only "source file .../data/adult.parquet does not exist"."""
    project = str(tmp_path / "p.dpkit")
    run = CliRunner().invoke
    assert run(main, ["init", project, "--epsilon", "1"]).exit_code == 0
    missing = tmp_path / "p.dpkit" / "data" / "adult.parquet"
    out = run(main, ["add-table", project, "adult", str(missing), "--public"])
    flat = "".join(out.output.split())  # the console may wrap the long path anywhere
    assert out.exit_code != 0
    expected = f"nor does its folder {missing.parent}: create it and put the file there"
    assert "".join(expected.split()) in flat
    missing.parent.mkdir()  # the folder there, the file not: the plain message
    out = run(main, ["add-table", project, "adult", str(missing), "--public"])
    assert "does not exist" in out.output and "nor does" not in out.output


def test_a_sql_typo_says_where_the_parser_stopped(tmp_path: Path) -> None:
    """"SELEC COUNT(*) FROM adult" was refused with "Invalid expression / Unexpected token.
    Line 1, Col: 12." and nothing else; now the refusal shows the text up to where the parser
    stopped, and a misspelt first word is named. Nothing is charged."""
    from dpkit.engine.curator import Curator

    project, _ = _adult_like(tmp_path)
    run = CliRunner().invoke
    cases = {
        "SELEC COUNT(*) FROM t": ["at '(' in 'SELEC COUNT(' (line 1, column 12)",
                                  "A query starts with SELECT (it starts with 'SELEC')"],
        "SELECT COUNT(* FROM t": ["Expecting ), at 'FROM' in 'SELECT COUNT(* FROM'"],
        "SELECT COUNT(*) FROM t WHERE age >": ["missing for GT, at '>'"],
    }
    for sql, expected in cases.items():
        out = run(main, ["query", project, sql, "--epsilon", "0.1"])
        flat = " ".join(out.output.split())
        assert out.exit_code != 0
        for text in expected:
            assert text in flat, flat
        assert "<class" not in flat and ("starts with SELECT" in flat) == sql.startswith("SELEC ")
    with Curator.open(project) as cur:
        assert cur.budget().spent == 0.0


def test_fit_says_whom_the_model_protects(tmp_path: Path) -> None:
    """`dpkit fit` said what it charged, not that a table with a privacy unit trains at user
    level (the researcher's question); now one line says so, in the table's words."""
    project, _ = _adult_like(tmp_path)
    out = CliRunner().invoke(main, ["fit", project, "SELECT age FROM t", "--label", "sex",
                                    "--model", "logistic", "--epsilon", "0.5"])
    assert out.exit_code == 0, out.output
    flat = " ".join(out.output.split())
    assert ("differentially private for adding or removing one 'pid' with all their rows "
            "(user level; max_rows_per_unit=1)") in flat


def test_a_budget_split_with_a_long_mechanism_stays_a_table_at_80_columns() -> None:
    """The demo's top-k and DP_RANGES answers printed their budget split as 40-line cards
    ("-- row 1 of 5" / "measurement" / "  SUM(cost)" ...): the mechanism column, which never
    folded, held "factorization mechanism: strategy optimized(laplace), discrete Laplace
    noise". It folds now, as the measurement does: two tables of four and three columns."""
    from rich.console import Console

    from dpkit.engine.results import split_table

    split = [{"measurement": "ranges: histogram over 101 cells of age",
              "mechanism": "factorization mechanism: strategy optimized(laplace), discrete "
                           "Laplace noise", "epsilon": 0.285, "sensitivity": 5},
             {"measurement": "diagnostics: rows read after bounding",
              "mechanism": "discrete Laplace noise, 1.67% of the budget", "epsilon": 0.005,
              "sensitivity": 5}]
    con = Console(width=80, record=True, color_system=None)
    con.print(split_table(split))
    out = con.export_text()
    assert "-- row" not in out and "(part 1 of 2)" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "factorization mechanism:" in out and "0.285" in out


def test_a_fitted_models_file_holds_its_event_and_account_reads_it(tmp_path: Path) -> None:
    """`dpkit fit --output` wrote the ε, not the event nor the δ nor whom it protects: the
    researcher could not re-check the ε with `dpkit account` without Python. The file holds
    them now, and `dpkit account @model.json` reports the model's event at its δ, with the
    tightest bound said in one line (every row of the table is an upper bound)."""
    project, _ = _adult_like(tmp_path)
    model = tmp_path / "m.json"
    run = CliRunner().invoke
    out = run(main, ["fit", project, "SELECT age FROM t", "--label", "sex", "--epsilon", "0.5",
                     "--output", str(model)])
    assert out.exit_code == 0, out.output
    assert f"dpkitaccount@{model}" in "".join(out.output.split())  # rich wraps paths
    doc = json.loads(model.read_text())
    assert doc["privacy_unit"] == "pid" and doc["max_rows_per_unit"] == 1
    assert "one 'pid' with all their rows" in doc["guarantee"]
    event = dp.events.from_json(json.dumps(doc["event"]))
    assert doc["delta"] > 0
    assert dp.accounting.epsilon(event, doc["delta"]) <= doc["epsilon"] + 1e-9
    report = run(main, ["account", f"@{model}"], env={"COLUMNS": "200"})
    assert report.exit_code == 0, report.output
    assert f"at delta = {doc['delta']:g}" in report.output
    flat = " ".join(report.output.split())
    assert "epsilon <= 0.5 at delta" in flat or "epsilon <= 0.499" in flat, flat
    assert "the tightest bound: " in flat


def test_account_still_reads_a_bare_event() -> None:
    event = '{"SelfComposed": {"event": {"Gaussian": [1.1]}, "count": 100}}'
    out = CliRunner().invoke(main, ["account", event, "--delta", "1e-5"],
                             env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    best = dp.accounting.report(dp.events.from_json(event), 1e-5)
    smallest = min(r.epsilon for r in best if r.epsilon is not None)
    assert f"epsilon <= {smallest:.6g} at delta = 1e-05" in out.output


def test_a_fit_over_undeclared_columns_names_them_all_in_the_commands_spelling(
        tmp_path: Path) -> None:
    """Adult's columns went undeclared one at a time, each a reload; the one refusal now lists
    the flags to add, and its Python half is not respelled into `--replace`."""
    rows = "\n".join(f"{i},{20 + i % 50},{'MF'[i % 2]},{i % 3}" for i in range(100))
    (tmp_path / "t.csv").write_text("pid,age,sex,w\n" + rows + "\n")
    project = str(tmp_path / "p.dpkit")
    run = CliRunner().invoke
    assert run(main, ["init", project, "--epsilon", "3", "--delta", "1e-6"]).exit_code == 0
    assert run(main, ["add-table", project, "t", str(tmp_path / "t.csv"),
                      "--types", "age=INTEGER,w=INTEGER"]).exit_code == 0
    out = run(main, ["fit", project, "SELECT age, w FROM t", "--label", "sex", "--epsilon",
                     "0.5"])
    assert out.exit_code != 0
    flat = " ".join(out.output.split())
    assert ("dpkit add-table t ... --bounds age=LOW:HIGH --bounds w=LOW:HIGH "
            "--domain sex=A,B --replace") in flat, flat
    assert "add_table(...) again with bounds" in flat and ", --replace)" not in flat
    assert json.loads(run(main, ["budget", project, "--json"]).output)["spent"] == 0.0
