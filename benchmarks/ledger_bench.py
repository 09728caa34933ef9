"""The ledger on SQLite and on PostgreSQL: charges per second, races, kill -9.

``python benchmarks/ledger_bench.py [--charges 400] [--repeat 3] [--races 5] [--kills 25]
[--dsn DSN]``: for each store, as its users would run it (SQLite: ``ledger.sqlite`` in a folder,
WAL + ``synchronous=FULL``; PostgreSQL: a throwaway cluster with its default durability,
``fsync=on`` and ``synchronous_commit=on``, started from Debian's ``postgresql`` package, or
``--dsn``), measures

* **single**: durable check-and-charge calls per second from one process (``Ledger.charge``);
* **8 processes**: total charges per second from 8 processes charging at once;
* **race**: 32 processes charge epsilon 0.1 against a budget with 0.1 left, ``--races`` times:
  successes beyond the one that fits are the overspend (must be 0);
* **kill -9**: a process charging in a loop is killed at a random moment, ``--kills`` times;
  afterwards the chain must verify (no half-written row) and every charge the process reported
  as committed must be there (no lost row).

Results go to ``benchmarks/results/ledger.json``. The machine may be shared: read the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))
from pg_cluster import throwaway_cluster, unavailable

from dpkit import events as ev
from dpkit.engine.ledger import Ledger

WORKER = textwrap.dedent(
    """
    import sys, time
    from dpkit import events as ev
    from dpkit.accounting import BudgetExceeded
    from dpkit.engine.ledger import Ledger
    path, mode, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    led = Ledger.open(path)
    while time.time() < start:  # start together
        time.sleep(0.0005)
    ok = 0
    for i in range(n):
        try:
            e = led.charge(ev.PureDP(0.1 if mode == "race" else 1e-6), analyst="w",
                           query=f"{mode} {i}")
        except BudgetExceeded:
            continue
        ok += 1
        if mode == "loop":  # reported only once committed
            print(e.seq, flush=True)
    print("ok", ok, flush=True)
    """
)


def _new(folder: Path, dsn: str | None, epsilon: float) -> Ledger:
    name = f"l{time.monotonic_ns()}." + ("sqlite" if dsn is None else "pg")
    return Ledger.create(folder / name, epsilon=epsilon, delta=0.0, accountant="pure", dsn=dsn)


def _workers(path: Path, mode: str, n: int, procs: int) -> tuple[list[str], float]:
    start = time.time() + 2.0 + 0.3 * procs  # every interpreter imported before the start
    ps = [subprocess.Popen([sys.executable, "-c", WORKER, str(path), mode, str(n), str(start)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for _ in range(procs)]
    outs = []
    for p in ps:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(err)
        outs.append(out)
    return outs, time.time() - start


def single(folder: Path, dsn: str | None, charges: int) -> float:
    led = _new(folder, dsn, 1000.0)
    t0 = time.perf_counter()
    for i in range(charges):
        led.charge(ev.PureDP(1e-6), analyst="w", query=f"q{i}")
    rate = charges / (time.perf_counter() - t0)
    led.close()
    return rate


def parallel(folder: Path, dsn: str | None, charges: int) -> float:
    led = _new(folder, dsn, 1000.0)
    _, wall = _workers(led.path, "bulk", charges // 8, 8)
    assert len(Ledger.open(led.path).entries("charge")) == 8 * (charges // 8)
    return 8 * (charges // 8) / wall


def race(folder: Path, dsn: str | None) -> int:
    """Successes beyond the one charge of 0.1 that fits (the overspend, in charges)."""
    led = _new(folder, dsn, 1.0)
    for _ in range(9):
        led.charge(ev.PureDP(0.1), analyst="w", query="before")
    outs, _ = _workers(led.path, "race", 1, 32)
    ok = sum(int(o.split()[-1]) for o in outs)
    return ok - 1


def kill(folder: Path, dsn: str | None, rng: random.Random) -> dict[str, int]:
    led = _new(folder, dsn, 1000.0)
    p = subprocess.Popen([sys.executable, "-c", WORKER, str(led.path), "loop", "100000",
                          "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline() if p.stdout else ""  # charging has begun
    time.sleep(rng.uniform(0.0, 0.3))
    p.kill()
    out, _ = p.communicate()
    reported = {int(s) for s in (first + out).split() if s.isdigit()}
    try:
        again = Ledger.open(led.path)
        again.verify()
        present = {e.seq for e in again.entries("charge")}
        broken = 0
    except Exception:
        present, broken = set(), 1
    return {"lost": len(reported - present), "half_written": broken,
            "committed": len(present)}


def run(store: str, dsn: str | None, args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"dpkit-ledger-{store}-"))
    load_before = os.getloadavg()[0]
    rng = random.Random(1)  # the benchmark's own timing, never a privacy draw
    singles = [single(folder, dsn, args.charges) for _ in range(args.repeat)]
    parallels = [parallel(folder, dsn, args.charges) for _ in range(args.repeat)]
    overspend = [race(folder, dsn) for _ in range(args.races)]
    kills = [kill(folder, dsn, rng) for _ in range(args.kills)]
    out = {
        "single_per_s": _spread(singles), "eight_procs_per_s": _spread(parallels),
        "race_overspend": sum(overspend), "races": args.races,
        "kill_lost": sum(k["lost"] for k in kills),
        "kill_half_written": sum(k["half_written"] for k in kills), "kills": args.kills,
        "kill_committed_median": statistics.median(k["committed"] for k in kills),
        "load_average_1min": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }
    print(store, json.dumps(out), flush=True)
    return out


def _spread(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 1), "min": round(min(xs), 1),
            "max": round(max(xs), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--charges", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--races", type=int, default=5)
    ap.add_argument("--kills", type=int, default=25)
    ap.add_argument("--dsn", default=None, help="an existing PostgreSQL database to use")
    ap.add_argument("--only", choices=["sqlite", "postgres"], default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"args": vars(args)}
    if args.only != "postgres":
        results["sqlite"] = run("sqlite", None, args)
    if args.only != "sqlite":
        if args.dsn:
            results["postgres"] = run("postgres", args.dsn, args)
        elif (why := unavailable()) is not None:
            print(f"PostgreSQL skipped: {why}")
        else:
            with throwaway_cluster(fsync=True) as dsn:
                results["postgres"] = run("postgres", dsn, args)
    if args.only is None:
        out = Path(__file__).resolve().parent / "results" / "ledger.json"
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
