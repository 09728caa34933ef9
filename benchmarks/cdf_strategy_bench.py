"""What the CDF family's strategy choice costs a query: the first ``cdf`` of a fresh process
(the CLI's case: ``dpkit cdf``, one process per query) and the planning alone, on a project
whose strategy cache on disk is cold (first query ever) or warm (every later process).

Each measurement runs in its own process (``--repeats`` of each), with one BLAS thread;
printed: the median and (min-max) of the query's and its planning's (``families.plan``:
grid, workload, strategy choice, noise; no row read) CPU seconds (the process's: robust to a
shared machine's load) and wall seconds, and the 1-minute load average. ``--cells`` sets the
grid (default 1024, the largest the optimised strategies cover). ``--trees A B``: source
trees (``src`` folders) to compare, taking turns in every repeat (e.g. the branch's base,
extracted with ``git archive BASE src | tar -x -C /tmp/base``, against ``src``).

    python benchmarks/cdf_strategy_bench.py --repeats 7 --trees /tmp/base/src src
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
t, c = time.perf_counter(), time.process_time()
if what == "plan":
    ctx = cur._families(None)
    plan(ctx, families.CdfAsk(table="t", column="x", bins=cells), families.Target(epsilon=eps))
else:
    cur.cdf("t", "x", epsilon=eps, bins=cells)
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c}))
"""


def child(tree: str | None, path: Path, cells: int, eps: float, what: str
          ) -> tuple[float, float]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if tree is not None:
        env["PYTHONPATH"] = str(Path(tree).resolve())
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(cells), str(eps), what],
                         check=True, capture_output=True, text=True, env=env)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return float(got["cpu"]), float(got["wall"])


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


STEPS = (("cold: first query", 0.5, "cdf"), ("warm: query, same epsilon", 0.5, "cdf"),
         ("warm: query, other epsilon", 0.7, "cdf"), ("warm: planning alone", 0.6, "plan"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cells", type=int, default=1024)
    ap.add_argument("--trees", nargs="*", default=[None])
    a = ap.parse_args()
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            for j, tree in enumerate(a.trees):
                path = Path(tmp) / f"p{i}-{j}.dpkit"
                make(path)  # a fresh project: its strategy cache is empty
                for name, eps, what in STEPS:
                    rows.setdefault((str(tree), name), []).append(
                        child(tree, path, a.cells, eps, what))
    for (tree, name), xs in rows.items():
        print(f"{tree:24s} {name:28s} cpu {stats([c for c, _ in xs])} s, "
              f"wall {stats([w for _, w in xs])} s")
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}; {time.strftime('%H:%M:%S')}")


if __name__ == "__main__":
    main()
