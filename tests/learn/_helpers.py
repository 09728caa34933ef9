"""Shared test helpers for dpkit.learn."""

from __future__ import annotations

import numpy as np
import pandas as pd

import dpkit as dp


class Exploding(dp.noise.Source):
    """A source that fails if anything draws from it: a refused fit must draw nothing."""

    insecure = True

    def uint64(self, n: int) -> np.ndarray:  # pragma: no cover - reaching it is the failure
        raise AssertionError("noise drawn before the input was checked")


def exploding() -> dp.noise.Source:
    return Exploding()


def patients(n: int) -> pd.DataFrame:
    """``n`` seeded rows, two per ``uid``: age in [0, 100), ward A/B, sick when age > 50,
    cost = 2 age + 10 (the curator fit tests' table)."""
    src = dp.noise.seeded(5)
    age = dp.noise.uniform_float01(n, source=src) * 100
    ward = np.array(["A", "B"])[dp.noise.uniform_int(2, n, source=src)]
    return pd.DataFrame({"uid": np.arange(n) // 2, "age": age, "ward": ward,
                         "sick": np.where(age > 50, "yes", "no"), "cost": 2.0 * age + 10})
