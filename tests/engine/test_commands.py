"""The CLI-facing functions, the demo data and the demo itself."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from dpkit.accounting import BudgetExceeded
from dpkit.cli import project as commands
from dpkit.cli import query as queries
from dpkit.engine import Curator
from dpkit.engine.demo import WARDS, make_hospital_visits, run_demo


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=140, force_terminal=False), buf


def test_hospital_visits_are_deterministic_and_plausible() -> None:
    a = make_hospital_visits(5000, seed=3)
    b = make_hospital_visits(5000, seed=3)
    c = make_hospital_visits(5000, seed=4)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert not np.array_equal(a["cost"], c["cost"])
    assert set(np.unique(a["ward"])) <= set(WARDS)
    assert a["age"].min() >= 0 and a["age"].max() <= 100
    visits = np.unique(a["patient_id"], return_counts=True)[1]
    assert visits.max() > 5 and np.median(visits) >= 1  # several visits each, a few heavy
    # age is a property of the patient
    first = {}
    for p, age in zip(a["patient_id"], a["age"], strict=True):
        assert first.setdefault(p, age) == age
    with pytest.raises(ValueError):
        make_hospital_visits(0)


def test_cli_functions_end_to_end(tmp_path: Path) -> None:
    import duckdb

    data = make_hospital_visits(3000, seed=1)
    con = duckdb.connect()
    con.register("d", data)
    con.execute(f"COPY d TO '{tmp_path / 'visits.csv'}' (HEADER)")
    con.close()
    project = tmp_path / "clinic.dpkit"
    out, buf = _console()
    commands.init_project(project, epsilon=3.0, delta=1e-6, console=out)
    commands.add_table(project, "visits", str(tmp_path / "visits.csv"),
                       privacy_unit="patient_id", bounds={"age": (0, 120)},
                       max_rows_per_unit=3, domains={"ward": list(WARDS)}, console=out)
    res = queries.query(project, "SELECT ward, COUNT(*), AVG(age) FROM visits GROUP BY ward",
                         epsilon=0.5, output=tmp_path / "out.csv", console=out)
    assert len(res) == len(WARDS)
    assert (tmp_path / "out.csv").read_text().startswith("ward,count,count_ci_low")
    pv = queries.preview(project, "SELECT COUNT(*) FROM visits", epsilon=0.2, console=out)
    assert pv.cost == pytest.approx(0.2)
    status = commands.budget(project, console=out)
    assert status.spent == pytest.approx(0.5)
    out2, buf2 = _console()
    commands.budget(project, console=out2, as_json=True)
    parsed = json.loads(buf2.getvalue())
    assert parsed["spent"] == pytest.approx(0.5) and parsed["head"]["seq"] == 3
    text = buf.getvalue()
    assert "privacy unit" in text and "95% CI" in text and "budget split" in text
    with pytest.raises(ValueError, match="--epsilon"):
        queries.query(project, "SELECT COUNT(*) FROM visits", console=out)
    with pytest.raises(BudgetExceeded):
        queries.query(project, "SELECT COUNT(*) FROM visits", epsilon=2.9, console=out)


def test_demo_runs_and_prints(tmp_path: Path) -> None:
    out, buf = _console()
    results = run_demo(tmp_path / "demo.dpkit", console=out, rows=20_000)
    text = buf.getvalue()
    # session 5: a CASE group, derived bins with a ratio, and a warned clamp joined the tour
    assert len(results) == 8
    assert "refused" in text and "Reopened from disk" in text
    assert text.count("refused:") == 3  # over her cap, raw rows, registering a table
    assert "age_group" in text and "senior" in text and "readmit_rate" in text
    assert (tmp_path / "demo.dpkit" / "dpkit-demo-age-groups.png").stat().st_size > 1000
    again = Curator.open(tmp_path / "demo.dpkit")
    assert again.budget().spent == pytest.approx(2.4)
    assert {h.analyst for h in again.budget().history} == {"alice"}


def test_analyst_budgets_through_the_curator(project: object) -> None:
    cur = project(epsilon=2.0)  # type: ignore[operator]
    cur.add_table("t", {"x": np.arange(10.0)})
    # changed with roles: analysts act through their tokens, not a caller-chosen analyst=
    intern = Curator.open(cur.path, token=cur.add_analyst("intern"))
    lead = Curator.open(cur.path, token=cur.add_analyst("lead"))
    cur.set_analyst_budget("intern", 0.3)
    intern.sql("SELECT COUNT(*) FROM t", epsilon=0.25)
    with pytest.raises(BudgetExceeded, match="intern"):
        intern.sql("SELECT COUNT(*) FROM t", epsilon=0.1)
    lead.sql("SELECT COUNT(*) FROM t", epsilon=1.0)
    assert cur.budget().spent == pytest.approx(1.25)
    assert cur.budget("intern").spent == pytest.approx(0.25)


def test_write_columns_needs_no_pandas_and_takes_reversed_views(tmp_path: Path) -> None:
    from dpkit.engine.results import write_columns

    rev = np.arange(5.0)[::-1]  # a negative-stride view, as some interval columns are
    keys = np.array(["a", "b", None, "d", "e"], dtype=object)
    write_columns({"k": keys, "v": rev}, tmp_path / "out.csv")
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert lines[0] == "k,v" and lines[1] == "a,4.0" and lines[3] == ",2.0"
    write_columns({"k": keys, "v": rev}, tmp_path / "out.bin", fmt="parquet")
    import duckdb

    back = duckdb.sql(f"SELECT * FROM read_parquet('{tmp_path / 'out.bin'}')").fetchall()
    assert back[0] == ("a", 4.0) and back[2] == (None, 2.0)
