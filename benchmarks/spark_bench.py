"""dpkit on Spark vs the same plain Spark SQL vs Tumult Analytics (same session, same Parquet)
vs dpkit on DuckDB: a grouped COUNT / SUM / AVG at record and at user level.

    # everything, Tumult included: run inside Tumult's venv (pyspark 3.5 there), dpkit
    # installed into it (pip install --no-deps -e . && pip install duckdb sqlglot)
    /work/main/benchmarks/.venvs/tumult/bin/python benchmarks/spark_bench.py --rows 10000000
    # without Tumult, from dpkit's own venv (pyspark 4)
    python benchmarks/spark_bench.py --rows 1000000 --skip tumult

Data: ``--rows`` generated rows (uid: rows/5 units, 1-9 rows each; g: 20 string keys; x in
[0, 100]; k in 0..9) written once as Parquet under ``--data`` (reused when present). One
local Spark session (``local[--cores]``, no UI, ``--partitions`` shuffle partitions) serves
plain Spark SQL, dpkit and Tumult. Loading (dpkit's Parquet copy, Tumult's sessions) is
timed apart. Every system answers once untimed (warm-up: the session's first-query costs
would otherwise fall on whichever system runs first), then the systems take turns for
``--repeats`` rounds (the order rotates each round), so that a load change on a shared
machine hits them alike; Tumult takes part in the first ``--tumult-rounds`` rounds only, each
answer cancelled after ``--tumult-timeout`` seconds (then reported as a lower bound). We
report each system's median (min-max) and each ratio round by round, with its median.
Baselines: ``plain/record`` and ``plain/user`` are the same non-private query;
``plain/capped`` is plain Spark SQL that also keeps at most 3 rows per uid (ROW_NUMBER in
xxhash64 order), the floor of what bounding costs on Spark. ``buckets_p`` (user level
only): dpkit with its user-level copy in as many buckets as shuffle partitions (the rule
before ``spark_load.bucket_count``), to compare the two bucket counts in one run.
``--levels user`` leaves the record level out (at 100M rows its copy and queries cost
minutes).
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


def session(cores: int, partitions: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("spark_bench")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "6g")
             # Tumult keeps temporary tables in the warehouse: not in the working directory
             .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="spark_warehouse_"))
             .config("spark.sql.shuffle.partitions", str(partitions)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark




Answer = Callable[[], Any]  # one answer of one system at one level


def plain_setup(spark: Any, data: Path) -> dict[str, Answer]:
    """The same query as plain Spark SQL (no DP). ``capped``: plain Spark SQL that also keeps
    at most M rows per uid (ROW_NUMBER in Spark's xxhash64 order), the way a Spark user would
    bound contributions by hand: the floor of what user-level bounding costs on Spark."""
    spark.read.parquet(str(data)).createOrReplaceTempView("t")
    capped = QUERY.replace("FROM t", f"FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER "
                                     f"(PARTITION BY uid ORDER BY xxhash64(uid, g, x, 17)) AS "
                                     f"rn FROM t) WHERE rn <= {M})")
    return {"record": lambda: spark.sql(QUERY).collect(),
            "user": lambda: spark.sql(QUERY).collect(),  # the same plain query
            "capped": lambda: spark.sql(capped).collect()}


def levels_only(fns: dict[str, Answer], levels: tuple[str, ...]) -> dict[str, Answer]:
    """The answers at ``levels`` (``capped`` goes with ``user``)."""
    return {lv: f for lv, f in fns.items() if lv in levels or (lv == "capped" and
                                                                  "user" in levels)}


def dpkit_setup(spark: Any, data: Path, work: Path, engine: str, diagnostics: bool,
                loads: dict[str, float], levels: tuple[str, ...] = ("record", "user"),
                per_bucket: int | None = None) -> dict[str, Answer]:
    """A project with the rows loaded at record and at user level (load timed apart).
    ``per_bucket``: rows per bucket of the user-level copy in place of dpkit's own
    ``ROWS_PER_BUCKET`` (the ``buckets_p`` comparison: a huge value gives the former rule,
    buckets = shuffle partitions)."""
    import dpkit as dp
    from dpkit.engine import spark_load

    cur = dp.Curator.create(work / f"{engine}_{diagnostics}_{per_bucket}.dpkit",
                            epsilon=1000.0, engine=engine,
                            spark=spark if engine == "spark" else None)
    out: dict[str, Answer] = {}
    for level, unit in (("record", None), ("user", "uid")):
        if level not in levels:
            continue
        t0 = time.perf_counter()
        kw: dict[str, Any] = {"max_rows_per_unit": M} if unit else {}
        default = spark_load.ROWS_PER_BUCKET
        spark_load.ROWS_PER_BUCKET = per_bucket or default
        try:
            cur.add_table(level, str(data), privacy_unit=unit, bounds={"x": (0, 100)},
                          domains={"g": KEYS}, **kw)
        finally:
            spark_load.ROWS_PER_BUCKET = default
        loads[level] = time.perf_counter() - t0
        q = QUERY.replace("FROM t", f"FROM {level}")

        def ask(q: str = q) -> Any:
            return cur.sql(q, epsilon=0.1, diagnostics=diagnostics)

        out[level] = ask
    return out


def tumult_setup(spark: Any, data: Path, loads: dict[str, float]) -> dict[str, Answer]:
    """Tumult Analytics sessions on the same DataFrame; it answers one aggregate per query,
    so COUNT, SUM and AVG are three ``evaluate`` calls."""
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
    out: dict[str, Answer] = {}
    for level in ("record", "user"):
        t0 = time.perf_counter()
        change = AddOneRow() if level == "record" else AddRowsWithID("uid")
        sess = Session.from_dataframe(PureDPBudget(float("inf")), "t", df, change)
        loads[level] = time.perf_counter() - t0

        def base(user: bool = level == "user") -> Any:
            b = QueryBuilder("t")
            return (b.enforce(MaxRowsPerID(M)) if user else b).groupby(keys)

        def ask(sess: Any = sess, base: Callable[[], Any] = base) -> None:
            for q in (base().count(), base().sum("x", 0, 100), base().average("x", 0, 100)):
                sess.evaluate(q, PureDPBudget(0.1)).collect()

        out[level] = ask
    return out


def run_bounded(spark: Any, fn: Answer, timeout: float | None) -> tuple[float, bool]:
    """Seconds ``fn`` took, or ``timeout`` and False when it had not finished by then (its
    Spark jobs are cancelled: the time is a lower bound)."""
    import threading

    timer = None
    if timeout is not None:
        timer = threading.Timer(timeout, spark.sparkContext.cancelAllJobs)
        timer.start()
    t0 = time.perf_counter()
    try:
        fn()
        return time.perf_counter() - t0, True
    except Exception:
        if timeout is not None and time.perf_counter() - t0 >= timeout:
            return timeout, False
        raise
    finally:
        if timer is not None:
            timer.cancel()


def rounds(spark: Any, systems: dict[str, dict[str, Answer]], repeats: int,
           slow: dict[str, int], timeout: float, warm: bool = True) -> dict[str, Any]:
    """Every system warmed once (not timed), then ``repeats`` rounds in which the systems
    take turns (the order rotates each round): load changes on a shared machine hit all of
    them alike. A system in ``slow`` runs only in its first ``slow[name]`` rounds."""
    times: dict[str, dict[str, list[float]]] = {n: {lv: [] for lv in fns}
                                                for n, fns in systems.items()}
    unfinished: dict[str, list[str]] = {}
    names = list(systems)
    for n in names if warm else []:
        if n not in slow:
            for fn in systems[n].values():
                fn()  # warm-up: JIT, file cache, Spark's first-query costs
    loads: list[float] = []
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        loads.append(os.getloadavg()[0])
        for n in order:
            if n in slow and r >= slow[n]:
                continue
            for level, fn in systems[n].items():
                sec, ok = run_bounded(spark, fn, timeout if n in slow else None)
                times[n][level].append(sec)
                if not ok:
                    unfinished.setdefault(n, []).append(level)
                print(f"round {r}: {n} {level} {sec:.2f} s{'' if ok else ' (timed out)'}",
                      flush=True)
    loads.append(os.getloadavg()[0])
    return {"times": times, "unfinished": unfinished, "load_1min": loads}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratios(times: dict[str, dict[str, list[float]]], a: str, la: str, b: str, lb: str,
           ) -> list[float]:
    """``a``'s time over ``b``'s, round by round (rounds where both ran)."""
    ta, tb = times.get(a, {}).get(la, []), times.get(b, {}).get(lb, [])
    return [x / y for x, y in zip(ta, tb, strict=False)]


# (system, level, baseline system, baseline level): the ratios the issue asks for
RATIOS = [("spark", lv, "plain", lv) for lv in ("record", "user")] + [
    ("nodiag", lv, "plain", lv) for lv in ("record", "user")] + [
    ("spark", "user", "plain", "capped"), ("nodiag", "user", "plain", "capped"),
    ("buckets_p", "user", "plain", "capped"), ("spark", "user", "buckets_p", "user"),
    ("plain", "capped", "plain", "user")] + [
    ("tumult", lv, "spark", lv) for lv in ("record", "user")] + [
    ("spark", lv, "duckdb", lv) for lv in ("record", "user")]


def print_clock_tables(tables: dict[str, dict[str, list[float]]], base: str,
                       width: int = 16) -> None:
    """Each clock's table (``{"wall": {variant: seconds per round}, ...}``): median (min-max)
    and the per-round ratios to variant ``base`` (used by the bounding and diagnostics
    benchmarks)."""
    for what, table in tables.items():
        print(what)
        for name, ts in table.items():
            rs = [t / b for t, b in zip(ts, table[base], strict=True)]
            print(f"  {name:{width}s} {statistics.median(ts):7.2f} s ({min(ts):.2f}-{max(ts):.2f})"
                  f"  {statistics.median(rs):5.2f}x {base} ({', '.join(f'{x:.2f}' for x in rs)})")


def report(res: dict[str, Any]) -> None:
    """Medians (min-max) per system and level, and per-round ratios with their median."""
    times = res["times"]
    print(f"\n{res['rows']:,} rows, pyspark {res['pyspark']}, local[{res['cores']}], "
          f"{res['partitions']} shuffle partitions, {res['repeats']} rounds; 1-min load "
          f"{', '.join(f'{x:.1f}' for x in res['load_1min'])}")
    for name, levels in times.items():
        for level, vals in levels.items():
            if vals:
                s = summary(vals)
                late = " (timed out: lower bound)" if level in res["unfinished"].get(
                    name, []) else ""
                print(f"  {name:7s} {level:6s} {s['median']:8.2f} s ({s['min']:.2f}-"
                      f"{s['max']:.2f}){late}")
    res["ratios"] = {}
    for a, la, b, lb in RATIOS:
        r = ratios(times, a, la, b, lb)
        if r:
            key = f"{a}/{la} : {b}/{lb}"
            res["ratios"][key] = r
            print(f"  {key:32s} {statistics.median(r):6.2f}x  per round "
                  f"{', '.join(f'{x:.2f}' for x in r)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4, help="spark.sql.shuffle.partitions")
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "dpkit_spark")
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["plain", "spark", "tumult", "duckdb", "nodiag", "buckets_p"])
    ap.add_argument("--levels", nargs="+", default=["record", "user"], choices=["record", "user"],
                    help="privacy levels to load and time (record: no unit; user: uid)")
    ap.add_argument("--tumult-rounds", type=int, default=1,
                    help="rounds Tumult takes part in (it is slow)")
    ap.add_argument("--tumult-timeout", type=float, default=600.0,
                    help="seconds before a Tumult answer is cancelled (then a lower bound)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--no-warmup", action="store_true",
                    help="skip the untimed first answers (at 100M rows a warm-up round costs "
                         "as much as a timed one; first-query costs are then a small share)")
    args = ap.parse_args()
    warnings.simplefilter("ignore", FutureWarning)
    args.data.mkdir(parents=True, exist_ok=True)
    data = args.data / f"rows_{args.rows}.parquet"
    if not data.exists():
        t0 = time.perf_counter()
        write_rows(data, args.rows)
        print(f"wrote {data} ({data.stat().st_size / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="spark_bench_"))
    os.environ["DPKIT_SPARK_DIR"] = str(work / "spark_tables")
    t0 = time.perf_counter()
    spark = session(args.cores, args.partitions)
    res: dict[str, Any] = {"rows": args.rows, "repeats": args.repeats, "cores": args.cores,
                           "warmup": not args.no_warmup,
                           "partitions": args.partitions, "pyspark": spark.version,
                           "session_start": time.perf_counter() - t0, "load": {}}
    lv = tuple(args.levels)
    setups: dict[str, Callable[[dict[str, float]], dict[str, Answer]]] = {
        "plain": lambda _: levels_only(plain_setup(spark, data), lv),
        "spark": lambda ld: dpkit_setup(spark, data, work, "spark", True, ld, lv),
        "nodiag": lambda ld: dpkit_setup(spark, data, work, "spark", False, ld, lv),
        # the former bucket rule (buckets = shuffle partitions), user level only
        "buckets_p": lambda ld: dpkit_setup(spark, data, work, "spark", True, ld, ("user",),
                                            per_bucket=2**62),
        "duckdb": lambda ld: dpkit_setup(spark, data, work, "duckdb", True, ld, lv),
        "tumult": lambda ld: levels_only(tumult_setup(spark, data, ld), lv),
    }
    if "user" not in lv:
        args.skip.append("buckets_p")
    systems: dict[str, dict[str, Answer]] = {}
    try:
        for name, setup in setups.items():
            if name in args.skip:
                continue
            try:
                systems[name] = setup(res["load"].setdefault(name, {}))
            except ImportError as exc:
                print(f"{name} skipped: {exc}", flush=True)
        res.update(rounds(spark, systems, args.repeats, {"tumult": args.tumult_rounds},
                          args.tumult_timeout, warm=not args.no_warmup))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(res)
    if args.out:
        args.out.write_text(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
