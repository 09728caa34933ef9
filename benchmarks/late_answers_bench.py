"""What keeping late answers costs, in the project folder (:mod:`dpkit.server.answers`) and
in PostgreSQL (:mod:`dpkit.server.answers_pg`, for a service on several hosts).

    python benchmarks/late_answers_bench.py [--kept 1000] [--repeats 3] [--store both]

PostgreSQL: ``$DPKIT_TEST_PG_DSN``, else a throwaway local cluster (tests/engine/pg_cluster.py,
with its default durability: fsync on), over loopback.

A 504 writes one sealed record and its work's end another (each after sweeping the store:
the cost grows with the answers kept), and a poll reads and opens one (a running one's also
asks whether its process lives: a lock in the folder, ``pg_locks`` in PostgreSQL); a request
answered within its timeout touches neither. Fills a store with ``--kept`` answers of a
two-group query's JSON, then times ``keep`` of work already done (both writes and sweeps, on
a full store), ``get`` of those, and ``get`` of a running one; prints the median [min-max]
per call over the repeats, with the ``uptime`` load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))
from pg_cluster import throwaway_cluster, unavailable

from dpkit.noise import token_hex
from dpkit.server.answers import Answers, AnswerStore, plain_finish

ANSWER = {"columns": ["g", "n"], "rows": [["a", 667.0], ["b", 1333.0]],
          "intervals": {"n": [[600.0, 734.0], [1266.0, 1400.0]]},
          "charge": {"epsilon": 0.1, "delta": 0.0}, "warnings": [], "notes": []}


def _done() -> Future[Any]:
    f: Future[Any] = Future()
    f.set_result(ANSWER)
    return f


def one(kept: int, opened: Callable[[int], Answers]) -> tuple[float, float, float]:
    """Seconds per ``keep`` into a full store, per ``get`` of a finished answer and per
    ``get`` of a running one (which asks whether its process lives)."""
    store = opened(kept)
    try:
        ids = [store.keep("alice", _done(), plain_finish, limit=30.0) for _ in range(kept)]
        n = 100
        t0 = time.perf_counter()
        for _ in range(n):
            ids.append(store.keep("alice", _done(), plain_finish, limit=30.0))
        t1 = time.perf_counter()
        for ident in ids[-n:]:
            assert store.get(ident, "alice", owner=False) is not None
        t2 = time.perf_counter()
        running = store.keep("alice", Future(), plain_finish, limit=30.0)
        t3 = time.perf_counter()
        for _ in range(n):
            got = store.get(running, "alice", owner=False)
            assert got is not None and got.answer is None and not got.lost
        t4 = time.perf_counter()
    finally:
        store.close()
    return (t1 - t0) / n, (t2 - t1) / n, (t4 - t3) / n


@contextlib.contextmanager
def folder() -> Iterator[Callable[[int], Answers]]:
    with tempfile.TemporaryDirectory() as tmp:
        yield lambda kept: AnswerStore(Path(tmp) / token_hex(16)[:8], count=kept)


@contextlib.contextmanager
def postgres() -> Iterator[Callable[[int], Answers]]:
    import psycopg

    from dpkit.server.answers_pg import PostgresAnswers

    reason = unavailable()
    if reason is not None:
        raise SystemExit(f"no PostgreSQL: {reason}")
    with throwaway_cluster(fsync=True) as dsn:
        made: list[str] = []

        def opened(kept: int) -> Answers:
            made.append("dpkit_bench_" + token_hex(16)[:12])
            return PostgresAnswers(dsn, made[-1], b"k" * 32, count=kept)

        try:
            yield opened
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for schema in made:
                    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kept", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--store", choices=["folder", "postgres", "both"], default="both")
    args = ap.parse_args()
    stores = {"folder": folder, "postgres": postgres}
    names = list(stores) if args.store == "both" else [args.store]
    print("load before:", os.getloadavg())
    for name in names:
        with stores[name]() as opened:
            runs = [one(args.kept, opened) for _ in range(args.repeats)]
        for i, what in enumerate(("keep (a 504 and its end)", "get (a poll, done)",
                                  "get (a poll, running)")):
            ms = [r[i] * 1000 for r in runs]
            print(f"{name:8s} {what}: {statistics.median(ms):.3f} ms "
                  f"[{min(ms):.3f}-{max(ms):.3f}] with {args.kept} answers kept")
    print("load after:", os.getloadavg())


if __name__ == "__main__":
    main()
