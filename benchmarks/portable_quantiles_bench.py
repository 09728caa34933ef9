"""QUANTILE/MEDIAN's exact read: DuckDB's native ``histogram()`` against the portable
``GROUP BY (group, bin)`` count Spark runs (docs/scale.md), on the same DuckDB table.

Times the exact read only (``Curator._execute``: compile, dry run, the statement; no noise, no
charge), median and (min-max) over ``--repeats``, at record and user level. ``--spark`` also
times the portable statement on a local Spark session (``local[2]``) against AVG alone, the
query without the quantile's histogram, the two taking turns, with their ratio per round and
the 1-minute load average (the machine may be shared).

    python benchmarks/portable_quantiles_bench.py --rows 1000000 --repeats 5
    python benchmarks/portable_quantiles_bench.py --rows 200000 --repeats 5 --spark --no-duckdb
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import dpkit as dp
from dpkit.engine import plan as dplan

QUERY = "SELECT g, MEDIAN(x) AS m, AVG(x) AS a FROM {t} GROUP BY g"
PLAIN = "SELECT g, AVG(x) AS a FROM {t} GROUP BY g"


def write_rows(path: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = dp.noise.seeded(1)
    uid = dp.noise.uniform_int(max(n // 4, 1), n, source=src).astype(np.int64)
    g = np.array([f"g{i:02d}" for i in range(20)], dtype=object)[
        dp.noise.uniform_int(20, n, source=src)]
    x = dp.noise.uniform_float01(n, source=src) * 120.0
    pq.write_table(pa.table({"uid": uid, "g": list(g), "x": x}), path)


def timed(cur: Any, query: str, repeats: int) -> dict[str, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise=dplan.LAPLACE,
                      level=0.95, bounds=None)
        cur._execute(p)
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def interleaved(cur: Any, table: str, repeats: int) -> dict[str, Any]:
    """AVG alone and MEDIAN + AVG taking turns (after one untimed run of each), so that load
    changes on a shared machine hit both alike; the ratio is taken round by round."""
    queries = {"avg_only": PLAIN.format(t=table), "median": QUERY.format(t=table)}
    for q in queries.values():
        timed(cur, q, 1)  # warm-up
    times: dict[str, list[float]] = {k: [] for k in queries}
    for _ in range(repeats):
        for k, q in queries.items():
            times[k].append(timed(cur, q, 1)["median_s"])
    ratios = [m / a for m, a in zip(times["median"], times["avg_only"], strict=True)]
    out: dict[str, Any] = {f"spark_{table}_{k}": {"median_s": statistics.median(v),
                                                  "min_s": min(v), "max_s": max(v)}
                           for k, v in times.items()}
    out[f"spark_{table}_ratio"] = {"median": statistics.median(ratios), "per_round": ratios}
    out[f"spark_{table}_load"] = os.getloadavg()[0]
    return out


def add_tables(cur: Any, path: Path) -> None:
    decl: dict[str, Any] = {"bounds": {"x": (0, 120)},
                            "domains": {"g": [f"g{i:02d}" for i in range(20)]}}
    cur.add_table("rec", str(path), **decl)
    cur.add_table("usr", str(path), privacy_unit="uid", max_rows_per_unit=3, **decl)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--spark", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-duckdb", action="store_true", help="skip the DuckDB forms")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    write_rows(tmp / "rows.parquet", args.rows)
    out: dict[str, Any] = {"rows": args.rows, "repeats": args.repeats}
    cur = dp.Curator.create(tmp / "d.dpkit", epsilon=1000, source=dp.noise.seeded(2))
    add_tables(cur, tmp / "rows.parquet")
    for table in () if args.no_duckdb else ("rec", "usr"):
        for form in ("native", "portable"):
            cur._preparer.portable = form == "portable"
            out[f"duckdb_{table}_{form}"] = timed(cur, QUERY.format(t=table), args.repeats)
    if args.spark:
        from dpkit.engine.backend_spark import local_session

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            spark = local_session()
            spark.sparkContext.setLogLevel("ERROR")
            spk = dp.Curator.create(tmp / "s.dpkit", epsilon=1000, engine="spark",
                                    spark=spark, source=dp.noise.seeded(2))
            add_tables(spk, tmp / "rows.parquet")
        for table in ("rec", "usr"):
            out.update(interleaved(spk, table, args.repeats))
    text = json.dumps(out, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
