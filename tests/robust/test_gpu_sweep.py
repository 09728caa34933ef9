"""The GPU recipe sweep's offline certificate and ranking (benchmarks/robust_gpu_sweep.py):
its screen must be CERTIFY's own rule, or the recipe it chooses is chosen on a wrong figure."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import robust_gpu_sweep as sweep
from dpkit import robust


def test_offline_certificate_is_certify_rule() -> None:
    rng = np.random.default_rng(5)
    counts = np.concatenate([rng.integers(0, sweep.N + 1, 200), [0, sweep.N, 5000, 9800]])
    labels = rng.integers(0, 10, len(counts))
    chosen = np.where(rng.random(len(counts)) < 0.8, labels, (labels + 1) % 10)
    res = sweep.certify_offline(chosen, counts, labels, sigma=0.5)
    radii = np.array([
        robust.cohen_radius(0.5, robust.clopper_pearson_lower(int(k), sweep.N, sweep.ALPHA))
        if c == y else 0.0 for c, k, y in zip(chosen, counts, labels, strict=True)])
    for r in (0.5, 1.0, 1.5):
        assert res[f"r{r}"] == pytest.approx(float((radii >= r).mean()), abs=1e-12)
    assert res["mean_radius"] == pytest.approx(float(radii.mean()), rel=1e-9)


def test_ranking_prefers_complete_recipes_then_radius_one_then_mean_radius() -> None:
    log = [{"name": "a", "final": False, "r1.0": 0.9375, "mean_radius": 1.0},
           {"name": "b", "final": False, "r1.0": 0.75, "mean_radius": 1.25},
           {"name": "b", "final": False, "r1.0": 0.875, "mean_radius": 1.25},
           {"name": "c", "final": False, "r1.0": 0.8125, "mean_radius": 1.0},
           {"name": "c", "final": False, "r1.0": 0.8125, "mean_radius": 1.0},
           {"name": "d", "final": False, "r1.0": 0.875, "mean_radius": 0.5},
           {"name": "d", "final": False, "r1.0": 0.875, "mean_radius": 0.5},
           {"name": "d", "final": True}]
    # a has one seed only: ranked after the recipes with two, whatever its figure;
    # b and c tie at radius 1.0 (means exact in binary), b's larger mean radius wins
    assert [row[0] for row in sweep.ranking(log)] == ["d", "b", "c", "a"]
