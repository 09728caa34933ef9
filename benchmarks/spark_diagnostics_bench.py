"""Where the answer diagnostics' time goes on Spark: dpkit's user-level statement with and
without diagnostics, and the same statement with parts of the diagnostics taken out, run as
plain Spark SQL on the bucketed copy (docs/scale.md, the diagnostics' cost).

    python benchmarks/spark_diagnostics_bench.py --rows 2000000 --repeats 5

Rows as ``spark_bench.py`` (reused under ``--data``), loaded once by dpkit at user level
(``max_rows_per_unit=3``, bucketed by ``uid``); the query is spark_bench's grouped COUNT /
SUM / AVG. The variants are the Spark texts dpkit reads (taken from its work trace) and
edits of the diagnostics one:

* ``nodiag``: ``diagnostics=False``; ``diag``: the default (rows kept, dropped, clamped);
* ``diag_no_clamp``: ``diag`` without the clamped-values count;
* ``diag_no_drop``: ``diag`` with the dropped-rows count and its count window taken out
  (ranks cut at ``m``, as ``nodiag``'s);
* ``diag_window``: ``diag`` with the dropped rows totalled over the groups by a window in
  the statement (``SUM(SUM(__d)) OVER ()``), as before they were summed per group and
  totalled on the driver (a window keeps them where a public table's keys may drop groups);
* ``diag_frame``: ``diag`` with the unit's rows up to ``2m`` counted by a frame of the
  ranking window (one window operator; no window group limit then).

Every variant runs once untimed, then they take turns for ``--repeats`` rounds (the order
rotating each round); medians (min-max) of the wall clock and of the JVM's CPU time (all
its threads: on a shared machine the wall clock also counts the waits for a core), and
each variant's ratio to ``nodiag`` per round, with the 1-minute load.
``--explain NAME`` prints a variant's physical plan instead; ``--jobs`` the Spark jobs and
stages each variant's one run starts (``SparkContext.statusTracker``, by job group).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from spark_bench import KEYS, QUERY, M, print_clock_tables, session, write_rows


def dpkit_texts(spark: Any, data: Path, work: Path) -> dict[str, str]:
    """The Spark texts dpkit reads for QUERY at user level, with and without diagnostics."""
    import dpkit as dp
    from dpkit import noise
    from dpkit.engine import plan as dplan

    cur = dp.Curator.create(work / "diag.dpkit", epsilon=1000.0, engine="spark", spark=spark)
    cur.add_table("t", str(data), privacy_unit="uid", max_rows_per_unit=M,
                  bounds={"x": (0, 100)}, domains={"g": KEYS})
    out = {}
    for name, diagnostics in (("diag", True), ("nodiag", False)):
        plan = cur._plan(QUERY, epsilon=1.0, rho=None, delta=None, noise=dplan.LAPLACE,
                         level=0.95, bounds=None, diagnostics=diagnostics)
        with noise.trace.recording() as t:
            cur._execute(plan)
        out[name] = next(s[2] for s in t.statements if s[:2] == ("spark", "collect"))
    # keep the views: the texts read the session's declaration of the bucketed copy
    out["_session"] = cur  # type: ignore[assignment]
    return out


def _edit(text: str, pattern: str, repl: Any, name: str) -> str:
    out = re.sub(pattern, repl, text, count=1)
    if out == text:
        raise SystemExit(f"the edit {name} changed nothing: dpkit's statement changed; "
                         f"update edits()")
    return out


def edits(diag: str, nodiag: str) -> dict[str, str]:
    """The diagnostics statement with parts taken out (see the module docstring)."""
    out = {"nodiag": nodiag, "diag": diag}
    # the clamped-values count: COUNT(CASE WHEN (NOT ISNAN(...) AND (...)) THEN 1 END) AS __mj
    out["diag_no_clamp"] = _edit(diag, r", COUNT\(CASE WHEN \(NOT ISNAN.*? THEN 1 END\) AS "
                                       r"(__m\d+)", r", 0 AS \1", "diag_no_clamp")
    # the dropped rows' total over the groups as a window: SUM(<the group's sum of __d>) OVER ()
    total = r"(\(CAST\(SUM\(SHIFTRIGHT\(__d, 31\)\).*?\)\)\)) AS (__m\d+)"
    out["diag_window"] = _edit(diag, total, r"SUM(\1) OVER () AS \2", "diag_window")
    # no dropped count at all: the count window's CTE gone, ranks cut at m, __d = 0
    no_drop = _edit(diag, r"__r2 AS \(SELECT (.*?), __rn, COUNT\(\*\) OVER \(PARTITION BY "
                          r"__u\) AS __n2 FROM __r WHERE __rn <= \d+\)",
                    rf"__r2 AS (SELECT \1, __rn FROM __r WHERE __rn <= {M})", "diag_no_drop")
    out["diag_no_drop"] = _edit(no_drop, r"CASE WHEN __rn = 1 THEN __n2 - LEAST\(__n2, \d+\) "
                                         r"ELSE 0 END AS __d", "0 AS __d", "diag_no_drop")
    # the unit's rows up to 2m counted by a frame of the ranking window itself (one window
    # operator, two functions: Spark's window group limit then no longer applies)
    start = diag.index("ROW_NUMBER() OVER (") + len("ROW_NUMBER() OVER (")
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(diag[end], 0)
        end += 1
    spec = diag[start:end - 1]
    framed = (f"ROW_NUMBER() OVER ({spec}) AS __rn, COUNT(*) OVER ({spec} ROWS BETWEEN "
              f"CURRENT ROW AND {2 * M - 1} FOLLOWING) AS __n2")
    one = diag[:start - len("ROW_NUMBER() OVER (")] + framed + diag[end + len(" AS __rn"):]
    out["diag_frame"] = _edit(one, r"__r2 AS \(SELECT (.*?), __rn, COUNT\(\*\) OVER "
                                   r"\(PARTITION BY __u\) AS __n2 FROM __r WHERE __rn <= \d+\)",
                              r"__r2 AS (SELECT \1, __rn, __n2 FROM __r)", "diag_frame")
    return out


def print_jobs(spark: Any, query: Any, variants: dict[str, str]) -> None:
    """Each variant's Spark jobs and stages in one run (after a warm-up run), by job group."""
    sc, tracker = spark.sparkContext, spark.sparkContext.statusTracker()
    for name, text in variants.items():
        query.sql(text).collect()
        sc.setJobGroup(f"dpkit_{name}", name)
        query.sql(text).collect()
        jobs = tracker.getJobIdsForGroup(f"dpkit_{name}")
        stages = sum(len(tracker.getJobInfo(j).stageIds) for j in jobs)
        print(f"{name:14s} {len(jobs)} jobs, {stages} stages (skipped included)")
    sc.setJobGroup("", "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "dpkit_spark")
    ap.add_argument("--variants", nargs="*", default=None)
    ap.add_argument("--explain", default=None)
    ap.add_argument("--jobs", action="store_true", help="print each variant's jobs and stop")
    ap.add_argument("--show", action="store_true", help="print the texts and stop")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    data = args.data / f"rows_{args.rows}.parquet"
    if not data.exists():
        write_rows(data, args.rows)
    warnings.simplefilter("ignore", FutureWarning)
    spark = session(2, 4)
    with tempfile.TemporaryDirectory() as tmp:
        texts = dpkit_texts(spark, data, Path(tmp))
        cur = texts.pop("_session")
        query = cur._backend.session()  # the session where dpkit's views are declared
        if args.show:
            for name, text in texts.items():
                print(f"-- {name}\n{text}\n")
            return
        variants = edits(texts["diag"], texts["nodiag"])
        if args.variants:
            variants = {n: variants[n] for n in ["nodiag", *args.variants] if n in variants}
        if args.explain:
            print(query.sql(variants[args.explain])._jdf.queryExecution().executedPlan()
                  .toString())
            return
        if args.jobs:
            print_jobs(spark, query, variants)
            cur.close()
            return
        for text in variants.values():
            query.sql(text).collect()  # warm-up
        # the JVM's CPU time (all its threads: local mode's executors, GC, JIT) beside the
        # wall clock: on a shared machine the wall clock also counts the waits for a core
        stat = Path(f"/proc/{spark._jvm.java.lang.ProcessHandle.current().pid()}/stat")

        def jvm_cpu() -> float:  # user + system seconds of the JVM (Linux /proc)
            fields = stat.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        times: dict[str, list[float]] = {n: [] for n in variants}
        cpus: dict[str, list[float]] = {n: [] for n in variants}
        loads = []
        names = list(variants)
        for r in range(args.repeats):
            loads.append(os.getloadavg()[0])
            for name in names[r % len(names):] + names[:r % len(names)]:  # rotating order
                c0, t0 = jvm_cpu(), time.perf_counter()
                query.sql(variants[name]).collect()
                times[name].append(time.perf_counter() - t0)
                cpus[name].append(jvm_cpu() - c0)
        cur.close()
    spark.stop()
    print(f"rows {args.rows}, {args.repeats} rounds, 1-min load {min(loads):.1f}-"
          f"{max(loads):.1f}")
    print_clock_tables({"wall": times, "JVM CPU": cpus}, "nodiag", width=14)

if __name__ == "__main__":
    main()
