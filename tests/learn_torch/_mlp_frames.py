"""A small seeded table shared by the MLP-through-the-curator tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp


def mlp_frame(n: int = 900) -> pd.DataFrame:
    """``n`` seeded rows: age uniform on [0, 100), ward A/B, sick = age > 50, units of 3 rows."""
    src = dp.noise.seeded(5)
    age = dp.noise.uniform_float01(n, source=src) * 100
    ward = np.array(["A", "B"])[dp.noise.uniform_int(2, n, source=src)]
    return pd.DataFrame({"uid": np.arange(n) // 3, "age": age, "ward": ward,
                         "sick": np.where(age > 50, "yes", "no")})


def capture_trainings(monkeypatch: Any) -> list[Any]:
    """The full ``PrivateTraining`` objects of the next fits (through the curator a model keeps
    only their public summary, FINDINGS.md G1; the tests still check the rows they read)."""
    from dpkit.learn.torch import PrivateTraining

    seen: list[Any] = []
    summary = PrivateTraining.summary

    def keep(self: Any) -> Any:
        seen.append(self)
        return summary(self)

    monkeypatch.setattr(PrivateTraining, "summary", keep)
    return seen
