"""dpkit on Spark vs the same plain Spark SQL vs Tumult Analytics (same session, same Parquet)
vs dpkit on DuckDB: a grouped COUNT / SUM / AVG at record and at user level.

    # everything, Tumult included: run inside Tumult's venv (pyspark 3.5 there), dpkit
    # installed into it (pip install --no-deps -e . && pip install duckdb sqlglot)
    /work/main/benchmarks/.venvs/tumult/bin/python benchmarks/spark_bench.py --rows 10000000
    # without Tumult, from dpkit's own venv (pyspark 4)
    python benchmarks/spark_bench.py --rows 1000000 --skip tumult

Data: ``--rows`` generated rows (uid: rows/5 units, 1-9 rows each; g: 20 string keys; x in
[0, 100]; k in 0..9) written once as Parquet under ``--data`` (reused when present). One
local Spark session (``local[--cores]``, no UI, 4 shuffle partitions) serves plain Spark SQL,
dpkit and Tumult. Each system answers the query ``--repeats`` times; we report the median,
min and max seconds and the ratios of medians. Loading (dpkit's Parquet copy, Tumult's
session) is timed apart. Timings on a shared machine: compare within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

KEYS = [f"g{i:02d}" for i in range(20)]
QUERY = "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM t GROUP BY g"
M = 3  # rows per unit at user level


def write_rows(path: Path, rows: int, chunk: int = 2_000_000) -> None:
    """Deterministic rows, written in chunks (bounded memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import dpkit as dp

    src = dp.noise.seeded(2024)
    keys = np.array(KEYS, dtype=object)
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, pa.schema([("uid", pa.int64()), ("g", pa.string()),
                                          ("x", pa.float64()), ("k", pa.int64())])) as w:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            idx = np.arange(start, start + n)
            uid = (idx // 5) + dp.noise.uniform_int(2, n, source=src)  # 1-9 rows per unit
            w.write_table(pa.table({
                "uid": pa.array(uid.astype(np.int64)),
                "g": pa.array(keys[dp.noise.uniform_int(len(KEYS), n, source=src)]),
                "x": pa.array(np.round(dp.noise.uniform_float01(n, source=src) * 100, 3)),
                "k": pa.array(dp.noise.uniform_int(10, n, source=src).astype(np.int64)),
            }))
    tmp.rename(path)


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, Any]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return {"median": statistics.median(out), "min": min(out), "max": max(out), "runs": out}


def session(cores: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("spark_bench")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "6g")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def dpkit_runs(spark: Any, data: Path, work: Path, repeats: int, engine: str,
               diagnostics: bool) -> dict[str, Any]:
    import dpkit as dp

    cur = dp.Curator.create(work / f"{engine}_{diagnostics}.dpkit", epsilon=1000.0,
                            engine=engine, spark=spark if engine == "spark" else None)
    out: dict[str, Any] = {}
    for level, unit in (("record", None), ("user", "uid")):
        t0 = time.perf_counter()
        kw: dict[str, Any] = {"max_rows_per_unit": M} if unit else {}
        cur.add_table(level, str(data), privacy_unit=unit, bounds={"x": (0, 100)},
                      domains={"g": KEYS}, **kw)
        out[f"load_{level}"] = time.perf_counter() - t0
        q = QUERY.replace("FROM t", f"FROM {level}")
        out[level] = timed(lambda q=q: cur.sql(q, epsilon=0.1, diagnostics=diagnostics),
                           repeats)
    cur.close()
    return out


