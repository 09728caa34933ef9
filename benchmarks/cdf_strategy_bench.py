"""What the CDF family's strategy choice costs a query: the first ``cdf`` of a fresh process
(the CLI's case: ``dpkit cdf``, one process per query) and the planning alone, on a project
whose strategy cache on disk is cold (first query ever) or warm (every later process).

Each measurement runs in its own process (``--repeats`` of each); printed: the median and
(min-max) seconds of the query and of its planning (``families.plan``: grid, workload,
strategy choice, noise; no row read), and the 1-minute load average (the machine may be
shared). ``--cells`` sets the grid (default 1024, the largest the optimised strategies cover).

    python benchmarks/cdf_strategy_bench.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from dpkit.engine import Curator
from dpkit.engine import families
from dpkit.engine.families.plan import plan
import dpkit.release.mechanism, dpkit.release.optimize  # imports are not the choice's cost
path, cells, eps, what = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
cur = Curator.open(path)
t = time.perf_counter()
if what == "plan":
    ctx = cur._families(None)
    plan(ctx, families.CdfAsk(table="t", column="x", bins=cells), families.Target(epsilon=eps))
else:
    cur.cdf("t", "x", epsilon=eps, bins=cells)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def child(path: Path, cells: int, eps: float, what: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(cells), str(eps), what],
                         check=True, capture_output=True, text=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def make(path: Path) -> None:
    import numpy as np
    import pandas as pd

    from dpkit.engine import Curator

    cur = Curator.create(path, epsilon=1000.0, delta=0.0)
    x = np.random.default_rng(0).uniform(0, 1000, 5000)
    cur.add_table("t", pd.DataFrame({"x": x}), bounds={"x": (0.0, 1000.0)})
    cur.close()


def stats(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cells", type=int, default=1024)
    a = ap.parse_args()
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            path = Path(tmp) / f"p{i}.dpkit"
            make(path)  # a fresh project: its strategy cache is empty
            rows.setdefault("cold: first query", []).append(child(path, a.cells, 0.5, "cdf"))
            rows.setdefault("warm: query, same epsilon", []).append(
                child(path, a.cells, 0.5, "cdf"))
            rows.setdefault("warm: query, other epsilon", []).append(
                child(path, a.cells, 0.7, "cdf"))
            rows.setdefault("warm: planning alone", []).append(child(path, a.cells, 0.6, "plan"))
    for k, xs in rows.items():
        print(f"{k:30s} {stats(xs)} s")
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}; {time.strftime('%H:%M:%S')}")


if __name__ == "__main__":
    main()
