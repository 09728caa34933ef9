"""Columns declared complete (``not_null``): checked at load, and their COUNT/AVG/VAR share
the query's row-count measurement (one measurement less, so more budget for each)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine.plan import DIAGNOSTICS_SHARE
from dpkit.engine.tables import TableMeta


def _frame(n: int = 400, seed: int = 3) -> pd.DataFrame:
    src = dp.noise.seeded(seed)
    return pd.DataFrame({
        "pid": dp.noise.uniform_int(n // 2, n, source=src).astype(np.int64),
        "g": dp.noise.uniform_int(3, n, source=src).astype(np.int64),
        "age": dp.noise.uniform_int(90, n, source=src).astype(np.float64),
        "cost": np.round(dp.noise.uniform_float01(n, source=src) * 100.0, 2),
    })


def _kinds(cur: Curator, query: str) -> list[str]:
    plan = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise="laplace", level=0.95,
                     bounds=None)
    # the outputs' measurements (the diagnostics, plan.diag_measures, come on top)
    return sorted(m.kind for m in plan.measures if m not in plan.diag_measures)


def test_avg_and_count_share_the_row_count(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=100.0)
    df = _frame()
    cur.add_table("t", df, privacy_unit="pid", max_rows_per_unit=2,
                  bounds={"age": (0, 100), "cost": (0, 100)}, domains={"g": [0, 1, 2]},
                  not_null=["AGE"])  # names are matched as columns are
    assert cur.tables()["t"].not_null == ("age",)
    q = "SELECT g, COUNT(*) AS n, AVG(age) AS a, COUNT(age) AS na FROM t GROUP BY g"
    assert _kinds(cur, q) == ["csum", "rows"]
    # an undeclared column keeps its own count of non-missing values
    assert _kinds(cur, "SELECT COUNT(*), AVG(cost) FROM t") == ["csum", "nonnull", "rows"]
    assert _kinds(cur, "SELECT VAR(age) FROM t") == ["csq", "csum", "rows"]
    # the outputs' budget goes to the two measurements (half each; the diagnostics take
    # DIAGNOSTICS_SHARE first), and COUNT(age) is COUNT(*)'s value
    res = cur.sql(q, epsilon=1.0)
    main = 1.0 - DIAGNOSTICS_SHARE
    shares = sorted(s["share"] for s in res.split
                    if not s["measurement"].startswith("diagnostics"))
    assert shares == pytest.approx([main / 2, main / 2])
    assert list(res["n"]) == list(res["na"])


def test_avg_interval_covers_under_not_null(project: Callable[..., Curator]) -> None:
    """The AVG interval (union bound over the shared count and the centred sum) covers the
    true average of the bounded rows with probability >= 0.95 per query. Over T = 300 seeded
    queries the failures are at most Binomial(300, 0.05) in law (a valid interval can only
    fail less often); the threshold is its 1e-6 upper quantile, so a valid implementation
    fails this test with probability < 1e-6."""
    df = _frame(200)
    true_avg = float(df["age"].mean())  # record level: every row counts, no bounding
    trials = 300
    threshold = int(stats.binom.isf(1e-6, trials, 0.05))
    misses = 0
    cur = project(epsilon=1000.0, seed=17)
    cur.add_table("t", df.drop(columns=["pid"]), bounds={"age": (0, 100)}, not_null=["age"])
    for _ in range(trials):
        res = cur.sql("SELECT COUNT(*) AS n, AVG(age) AS a FROM t", epsilon=0.5)
        lo, hi = float(res["a_ci_low"][0]), float(res["a_ci_high"][0])
        misses += not (lo <= true_avg <= hi)
    assert misses <= threshold


@pytest.mark.parametrize("bad", [
    pd.DataFrame({"age": [1.0, float("nan"), 3.0]}),
    pd.DataFrame({"age": pd.array([1, None, 3], dtype="Int64")}),
])
def test_a_missing_value_refuses_the_load_and_keeps_the_old_table(
        project: Callable[..., Curator], bad: pd.DataFrame) -> None:
    cur = project(epsilon=1000.0)
    good = pd.DataFrame({"age": [1.0, 2.0, 3.0, 4.0]})
    cur.add_table("t", good, bounds={"age": (0, 10)}, not_null=["age"])
    entries = len(cur.entries())
    with pytest.raises(ValueError, match=r"declared not_null, but 1 row\(s\) hold NULL"):
        cur.add_table("t", bad, bounds={"age": (0, 10)}, not_null=["age"], replace=True)
    assert len(cur.entries()) == entries  # nothing recorded
    assert cur.tables()["t"].not_null == ("age",)
    # the old rows still answer: at epsilon 100 the count's noise is 0 except with
    # probability 2e^-100/(1+e^-100) < 1e-40
    res = cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=100.0)
    assert int(res["n"][0]) == 4


def test_declaration_errors(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=10.0)
    df = pd.DataFrame({"age": [1.0, 2.0]})
    with pytest.raises(ValueError, match="has no column 'agee'"):
        cur.add_table("t", df, not_null=["agee"])
    with pytest.raises(TypeError, match="list of column names"):
        cur.add_table("t", df, not_null="age")
    with pytest.raises(ValueError, match="private tables"):
        cur.add_public_table("p", df, not_null=["age"])
    assert cur.tables() == {}


def test_old_projects_read_without_the_field() -> None:
    d = TableMeta(name="t", columns=()).to_dict()
    del d["not_null"]
    assert TableMeta.from_dict(d).not_null == ()


def test_cli_flag(tmp_path: pytest.TempPathFactory) -> None:
    from dpkit.cli import main

    csv = tmp_path / "t.csv"  # type: ignore[operator]
    pd.DataFrame({"age": [1.0, 2.0, 3.0], "cost": [4.0, 5.0, 6.0]}).to_csv(csv, index=False)
    proj = tmp_path / "p.dpkit"  # type: ignore[operator]
    runner = CliRunner()
    assert runner.invoke(main, ["init", str(proj), "--epsilon", "5"]).exit_code == 0
    out = runner.invoke(main, ["add-table", str(proj), "t", str(csv), "--bounds", "age=0:10",
                               "--not-null", "age,cost"])
    assert out.exit_code == 0, out.output
    assert "not null" in out.output
    with Curator.open(proj) as cur:
        assert cur.tables()["t"].not_null == ("age", "cost")
