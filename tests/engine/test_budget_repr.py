"""``print(cur.budget())`` reads as a few lines (the researcher's hour, docs/first_hour.md:
it printed every dataclass field and every charge's event): spent and left ε and δ, the
number of charges, one line per analyst; the fields are unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import dpkit as dp
from dpkit.engine.curator import Curator


def test_print_budget_is_a_short_summary_and_the_fields_stay(tmp_path: Path) -> None:
    cur = Curator.create(tmp_path / "p.dpkit", epsilon=3.0, delta=1e-6,
                         source=dp.noise.seeded(1))
    cur.add_table("t", {"x": np.arange(50) % 5}, bounds={"x": (0, 5)})
    cur.add_analyst("rae", epsilon=1.0)
    for _ in range(3):
        cur.sql("SELECT COUNT(*) FROM t", epsilon=0.25)
    status = cur.budget()
    text = str(status)
    assert repr(status) == text
    lines = text.splitlines()
    assert lines[0].startswith("BudgetStatus, accountant approx: 3 charges, ledger head #")
    assert "epsilon spent 0.75 of 3, left 2.25" in lines[1] and "delta spent" in lines[1]
    assert "analyst rae: spent 0 of 1, next query may use 1" in text
    assert len(lines) == 4 and all(len(x) < 100 for x in lines)
    assert "Event" not in text and "history" not in text  # the detail stays in the fields
    assert status.spent == 0.75 and len(status.history) == 3  # attribute access unchanged
    own = str(cur.budget("rae"))
    assert own.startswith("BudgetStatus (analyst rae), accountant approx: 0 charges")
    assert "left 1 (project left 2.25)" in own and "analyst owner" not in own
