"""Shared by the randomized-smoothing tests (a module name no other test folder uses)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit import noise


class CountingSource(noise.Source):
    """A seeded source that counts its draws, to prove that bad input draws no noise."""

    def __init__(self, seed: int) -> None:
        self.inner = noise.seeded(seed)
        self.draws = 0

    def uint64(self, n: int) -> np.ndarray:
        self.draws += n
        return self.inner.uint64(n)


def wrong_certificates(g: Any, d: float, trials: int, alpha: float) -> int:
    """Certify ``(d, 0)`` ``trials`` times with ``g`` (n0 = 10, n = 100) where the true
    classifier is class 1 with radius ``d``: how many certificates were wrong (class 0, or
    class 1 with a radius above ``d``)."""
    x = np.array([d, 0.0])
    bad = 0
    for _ in range(trials):
        label, radius = g.certify(x, n0=10, n=100, alpha=alpha)
        bad += (label == 0) or (label == 1 and radius > d)
    return bad
