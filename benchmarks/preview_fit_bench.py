"""How long ``cur.preview_fit`` of a DP-SGD model takes in a fresh process: planning only (no
row is read), so the accountant's calibration of σ, and no torch import.

    PYTHONPATH=src python benchmarks/preview_fit_bench.py

The researcher's hour's model (docs/first_hour.md §2): ``MLPClassifier`` at 10 epochs,
sample_rate 0.02, ε = 1 on a 30,000-row user-level table (``max_rows_per_unit=4``, so a noisy
count and DP-SGD composed, δ = 1e-7). Prints the first preview's seconds, a second preview's
on a new model (the accountant's memo), and the number of PLD evaluations the first made.
Run it once per process: the point is the cold calibration (docs/learn.md).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dpkit as dp
from dpkit.accounting import api
from dpkit.learn import MLPClassifier


def main() -> None:
    rng, n = np.random.default_rng(0), 30_000
    df = pd.DataFrame({"pid": np.arange(n) // 2, "age": rng.integers(17, 90, n),
                       "hours": rng.integers(1, 99, n),
                       "sex": rng.choice(["Male", "Female"], n),
                       "income": rng.choice(["<=50K", ">50K"], n)})
    calls = [0]
    real = api._pld_value

    def counted(*a: object) -> object:
        calls[0] += 1
        return real(*a)  # type: ignore[arg-type]

    api._pld_value = counted  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        cur = dp.Curator.create(Path(tmp) / "p.dpkit", epsilon=12, delta=1e-6)
        cur.add_table("a", df, privacy_unit="pid", max_rows_per_unit=4,
                      bounds={"age": (17, 90), "hours": (1, 99)},
                      domains={"sex": ["Male", "Female"], "income": ["<=50K", ">50K"]})
        for what in ("first preview", "a second, new model"):
            t = time.perf_counter()
            p = cur.preview_fit(MLPClassifier(epochs=10, sample_rate=0.02, epsilon=1.0),
                                "SELECT age, hours, sex FROM a", label="income", epsilon=1.0)
            print(f"{what}: {time.perf_counter() - t:.2f} s (cost epsilon {p.cost:.7f}; "
                  f"{calls[0]} PLD evaluations so far; torch imported: "
                  f"{'torch' in sys.modules})")
        cur.close()


if __name__ == "__main__":
    main()
