"""What the fixed row order of ``cur.fit``'s read costs: its one statement with and without the
ORDER BY, on a user-level table (the bounding's window runs either way).

    python benchmarks/fit_order_bench.py [--rows 1000000] [--repeats 5]

Prints the median, min and max seconds of each form (interleaved, same process, same table)
and their ratio. The ORDER BY is what makes a seeded project's fit reproducible to the bit
(docs/learn.md, "Randomness and the ledger").
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
from dpkit.engine import Curator
from dpkit.engine.backend_duckdb import table_relation
from dpkit.engine.families.fit import plan_encoding, statement


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    src = dp.noise.seeded(1)
    n = args.rows
    age = dp.noise.uniform_float01(n, source=src) * 100
    frame = pd.DataFrame({"uid": np.arange(n) // 3, "age": age,
                          "ward": np.array(["A", "B"])[dp.noise.uniform_int(2, n, source=src)],
                          "sick": np.where(age > 50, "yes", "no")})
    with tempfile.TemporaryDirectory() as tmp:
        cur = Curator.create(Path(tmp) / "p.dpkit", epsilon=10.0, delta=1e-6)
        cur.add_table("u", frame, privacy_unit="uid", max_rows_per_unit=2,
                      bounds={"age": (0, 100)}, domains={"ward": ["A", "B"], "sick": ["no", "yes"]})
        ctx = cur._families()
        meta = ctx.tables()["u"]
        text = statement(meta, plan_encoding(meta, ["age", "ward"], "sick"), None,
                         table_relation(meta), seed=7)
        forms = {"ordered": text, "unordered": text[:text.rindex(" ORDER BY")]}
        times: dict[str, list[float]] = {k: [] for k in forms}
        for _ in range(args.repeats):
            for name, sql in forms.items():
                t0 = time.perf_counter()
                rows = len(ctx.backend.run_numpy(sql)["__y"])
                times[name].append(time.perf_counter() - t0)
        cur.close()
    for name, v in times.items():
        print(f"{name:>9}: median {statistics.median(v):.3f} s (min {min(v):.3f}, max "
              f"{max(v):.3f}) over {args.repeats} reads of {rows:,} bounded rows")
    ratios = [a / b for a, b in zip(times["ordered"], times["unordered"], strict=True)]
    print(f"ordered / unordered: median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
