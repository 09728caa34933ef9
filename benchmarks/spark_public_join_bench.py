"""What shipping a public lookup table to Spark costs (docs/scale.md, JOINs with public lookup
tables): a Spark table joined with a public DuckDB table of ``--lookup`` rows.

    python benchmarks/spark_public_join_bench.py --rows 200000 --lookup 100000 --repeats 3

Each round reloads the public table (``replace=True``: a new registration, so the next JOIN
ships it again) and times the exact read (plan, dry run, Spark's analysis, the statement;
no noise) of the JOIN query twice: ``first`` ships the rows, ``again`` reuses the view. Also
timed: the same query without the JOIN (``no_join``, grouped by a column of the private
table). Medians (min-max) over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp
from dpkit.engine import plan as dplan
from dpkit.engine.backend_spark import local_session


def _exact(cur: Any, query: str) -> float:
    t0 = time.perf_counter()
    plan = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise=dplan.LAPLACE,
                     level=0.95, bounds=None)
    cur._execute(plan)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--lookup", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    src = dp.noise.seeded(1)
    keys = np.array([f"k{i:06d}" for i in range(args.lookup)], dtype=object)
    rows = pd.DataFrame({
        "uid": dp.noise.uniform_int(args.rows // 5, args.rows, source=src).astype(np.int64),
        "g": keys[dp.noise.uniform_int(args.lookup, args.rows, source=src)],
        "x": dp.noise.uniform_float01(args.rows, source=src) * 100.0})
    lookup = pd.DataFrame({"g": keys, "region": [f"r{i % 20}" for i in range(args.lookup)],
                           "w": np.arange(args.lookup, dtype=np.int64),
                           "f": np.arange(args.lookup) * 0.5})
    join_q = ("SELECT region, COUNT(*) AS n, SUM(x) AS s FROM t JOIN wards w ON t.g = w.g "
              "GROUP BY region")
    plain_q = "SELECT COUNT(*) AS n, SUM(x) AS s FROM t"
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore", FutureWarning)
        spark = local_session()
        spark.sparkContext.setLogLevel("ERROR")
        parquet = Path(tmp) / "rows.parquet"
        rows.to_parquet(parquet)
        cur = dp.Curator.create(Path(tmp) / "p.dpkit", epsilon=1000, engine="spark",
                                spark=spark, source=dp.noise.seeded(2))
        cur.add_table("t", str(parquet), bounds={"x": (0, 100)})
        times: dict[str, list[float]] = {"first": [], "again": [], "no_join": []}
        for r in range(args.repeats + 1):  # round 0: warm-up, untimed
            cur.add_table("wards", lookup, public=True, engine="duckdb", replace=True)
            got = {"first": _exact(cur, join_q), "again": _exact(cur, join_q),
                   "no_join": _exact(cur, plain_q)}
            if r:
                for k, v in got.items():
                    times[k].append(v)
        cur.close()
        spark.stop()
    print(f"rows {args.rows}, lookup {args.lookup} rows, {args.repeats} rounds")
    for name, ts in times.items():
        print(f"{name:8s} {statistics.median(ts):.2f} s ({min(ts):.2f}-{max(ts):.2f})")


if __name__ == "__main__":
    main()
