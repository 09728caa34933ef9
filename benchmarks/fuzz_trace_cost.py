"""Benchmark: what the side-channel fuzzer's work trace costs (the CI fuzz with and without it).

    PYTHONPATH=$PWD/src python benchmarks/fuzz_trace_cost.py              # 2 pairs, ~10 min
    PYTHONPATH=$PWD/src python benchmarks/fuzz_trace_cost.py --queries 200 --pairs 1

Runs the CI fuzz (``tests/attacks/test_side_channels.py``: the PEOPLE table, the WARDS public
table, seed 2024, the approx and zcdp accountants) with ``trace=False`` and ``trace=True``,
interleaved (the order alternates per pair, so load drift does not favour one side), and prints
each run's CPU seconds (``time.process_time``, less sensitive to a shared machine's load than
wall time), wall seconds and the 1-minute load average, then the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "attacks"))

from test_side_channels import PEOPLE, WARDS

from dpkit.attacks import side_channels as sc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=1200)
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.pairs):
        for trace in ((False, True) if i % 2 == 0 else (True, False)):
            load = os.getloadavg()[0]
            w, c = time.perf_counter(), time.process_time()
            rep = sc.fuzz(PEOPLE, public=[WARDS], queries=args.queries, seed=2024,
                          accountants=("approx", "zcdp"), max_findings=1, trace=trace)
            c, w = time.process_time() - c, time.perf_counter() - w
            cpu[trace].append(c)
            print(f"trace={trace!s:5} cpu {c:6.1f} s  wall {w:6.1f} s  load {load:5.2f}  "
                  f"comparisons {rep.comparisons}  findings {len(rep.findings)}", flush=True)
    off, on = statistics.median(cpu[False]), statistics.median(cpu[True])
    print(f"median cpu: off {off:.1f} s, on {on:.1f} s, ratio {on / off:.3f} "
          f"(off {min(cpu[False]):.1f}-{max(cpu[False]):.1f}, "
          f"on {min(cpu[True]):.1f}-{max(cpu[True]):.1f})")


if __name__ == "__main__":
    main()
