"""A query goes down the engine's line once: sql -> plan -> prepare -> charge -> read -> noise.

docs/architecture.md draws the query path as one line of stages. This test follows a real query
with a profiler and checks that each stage's entry point is called exactly once, in that order,
and that no stage calls back into a stage it has left (the "hub" pattern issue 13 removed: the
curator used to call into the planner and the noise step several times per query). Data objects
that later stages consult (``Plan.measure``, ``Exact.column``: methods of values, not stages) are
not stage entries.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pandas as pd
import pytest

import dpkit.engine as de
from dpkit.engine import Curator

ENGINE = str(Path(de.__file__).parent)

# (file inside dpkit/engine, qualified name) of each stage's entry point, in the order of the line
STAGES = [
    ("sql.py", "parse_query"),
    ("plan/build.py", "build_plan"),
    ("prepare.py", "Preparer.prepare"),
    ("charge.py", "charged_read"),
    ("ledger.py", "Ledger.charge"),
    ("read.py", "read_exact"),
    ("noisy.py", "release"),
    ("postprocess.py", "project"),
]

QUERIES = [
    "SELECT s, COUNT(*) AS n, AVG(x) AS a FROM t WHERE x > 1 GROUP BY s "
    "HAVING COUNT(*) > 0 ORDER BY n LIMIT 3",
    "SELECT u, SUM(x) AS total FROM t GROUP BY u ORDER BY total DESC",  # private selection
]


def _trace(call: Callable[[], Any]) -> list[tuple[str, str]]:
    """The (file, qualified name) of every call into an engine file from another file."""
    seen: list[tuple[str, str]] = []

    def rel(frame: FrameType | None) -> str | None:
        if frame is None or not frame.f_code.co_filename.startswith(ENGINE):
            return None
        return frame.f_code.co_filename[len(ENGINE) + 1:]

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        here = rel(frame)
        if here is not None and here != rel(frame.f_back):
            seen.append((here, frame.f_code.co_qualname))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


@pytest.mark.parametrize("query", QUERIES)
def test_a_query_crosses_each_stage_once_in_order(project: Callable[..., Curator],
                                                   query: str) -> None:
    cur = project(epsilon=10.0, delta=1e-4)
    cur.add_table("t", pd.DataFrame({"uid": [1, 1, 2, 3], "x": [1.0, 2, 3, 4],
                                     "s": ["a", "b", "c", "d"], "u": ["p", "q", "p", "r"]}),
                  privacy_unit="uid", max_rows_per_unit=1, bounds={"x": (0, 10)},
                  domains={"s": list("abcd")})
    seen = _trace(lambda: cur.sql(query, epsilon=0.5, delta=1e-6))
    entries = [(f, q) for f, q in seen if (f, q) in STAGES]
    assert entries == STAGES, entries
    # after the charge nothing calls back into the planning side of the line: only values made
    # there (the Plan, its measures: plan/model.py) are consulted
    charged = seen.index(("charge.py", "charged_read"))
    planning = ("sql.py", "scope.py", "totality.py", "prepare.py", "plan/build.py",
                "plan/calibrate.py", "plan/compile.py", "plan/cache.py", "plan/fixed.py",
                "plan/keys.py", "plan/bounding.py")
    late = [(f, q) for f, q in seen[charged:] if f in planning]
    assert not late, late
    # and before it, nothing of the reading side runs
    early = [(f, q) for f, q in seen[:charged] if f in ("read.py", "noisy.py", "postprocess.py")
             and not q.startswith(("Exact.", "Prepared."))]
    assert not early, early


def test_a_refused_query_stops_at_the_charge(project: Callable[..., Curator]) -> None:
    """Over budget: the line stops in Ledger.charge; nothing after it runs."""
    from dpkit.accounting import BudgetExceeded

    cur = project(epsilon=1.0)
    cur.add_table("t", pd.DataFrame({"uid": [1, 2], "x": [1.0, 2.0]}), privacy_unit="uid",
                  max_rows_per_unit=1, bounds={"x": (0, 10)})
    box: dict[str, Any] = {}

    def ask() -> None:
        with pytest.raises(BudgetExceeded):
            cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=5.0)
        box["entries"] = len(cur.entries())

    seen = _trace(ask)
    names = [q for _, q in seen]
    assert "Ledger.charge" in names
    assert "read_exact" not in names and "release" not in names
