"""The analyst service under load and faults, on loopback (issue 17 item 5).

    python benchmarks/service_bench.py                 # all phases, SQLite ledger
    python benchmarks/service_bench.py --quick         # a short run (100k rows, 5 kills)
    python benchmarks/service_bench.py --ledger postgresql://user@127.0.0.1/db

Phases (each against real ``dpkit serve`` processes, clients are ``dpkit.Client`` threads in
this process, so client and server share the machine's cores):

1. latency: one analyst, sequential grouped COUNTs over ``--rows`` rows with declared keys
   (16 groups), p50/p99 per query, with and without the answer diagnostics (the default
   spends 5% of epsilon estimating rows dropped by bounding: README), on a server whose
   answers leave as soon as they are made (the service's own work) and, interleaved, on one
   with ``dpkit serve``'s default timing classes (``latency_paced``: what an analyst waits);
   baseline, interleaved in the same run: the same query on a curator in this process (no
   HTTP); also the first request of an analyst (its curator opened) against the cached ones;
2. throughput: ``--analysts`` analysts (8) querying at once for ``--seconds``, over
   ``--workers`` (2) server processes: queries/s; baseline, interleaved: 8 curators in this
   process, one thread each;
3. race: 32 clients over 2 server processes for the last of a budget (1.0, queries of 0.3:
   exactly 3 fit), ``--races`` rounds: overspend = answers beyond 3, and spent > budget;
4. kill -9: a server process killed mid-load ``--kills`` (25) times and restarted; then the
   ledger's chain is verified (no half-written entry) and every answer received is matched to
   its charge row (``ledger_seq``: same analyst, same SQL): an answer without its charge would
   be a privacy loss; a charge without an answer (the process died after charging) is budget
   lost, which the design accepts.

Phases 2-4 measure capacity and faults: their servers run with ``--answer-deadline-ms``
(default 0, timing classes off; pass 250 for dpkit serve's default, under which one analyst's
sequential queries are held to 4 a second).

``--ledger``: where the projects keep their ledgers: ``sqlite`` (default, ``ledger.sqlite`` in
the folder) or a PostgreSQL DSN, passed as ``Curator.create(..., ledger=DSN)`` (the pgledger
branch). Figures go to ``benchmarks/results/service_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp
from dpkit.server.client import Client, QueryRefusedError, ServiceError

ROOT = Path(__file__).resolve().parents[1]
SQL = "SELECT g, COUNT(*) AS n FROM events GROUP BY g"
GROUPS = [f"k{i:02d}" for i in range(16)]


def make_project(folder: Path, *, rows: int, epsilon: float, analysts: int,
                 ledger: str) -> tuple[Path, list[str]]:
    path = folder / "bench.dpkit"
    kw: dict[str, Any] = {} if ledger == "sqlite" else {"ledger": ledger}
    i = np.arange(rows)
    frame = pd.DataFrame({"g": np.array(GROUPS)[i % len(GROUPS)],
                          "x": (i % 100).astype(np.float64)})
    with dp.Curator.create(path, epsilon=epsilon, **kw) as cur:
        cur.add_table("events", frame, domains={"g": GROUPS}, bounds={"x": (0, 100)})
        tokens = [cur.add_analyst(f"a{j}") for j in range(analysts)]
    return path, tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``dpkit serve`` in its own process group, on a fixed port (restartable)."""

    def __init__(self, project: Path, *, workers: int, port: int | None = None,
                 deadline_ms: float | None = 0.0) -> None:
        self.project, self.workers, self.port = project, workers, port or free_port()
        # None: dpkit serve's default timing classes; 0: answers leave as soon as they are made
        self.deadline = [] if deadline_ms is None else ["--answer-deadline-ms", str(deadline_ms)]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        env.pop("DPKIT_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dpkit.cli", "serve", str(self.project), "--port",
             str(self.port), "--workers", str(self.workers), "--rate", "100000",
             "--burst", "100000", *self.deadline], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2):
                    pass
                with Client(self.url, "x") as c:
                    c.request("GET", "/v1/health")
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("dpkit serve did not start in 60 s")

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def latency(url: str, token: str, n: int, diagnostics: bool) -> dict[str, float]:
    times = []
    with Client(url, token) as c:
        for _ in range(5):  # warm: plan cache, DuckDB attach
            c.sql(SQL, epsilon=0.01, diagnostics=diagnostics)
        for _ in range(n):
            t0 = time.perf_counter()
            c.sql(SQL, epsilon=0.01, diagnostics=diagnostics)
            times.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": pct(times, 50), "p99_ms": pct(times, 99), "mean_ms": statistics.mean(times),
            "n": n}


