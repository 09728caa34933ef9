"""Wall time of ``POST /v1/query`` on neighbouring datasets, through ``dpkit serve``, with the
answers' timing classes on and off, side by side in the same run.

Three projects (constant work on: ε = 20, δ = 1e-3) over D = 5,000 units of one row, D plus
one ordinary unit, and D plus one unit of ``--rows`` rows (each a new group key, x out of
bounds; bounded to 1 row and 1 group per unit), each served by two ``dpkit serve`` processes
on loopback: one with timing classes (the service's default, or ``--deadline-ms``) and one without
(``--answer-deadline-ms 0``); a control serves D again by processes of its own (``D/2``: how
much two processes differ on the same data). Three query shapes, ``--rounds`` interleaved
rounds in a seeded shuffled order over all 24 (query, side, mode) cells; prints, per mode, the
medians and interquartile ranges and a Mann-Whitney U p-value of D against each neighbour, the
classes the paced answers left at (from the audit log), and the latency the classes cost
(docs/attacks.md §6, "Through the service"; FINDINGS.md H5; docs/service.md).

    PYTHONPATH=$PWD/src python benchmarks/service_timing.py --rows 50000 --rounds 25
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "server"))
from conftest import live_server, stop  # the test suite's `dpkit serve` runner

MODES = ("on", "off")  # timing classes on (the deadline given) / off (0)

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


def _projects(tmp: Path, sides: dict[str, pd.DataFrame]) -> dict[str, tuple[Path, str]]:
    out = {}
    for name, df in sides.items():
        path = tmp / name.replace("+", "_")
        with dp.Curator.create(path, budget=dp.Budget(epsilon=20, delta=1e-3)) as cur:
            cur.add_table("t", df, privacy_unit="uid", max_rows_per_unit=1,
                          max_groups_per_unit=1, bounds={"x": (0, 50)})
            out[name] = (path, cur.add_analyst("a"))
            print(f"{name}: {len(df)} rows, timing delta {cur.budget().timing_delta}")
    return out


def _audit_lines(path: Path) -> list[str]:
    return (path / "audit.jsonl").read_text().splitlines()


def _classes(path: Path, skip: int) -> dict[float, int]:
    """How many paced answers left at each class (the paced server's audit lines after the
    first ``skip``: the warm-up's)."""
    seen: dict[float, int] = {}
    for line in _audit_lines(path)[skip:]:
        rec = json.loads(line)
        if rec.get("endpoint") == "/v1/query" and "class_ms" in rec:
            seen[rec["class_ms"]] = seen.get(rec["class_ms"], 0) + 1
    return dict(sorted(seen.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))


def _report(times: dict[tuple[str, str, str], list[float]], sides: Any) -> None:
    from scipy.stats import mannwhitneyu

    def ms(xs: list[float]) -> str:
        lo, hi = np.percentile(xs, [25, 75]) * 1000
        return f"{statistics.median(xs) * 1000:.1f} ms (IQR {lo:.1f}-{hi:.1f})"

    for q in QUERIES:
        for mode in MODES:
            parts = [f"{s} {ms(times[(q, s, mode)])}" for s in sides]
            base = times[(q, "D", mode)]
            ps = [f"p(D vs {s}) = {mannwhitneyu(base, times[(q, s, mode)]).pvalue:.2g}"
                  for s in sides if s != "D"]
            print(f"{q} [classes {mode}]: " + " / ".join(parts) + "; " + ", ".join(ps))
        cost = [1000 * (on - off) for s in sides for on, off in
                zip(times[(q, s, "on")], times[(q, s, "off")], strict=True)]
        lo, hi = np.percentile(cost, [25, 75])
        print(f"{q}: the classes cost {statistics.median(cost):.1f} ms per answer "
              f"(median of paired on - off, IQR {lo:.1f}-{hi:.1f})")


def main() -> None:
    import httpx

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=5000)
    ap.add_argument("--rows", type=int, default=50000)
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--deadline-ms", type=float, default=None,
                    help="the paced servers' --answer-deadline-ms (first class; default: "
                         "the service's default)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpkit-service-timing-"))
    sides = _sides(args.units, args.rows)
    projects = _projects(tmp, sides)
    # the control: D again, served by processes of its own; D against it shows how much two
    # server processes differ on the same data (what no padding can remove, nor needs to)
    projects["D/2"] = projects["D"]
    servers = {}
    try:
        for name, (path, _) in projects.items():
            for mode in MODES:
                deadline = args.deadline_ms if mode == "on" else 0
                flag = () if deadline is None else ("--answer-deadline-ms", f"{deadline:g}")
                servers[(name, mode)] = live_server(path, extra=flag)
        times: dict[tuple[str, str, str], list[float]] = {
            (q, s, m): [] for q in QUERIES for s in projects for m in MODES}
        order = list(times)
        rng = random.Random(5)
        with httpx.Client(timeout=60) as client:
            def ask(q: str, s: str, m: str) -> float:
                start = time.perf_counter()
                r = client.post(servers[(s, m)].url + "/v1/query",
                                json={"sql": QUERIES[q], "epsilon": 0.01, "delta": 1e-8},
                                headers={"Authorization": f"Bearer {projects[s][1]}"})
                took = time.perf_counter() - start
                if r.status_code != 200:
                    raise RuntimeError(r.text)
                return took
            for cell in order:  # warm each server and statement once
                ask(*cell)
            warm = {name: len(_audit_lines(path)) for name, (path, _) in projects.items()}
            print("load before", os.getloadavg())
            for _ in range(args.rounds):
                rng.shuffle(order)
                for cell in order:
                    times[cell].append(ask(*cell))
            print("load after", os.getloadavg())
        _report(times, list(projects))
        for name in sides:
            path = projects[name][0]
            shown = "D and D/2" if name == "D" else name
            print(f"{shown}: paced answers per class (ms): {_classes(path, warm[name])}")
    finally:
        for live in servers.values():
            stop(live)


if __name__ == "__main__":
    main()
