"""What the release families' diagnostics cost in time (issue 14, item 4): the same family
releases with ``diagnostics=True`` (default: a second statement over the same bounded rows in
the charged read) and ``diagnostics=False``, interleaved, on one project.

    python benchmarks/family_diagnostics_bench.py --rows 1000000 --repeats 5

Prints, per family, the median wall time of each and the ratio on/off with its spread (min-max
of the per-repeat ratios). The privacy cost is a fixed 5% of each release's budget
(docs/curator.md), not measured here.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp


def _families(cur: Any) -> dict[str, Callable[[bool], Any]]:
    return {
        "cdf": lambda d: cur.cdf("t", "x", epsilon=1.0, diagnostics=d),
        "ranges": lambda d: cur.ranges("t", "x", [(0, 20), (20, 70), (70, 100)], epsilon=1.0,
                                       diagnostics=d),
        "marginals": lambda d: cur.marginals("t", ["g", "x"], epsilon=1.0, diagnostics=d),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.rows
    df = pd.DataFrame({"u": rng.integers(0, n // 3, n), "x": rng.normal(50, 30, n),
                       "g": rng.choice(np.array(["a", "b", "c", "d"], dtype=object), n)})
    with tempfile.TemporaryDirectory() as tmp:
        cur = dp.Curator.create(Path(tmp) / "p.dpkit", epsilon=1000)
        cur.add_table("t", df, privacy_unit="u", max_rows_per_unit=2, bounds={"x": (0, 100)},
                      domains={"g": ["a", "b", "c", "d"]})
        print(f"{n} rows, {n // 3} units, max_rows_per_unit=2; {args.repeats} repeats "
              f"(interleaved on/off); shared machine")
        for name, release in _families(cur).items():
            for flag in (True, False):  # warm the strategy cache and DuckDB
                release(flag)
            on: list[float] = []
            off: list[float] = []
            for _ in range(args.repeats):
                for flag, acc in ((True, on), (False, off)):
                    t0 = time.perf_counter()
                    release(flag)
                    acc.append(time.perf_counter() - t0)
            ratios = [a / b for a, b in zip(on, off, strict=True)]
            print(f"{name:10s} on {1e3 * statistics.median(on):7.1f} ms  off "
                  f"{1e3 * statistics.median(off):7.1f} ms  ratio "
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        cur.close()


if __name__ == "__main__":
    main()
