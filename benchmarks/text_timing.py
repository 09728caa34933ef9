"""Benchmark: wall time of one query on D and on neighbours that differ by one unit's text.

    PYTHONPATH=$PWD/src python benchmarks/text_timing.py            # 11 repeats, ~10-30 s
    PYTHONPATH=$PWD/src python benchmarks/text_timing.py --repeats 21 --units 20000
    PYTHONPATH=$PWD/src python benchmarks/text_timing.py --max-text-length none   # uncut only

The red-team pass's timing classes (docs/attacks.md §6, "Text: what one value can cost";
FINDINGS.md F2). D has ``--units`` units with short names and a bounded DOUBLE ``x``; each
neighbour adds one unit: an ordinary one, one whose text has 10^6 or 10^7 characters, one with
10^5 rows (bounded to one per unit), and NaN / inf values. Three queries (a substring LIKE, a
SUM, eight ``upper(s)`` calls) run on every project in one seeded shuffled order (so load drift
favours no side); printed: median, min and max in ms per (query, project), and the load average
before and after. Each project is loaded once per ``--max-text-length`` setting (default
``none,1000``: the text left whole, and cut at load to the engine's default bound), in the same
run, so the two settings are compared under the same load. Then the nested lengthening REPLACE
of F2 is asked once: refused before any row is read since the fix (before it: 16 ms on D, 2.7 s
on D plus a unit named 'zoe').
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

import numpy as np
import pandas as pd

import dpkit as dp


def neighbours(n: int) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(0)
    d = pd.DataFrame({"uid": np.arange(n), "s": [f"name{i}" for i in range(n)],
                      "x": rng.uniform(0, 10, n)})

    def one(s: str = "name", x: float = 5.0, rows: int = 1) -> pd.DataFrame:
        return pd.concat([d, pd.DataFrame({"uid": [n] * rows, "s": [s] * rows, "x": [x] * rows})])

    return {"D": d, "+ordinary": one(), "+1e6 chars": one(s="z" * 10**6),
            "+1e7 chars": one(s="z" * 10**7), "+1e5 rows": one(rows=10**5),
            "+NaN": one(x=float("nan"))}


QUERIES = {
    "s LIKE '%q%'": "SELECT COUNT(*) FROM t WHERE s LIKE '%q%'",
    "SUM(x)": "SELECT SUM(x) FROM t",
    "8 x upper(s)": "SELECT COUNT(*) FROM t WHERE " + " OR ".join(
        f"upper(s) = 'A{i}'" for i in range(8)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--units", type=int, default=10_000)
    ap.add_argument("--max-text-length", default="none,1000",
                    help="comma-separated bounds to load with ('none': text left whole)")
    args = ap.parse_args()
    limits = [None if v.strip() == "none" else int(v) for v in args.max_text_length.split(",")]
    curs = {}
    for name, frame in neighbours(args.units).items():
        for limit in limits:
            cur = dp.Curator.create(os.path.join(tempfile.mkdtemp(), "p"),
                                    budget=dp.Budget(epsilon=1000, delta=1e-6))
            cur.add_table("t", frame, privacy_unit="uid", max_rows_per_unit=1,
                          bounds={"x": (0, 10)}, max_text_length=limit)
            curs[name if len(limits) == 1 else f"{name} {limit or 'whole'}"] = cur
    order = [(q, k) for q in QUERIES for k in curs for _ in range(args.repeats)]
    random.Random(1).shuffle(order)
    times: dict[tuple[str, str], list[float]] = {}
    print(f"load before: {os.getloadavg()[0]:.2f}")
    for q, k in order:
        t0 = time.perf_counter()
        curs[k].sql(QUERIES[q], epsilon=0.01)
        times.setdefault((q, k), []).append(1000 * (time.perf_counter() - t0))
    print(f"load after: {os.getloadavg()[0]:.2f}; ms, median [min-max] of {args.repeats}")
    for q in QUERIES:
        print(q)
        for k in curs:
            print(f"  {k:24s} {statistics.median(times[(q, k)]):7.1f} "
                  f"[{min(times[(q, k)]):.0f}-{max(times[(q, k)]):.0f}]")
    expr = "s"
    for _ in range(8):
        expr = f"replace({expr}, 'zoe', '{'zoe' * 10}')"
    try:
        next(iter(curs.values())).sql(f"SELECT COUNT(*) FROM t WHERE length({expr}) > 0",
                                      epsilon=0.01)
        print("nested lengthening REPLACE: ANSWERED (F2 is open again)")
    except dp.engine.QueryError as exc:
        print(f"nested lengthening REPLACE: refused ({str(exc)[:70]}...)")


if __name__ == "__main__":
    main()
