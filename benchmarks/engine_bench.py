"""Curator benchmark: private grouped COUNT + SUM + AVG against the same query in plain DuckDB.

Everything in one run::

    python benchmarks/engine_bench.py                 # 1M and 10M rows
    python benchmarks/engine_bench.py --rows 1000000 --repeat 7 --json out.json

For each size: a table of ``rows`` rows, 10 groups (``g``, public keys declared as a domain), a
value ``x`` in [0, 100] and a unit id ``uid`` (1 to 8 rows per unit, so some units exceed the cap
of 5). Timed, each the best and the median of ``--repeat`` runs, interleaved:

* ``plain``: ``SELECT g, COUNT(*), SUM(x), AVG(x) FROM t GROUP BY g`` in DuckDB on the same
  file (read-only attach, same connection kind as the curator uses);
* ``dpkit record``: ``cur.sql(...)`` on the table registered at record level: parse, validate,
  plan, the one pushed-down statement, the durable ledger charge (SQLite, fsync), noise, result;
* ``hand bounded``: hand-written user-level SQL, clamping ``x`` and keeping at most 5 rows per
  unit with ``ROW_NUMBER() OVER (PARTITION BY uid ORDER BY hash(...))``;
* ``hand bounded (arbitrary rows)``: the same with no ORDER BY in the window (cheaper, but which
  rows survive then depends on the execution, not only on the unit's own rows);
* ``dpkit user``: ``cur.sql(...)`` on the table registered with ``privacy_unit="uid"``,
  ``max_rows_per_unit=5``;
* ``dpkit select record`` / ``dpkit select user``: ``SELECT g, COUNT(*) FROM t GROUP BY g`` with
  *undeclared* keys, in an (ε, δ) project (accountant ``approx``): private partition selection,
  charged through the (ε, δ) accountants; against ``plain count`` (the same in DuckDB) and
  ``hand bounded count`` (COUNT(DISTINCT uid) after the same hand-written bounding).

Ratios are reported three ways: best over best, median over median, and the median of the
ratios measured within each round (the most robust on a shared machine whose load drifts).

Targets (issue 3): record level <= 0.5 s at 1M rows and <= 1.5x plain; user level <= 1.5x hand
bounded; >= 10x faster than OpenDP and SmartNoise SQL.

Peers (``--peers``, at the first size): the same data is written once to Parquet and each peer
runs in its own virtual environment through ``benchmarks/engine_peer_run.py`` (a subprocess), the
same query (per group COUNT(*), SUM(x), AVG(x), x clamped to [0, 100]) at record level and at user
level (<= 5 rows per unit). Set up the environments once::

    python3 -m venv benchmarks/.venvs/opendp && benchmarks/.venvs/opendp/bin/pip install \
        "opendp[polars]==0.16.0" pyarrow
    python3 -m venv benchmarks/.venvs/smartnoise && benchmarks/.venvs/smartnoise/bin/pip install \
        smartnoise-sql pyarrow

A peer that is missing or fails is recorded with its error. Results go to
``benchmarks/results/engine.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

import dpkit as dp
from dpkit.engine import Curator

QUERY = "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM {t} GROUP BY g"
# undeclared keys: the groups are selected privately (an (eps, delta) project)
SEL_QUERY = "SELECT g, COUNT(*) AS n FROM {t} GROUP BY g"


def make_data(rows: int, seed: int = 7, *, groups: int = 10) -> dict[str, np.ndarray]:
    """``rows`` rows: key ``g`` uniform over ``[0, groups)``, value ``x`` in [-10, 110], unit
    ``uid`` with 1 to 8 rows (also used by engine_domains_bench and engine_overhead_bench)."""
    src = dp.noise.seeded(seed)
    # units with 1..8 rows (mean 4.5): draw a row count per unit, then repeat
    n_units = rows // 4 + 1
    per = dp.noise.uniform_int(8, n_units, source=src) + 1
    uid = np.repeat(np.arange(n_units, dtype=np.int64), per)[:rows]
    if len(uid) < rows:
        uid = np.concatenate([uid, np.arange(n_units, n_units + rows - len(uid))])
    perm = dp.noise.permutation(rows, source=src)
    uid = uid[perm]
    g = dp.noise.uniform_int(groups, rows, source=src).astype(np.int64)
    x = np.round(dp.noise.uniform_float01(rows, source=src) * 120.0 - 10.0, 3)
    return {"uid": uid, "g": g, "x": x}


def timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench(rows: int, repeat: int, workdir: Path) -> dict[str, Any]:
    data = make_data(rows)
    project = workdir / f"bench{rows}.dpkit"
    cur = Curator.create(project, epsilon=1000.0, accountant="pure")
    keys = list(range(10))
    t_load = timed(lambda: cur.add_table("rec", data, bounds={"x": (0, 100)},
                                         domains={"g": keys}))
    cur.add_table("usr", data, privacy_unit="uid", max_rows_per_unit=5, bounds={"x": (0, 100)},
                  domains={"g": keys})
    cur.close()
    cur = Curator.open(project)
    # undeclared keys (issue 12): groups chosen by private partition selection, an (eps, delta)
    # project whose every query is charged through the approx accountant
    sel_project = workdir / f"bench{rows}_sel.dpkit"
    sel = Curator.create(sel_project, epsilon=1000.0, delta=1e-3)
    sel.add_table("rec", data, bounds={"x": (0, 100)})
    sel.add_table("usr", data, privacy_unit="uid", max_rows_per_unit=5, bounds={"x": (0, 100)})

    con = duckdb.connect()
    con.execute("SET enable_progress_bar=false")
    con.execute(f"ATTACH '{project / 'data.duckdb'}' AS d (READ_ONLY)")
    # each load writes a fresh relation; the ledger's declaration names it
    rel = f"d.priv.{cur.tables()['rec'].stored_name}"
    usr = f"d.priv.{cur.tables()['usr'].stored_name}"
    plain = QUERY.format(t=rel)
    clamp = "LEAST(GREATEST(x, 0), 100)"
    hand = (f"SELECT g, COUNT(*), SUM({clamp}), AVG({clamp}) FROM (SELECT * FROM {usr} "
            f"QUALIFY ROW_NUMBER() OVER (PARTITION BY uid ORDER BY hash(uid, g, x, 42::UBIGINT))"
            f" <= 5) GROUP BY g")
    hand_count = (f"SELECT g, COUNT(DISTINCT uid) FROM (SELECT * FROM {usr} QUALIFY "
                  "ROW_NUMBER() OVER (PARTITION BY uid ORDER BY hash(uid, g, x, 42::UBIGINT))"
                  " <= 5) GROUP BY g")
    hand_any = (f"SELECT g, COUNT(*), SUM({clamp}), AVG({clamp}) FROM (SELECT * FROM {usr} "
                f"QUALIFY ROW_NUMBER() OVER (PARTITION BY uid) <= 5) GROUP BY g")
    cases = {
        "plain": lambda: con.execute(plain).fetchall(),
        "dpkit record": lambda: cur.sql(QUERY.format(t="rec"), epsilon=0.01),
        "hand bounded": lambda: con.execute(hand).fetchall(),
        "hand bounded (arbitrary rows)": lambda: con.execute(hand_any).fetchall(),
        "dpkit user": lambda: cur.sql(QUERY.format(t="usr"), epsilon=0.01),
        "plain count": lambda: con.execute(SEL_QUERY.format(t=rel)).fetchall(),
        "dpkit select record": lambda: sel.sql(SEL_QUERY.format(t="rec"), epsilon=0.01, delta=1e-9),
        "hand bounded count": lambda: con.execute(hand_count).fetchall(),
        "dpkit select user": lambda: sel.sql(SEL_QUERY.format(t="usr"), epsilon=0.01, delta=1e-9),
    }
    for fn in cases.values():  # warm caches once
        fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for k, fn in cases.items():
            times[k].append(timed(fn))
    con.close()
    cur.close()
    sel.close()
    out = {k: {"best_s": min(v), "median_s": statistics.median(v)} for k, v in times.items()}
    out["_load_s"] = t_load
    def paired(a: str, b: str) -> float:
        """Median over rounds of the ratio within a round (robust to load that drifts)."""
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))

    out["_ratios"] = {
        "record / plain (paired median)": paired("dpkit record", "plain"),
        "user / hand bounded (paired median)": paired("dpkit user", "hand bounded"),
        "record / plain (best)": out["dpkit record"]["best_s"] / out["plain"]["best_s"],
        "record / plain (median)": out["dpkit record"]["median_s"] / out["plain"]["median_s"],
        "user / hand bounded (best)": out["dpkit user"]["best_s"] / out["hand bounded"]["best_s"],
        "user / hand bounded (median)":
            out["dpkit user"]["median_s"] / out["hand bounded"]["median_s"],
        "select record / plain count (paired median)":
            paired("dpkit select record", "plain count"),
        "select user / hand bounded count (paired median)":
            paired("dpkit select user", "hand bounded count"),
        "user / hand arbitrary (best)":
            out["dpkit user"]["best_s"] / out["hand bounded (arbitrary rows)"]["best_s"],
    }
    return out


HERE = Path(__file__).resolve().parent
PEERS = {"opendp": HERE / ".venvs" / "opendp", "smartnoise": HERE / ".venvs" / "smartnoise"}


def run_peers(rows: int, repeat: int, workdir: Path, dpkit_times: dict[str, Any],
              timeout_s: float = 900.0) -> dict[str, Any]:
    """Each peer in its own venv on the same Parquet file; ratios = peer best / dpkit best."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = workdir / f"peers{rows}.parquet"
    pq.write_table(pa.table(make_data(rows)), path)
    out: dict[str, Any] = {}
    for peer, venv in PEERS.items():
        for level, mine in (("record", "dpkit record"), ("user", "dpkit user")):
            key = f"{peer} {level}"
            py = venv / "bin" / "python"
            if not py.exists():
                out[key] = {"error": f"no virtual environment at {venv} (see the module "
                                     f"docstring for the pip command)"}
                continue
            try:
                proc = subprocess.run(
                    [str(py), str(HERE / "engine_peer_run.py"), peer, level, str(path),
                     str(repeat)], capture_output=True, text=True, timeout=timeout_s,
                )
            except subprocess.TimeoutExpired:
                out[key] = {"error": f"timed out after {timeout_s:.0f} s"}
                continue
            if proc.returncode != 0:
                out[key] = {"error": proc.stderr.strip().splitlines()[-1:]}
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            r["best_s"] = min(r["times_s"])
            r["median_s"] = statistics.median(r["times_s"])
            r["dpkit_best_s"] = dpkit_times[mine]["best_s"]
            r["speedup_best"] = r["best_s"] / dpkit_times[mine]["best_s"]
            r["speedup_median"] = r["median_s"] / dpkit_times[mine]["median_s"]
            out[key] = r
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="*", default=[1_000_000, 10_000_000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, default=HERE / "results" / "engine.json",
                    help="write the results here (default benchmarks/results/engine.json)")
    ap.add_argument("--peers", action="store_true",
                    help="also time OpenDP and SmartNoise SQL (own venvs) at the first size")
    ap.add_argument("--peer-repeat", type=int, default=2)
    args = ap.parse_args()
    meta = {
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "dpkit": dp.__version__,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    results: dict[str, Any] = {"meta": meta, "sizes": {}}
    work = Path(tempfile.mkdtemp(prefix="dpkit-bench-"))
    try:
        for rows in args.rows:
            r = bench(rows, args.repeat, work)
            results["sizes"][str(rows)] = r
            print(f"\n== {rows:,} rows, 10 groups, COUNT + SUM + AVG (public keys) ==")
            for k, v in r.items():
                if not k.startswith("_"):
                    print(f"  {k:32s} best {v['best_s'] * 1000:8.1f} ms   median "
                          f"{v['median_s'] * 1000:8.1f} ms")
            for k, v in r["_ratios"].items():
                print(f"  {k:32s} {v:6.2f}x")
            print(f"  (loading the table into the project took {r['_load_s']:.1f} s)")
            if args.peers and rows == args.rows[0]:
                peers = run_peers(rows, args.peer_repeat, work, r)
                results["peers"] = {"rows": rows, "epsilon": 1.0, "runs": peers,
                                    "dpkit_epsilon": 0.01}
                for k, v in peers.items():
                    if "error" in v:
                        print(f"  {k:32s} ERROR {v['error']}")
                    else:
                        print(f"  {k:32s} best {v['best_s']:8.2f} s  ({v['version']}): dpkit is "
                              f"{v['speedup_best']:.0f}x faster (best), "
                              f"{v['speedup_median']:.0f}x (median)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["meta"]["load_average_after"] = os.getloadavg()
    print(f"\nmachine: {meta['machine']}, {meta['cpus']} cpus, load average before "
          f"{meta['load_average'][0]:.1f}, after {results['meta']['load_average_after'][0]:.1f}")
    results["meta"]["command"] = " ".join(["python", *sys.argv])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"results written to {args.json}")


if __name__ == "__main__":
    main()
