"""What keeping late answers in the project folder costs (:mod:`dpkit.server.answers`).

    python benchmarks/late_answers_bench.py [--kept 1000] [--repeats 3]

A 504 writes one sealed record and its work's end another (each after sweeping the folder:
the cost grows with the answers kept), and a poll reads and opens one; a request answered
within its timeout touches neither. Fills a store with ``--kept`` answers of a two-group
query's JSON, then times ``keep`` of work already done (both writes and sweeps, on a full
folder) and ``get``; prints the median [min-max] per call over the repeats, with the
``uptime`` load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from dpkit.server.answers import AnswerStore, plain_finish

ANSWER = {"columns": ["g", "n"], "rows": [["a", 667.0], ["b", 1333.0]],
          "intervals": {"n": [[600.0, 734.0], [1266.0, 1400.0]]},
          "charge": {"epsilon": 0.1, "delta": 0.0}, "warnings": [], "notes": []}


def _done() -> Future[Any]:
    f: Future[Any] = Future()
    f.set_result(ANSWER)
    return f


def one(kept: int) -> tuple[float, float]:
    """Seconds per ``keep`` into a full store and per ``get``."""
    with tempfile.TemporaryDirectory() as tmp:
        store = AnswerStore(Path(tmp) / "answers", count=kept)
        ids = [store.keep("alice", _done(), plain_finish, limit=30.0) for _ in range(kept)]
        n = 100
        t0 = time.perf_counter()
        for _ in range(n):
            ids.append(store.keep("alice", _done(), plain_finish, limit=30.0))
        t1 = time.perf_counter()
        for ident in ids[-n:]:
            assert store.get(ident, "alice", owner=False) is not None
        t2 = time.perf_counter()
        store.close()
    return (t1 - t0) / n, (t2 - t1) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kept", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print("load before:", os.getloadavg())
    runs = [one(args.kept) for _ in range(args.repeats)]
    for i, what in enumerate(("keep (a 504)", "get (a poll)")):
        ms = [r[i] * 1000 for r in runs]
        print(f"{what}: {statistics.median(ms):.3f} ms [{min(ms):.3f}-{max(ms):.3f}] "
              f"with {args.kept} answers kept")
    print("load after:", os.getloadavg())


if __name__ == "__main__":
    main()
