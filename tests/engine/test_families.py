"""The release families as a package (dpkit.engine.families): its entry points answer exactly as
the curator's methods and SQL forms, previews read nothing, and the package loads lazily.

No statistical assertion here: seeded runs are compared with each other (equal or not), so no
threshold can fail by chance.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dpkit.engine import Curator, families
from dpkit.engine.families import histogram
from dpkit.engine.results import Result

SRC = Path(__file__).resolve().parents[2] / "src"


def _pair(project: Callable[..., Curator], visits: Callable[..., dict[str, np.ndarray]],
          seed: int = 4) -> tuple[Curator, Curator]:
    """Two projects over the same table with the same seeded noise."""
    out = []
    for _ in range(2):
        cur = project(epsilon=50.0, seed=seed)
        cur.add_table("visits", visits(), privacy_unit="pid", max_rows_per_unit=2,
                      bounds={"age": (0, 100), "cost": (0, 1000)},
                      domains={"ward": ["A", "B", "C", "D"]})
        out.append(cur)
    return out[0], out[1]


def _same(a: Result, b: Result, columns: list[str]) -> None:
    for c in columns:
        np.testing.assert_array_equal(np.asarray(a[c]), np.asarray(b[c]))
    assert a.event == b.event
    assert a.epsilon == b.epsilon


def test_sql_forms_answer_as_the_methods(
        project: Callable[..., Curator],
        visits_data: Callable[..., dict[str, np.ndarray]]) -> None:
    m, s = _pair(project, visits_data)
    _same(m.cdf("visits", "age", epsilon=1.0, where="ward = 'B'"),
          s.sql("SELECT DP_CDF(age) FROM visits WHERE ward = 'B'", epsilon=1.0),
          ["edge", "count", "count_ci_low", "count_ci_high", "fraction"])
    _same(m.quantiles("visits", "age", [0.25, 0.5], epsilon=1.0),
          s.sql("SELECT DP_QUANTILES(age, 0.25, 0.5) FROM visits", epsilon=1.0),
          ["probability", "quantile", "quantile_ci_low", "quantile_ci_high"])
    _same(m.ranges("visits", "age", [(0, 17), (18, 100)], epsilon=1.0),
          s.sql("SELECT COUNT(*) FILTER (WHERE age BETWEEN 0 AND 17) AS kids, "
                "COUNT(*) FILTER (WHERE age BETWEEN 18 AND 100) FROM visits", epsilon=1.0),
          ["low", "high", "count", "count_ci_low", "count_ci_high"])
    _same(m.marginals("visits", ["ward", "age"], k=1, epsilon=1.0),
          s.sql("SELECT DP_MARGINALS(ward, age, 1) FROM visits", epsilon=1.0),
          ["marginal", "ward", "age", "count"])
    # the SQL text is what the ledger records; the method writes its own
    assert s.budget().history[-1].query == "SELECT DP_MARGINALS(ward, age, 1) FROM visits"
    assert m.budget().history[-1].query == "SELECT DP_MARGINALS(ward, age, 1) FROM visits"
    assert s.budget().spent == pytest.approx(m.budget().spent)


def test_entry_points_take_the_context(
        project: Callable[..., Curator],
        visits_data: Callable[..., dict[str, np.ndarray]]) -> None:
    m, f = _pair(project, visits_data)
    via_method = m.ranges("visits", "cost", [(0, 250), (250, 1000)], epsilon=0.5)
    ask = families.RangesAsk(table="visits", column="cost", ranges=[(0, 250), (250, 1000)])
    via_package = families.ranges(f._families(), ask, families.Target(epsilon=0.5))
    _same(via_method, via_package, ["low", "high", "count", "count_ci_low", "count_ci_high"])
    syn = f.synthetic("visits", ["ward", "age"], epsilon=0.5)
    assert isinstance(syn, families.SyntheticData)
    assert f._families("bob").analyst == "bob"
    assert f._families().analyst == f.analyst


def test_preview_reads_nothing_and_names_the_charged_cost(
        project: Callable[..., Curator], visits_data: Callable[..., dict[str, np.ndarray]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    cur, _ = _pair(project, visits_data)

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("a preview read the rows")

    with monkeypatch.context() as mp:
        mp.setattr(histogram, "read", boom)
        previews = [cur.preview_release("cdf", "visits", "age", epsilon=0.7),
                    cur.preview_release("quantiles", "visits", "age", [0.5], rho=0.05),
                    cur.preview_release("ranges", "visits", "age", [(0, 9)], epsilon=0.3),
                    cur.preview_release("marginals", "visits", ["ward", "age"], epsilon=0.2)]
    assert cur.budget().history == []
    charged = [cur.cdf("visits", "age", epsilon=0.7),
               cur.quantiles("visits", "age", [0.5], rho=0.05),
               cur.ranges("visits", "age", [(0, 9)], epsilon=0.3),
               cur.marginals("visits", ["ward", "age"], epsilon=0.2)]
    for p, r in zip(previews, charged, strict=True):
        assert p.cost == pytest.approx(r.epsilon)
        assert p.event == r.event
        assert p.query == r.query


def test_importing_the_curator_does_not_load_the_release_room() -> None:
    """dpkit.release (and scipy, ~0.4 s) load when a family is first used, not at import."""
    code = ("import sys, dpkit.engine.curator\n"
            "print(sorted(m for m in sys.modules if m == 'dpkit.release' or m == 'scipy'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert out.stdout.strip() == "[]", out.stdout
