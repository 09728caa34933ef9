"""benchmarks/robust_ensemble.py: offline CERTIFY from stored outputs equals dpkit.robust's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import dpkit.noise as noise
from dpkit.robust import Ensemble, clopper_pearson_lower, cohen_radius

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import robust_ensemble as screen


def test_certify_from_labels_matches_the_library() -> None:
    n0, n = screen.N0, 10_000
    y = np.array([3, 3, 3])
    labels = np.full((3, n0 + n), 3)
    labels[1, n0:n0 + 200] = 5  # n_A = 9,800
    labels[2, :n0] = 7  # the guess is wrong: no credit whatever the radius
    radius, pa = screen.certify_from_labels(labels, y, 0.5)
    assert radius[0] == pytest.approx(cohen_radius(0.5, clopper_pearson_lower(n, n, 0.001)))
    assert radius[1] == pytest.approx(cohen_radius(0.5, clopper_pearson_lower(9800, n, 0.001)))
    assert radius[2] == 0.0 and pa.tolist() == [1.0, 0.98, 0.0]
    summary = screen.summary(radius, pa)
    # 9,800 of 10,000 gives pA_lower 0.9765 < Phi(2): certified at 0.5, not at 1.0
    assert 0.5 < radius[1] < 1.0
    assert summary["0.5"] == pytest.approx(2 / 3) and summary["1.0"] == pytest.approx(1 / 3)


def test_combined_labels_are_the_ensembles_and_count_the_cost() -> None:
    src = noise.seeded(3)
    outs = [noise.gaussian_float(1.0, (4, 50, 3), source=src).astype(np.float16)
            for _ in range(3)]
    for combine, k in (("softmax", 0), ("logits", 2), ("vote", 2)):
        labels, cost = screen.combined_labels(outs, combine, k, 1.0)
        for i in range(4):
            members = [lambda b, o=o, i=i: o[i][b[:, 0].astype(int)].astype(np.float32)
                       for o in outs]  # the batch holds row indices
            want = Ensemble(members, num_classes=3, combine=combine, consensus=k)(
                np.arange(50.0)[:, None])
            assert np.array_equal(labels[i], want if want.ndim == 1 else want.argmax(axis=1))
        if k:
            first = [o.astype(np.float32).argmax(-1) for o in outs[:2]]
            assert cost == pytest.approx(2 + np.mean(first[0] != first[1]))
        else:
            assert cost == 3


def test_a_shifted_member_sees_its_input_translated() -> None:
    torch = pytest.importorskip("torch")
    import robust_bench

    seen = {}

    class Spy(torch.nn.Module):  # type: ignore[name-defined]
        def forward(self, z):  # type: ignore[no-untyped-def]
            seen["z"] = z.reshape(-1, 28, 28)
            return torch.zeros(len(z), 10)

    x = torch.zeros(1, 784)
    x[0, 10 * 28 + 10] = 1.0  # row 10, column 10
    robust_bench._shifted(Spy(), 1, -2)(x)
    assert (seen["z"][0] == 1).nonzero().tolist() == [[8, 11]]  # right 1, up 2
    assert float(seen["z"].sum()) == 1.0
