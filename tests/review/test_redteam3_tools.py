"""Third red-team pass, DP as a tool (FINDINGS.md H2): Thresholdout on neighbouring holdouts.

D and D' differ in one holdout row (the replace relation of the module). Before the fix a
query that raised, warned or returned another number of values on that one row told D and D'
apart outside the budget: ``ZeroDivisionError`` or numpy's "divide by zero" warning on D'
only, and a shape error quoting the exact number of holdout rows a filter kept.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.adaptive import Thresholdout


def _face(holdout: Any, f: Callable[..., Any], vectorized: bool) -> tuple[Any, ...]:
    """Everything but the noisy value: outcome, error, warnings, events, counters."""
    train = [[1.0, 1.0] for _ in range(50)]
    th = Thresholdout(np.asarray(train) if vectorized else train, holdout, threshold=0.04,
                      sigma=0.05, budget=5, max_epsilon=10, vectorized=vectorized,
                      source=dp.noise.seeded(1))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            th.query(f)
            outcome = "answer"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {exc}"
    return outcome, sorted(str(w.message) for w in seen), th.events, th.queries


@pytest.mark.parametrize(("f", "vectorized"), [
    (lambda r: 1 / r[0], False),  # Python floats: ZeroDivisionError on the 0 row only
    (lambda X: X[X[:, 0] > 0.5, 0], True),  # a filter: another shape on D' (49 of 50)
    (lambda X: np.log(X[:, 0]), True),  # numpy warns on the 0 row only
    (lambda X: 1 / X[:, 0].astype(int), True),
])
def test_one_holdout_row_cannot_change_what_a_query_shows(f: Callable[..., Any],
                                                         vectorized: bool) -> None:
    d = [[1.0, 1.0] for _ in range(50)]
    d1 = [row[:] for row in d]
    d1[0][0] = 0.0  # replace one row
    if vectorized:
        d, d1 = np.asarray(d), np.asarray(d1)
    face_d, face_d1 = _face(d, f, vectorized), _face(d1, f, vectorized)
    assert face_d == face_d1
    assert face_d[0] == "answer"


def test_a_failing_row_counts_zero_and_the_rest_is_kept() -> None:
    """The fallback is the row-wise function "f, or 0 where it fails": with sigma tiny and
    a threshold of 0 the holdout answers (almost) its exact mean."""
    rows = np.array([[1.0], [1.0], [0.0], [1.0]])
    th = Thresholdout(np.ones((4, 1)), rows, threshold=1e-9, sigma=1e-6, budget=1, max_epsilon=1e9,
                      source=dp.noise.seeded(2))
    assert th.query(lambda X: X[X[:, 0] > 0.5, 0]) == pytest.approx(0.75, abs=1e-3)
