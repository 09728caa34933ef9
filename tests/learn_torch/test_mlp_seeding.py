"""DP-SGD through the curator draws everything from the project's source: the initial weights,
each unit's kept rows, the Poisson sampling of every step, the gradient noise and the noisy row
count of ``batch_size="auto"``. Two projects seeded alike train bit-identical networks and
release the same N̂; the secure source does not repeat. The smallest network and 2 steps: this
checks where the randomness comes from, not accuracy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

import dpkit as dp
from dpkit.engine import Curator
from dpkit.learn import MLPClassifier
from learn_torch._mlp_frames import mlp_frame


def _fit(path: Path, source: dp.noise.Source | None,
         m: MLPClassifier) -> tuple[list[bytes], int | None]:
    cur = Curator.create(path, epsilon=10.0, delta=1e-5, source=source)
    # units of 3 rows capped at 2: the priorities that choose a unit's rows are drawn too
    cur.add_table("u", mlp_frame(60), privacy_unit="uid", max_rows_per_unit=2,
                  bounds={"age": (0, 100)}, domains={"sick": ["no", "yes"]})
    cur.fit(m, "SELECT age FROM u", label="sick", epsilon=2.0)
    assert m.random_state is None and m.training_.insecure == (source is not None)
    arrays = [*m.coefs_, *m.intercepts_]
    return [np.asarray(a).tobytes() for a in arrays], m.rows_estimate_


def test_seeded_projects_train_bit_identical_networks(tmp_path: Path) -> None:
    """The false-failure probability of the last check (a secure fit repeating the seeded one
    to the bit, every weight and N̂) is far below 1e-9."""
    # one estimator for the three fits: its σ calibration (public inputs) is cached on it
    m = MLPClassifier((2,), epochs=1, sample_rate=0.5)  # batch_size "auto": a noisy count
    a = _fit(tmp_path / "a.dpkit", dp.noise.seeded(7), m)
    b = _fit(tmp_path / "b.dpkit", dp.noise.seeded(7), m)
    assert a == b and a[1] is not None
    assert _fit(tmp_path / "c.dpkit", None, m)[0] != a[0]
