"""Wall time of ``POST /v1/query`` on neighbouring datasets, through ``dpkit serve``.

Three projects (constant work on: ε = 20, δ = 1e-3) over D = 5,000 units of one row, D plus
one ordinary unit, and D plus one unit of ``--rows`` rows (each a new group key, x out of
bounds; bounded to 1 row and 1 group per unit), each served by its own ``dpkit serve``
process on loopback. Three query shapes, ``--rounds`` interleaved rounds in a seeded shuffled
order; prints the medians and interquartile ranges and a Mann-Whitney U p-value of D against
each neighbour (docs/attacks.md §6, "Through the service"; FINDINGS.md H).

    PYTHONPATH=$PWD/src python benchmarks/service_timing.py --rows 50000 --rounds 25
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dpkit as dp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "server"))
from conftest import live_server, stop  # the test suite's `dpkit serve` runner

QUERIES = {"count": "SELECT COUNT(*) AS n FROM t",
           "groups": "SELECT g, COUNT(*) AS n FROM t GROUP BY g",
           "sum": "SELECT SUM(x) AS s FROM t"}


def _sides(units: int, rows: int) -> dict[str, pd.DataFrame]:
    base = pd.DataFrame({"uid": np.arange(units), "g": [f"k{i % 20}" for i in range(units)],
                         "x": np.arange(units) % 50 * 1.0})
    one = pd.DataFrame({"uid": [10**9], "g": ["k1"], "x": [3.0]})
    many = pd.DataFrame({"uid": [10**9] * rows, "g": [f"z{i}" for i in range(rows)],
                         "x": [1e9] * rows})
    return {"D": base, "D+1": pd.concat([base, one]), "D+many": pd.concat([base, many])}


def main() -> None:
    import httpx
    from scipy.stats import mannwhitneyu

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=5000)
    ap.add_argument("--rows", type=int, default=50000)
    ap.add_argument("--rounds", type=int, default=25)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpkit-service-timing-"))
    sides = _sides(args.units, args.rows)
    servers, tokens = {}, {}
    try:
        for name, df in sides.items():
            path = tmp / name.replace("+", "_")
            with dp.Curator.create(path, budget=dp.Budget(epsilon=20, delta=1e-3)) as cur:
                cur.add_table("t", df, privacy_unit="uid", max_rows_per_unit=1,
                              max_groups_per_unit=1, bounds={"x": (0, 50)})
                tokens[name] = cur.add_analyst("a")
                print(f"{name}: {len(df)} rows, timing delta {cur.budget().timing_delta}")
            servers[name] = live_server(path)
        times: dict[tuple[str, str], list[float]] = {(q, s): [] for q in QUERIES for s in sides}
        order = list(times)
        rng = random.Random(5)
        with httpx.Client(timeout=60) as client:
            def ask(q: str, s: str) -> float:
                start = time.perf_counter()
                r = client.post(servers[s].url + "/v1/query",
                                json={"sql": QUERIES[q], "epsilon": 0.01, "delta": 1e-8},
                                headers={"Authorization": f"Bearer {tokens[s]}"})
                took = time.perf_counter() - start
                if r.status_code != 200:
                    raise RuntimeError(r.text)
                return took
            for q, s in order:  # warm each server and statement once
                ask(q, s)
            print("load before", os.getloadavg())
            for _ in range(args.rounds):
                rng.shuffle(order)
                for q, s in order:
                    times[(q, s)].append(ask(q, s))
            print("load after", os.getloadavg())
        for q in QUERIES:
            parts = []
            for s in sides:
                lo, hi = np.percentile(times[(q, s)], [25, 75]) * 1000
                parts.append(f"{s} {statistics.median(times[(q, s)]) * 1000:.1f} ms "
                             f"(IQR {lo:.1f}-{hi:.1f})")
            ps = [mannwhitneyu(times[(q, "D")], times[(q, s)]).pvalue for s in ("D+1", "D+many")]
            print(f"{q}: " + " / ".join(parts) + f"; p(D vs D+1) = {ps[0]:.2g}, "
                  f"p(D vs D+many) = {ps[1]:.2g}")
    finally:
        for live in servers.values():
            stop(live)


if __name__ == "__main__":
    main()