def tumult_runs(spark: Any, data: Path, repeats: int) -> dict[str, Any]:
    from tmlt.analytics import (
        AddOneRow,
        AddRowsWithID,
        KeySet,
        MaxRowsPerID,
        PureDPBudget,
        QueryBuilder,
        Session,
    )

    df = spark.read.parquet(str(data))
    keys = KeySet.from_dict({"g": KEYS})
    out: dict[str, Any] = {}
    for level in ("record", "user"):
        t0 = time.perf_counter()
        change = AddOneRow() if level == "record" else AddRowsWithID("uid")
        sess = Session.from_dataframe(PureDPBudget(float("inf")), "t", df, change)
        out[f"load_{level}"] = time.perf_counter() - t0

        def base(user: bool = level == "user") -> Any:
            b = QueryBuilder("t")
            return (b.enforce(MaxRowsPerID(M)) if user else b).groupby(keys)

        def ask(sess: Any = sess, base: Callable[[], Any] = base) -> None:
            # Tumult answers one aggregate per query: COUNT, SUM and AVG are three queries
            for q in (base().count(), base().sum("x", 0, 100), base().average("x", 0, 100)):
                sess.evaluate(q, PureDPBudget(0.1)).collect()

        out[level] = timed(ask, repeats)
    return out


def plain_runs(spark: Any, data: Path, repeats: int) -> dict[str, Any]:
    spark.read.parquet(str(data)).createOrReplaceTempView("t")
    spark.sql(QUERY).collect()  # warm-up (JIT, file cache): the first query of a session
    return {"record": timed(lambda: spark.sql(QUERY).collect(), repeats)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "dpkit_spark")
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["plain", "spark", "tumult", "duckdb", "nodiag"])
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    warnings.simplefilter("ignore", FutureWarning)
    args.data.mkdir(parents=True, exist_ok=True)
    data = args.data / f"rows_{args.rows}.parquet"
    if not data.exists():
        t0 = time.perf_counter()
        write_rows(data, args.rows)
        print(f"wrote {data} in {time.perf_counter() - t0:.1f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="spark_bench_"))
    os.environ["DPKIT_SPARK_DIR"] = str(work / "spark_tables")
    t0 = time.perf_counter()
    spark = session(args.cores)
    res: dict[str, Any] = {"rows": args.rows, "repeats": args.repeats, "cores": args.cores,
                           "pyspark": spark.version, "session_start": time.perf_counter() - t0}
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("plain", lambda: plain_runs(spark, data, args.repeats)),
        ("spark", lambda: dpkit_runs(spark, data, work, args.repeats, "spark", True)),
        ("nodiag", lambda: dpkit_runs(spark, data, work, args.repeats, "spark", False)),
        ("duckdb", lambda: dpkit_runs(spark, data, work, args.repeats, "duckdb", True)),
        ("tumult", lambda: tumult_runs(spark, data, args.repeats)),
    ]
    try:
        for name, step in steps:
            if name in args.skip:
                continue
            try:
                res[name] = step()
            except ImportError as exc:
                res[name] = {"skipped": str(exc)}
            print(name, json.dumps(res[name], default=float), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(res)
    if args.out:
        args.out.write_text(json.dumps(res, indent=1, default=float))


def report(res: dict[str, Any]) -> None:
    """Medians (min-max) per system and level, and the ratios the issue asks for."""
    print(f"\n{res['rows']:,} rows, pyspark {res['pyspark']}, local[{res['cores']}], "
          f"{res['repeats']} repeats; session start {res['session_start']:.1f} s")
    for name in ("plain", "spark", "nodiag", "tumult", "duckdb"):
        for level in ("record", "user"):
            r = res.get(name, {}).get(level)
            if r:
                print(f"  {name:7s} {level:6s} {r['median']:8.2f} s  ({r['min']:.2f}-"
                      f"{r['max']:.2f})  load {res[name].get(f'load_{level}', 0):.1f} s")

    def ratio(a: str, b: str, la: str, lb: str) -> None:
        ra, rb = res.get(a, {}).get(la), res.get(b, {}).get(lb)
        if ra and rb:
            print(f"  {a}/{la} vs {b}/{lb}: {ra['median'] / rb['median']:.2f}x "
                  f"(range {ra['min'] / rb['max']:.2f}-{ra['max'] / rb['min']:.2f})")
    for level in ("record", "user"):
        ratio("tumult", "spark", level, level)
        ratio("spark", "plain", level, "record")
        ratio("nodiag", "plain", level, "record")
        ratio("spark", "duckdb", level, level)


if __name__ == "__main__":
    main()
