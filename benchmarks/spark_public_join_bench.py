"""A Spark table JOINed with a public lookup table of ``--lookup`` rows (docs/scale.md, JOINs
with public lookup tables), against the same JOIN in plain Spark SQL.

    python benchmarks/spark_public_join_bench.py --rows 200000 --lookup 100000 --repeats 3

Times, in rounds taking turns (after one untimed round), the exact read (plan, dry run,
Spark's analysis, the statement; no noise) of the JOIN query grouped by the lookup's column:

* ``first``: the lookup loaded into DuckDB, reloaded each round (``replace=True``: a new
  registration), so the JOIN ships its rows to Spark;
* ``again``: the same query once more (the shipped view is there);
* ``spark_public``: the lookup loaded on Spark (``engine="spark"``: a Parquet copy, nothing
  shipped);
* ``spark_public_cached``: ``spark_public`` with the lookup's rows cached in Spark's memory
  once (``cache()`` and a count of the view's rows, as a shipped lookup is; a third
  project), to see whether reading them from memory instead of the files pays off (the
  broadcast is built per query either way: Spark SQL reuses no exchange across queries);
* ``again_join``, ``spark_public_join``: ``again`` and ``spark_public`` with the public
  group keys joined in Spark, as before they were read on the driver
  (``backend_spark.PUBLIC_KEYS_MAX = 0``; a second project over the same session and rows,
  so that neither reuses the other's key cache);
* ``plain``: the same JOIN as plain Spark SQL over the same Parquet rows and lookup (no DP),
  in the same session;
* ``no_join``: dpkit's ungrouped COUNT/SUM of the private table (for scale, not a ratio).

``first`` opens each round; the others follow in an order that rotates each round. Prints
medians (min-max), each ratio to ``plain`` per round and the ratios of the driver-keys
variants to their join forms per round, with the 1-minute load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp
from dpkit.engine import backend_spark
from dpkit.engine import plan as dplan
from dpkit.engine.backend_spark import local_session


def _timed(f: Any) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def _exact(cur: Any, query: str) -> float:
    t0 = time.perf_counter()
    plan = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise=dplan.LAPLACE,
                     level=0.95, bounds=None)
    cur._execute(plan)
    return time.perf_counter() - t0


def _joined(cur: Any, query: str) -> float:
    """:func:`_exact` with the public keys joined in Spark (the form before driver keys)."""
    keep = backend_spark.PUBLIC_KEYS_MAX
    backend_spark.PUBLIC_KEYS_MAX = 0
    try:
        return _exact(cur, query)
    finally:
        backend_spark.PUBLIC_KEYS_MAX = keep


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
    join_q = ("SELECT region, COUNT(*) AS n, SUM(x) AS s FROM t JOIN {w} w ON t.g = w.g "
              "GROUP BY region")
    plain_q = ("SELECT region, COUNT(*) AS n, SUM(x) AS s FROM rows_p t JOIN lookup_p w "
               "ON t.g = w.g GROUP BY region")
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as tmp:
        warnings.simplefilter("ignore", FutureWarning)
        spark = local_session()
        spark.sparkContext.setLogLevel("ERROR")
        parquet, lookup_pq = Path(tmp) / "rows.parquet", Path(tmp) / "lookup.parquet"
        rows.to_parquet(parquet)
        lookup.to_parquet(lookup_pq)
        spark.read.parquet(str(parquet)).createOrReplaceTempView("rows_p")
        spark.read.parquet(str(lookup_pq)).createOrReplaceTempView("lookup_p")
        curs = []
        for name in ("p", "p_join", "p_cached"):
            cur = dp.Curator.create(Path(tmp) / f"{name}.dpkit", epsilon=1000, engine="spark",
                                    spark=spark, source=dp.noise.seeded(2))
            cur.add_table("t", str(parquet), bounds={"x": (0, 100)})
            cur.add_public_table("swards", str(lookup_pq), engine="spark")
            cur.add_table("wards", lookup, public=True, engine="duckdb")
            curs.append(cur)
        cur, cur_join, cur_cached = curs
        _exact(cur_cached, join_q.format(w="swards"))  # registers the lookup's view
        view = next(v for (kind, _), v in cur_cached._backend._views.items() if kind == "pub")
        cur_cached._backend.session().table(view).cache().count()
        times: dict[str, list[float]] = {k: [] for k in (
            "first", "again", "again_join", "spark_public", "spark_public_join",
            "spark_public_cached", "plain", "no_join")}
        loads = []
        others: dict[str, Any] = {
            "again": lambda: _exact(cur, join_q.format(w="wards")),
            "again_join": lambda: _joined(cur_join, join_q.format(w="wards")),
            "spark_public": lambda: _exact(cur, join_q.format(w="swards")),
            "spark_public_join": lambda: _joined(cur_join, join_q.format(w="swards")),
            "spark_public_cached": lambda: _exact(cur_cached, join_q.format(w="swards")),
            "plain": lambda: _timed(lambda: spark.sql(plain_q).collect()),
            "no_join": lambda: _exact(cur, "SELECT COUNT(*) AS n, SUM(x) AS s FROM t")}
        order = list(others)
        for r in range(args.repeats + 1):  # round 0: warm-up, untimed
            cur.add_table("wards", lookup, public=True, engine="duckdb", replace=True)
            got = {"first": _exact(cur, join_q.format(w="wards"))}
            shift = r % len(order)  # the order rotates each round (load changes hit all)
            for name in order[shift:] + order[:shift]:
                got[name] = others[name]()
            if r:
                loads.append(os.getloadavg()[0])
                for k, v in got.items():
                    times[k].append(v)
        for c in curs:
            c.close()
        spark.stop()
    print(f"rows {args.rows}, lookup {args.lookup} rows, {args.repeats} rounds, 1-min load "
          f"{min(loads):.1f}-{max(loads):.1f}")
    for name, ts in times.items():
        ratios = [t / p for t, p in zip(ts, times["plain"], strict=True)]
        print(f"{name:18s} {statistics.median(ts):.2f} s ({min(ts):.2f}-{max(ts):.2f})  "
              f"/ plain {statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})")
    for a, b in (("again", "again_join"), ("spark_public", "spark_public_join"),
                 ("spark_public_cached", "spark_public")):
        ratios = [x / y for x, y in zip(times[a], times[b], strict=True)]
        print(f"{a} / {b}: {statistics.median(ratios):.2f}x "
              f"({', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
