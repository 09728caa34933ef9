"""MNIST-5k for the DP-SGD benchmarks: 4,000 train / 1,000 test, shuffled with seed 0."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def mnist_5k() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, y_train, X_test, y_test), pixels scaled to [0, 1] (a public constant)."""
    here = Path(__file__).resolve().parents[1]
    roots = [Path(os.environ["DPKIT_DATA"])] if "DPKIT_DATA" in os.environ else []
    # the main checkout sits beside shared/; a worktree one level deeper
    roots += [here / ".." / "shared" / "data", here / ".." / ".." / "shared" / "data"]
    root = next((r for r in roots if (r / "mnist_5k.csv.gz").exists()), roots[0])
    raw = np.loadtxt(root / "mnist_5k.csv.gz", delimiter=",", dtype=np.float32)
    perm = np.random.RandomState(0).permutation(len(raw))  # the file is sorted by label
    raw = raw[perm]
    X, y = raw[:, :-1] / 255.0, raw[:, -1].astype(np.int64)
    return X[:4000], y[:4000], X[4000:], y[4000:]
