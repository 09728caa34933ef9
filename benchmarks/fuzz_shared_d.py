"""Benchmark: the side-channel fuzzer with D's project shared by the neighbour kinds (today)
against one D project per pair (before), on the CI fuzz runs; checks both report the same.

    PYTHONPATH=$PWD/src python benchmarks/fuzz_shared_d.py               # 2 rounds, ~10 min
    PYTHONPATH=$PWD/src python benchmarks/fuzz_shared_d.py --rounds 1 --queries 300

Runs the CI fuzz (``tests/attacks/test_side_channels.py``: the PEOPLE table, the WARDS public
table, seed 2024, the approx and zcdp accountants; and the PLD run, seed 2025, 150 queries) both
ways, interleaved (the order alternates per round, so load drift favours neither), and prints
each run's CPU seconds (``time.process_time``: less sensitive than wall time to a shared
machine's load), wall seconds and the 1-minute load average, then the medians and their ratio.
It fails if the two ways differ in comparisons, outcome counts or findings: sharing must
change the time only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "attacks"))

from test_side_channels import PEOPLE, WARDS

from dpkit.attacks import side_channels as sc
from dpkit.attacks.side_channels import runner

_shared_init = runner._Pair.__init__


def _per_pair_init(self: Any, *args: Any, side: Any = None, **kw: Any) -> None:
    _shared_init(self, *args, **kw)  # the shared D ignored: each pair opens its own


def _face(rep: sc.Report) -> Any:
    return (rep.comparisons, dict(rep.outcomes), rep.skipped,
            [(f.check, f.fields, f.query.python(), f.neighbour, f.accountant)
             for f in rep.findings])


def _run(shared: bool, kw: dict[str, Any]) -> tuple[float, float, Any]:
    runner._Pair.__init__ = _shared_init if shared else _per_pair_init  # type: ignore[method-assign]
    w, c = time.perf_counter(), time.process_time()
    try:
        rep = sc.fuzz(PEOPLE, public=[WARDS], max_findings=1, **kw)
    finally:
        runner._Pair.__init__ = _shared_init  # type: ignore[method-assign]
    return time.process_time() - c, time.perf_counter() - w, _face(rep)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--queries", type=int, default=1200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    runs = {"ci": {"queries": args.queries, "seed": 2024, "accountants": ("approx", "zcdp")},
            "pld": {"queries": 150, "seed": 2025, "accountants": ("pld",)}}
    for name, kw in runs.items():
        cpu: dict[bool, list[float]] = {False: [], True: []}
        faces = set()
        for i in range(args.rounds):
            for shared in ((False, True) if i % 2 == 0 else (True, False)):
                load = os.getloadavg()[0]
                c, w, face = _run(shared, kw)
                faces.add(repr(face))
                cpu[shared].append(c)
                print(f"{name} {'shared D ' if shared else 'D per pair'}: {c:6.1f} s CPU, "
                      f"{w:6.1f} s wall, load {load:.1f}, {face[0]} comparisons, "
                      f"{len(face[3])} findings", flush=True)
        if len(faces) != 1:
            sys.exit(f"{name}: the two ways reported differently: {sorted(faces)}")
        a, b = statistics.median(cpu[False]), statistics.median(cpu[True])
        print(f"{name}: median CPU {a:.1f} s (D per pair) -> {b:.1f} s (shared D), ratio "
              f"{b / a:.2f}; spread {min(cpu[True]):.1f}-{max(cpu[True]):.1f} s shared, "
              f"{min(cpu[False]):.1f}-{max(cpu[False]):.1f} s per pair; same report: yes")


if __name__ == "__main__":
    main()
