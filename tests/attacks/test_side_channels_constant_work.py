"""The side-channel fuzzer over constant-work projects (slow, not CI): the fixed-plan samplers
run through the whole query grammar (SQL, families, partition selection, quantiles, top-k) on
neighbouring datasets D and D', under the approx and pld accountants, and the fuzzer finds no
difference in outcome, error text, keys, order, cost or work trace, and no internal error.

Run: ``PYTHONPATH=$PWD/src python -m pytest tests/attacks/test_side_channels_constant_work.py
-m slow -q`` (about 40 s for 100 comparisons on a shared 2-core machine).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from test_side_channels import PEOPLE, WARDS

from dpkit import Budget, Curator, noise
from dpkit.attacks import side_channels as sc
from dpkit.engine.tables import TableMeta

pytestmark = pytest.mark.slow


def constant_work_project(path: Path, data_file: Path, table: TableMeta,
                          public: Sequence[TableMeta], *, accountant: str,
                          seed: int) -> Curator:
    """The fuzzer's throwaway project (runner.make_project) with ``constant_work=True`` and a
    budget of epsilon 20 (constant work refuses budgets whose (1 + e^ε) term needs more than 80
    bits; the fuzzer's own 1000 is one)."""
    cur = Curator.create(path, budget=Budget(epsilon=20.0, delta=1e-3, accountant=accountant),
                         source=noise.seeded(seed), constant_work=True)
    for p in public:
        cur.add_table(p.name, f"{data_file}::{p.name}", public=True)
    cur.add_table(
        table.name, f"{data_file}::{table.name}", privacy_unit=table.privacy_unit,
        bounds={**table.bounds, **table.date_ranges} or None,
        max_rows_per_unit=table.max_rows_per_unit,
        max_groups_per_unit=table.max_groups_per_unit,
        domains={k: list(v) for k, v in table.domains.items()} or None,
        not_null=list(table.not_null) or None)
    return cur


def test_constant_work_projects_show_nothing_to_the_fuzzer() -> None:
    rep = sc.fuzz(PEOPLE, public=[WARDS], queries=100, seed=77, accountants=("approx", "pld"),
                  factory=constant_work_project, max_findings=1)
    assert rep.comparisons >= 100
    assert not rep.findings, rep.summary()
