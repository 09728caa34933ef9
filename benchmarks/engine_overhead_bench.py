"""Where a record-level curator query spends its time beyond the SQL statement.

``python benchmarks/engine_overhead_bench.py [--rows 1000000] [--repeat 30] [--history N]``:
builds the same
table as ``engine_bench.py`` (record level, 10 declared groups), then times each step of
``Curator.sql`` separately (plan, budget pre-check, DuckDB execution, durable ledger commit,
noise + intervals + result) next to the whole call and the same plain DuckDB query, interleaved,
and prints medians and bests. The steps are the curator's own methods, called in its order.
``--history N`` first appends N small charges to the ledger (a project's long history: a query
must not slow down as it grows).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dpkit.engine import Curator
from dpkit.engine.noisy import release
from dpkit.engine.read import read_exact
from engine_bench import QUERY, make_data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--history", type=int, default=0, help="charges in the ledger beforehand")
    ap.add_argument("--no-diagnostics", action="store_true",
                    help="answers without the bounding/clamping estimates (issue 14's default "
                         "adds them: three more noisy counts, a scan of the raw bounded column)")
    args = ap.parse_args()
    extra = {"diagnostics": False} if args.no_diagnostics else {}
    folder = Path(tempfile.mkdtemp(prefix="dpkit-overhead-"))
    cur = Curator.create(folder / "p.dpkit", epsilon=1000.0, accountant="pure")
    cur.add_table("rec", make_data(args.rows), bounds={"x": (0, 100)},
                  domains={"g": list(range(10))})
    cur.close()
    cur = Curator.open(folder / "p.dpkit")
    if args.history:
        from dpkit import events as ev

        for _ in range(args.history):
            cur.ledger.charge(ev.PureDP(1e-9), analyst="history", query="earlier")
        cur.close()
        cur = Curator.open(folder / "p.dpkit")  # as a later session would find it
    query = QUERY.format(t="rec")
    con = duckdb.connect()
    con.execute(f"ATTACH '{folder / 'p.dpkit' / 'data.duckdb'}' AS d (READ_ONLY)")
    plain = QUERY.format(t=f"d.priv.{cur.tables()['rec'].stored_name}")
    for _ in range(5):
        cur.sql(query, epsilon=0.01, **extra)
        con.execute(plain).fetchall()
    steps = ["plan", "pre-check", "prepare + dry run", "read (DuckDB)", "ledger commit",
             "noise + result", "whole cur.sql", "plain DuckDB"]
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        plan = cur._plan(query, epsilon=0.01, rho=None, delta=None, noise="laplace",
                         level=0.95, bounds=None, **extra)
        t1 = time.perf_counter()
        cur._cost(plan, cur.analyst, None)
        t2 = time.perf_counter()
        prepared = cur._preparer.prepare(plan, cur._tables_version())
        t3 = time.perf_counter()
        exact = read_exact(cur._backend, prepared)
        t4 = time.perf_counter()
        entry = cur.ledger.charge(plan.event, analyst=cur.analyst, query=query,
                                  delta_share=None, details={})
        t5 = time.perf_counter()
        release(plan, exact, source=None, insecure=False, epsilon_cost=0.01,
                ledger_seq=entry.seq, remaining=None, scratch=cur._backend.scratch)
        t6 = time.perf_counter()
        cur.sql(query, epsilon=0.01, **extra)
        t7 = time.perf_counter()
        con.execute(plain).fetchall()
        t8 = time.perf_counter()
        marks = [t0, t1, t2, t3, t4, t5, t6, t7, t8]
        for k, a, b in zip(steps, marks[:-1], marks[1:], strict=True):
            times[k].append((b - a) * 1000.0)
    print(f"{args.rows:,} rows, {args.history:,} earlier charges, {args.repeat} interleaved "
          f"rounds (ms)")
    for k, v in times.items():
        print(f"  {k:18s} median {statistics.median(v):7.2f}   best {min(v):7.2f}")
    ratio = statistics.median(a / b for a, b in zip(times["whole cur.sql"],
                                                    times["plain DuckDB"], strict=True))
    print(f"  whole / plain (paired median) {ratio:.2f}x")
    cur.close()


if __name__ == "__main__":
    main()
