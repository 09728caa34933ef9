"""What the bounding diagnostics cost in time (issue 14, item 4): the same queries with
``diagnostics=True`` (default) and ``diagnostics=False``, interleaved, on one project.

    python benchmarks/diagnostics_bench.py --rows 1000000 --repeats 7

Prints, per query, the median wall time of each and the ratio on/off with its spread (min-max
of the per-repeat ratios). The privacy cost is not measured here: it is a fixed 5% of each
query's budget (docs/curator.md).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dpkit as dp

QUERIES = {
    "count+avg": "SELECT COUNT(*) AS n, AVG(x) AS ax FROM t",
    "group sum": "SELECT g, COUNT(*) AS n, SUM(x) AS sx FROM t GROUP BY g",
    "where+median": "SELECT MEDIAN(x) AS mx FROM t WHERE x > 10",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=7)
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
        for name, q in QUERIES.items():
            for flag in (True, False):  # warm the plan cache and DuckDB
                cur.sql(q, epsilon=1.0, diagnostics=flag)
            on, off = [], []
            for _ in range(args.repeats):
                for flag, acc in ((True, on), (False, off)):
                    t0 = time.perf_counter()
                    cur.sql(q, epsilon=1.0, diagnostics=flag)
                    acc.append(time.perf_counter() - t0)
            ratios = [a / b for a, b in zip(on, off, strict=True)]
            print(f"{name:14s} on {1e3 * statistics.median(on):7.1f} ms  off "
                  f"{1e3 * statistics.median(off):7.1f} ms  ratio "
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        cur.close()


if __name__ == "__main__":
    main()
