"""Loads report their progress (the CLI draws bars with it) and still fail cleanly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpkit.engine import Curator


def test_progress_reports_each_long_step_up_to_done(project: Callable[..., Curator],
                                                    tmp_path: Path) -> None:
    cur = project(epsilon=10.0)
    seen: list[tuple[str, float]] = []
    n = 200_000
    df = pd.DataFrame({"uid": np.arange(n) % 5000, "x": np.arange(n, dtype=np.float64) % 100})
    cur.add_table("t", df, privacy_unit="uid", max_rows_per_unit=4, bounds={"x": (0, 100)},
                  progress=lambda step, f: seen.append((step, f)))
    steps = list(dict.fromkeys(s for s, _ in seen))
    assert steps == ["copying rows", "clamped values and unit totals"]
    for step in steps:
        fs = [f for s, f in seen if s == step]
        assert fs[0] == 0.0 and fs[-1] == 1.0
        assert all(0.0 <= f <= 1.0 for f in fs)
    assert "t" in cur.tables()


def test_a_failing_statement_under_progress_keeps_nothing(project: Callable[..., Curator],
                                                          tmp_path: Path) -> None:
    cur = project(epsilon=10.0)
    bad = tmp_path / "bad.csv"
    # numbers for longer than DuckDB's type sniffer samples, then a word: the copy fails
    bad.write_text("x\n" + "3\n" * 100_000 + "not a number\n")
    good = pd.DataFrame({"x": [1.0, 2.0]})
    cur.add_table("t", good, bounds={"x": (0, 5)})
    with pytest.raises(ValueError, match="cannot load 't'"):
        cur.add_table("t", str(bad), bounds={"x": (0, 5)}, replace=True,
                      progress=lambda step, f: None, source_table=None)
    assert cur.tables()["t"].bounds == {"x": (0.0, 5.0)}
    assert [c.name for c in cur.tables()["t"].columns] == ["x"]
