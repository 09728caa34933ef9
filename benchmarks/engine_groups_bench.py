"""Curator benchmark: per-group exponential mechanisms over many groups (quantiles, top-k).

Times, through ``cur.sql(...)`` end to end, on a table with declared public keys::

    SELECT g, MEDIAN(x) AS m FROM t GROUP BY g                      (K = 100k and 1M groups)
    SELECT g, COUNT(*) AS n FROM t GROUP BY g ORDER BY n DESC LIMIT 10   (among 1M groups)

MEDIAN runs three exact exponential mechanisms per group (point, low end, high end of its
interval); top-10 runs ten peeling rounds of the exponential mechanism over all candidates.
Run it once per dpkit version and compare::

    git worktree add /tmp/wt_before <commit>
    PYTHONPATH=/tmp/wt_before/src python benchmarks/engine_groups_bench.py --label before
    python benchmarks/engine_groups_bench.py --label after
    python benchmarks/engine_groups_bench.py --compare      # ratios before / after

Results are merged into ``benchmarks/results/engine_groups.json`` under ``--label`` (cases of
several runs with the same label are merged). Each case
reports the best and median of ``--repeat`` runs (wall-clock seconds).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import dpkit as dp
from dpkit.engine import Curator

RESULTS = Path(__file__).resolve().parent / "results" / "engine_groups.json"


def make_data(rows: int, keys: int, seed: int = 11) -> dict[str, np.ndarray]:
    """``rows`` rows, group ``g`` uniform over ``[0, keys)``, value ``x`` uniform in [0, 100)
    (3 decimals), each row its own unit (record level)."""
    src = dp.noise.seeded(seed)
    g = dp.noise.uniform_int(keys, rows, source=src).astype(np.int64)
    x = np.round(dp.noise.uniform_float01(rows, source=src) * 100.0, 3)
    return {"g": g, "x": x}


def cases(sizes: list[int], topk_keys: int) -> list[tuple[str, int, str]]:
    out = [(f"median_{k}", k, "SELECT g, MEDIAN(x) AS m FROM t GROUP BY g") for k in sizes]
    if topk_keys > 0:
        out.append((f"top10_{topk_keys}", topk_keys,
                    "SELECT g, COUNT(*) AS n FROM t GROUP BY g ORDER BY n DESC LIMIT 10"))
    return out


def run(sizes: list[int], topk_keys: int, rows_per_key: int, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, keys, query in cases(sizes, topk_keys):
            data = make_data(rows_per_key * keys, keys)
            cur = Curator.create(Path(tmp) / f"{name}.dpkit", epsilon=1000.0, accountant="pure")
            cur.add_table("t", data, bounds={"x": (0, 100)}, domains={"g": list(range(keys))})
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                res = cur.sql(query, epsilon=1.0)
                times.append(time.perf_counter() - t0)
            shown = len(res.to_pandas())
            cur.close()
            out[name] = {"best": min(times), "median": statistics.median(times),
                         "groups": keys, "rows": rows_per_key * keys, "shown": shown}
            print(f"{name:>16}: best {min(times):8.2f} s  median "
                  f"{statistics.median(times):8.2f} s  ({shown} rows shown)", flush=True)
    return out


def _load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000],
                    help="group counts for MEDIAN")
    ap.add_argument("--topk-keys", type=int, default=1_000_000, help="0: no top-k case")
    ap.add_argument("--rows-per-key", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--label", default="after")
    ap.add_argument("--compare", action="store_true",
                    help="print before/after ratios from the results file and exit")
    args = ap.parse_args()
    if not args.compare:
        print(f"dpkit from {Path(dp.__file__).parent}", flush=True)
        got = run(args.sizes, args.topk_keys, args.rows_per_key, args.repeat)
        stored = _load()  # re-read: another run may have written meanwhile
        old = stored.get(args.label, {}).get("cases", {})
        stored[args.label] = {"machine": platform.platform(), "python": sys.version.split()[0],
                              "cases": {**old, **got}}
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    stored = _load()
    before = stored.get("before", {}).get("cases", {})
    after = stored.get("after", {}).get("cases", {})
    for name in sorted(set(before) & set(after)):
        b, a = before[name]["best"], after[name]["best"]
        print(f"{name:>16}: before {b:8.2f} s  after {a:8.2f} s  speed-up x{b / a:.1f}")


if __name__ == "__main__":
    main()
