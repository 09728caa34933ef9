"""plan_workload / WorkloadPlan and mwem_event: the event and accuracy are fixed before data."""

from __future__ import annotations

import numpy as np
import pytest

import dpkit as dp
from dpkit.release import (
    answer_workload,
    expected_error,
    mwem,
    mwem_event,
    plan_workload,
    workloads,
)


@pytest.mark.parametrize("privacy", [{"epsilon": 0.7}, {"rho": 0.3},
                                     {"epsilon": 1.0, "delta": 1e-6}])
def test_plan_answer_equals_answer_workload(privacy: dict) -> None:
    x = np.arange(32) % 7
    W = workloads.prefix(32)
    plan = plan_workload(W, "tree:2", contributions=2, **privacy)
    a = plan.answer(x, level=0.9, source=dp.noise.seeded(5))
    b = answer_workload(x, W, "tree:2", contributions=2, level=0.9, source=dp.noise.seeded(5),
                        **privacy)
    assert a.event == b.event == plan.event
    np.testing.assert_array_equal(a.value, b.value)
    assert a.ci is not None and b.ci is not None
    np.testing.assert_array_equal(a.ci[0], b.ci[0])
    half = plan.halfwidths(0.9)
    assert half is not None
    np.testing.assert_allclose(a.ci[1] - a.value, half)
    ref = expected_error(W, "tree:2", contributions=2, **privacy)
    assert plan.expected_rmse == pytest.approx(ref.rmse)
    assert plan.summary()["strategy"] == "tree(b=2)"


def test_plan_fails_on_bad_privacy_before_optimising() -> None:
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        plan_workload(workloads.all_ranges(64), None, epsilon=-1.0)
    with pytest.raises(ValueError, match="privacy target"):
        plan_workload(workloads.prefix(8), "identity")


@pytest.mark.parametrize("privacy", [{"epsilon": 1.0}, {"rho": 0.5}])
@pytest.mark.parametrize("total", [None, 100])
def test_mwem_event_matches_mwem(privacy: dict, total: int | None) -> None:
    W = workloads.marginals((3, 4), 1)
    x = np.arange(12)
    r = mwem(x, W, rounds=4, total=total, contributions=2, source=dp.noise.seeded(1),
             **privacy)
    assert mwem_event(W, rounds=4, total=total, contributions=2, **privacy) == r.event


def test_mwem_event_pure_epsilon_is_exact() -> None:
    e = mwem_event(workloads.prefix(16), epsilon=1.0, rounds=5)
    assert dp.accounting.epsilon(e, delta=0.0, method="pure") == pytest.approx(1.0, abs=1e-9)
