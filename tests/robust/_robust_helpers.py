"""Shared by the randomized-smoothing tests (a module name no other test folder uses)."""

from __future__ import annotations

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
