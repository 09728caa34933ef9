"""Shared test helpers for dpkit.learn."""

from __future__ import annotations

import numpy as np

import dpkit as dp


class Exploding(dp.noise.Source):
    """A source that fails if anything draws from it: a refused fit must draw nothing."""

    insecure = True

    def uint64(self, n: int) -> np.ndarray:  # pragma: no cover - reaching it is the failure
        raise AssertionError("noise drawn before the input was checked")


def exploding() -> dp.noise.Source:
    return Exploding()