def cache_effect(url: str, tokens: list[str]) -> dict[str, float]:
    """The first request of an analyst (its curator opened: chain verified, data attached)
    against the next ones (the cached curator), ms."""
    first, later = [], []
    for tok in tokens:
        with Client(url, tok) as c:
            t0 = time.perf_counter()
            c.budget()
            first.append((time.perf_counter() - t0) * 1000)
            for _ in range(5):
                t0 = time.perf_counter()
                c.budget()
                later.append((time.perf_counter() - t0) * 1000)
    return {"first_request_ms": statistics.median(first),
            "cached_request_ms": statistics.median(later), "analysts": len(tokens)}


def curator_latency(path: Path, token: str, n: int) -> dict[str, float]:
    """The same query on the curator in this process (no HTTP): the baseline of phase 1."""
    times = []
    with dp.Curator.open(path, token=token) as cur:
        for _ in range(5):
            cur.sql(SQL, epsilon=0.01, diagnostics=False)
        for _ in range(n):
            t0 = time.perf_counter()
            cur.sql(SQL, epsilon=0.01, diagnostics=False)
            times.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": pct(times, 50), "p99_ms": pct(times, 99), "mean_ms": statistics.mean(times),
            "n": n}


def throughput(url: str, tokens: list[str], seconds: float) -> dict[str, float]:
    counts = [0] * len(tokens)
    errors = [0] * len(tokens)
    stop_at = time.monotonic() + seconds
    go = threading.Barrier(len(tokens))

    def run(k: int) -> None:
        with Client(url, tokens[k]) as c:
            c.sql(SQL, epsilon=0.001, diagnostics=False)
            go.wait()
            while time.monotonic() < stop_at:
                try:
                    c.sql(SQL, epsilon=0.001, diagnostics=False)
                    counts[k] += 1
                except ServiceError:
                    errors[k] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(tokens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    return {"queries": sum(counts), "errors": sum(errors), "seconds": took,
            "qps": sum(counts) / took, "analysts": len(tokens)}


def curator_throughput(path: Path, tokens: list[str], seconds: float) -> dict[str, float]:
    """Phase 2's baseline: one curator per analyst in this process, one thread each."""
    curs = [dp.Curator.open(path, token=t) for t in tokens]
    counts = [0] * len(curs)
    for cur in curs:
        cur.sql(SQL, epsilon=0.001, diagnostics=False)
    stop_at = time.monotonic() + seconds

    def run(k: int) -> None:
        while time.monotonic() < stop_at:
            curs[k].sql(SQL, epsilon=0.001, diagnostics=False)
            counts[k] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(curs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    for cur in curs:
        cur.close()
    return {"queries": sum(counts), "seconds": took, "qps": sum(counts) / took,
            "analysts": len(curs)}


def race_round(folder: Path, ledger: str, clients: int, deadline_ms: float) -> dict[str, Any]:
    path, tokens = make_project(folder, rows=10_000, epsilon=1.0, analysts=8, ledger=ledger)
    server = Server(path, workers=2, deadline_ms=deadline_ms)
    server.start()
    wins: list[int] = []
    go = threading.Barrier(clients)

    def run(k: int) -> None:
        with Client(server.url, tokens[k % len(tokens)]) as c:
            c.tables()
            go.wait()
            for _ in range(2):
                try:
                    c.sql(SQL, epsilon=0.3, diagnostics=False)
                    wins.append(k)
                except QueryRefusedError:
                    pass

    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop()
    with dp.Curator.open(path) as cur:
        cur.verify()
        spent = cur.budget().spent
    return {"answers": len(wins), "overspend": max(0, len(wins) - 3), "spent": spent}


def kill_rounds(folder: Path, ledger: str, kills: int, deadline_ms: float) -> dict[str, Any]:
    path, tokens = make_project(folder, rows=100_000, epsilon=1000.0, analysts=4,
                                ledger=ledger)
    server = Server(path, workers=1, deadline_ms=deadline_ms)
    received: list[tuple[str, int | None]] = []
    lock = threading.Lock()
    for r in range(kills):
        server.start()
        stop = threading.Event()

        def run(k: int, stop: threading.Event = stop) -> None:
            c = Client(server.url, tokens[k], timeout=10)
            while not stop.is_set():
                try:
                    res = c.sql(SQL, epsilon=0.01, diagnostics=False)
                    with lock:
                        received.append((f"a{k}", res.ledger_seq))
                except (OSError, ServiceError, ConnectionError):
                    c.close()
                    time.sleep(0.01)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(len(tokens))]
        for t in threads:
            t.start()
        before, deadline = len(received), time.monotonic() + 30
        while len(received) < before + 4 and time.monotonic() < deadline:
            time.sleep(0.01)  # under way: every client has its curator open
        time.sleep(0.005 + 0.02 * (r % 5))  # staggered: kills land at different points
        server.kill9()
        stop.set()
        for t in threads:
            t.join()
    with dp.Curator.open(path) as cur:
        rows = cur.verify()
        charges = {e.seq: e for e in cur.ledger.entries("charge")}
    unmatched = [s for a, s in received if s not in charges or charges[s].analyst != a
                 or charges[s].query != SQL]
    return {"kills": kills, "answers": len(received), "charges": len(charges),
            "ledger_rows_verified": rows, "answers_without_charge": len(unmatched),
            "charges_without_answer": len(charges) - len(received)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3, help="latency repeats (spread)")
    ap.add_argument("--analysts", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--races", type=int, default=5)
    ap.add_argument("--kills", type=int, default=25)
    ap.add_argument("--answer-deadline-ms", type=float, default=0.0,
                    help="timing classes of phases 2-4's servers (0: off)")
    ap.add_argument("--ledger", default="sqlite", help="sqlite, or a PostgreSQL DSN")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "service_bench.json"))
    a = ap.parse_args()
    if a.quick:
        a.rows, a.queries, a.seconds, a.races, a.kills, a.repeats = 100_000, 60, 3.0, 2, 5, 1
    out: dict[str, Any] = {"args": vars(a), "machine": f"{os.cpu_count()} cores (shared)"}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path, tokens = make_project(Path(tmp) / "main", rows=a.rows, epsilon=1000.0,
                                    analysts=a.analysts, ledger=a.ledger)
        out["load_s"] = time.perf_counter() - t0
        out["load_average_before"] = os.getloadavg()
        server = Server(path, workers=1)
        paced = Server(path, workers=1, deadline_ms=None)
        server.start()
        paced.start()
        try:  # interleaved with the in-process baseline: the machine's load moves
            out["curator_cache"] = cache_effect(server.url, tokens[3:])
            for _ in range(a.repeats):
                out.setdefault("latency_curator_in_process", []).append(
                    curator_latency(path, tokens[-1], a.queries))
                out.setdefault("latency_diagnostics_off", []).append(
                    latency(server.url, tokens[0], a.queries, False))
                out.setdefault("latency_default", []).append(
                    latency(server.url, tokens[1], a.queries, True))
                out.setdefault("latency_paced", []).append(
                    latency(paced.url, tokens[2], max(20, a.queries // 4), True))
        finally:
            server.stop()
            paced.stop()
        print(json.dumps({k: out[k] for k in ("latency_curator_in_process",
                                              "latency_diagnostics_off", "latency_default",
                                              "latency_paced")}))
        server = Server(path, workers=a.workers, deadline_ms=a.answer_deadline_ms)
        server.start()
        try:
            throughput(server.url, tokens, 3.0)  # warm: every analyst's curator in each worker
            for _ in range(a.repeats):  # interleaved with the in-process baseline
                out.setdefault("throughput", []).append(
                    throughput(server.url, tokens, a.seconds))
                out.setdefault("throughput_curator_in_process", []).append(
                    curator_throughput(path, tokens, a.seconds))
        finally:
            server.stop()
        print(json.dumps({k: out[k] for k in ("throughput",
                                              "throughput_curator_in_process")}))
        races = [race_round(Path(tmp) / f"race{r}", a.ledger, 32,
                            a.answer_deadline_ms) for r in range(a.races)]
        out["race"] = {"rounds": races, "overspend_total": sum(r["overspend"] for r in races),
                       "max_spent": max(r["spent"] for r in races)}
        print(json.dumps(out["race"]))
        out["kill9"] = kill_rounds(Path(tmp) / "kills", a.ledger, a.kills, a.answer_deadline_ms)
        print(json.dumps(out["kill9"]))
        out["load_average_after"] = os.getloadavg()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))
    print(f"written to {a.out}")


if __name__ == "__main__":
    main()
