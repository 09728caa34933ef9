"""Diagnostics of the release families (issue 14 item 4): rows read, dropped by the per-unit cap
and outside the declared bounds/domains, measured with 5% of the release's budget inside its one
event (dpkit.engine.families.diagnostics).

Statistical thresholds. Each count has sensitivity m and discrete Laplace noise of scale
``m / (ε·0.05/n)``; at ε = 1, m = 2, n = 3 that is 120, and at ε = 1, m = 1, n = 2: 40. A
warning is issued when the share's lower bound (from each count's 95% half-width, about
3.7 scales) exceeds 5%. In the tables below the true shares are >= 50% over >= 2000 rows, so a
missed warning needs a noise of hundreds of scales (probability below e^-20); the clean table's
true shares are 0 and a false warning needs a noise above 3.7 scales + 5% of 2000 rows
(probability below 1e-3 per count). The seeds are fixed, so the outcomes are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpkit.accounting import zcdp
from dpkit.engine import Curator
from dpkit.engine.backend_duckdb import table_relation
from dpkit.engine.charge import charged_event
from dpkit.engine.families import CdfAsk, histogram
from dpkit.engine.families.job import Target
from dpkit.engine.families.plan import plan

N_UNITS = 1000


def _units(rows_per_unit: int, *, extra: dict[str, list[Any]] | None = None,
           ) -> dict[str, np.ndarray]:
    """N_UNITS units with ``rows_per_unit`` rows each, ages 20-69, wards A-D (all in range);
    ``extra``: rows appended as they are (one more unit, e.g. with extreme values)."""
    n = N_UNITS * rows_per_unit
    idx = np.arange(n)
    cols: dict[str, list[Any]] = {"pid": list(idx // rows_per_unit), "age": list(20 + idx % 50),
                             "ward": ["ABCD"[i % 4] for i in idx]}
    for k, v in (extra or {}).items():
        cols[k] = cols[k] + v
    return {"pid": np.asarray(cols["pid"], dtype=np.int64),
            "age": np.asarray([np.nan if a is None else a for a in cols["age"]],
                              dtype=np.float64),
            "ward": np.asarray(cols["ward"], dtype=object)}


def _add(cur: Curator, data: dict[str, np.ndarray], *, m: int = 2,
         age: tuple[float, float] = (0, 100)) -> Curator:
    cur.add_table("t", data, privacy_unit="pid", max_rows_per_unit=m, bounds={"age": age},
                  domains={"ward": ["A", "B", "C", "D"]})
    return cur


def test_units_above_the_cap_warn(project: Callable[..., Curator]) -> None:
    cur = _add(project(epsilon=10.0), _units(10))  # 8 of 10 rows dropped per unit
    res = cur.cdf("t", "age", epsilon=1.0)
    d = res.diagnostics
    assert set(d) == {"rows_read", "rows_dropped", "rows_outside"}
    # each unit's drops are counted up to m = 2: the floor is 2 per unit
    assert d["rows_dropped"]["share"] > 0.3
    assert any("per-unit cap" in w for w in res.warnings)
    assert not any("outside" in w for w in res.warnings)


def test_values_outside_the_bounds_warn(project: Callable[..., Curator]) -> None:
    # ages 20-69 against bounds [0, 30]: 39 of 50 values are clamped into the last cell
    cur = _add(project(epsilon=10.0), _units(2), age=(0, 30))
    res = cur.quantiles("t", "age", [0.5], epsilon=1.0)
    # the share's denominator O + K + D counts clamped rows twice (they are also read): 78%
    # of the rows are outside, reported as about 0.78 / 1.78 = 44%, a conservative figure
    assert res.diagnostics["rows_outside"]["share"] > 0.3
    assert any("outside the declared bounds" in w for w in res.warnings)
    assert not any("per-unit cap" in w for w in res.warnings)


def test_clean_table_does_not_warn(project: Callable[..., Curator]) -> None:
    cur = _add(project(epsilon=10.0), _units(2))
    for res in (cur.cdf("t", "age", epsilon=1.0),
                cur.marginals("t", ["ward", "age"], epsilon=1.0),
                cur.ranges("t", "age", [(0, 40), (41, 100)], epsilon=1.0)):
        assert res.warnings == [] and res.diagnostics["rows_read"]["estimate"] > 1000
    syn = cur.synthetic("t", ["ward"], epsilon=1.0, rows=10)
    assert syn.warnings == [] and "rows_read" in syn.diagnostics


@pytest.mark.parametrize(("target", "accountant"), [
    ({"epsilon": 0.7}, None), ({"rho": 0.3}, "zcdp"), ({"epsilon": 0.7, "delta": 1e-7}, "approx")])
def test_one_charge_equals_the_budget_asked(project: Callable[..., Curator],
                                            target: dict[str, float],
                                            accountant: str | None) -> None:
    cur = _add(project(epsilon=10.0, accountant=accountant), _units(3))
    before = len(cur.budget().history)
    res = cur.cdf("t", "age", **target)
    hist = cur.budget().history
    # charged as released (with a constant-work project's timing term beside it: the default)
    assert len(hist) == before + 1 and hist[-1].event == charged_event(cur.ledger, res.event)
    if "rho" in target:
        assert zcdp.rho(res.event) == pytest.approx(0.3, rel=1e-9)
    else:
        assert res.epsilon == pytest.approx(0.7, rel=1e-9)
    # the split lists the family's part and each count's, summing to the whole
    parts = res.split
    assert len(parts) == 4 and parts[0]["measurement"].startswith("cdf")
    if "rho" not in target and "delta" not in target:
        assert sum(p["epsilon"] for p in parts) == pytest.approx(0.7, rel=1e-9)
    off = cur.cdf("t", "age", diagnostics=False, **target)
    assert off.diagnostics == {} and off.warnings == [] and len(off.split) == 1


def test_neighbouring_tables_give_the_same_public_outcome(
        project: Callable[..., Curator]) -> None:
    """D and D' (one more unit, with many rows, NULLs and values far outside the bounds):
    everything public is equal (event, charge, split, columns, notes); each exact count moves
    by at most m."""
    m = 2
    extreme: dict[str, list[Any]] = {
        "pid": [10**6] * 40, "age": [None] * 10 + [10**9] * 20 + [25] * 10,
        "ward": ["Z"] * 20 + ["A"] * 20}
    outs = []
    exact = []
    for data in (_units(3), _units(3, extra=extreme)):
        cur = _add(project(epsilon=10.0, seed=3), data, m=m)
        res = cur.marginals("t", ["ward", "age"], epsilon=1.0)
        outs.append(res)
        ctx = cur._families()
        job = plan(ctx, CdfAsk(table="t", column="age"), Target(epsilon=1.0))
        text = histogram.diagnostics_statement(ctx.backend, job, table_relation(job.meta))
        x = histogram.read(ctx, job)
        exact.append(histogram.read_diagnostics(ctx, text, x, sparse=False))
    a, b = outs
    assert a.event == b.event and a.epsilon == b.epsilon and a.columns == b.columns
    assert a.split == b.split and a.notes == b.notes and len(a) == len(b)
    assert set(a.diagnostics) == set(b.diagnostics)
    for e in (*a.diagnostics.values(), *b.diagnostics.values()):
        assert {"estimate", "ci_low", "ci_high", "share_of_budget"} <= set(e)
    for name in exact[0]:
        assert abs(exact[0][name] - exact[1][name]) <= m, name
    # the extreme unit is counted: its outside rows (clipped at m) and its kept rows
    assert exact[1]["rows_outside"] - exact[0]["rows_outside"] == m
    assert exact[1]["rows_dropped"] - exact[0]["rows_dropped"] >= 1


def test_sql_form_and_cli_show_the_diagnostics(project: Callable[..., Curator],
                                               tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dpkit.cli import release as release_commands

    cur = _add(project(epsilon=10.0), _units(10))
    res = cur.sql("SELECT DP_CDF(age) FROM t", epsilon=1.0)
    assert "rows_dropped" in res.diagnostics and res.warnings
    off = cur.sql("SELECT DP_CDF(age) FROM t", epsilon=1.0, diagnostics=False)
    assert off.diagnostics == {}
    path = Path(cur.path)
    cur.close()
    out = CliRunner().invoke(release_commands.cdf, [str(path), "t", "age", "--epsilon", "1"])
    assert out.exit_code == 0, (out.output, out.exception)
    assert "warning:" in out.output and "per-unit cap" in out.output
    assert "rows_dropped" in out.output
    off_cli = CliRunner().invoke(release_commands.cdf, [str(path), "t", "age", "--epsilon", "1",
                                                        "--no-diagnostics"])
    assert off_cli.exit_code == 0, (off_cli.output, off_cli.exception)
    assert "warning:" not in off_cli.output and "rows_dropped" not in off_cli.output


def test_record_level_and_mst(project: Callable[..., Curator]) -> None:
    """Record level: no cap, so no rows_dropped; keys outside the domain warn. MST (its sparse
    read) reports the same counts."""
    cur = project(epsilon=10.0)
    n = 3000
    cur.add_table("r", {"ward": np.asarray(["A", "Q", "R"] * (n // 3), dtype=object),
                        "age": np.arange(n, dtype=np.float64) % 90},
                  bounds={"age": (0, 100)}, domains={"ward": ["A", "B"]})
    res = cur.marginals("r", ["ward"], epsilon=1.0)
    assert set(res.diagnostics) == {"rows_read", "rows_outside"}
    assert any("outside the declared bounds" in w for w in res.warnings)  # 2/3 of the keys
    syn = cur.synthetic("r", ["ward", "age"], epsilon=1.0, method="mst", rows=10)
    assert syn.diagnostics["rows_read"]["estimate"] > 500 and syn.warnings
