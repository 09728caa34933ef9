"""Curator benchmark: GROUP BY a derived key against GROUP BY a stored column with the same keys.

A derived key (``CASE``, ``floor(age / 10) * 10``, ``date_trunc``) is computed per row inside
the one bounded statement (under ``TRY`` where it could fail); the alternative is the data owner
storing the same value as a column with a declared domain. This script times, on the same
project (``--rows`` rows, user level, 1-3 rows per unit, at most 3 kept)::

    stored : SELECT decade, COUNT(*), AVG(age) ... GROUP BY decade        (declared domain)
    derived: SELECT floor(age / 10) * 10 AS d, COUNT(*), AVG(age) ... GROUP BY d   (bins)
    stored : SELECT band, ...   vs  derived: SELECT CASE WHEN age < 18 ... END AS b, ...
    stored : SELECT month, ...  vs  derived: SELECT date_trunc('month', day) AS m, ...
    where  : SELECT ward, COUNT(*) ... WHERE ward IN ('w1', 'w2') GROUP BY ward  (undeclared:
             public keys from WHERE)  vs  the same without WHERE restriction (private selection)

each pair interleaved, ``cur.sql`` end to end, median and spread (min-max) of ``--repeat``
runs, and the median of the per-round ratios derived / stored.

    python benchmarks/engine_derived_keys_bench.py --rows 1000000 --repeat 7
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

import dpkit as dp
from dpkit.engine import Curator

PAIRS = {
    "bins": ("SELECT decade, COUNT(*) AS n, AVG(age) AS a FROM t GROUP BY decade",
             "SELECT floor(age / 10) * 10 AS d, COUNT(*) AS n, AVG(age) AS a FROM t GROUP BY d"),
    "case": ("SELECT band, COUNT(*) AS n FROM t GROUP BY band",
             "SELECT CASE WHEN age < 18 THEN 'child' WHEN age < 65 THEN 'adult' ELSE 'senior' "
             "END AS b, COUNT(*) AS n FROM t GROUP BY b"),
    "date_trunc": ("SELECT month, COUNT(*) AS n FROM t GROUP BY month",
                   "SELECT date_trunc('month', day) AS m, COUNT(*) AS n FROM t GROUP BY m"),
    "where_keys": ("SELECT ward, COUNT(*) AS n FROM t GROUP BY ward",
                   "SELECT ward, COUNT(*) AS n FROM t WHERE ward IN ('w1', 'w2') GROUP BY ward"),
}


def build(path: Path, rows: int) -> Curator:
    cur = Curator.create(path, epsilon=1000.0, delta=1e-3, source=dp.noise.seeded(1))
    rel = duckdb.sql(
        f"SELECT i // 2 AS pid, CAST(i % 100 AS INTEGER) AS age, "
        f"CAST(floor(i % 100 / 10) * 10 AS BIGINT) AS decade, "
        f"CASE WHEN i % 100 < 18 THEN 'child' WHEN i % 100 < 65 THEN 'adult' ELSE 'senior' "
        f"END AS band, 'w' || (i % 7) AS ward, DATE '2024-01-01' + CAST(i % 365 AS INTEGER) "
        f"AS day, CAST(date_trunc('month', DATE '2024-01-01' + CAST(i % 365 AS INTEGER)) "
        f"AS DATE) AS month FROM range({rows}) r(i)")
    days = [f"2024-{m:02d}-{d:02d}" for m in range(1, 13) for d in range(1, 29)]
    cur.add_table("t", rel, privacy_unit="pid", max_rows_per_unit=3,
                  bounds={"age": (0, 100)},
                  domains={"decade": list(range(0, 101, 10)),
                           "band": ["child", "adult", "senior"], "day": days,
                           "month": [f"2024-{m:02d}-01" for m in range(1, 13)]})
    return cur


def timed(cur: Curator, q: str) -> float:
    t0 = time.perf_counter()
    cur.sql(q, epsilon=1.0)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cur = build(Path(tmp) / "bench.dpkit", args.rows)
        print(f"{args.rows} rows, {args.repeat} repeats (ms: median [min-max]; ratio: median "
              f"of derived/stored per round)")
        for name, (stored, derived) in PAIRS.items():
            timed(cur, stored), timed(cur, derived)  # warm the plan and dry-run caches
            a: list[float] = []
            b: list[float] = []
            for _ in range(args.repeat):
                a.append(timed(cur, stored))
                b.append(timed(cur, derived))
            ratios = [y / x for x, y in zip(a, b, strict=True)]
            print(f"{name:11s} stored {1e3 * statistics.median(a):7.1f} [{1e3 * min(a):.1f}-"
                  f"{1e3 * max(a):.1f}]  derived {1e3 * statistics.median(b):7.1f} "
                  f"[{1e3 * min(b):.1f}-{1e3 * max(b):.1f}]  ratio "
                  f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
