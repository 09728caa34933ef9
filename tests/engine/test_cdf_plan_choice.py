"""The CDF family's strategy choice reads public things only: on neighbouring tables D, D'
the plan (grid, strategy, event, notes, intervals) is the same, and it is made while any
read of the database fails."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from dpkit.engine import Curator, families
from dpkit.engine.backend_duckdb import DuckBackend
from dpkit.engine.families.plan import plan
from dpkit.release.optimize import clear_cache


def _fresh() -> None:
    clear_cache()  # what a new process starts with


@pytest.mark.parametrize("change", ["add_top", "remove", "replace"])
def test_the_cdf_plan_reads_no_row(project: Callable[..., Curator],
                                   monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """D and D' (one row added at the top, removed, changed to the top): the same grid,
    strategy, event and notes, planned while any read of the database fails."""
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 1000, 3000)
    other = {"add_top": np.append(x, 1000.0), "remove": x[1:],
             "replace": np.concatenate([[1000.0], x[1:]])}[change]

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("a row was read while planning")

    plans = []
    for rows in (x, other):
        _fresh()
        cur = project(epsilon=10.0)
        cur.add_table("t", pd.DataFrame({"x": rows}), bounds={"x": (0.0, 1000.0)})
        with monkeypatch.context() as m:
            m.setattr(DuckBackend, "run", no_read)
            m.setattr(DuckBackend, "dry_run", no_read)
            job = plan(cur._families(None), families.CdfAsk(table="t", column="x", bins=256),
                       families.Target(epsilon=0.5))
        wp = job.workload_plan()
        plans.append((wp.strategy.key, wp.event, job.notes, job.details["grid"],
                      list(wp.halfwidths(0.95))))
    assert plans[0] == plans[1]
