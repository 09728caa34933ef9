"""Campaign: the side-channel fuzzer at length, on DuckDB or Spark, every finding kept.

    PYTHONPATH=$PWD/src python benchmarks/fuzz_campaign.py --queries 1500 --seed 4101
    PYTHONPATH=$PWD/src python benchmarks/fuzz_campaign.py --families all --options \\
        --queries 1500 --seed 4102
    PYTHONPATH=$PWD/src python benchmarks/fuzz_campaign.py --no-constant-work --queries 600
    PYTHONPATH=$PWD/src python benchmarks/fuzz_campaign.py --engine spark --queries 60 \\
        --seed 4201 --neighbours add,change_extreme
    PYTHONPATH=$PWD/src python benchmarks/fuzz_campaign.py --engine service --queries 105 \\
        --seed 5301

DuckDB: the CI run's table (``tests/attacks/test_side_channels.py``: PEOPLE, eleven column
types, and the public WARDS). Spark (a ``local[1]`` session): the Spark test's table
(``tests/spark/test_session_and_fuzz.py``: SMALL with a date and a timestamp column, and the
public LOOKUP), its projects made by ``sc.spark_factory``. The service (``--engine service``):
the DuckDB table, every project served by its own in-process app
(:func:`dpkit.server.fuzz.fuzz_service`, the service's families unless ``--families``).
Unlike the CI runs it does not stop at the first finding: each is minimised and printed with
its reproducer, and the run's figures (comparisons, outcomes on D, findings by cause, CPU and
wall seconds) are appended to ``--out`` as one JSON line. FINDINGS.md sections K and M give the
runs made and what they found.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "attacks"))
sys.path.insert(0, str(ROOT / "tests" / "spark"))

from dpkit.attacks import side_channels as sc  # noqa: E402

#: every family the grammar knows, SQL weighed up as in the default
ALL = ("sql", "sql", "sql", "filter", "dp_cdf", "cdf", "ranges", "quantiles", "marginals",
       "synthetic", "synthetic", "fit")


def _spark_session() -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        spark = (SparkSession.builder.master("local[1]").appName("dpkit-fuzz")
                 .config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    return spark


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--engine", choices=("duckdb", "spark", "service"), default="duckdb")
    ap.add_argument("--queries", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=4101)
    ap.add_argument("--families", default="", help="comma-separated, or 'all' (default: "
                    "the grammar's default families)")
    ap.add_argument("--accountants", default="approx,zcdp")
    ap.add_argument("--neighbours", default=",".join(sc.NEIGHBOURS))
    ap.add_argument("--options", action="store_true", help="also draw request options")
    ap.add_argument("--units", type=int, default=12)
    ap.add_argument("--no-constant-work", action="store_true", help="DuckDB projects as "
                    "before constant work (budget 1000, opted out: the samplers whose work "
                    "follows the noise)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fuzz_campaign.jsonl"))
    args = ap.parse_args()
    families = ALL if args.families == "all" else tuple(f for f in args.families.split(",") if f)
    kw: dict[str, Any] = {"queries": args.queries, "seed": args.seed, "units": args.units,
                          "accountants": tuple(args.accountants.split(",")),
                          "neighbours": tuple(args.neighbours.split(",")),
                          "options": args.options, "families": families or None}
    if args.engine == "spark":
        from test_session_and_fuzz import LOOKUP, SMALL

        table, public = SMALL, [LOOKUP]
        kw["factory"] = sc.spark_factory(_spark_session())
    else:
        from test_side_channels import PEOPLE, WARDS

        table, public = PEOPLE, [WARDS]
        if args.no_constant_work:
            kw["factory"] = functools.partial(sc.make_project, epsilon=1000.0,
                                              constant_work=False)
    cpu, wall = time.process_time(), time.perf_counter()

    def progress(done: int, total: int) -> None:
        if done % 100 == 0:
            print(f"  {done}/{total} comparisons, {time.perf_counter() - wall:.0f} s",
                  flush=True)

    run = sc.fuzz
    if args.engine == "service":
        from dpkit.server.fuzz import fuzz_service

        run = fuzz_service
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        rep = run(table, public=public, progress=progress, **kw)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(rep.summary())
    for f in rep.findings[2:]:  # the summary shows two per cause
        print(f.reproducer())
    line = {"engine": args.engine, "seed": args.seed, "queries": args.queries,
            "families": list(families) or "default", "accountants": kw["accountants"],
            "neighbours": kw["neighbours"], "options": args.options,
            "constant_work": not args.no_constant_work,
            "comparisons": rep.comparisons, "outcomes": dict(rep.outcomes),
            "findings": {c: len(fs) for c, fs in rep.by_cause().items()},
            "skipped": rep.skipped, "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
            "load": round(os.getloadavg()[0], 1),
            "reproducers": [f.reproducer() for f in rep.findings]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as fh:
        fh.write(json.dumps(line) + "\n")
    print(f"cpu {cpu:.0f} s, wall {wall:.0f} s, load {line['load']}; appended to {args.out}")


if __name__ == "__main__":
    main()
