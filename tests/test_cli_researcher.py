"""What the researcher's hour with the `dpkit` command found (docs/first_hour.md, "The
researcher's hour"): a trained model carries what a reader needs to re-check its epsilon."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import dpkit as dp
from dpkit.cli import main


def _project(tmp_path: Path) -> str:
    rows = "\n".join(f"{i // 2},{20 + i % 50},{'MF'[i % 2]}" for i in range(300))
    (tmp_path / "t.csv").write_text("pid,age,sex\n" + rows + "\n")
    project = str(tmp_path / "p.dpkit")
    run = CliRunner().invoke
    assert run(main, ["init", project, "--epsilon", "3", "--delta", "1e-6"]).exit_code == 0
    assert run(main, ["add-table", project, "t", str(tmp_path / "t.csv"), "--privacy-unit",
                      "pid", "--max-rows-per-unit", "2", "--bounds", "age=0:100",
                      "--domain", "sex=M,F"]).exit_code == 0
    return project


def test_a_fitted_models_file_holds_its_event_and_account_reads_it(tmp_path: Path) -> None:
    """`dpkit fit --output` wrote the ε, not the event nor the δ nor whom it protects: the
    researcher could not re-check the ε with `dpkit account` without Python. The file holds
    them now, and `dpkit account @model.json` reports the model's event at its δ, with the
    tightest bound said in one line (every row of the table is an upper bound)."""
    project = _project(tmp_path)
    model = tmp_path / "m.json"
    run = CliRunner().invoke
    out = run(main, ["fit", project, "SELECT age FROM t", "--label", "sex", "--epsilon", "0.5",
                     "--output", str(model)])
    assert out.exit_code == 0, out.output
    assert f"dpkitaccount@{model}" in "".join(out.output.split())  # rich wraps paths
    doc = json.loads(model.read_text())
    assert doc["privacy_unit"] == "pid" and doc["max_rows_per_unit"] == 2
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
    assert run(main, ["add-table", project, "t", str(tmp_path / "t.csv")]).exit_code == 0
    out = run(main, ["fit", project, "SELECT age, w FROM t", "--label", "sex", "--epsilon",
                     "0.5"])
    assert out.exit_code != 0
    flat = " ".join(out.output.split())
    assert ("dpkit add-table t ... --bounds age=LOW:HIGH --bounds w=LOW:HIGH "
            "--domain sex=A,B --replace") in flat, flat
    assert "add_table(...) again with bounds" in flat and ", --replace)" not in flat
    assert json.loads(run(main, ["budget", project, "--json"]).output)["spent"] == 0.0
