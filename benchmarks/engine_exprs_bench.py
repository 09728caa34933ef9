"""Curator benchmark: aggregates over expressions and FILTER, against the bare-column form.

An aggregate over an expression (``SUM(x * 2 + 1)``, ``SUM(CASE WHEN ...)``, ``SUM(x) FILTER
(WHERE ...)``) clamps each column, evaluates the expression under DuckDB's ``TRY`` and clamps
the value again; the bare form clamps one column. This script times, on the same project and
the same rows, the exact read of the one compiled statement (``Curator._execute``, no noise,
no ledger) for::

    SUM(x)                                            -- bare column (the reference)
    SUM(x * 2 + 1)                                    -- arithmetic
    SUM(CASE WHEN g > 4 THEN x ELSE 0 END)            -- CASE
    SUM(x) FILTER (WHERE g > 4)                       -- FILTER
    SUM(x) ... WHERE g > 4                            -- the same rows by WHERE (reference)
    COUNT(*) FILTER (WHERE g > 4)                     -- a conditional count

at record level and at user level (at most 5 rows per unit), interleaved rounds, the median
and spread (min-max) of ``--repeat`` runs, and the median of per-round ratios to ``SUM(x)``.
Plain DuckDB of the same aggregate is timed beside it (read-only attach of the project file).

    python benchmarks/engine_exprs_bench.py                 # 1M rows, 7 repeats
    python benchmarks/engine_exprs_bench.py --rows 200000 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_bench
from dpkit.engine import Curator
from engine_bench import timed

FORMS = {
    "bare": ("SUM(x)", ""),
    "arith": ("SUM(x * 2 + 1)", ""),
    "case": ("SUM(CASE WHEN g > 4 THEN x ELSE 0 END)", ""),
    "filter": ("SUM(x) FILTER (WHERE g > 4)", ""),
    "where": ("SUM(x)", " WHERE g > 4"),
    "count_filter": ("COUNT(*) FILTER (WHERE g > 4)", ""),
}


def bench(rows: int, repeat: int, workdir: Path) -> dict[str, Any]:
    data = engine_bench.make_data(rows)
    path = workdir / "exprs.dpkit"
    cur = Curator.create(path, epsilon=1000.0, accountant="pure")
    cur.add_table("rec", data, bounds={"x": (0, 100)})
    cur.add_table("usr", data, privacy_unit="uid", max_rows_per_unit=5, bounds={"x": (0, 100)})
    out: dict[str, Any] = {}
    for table in ("rec", "usr"):
        plans = {k: cur._plan(f"SELECT {agg} FROM {table}{w}", epsilon=1.0, rho=None,
                              delta=None, noise="laplace", level=0.95, bounds=None)
                 for k, (agg, w) in FORMS.items()}
        times: dict[str, list[float]] = {k: [] for k in FORMS}
        for k in FORMS:  # warm-up: prepare (dry run) and the first read
            cur._execute(plans[k])
        for _ in range(repeat):
            for k in FORMS:
                times[k].append(timed(lambda k=k, plans=plans: cur._execute(plans[k])))
        out[table] = times
    rel = f"d.priv.{cur.tables()['rec'].stored_name}"
    cur.close()
    con = duckdb.connect()
    con.execute("SET enable_progress_bar=false")
    con.execute(f"ATTACH '{path / 'data.duckdb'}' AS d (READ_ONLY)")
    plain: dict[str, list[float]] = {}
    for k, (agg, w) in FORMS.items():
        q = f"SELECT {agg} FROM {rel}{w}"
        con.execute(q).fetchall()
        plain[k] = [timed(lambda q=q: con.execute(q).fetchall()) for _ in range(repeat)]
    con.close()
    out["plain_duckdb_rec"] = plain
    return out


def report(res: dict[str, Any]) -> None:
    for table, times in res.items():
        if not times:
            continue
        print(f"\n{table}: median ms (min-max), ratio to SUM(x) (median of rounds)")
        base = times["bare"]
        for k, ts in times.items():
            ratios = [t / b for t, b in zip(ts, base, strict=True)]
            print(f"  {k:13s} {statistics.median(ts) * 1e3:8.1f} ({min(ts) * 1e3:.1f}-"
                  f"{max(ts) * 1e3:.1f})   x{statistics.median(ratios):.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        report(bench(args.rows, args.repeat, Path(d)))


if __name__ == "__main__":
    main()
