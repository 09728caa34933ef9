"""The side-channel fuzzer over constant-work projects (slow, not CI): the fixed-plan samplers
run through the whole query grammar (SQL, families, partition selection, quantiles, top-k) on
neighbouring datasets D and D', under the approx, pld and zcdp accountants, and the fuzzer
finds no difference in outcome, error text, keys, order, cost or work trace, and no internal error.

Run: ``PYTHONPATH=$PWD/src python -m pytest tests/attacks/test_side_channels_constant_work.py
-m slow -q`` (about 40 s for 150 comparisons on a shared 2-core machine).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_side_channels import PEOPLE, WARDS

from dpkit import Curator
from dpkit.attacks import side_channels as sc

pytestmark = pytest.mark.slow


def constant_work_project(*args: Any, **kw: Any) -> Curator:
    """The fuzzer's throwaway project with ``constant_work=True`` and a budget of epsilon 20
    (constant work refuses budgets whose (1 + e^ε) term needs more than 80 bits; the fuzzer's
    own default, 25, is on constant work too since it became the default: this run keeps its
    own seed and budget)."""
    return sc.make_project(*args, **kw, epsilon=20.0, constant_work=True)


def test_constant_work_projects_show_nothing_to_the_fuzzer() -> None:
    rep = sc.fuzz(PEOPLE, public=[WARDS], queries=150, seed=77,
                  accountants=("approx", "pld", "zcdp"), factory=constant_work_project,
                  max_findings=1)
    assert rep.comparisons >= 150
    assert not rep.findings, rep.summary()
