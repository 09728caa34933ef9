"""The strategy choice and its accuracy figures, cached (:mod:`dpkit.release.figures`): the
same choice and figures from memory, from disk and computed afresh; the cache bounded and
keyed by public inputs (the D/D' check through the curator:
tests/engine/test_cdf_plan_choice.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpkit.release import figures, plan_workload, workloads
from dpkit.release.optimize import clear_cache
from dpkit.release.strategies import MatrixStrategy, TreeStrategy


def _fresh() -> None:
    clear_cache()  # what a new process starts with


def test_figures_from_disk_equal_the_computed_ones(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    W = workloads.prefix(64)
    _fresh()
    first = plan_workload(W, None, epsilon=0.5, cache_dir=tmp_path)
    half = first.halfwidths(0.9)
    assert first.strategy.name.startswith("optimized")
    assert len(list(tmp_path.glob("figures-*.npz"))) == 2  # the optimised one, the identity
    _fresh()

    def no_covariance(self: object) -> np.ndarray:
        raise AssertionError("computed again")

    monkeypatch.setattr(MatrixStrategy, "covariance", no_covariance)
    monkeypatch.setattr(TreeStrategy, "covariance", no_covariance)
    again = plan_workload(W, None, epsilon=0.5, cache_dir=tmp_path)
    assert again.strategy.key == first.strategy.key
    assert np.array_equal(again.halfwidths(0.9), half)
    assert again.expected_rmse == first.expected_rmse
    monkeypatch.undo()
    _fresh()  # without the folder: computed, the same figures
    fresh = plan_workload(W, None, epsilon=0.5)
    assert np.allclose(fresh.halfwidths(0.9), half, rtol=1e-12)


def test_a_file_for_another_pair_is_ignored(tmp_path: Path) -> None:
    W = workloads.prefix(32)
    _fresh()
    p = plan_workload(W, None, epsilon=1.0, cache_dir=tmp_path)
    want = p.halfwidths(0.95)
    for f in tmp_path.glob("figures-*.npz"):  # every file now holds another pair's keys
        with np.load(f) as d:
            data = dict(d)
        data["workload"] = np.array("something else")
        np.savez(f, **data)
    _fresh()
    again = plan_workload(W, None, epsilon=1.0, cache_dir=tmp_path)
    assert np.allclose(again.halfwidths(0.95), want, rtol=1e-12)


def test_the_choice_is_kept_bounded_and_by_its_public_inputs() -> None:
    W = workloads.prefix(16)
    _fresh()
    a = plan_workload(W, None, epsilon=0.5).strategy
    assert plan_workload(W, None, epsilon=0.5).strategy is a  # remembered
    # at a large epsilon the identity's discrete noise wins: another key, another answer
    big = plan_workload(W, None, epsilon=30.0).strategy
    assert big.name == "identity" and a.name.startswith("optimized")
    for i in range(figures.CHOICE_SLOTS + 5):
        plan_workload(W, None, epsilon=0.01 + i * 1e-4)
    assert len(figures._CHOICES) == figures.CHOICE_SLOTS
    assert len(figures._MEMORY) <= figures.SLOTS
