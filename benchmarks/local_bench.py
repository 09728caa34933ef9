"""Benchmark: dpkit.local frequency oracles vs pure-ldp 1.2, side by side, at d = 1024.

    python benchmarks/local_bench.py            # full run (n = 1,000,000 users; ~1-2 min)
    python benchmarks/local_bench.py --quick    # n = 200,000, smaller pure-ldp samples
    python benchmarks/local_bench.py --setup    # (re)create the pure-ldp venv first

What is timed (users per second, best of ``--repeat``; the default secure source, os.urandom):

* ``grr``, ``hr``, ``olh``, ``blh``: batched client randomization of n users + server
  aggregation + estimate of all d frequencies;
* ``oue_aggregate``: server aggregation of n bit-packed OUE reports (128 bytes each) + estimate;
  ``oue``: the full client + server path on a smaller n (its client draws n·d Bernoulli bits).

pure-ldp (the peer; loops over users in Python) runs in its own venv at
``benchmarks/.venvs/pureldp``: pure-ldp 1.2.0 needs numpy 1.x and xxhash 3.x (``--setup`` pins
``numpy<2``, ``xxhash<4``, ``scipy<1.14``, ``scikit-learn<1.6``, ``statsmodels<0.15``). Its
client+server loop is timed on ``--peer-users`` users (it is ~1000x slower) and reported per
user. Targets (issue 6): GRR and HR >= 1e6 users/s, packed UE aggregation >= 1e6 users/s,
local hashing >= 100x pure-ldp. Results go to ``benchmarks/results/local.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venvs" / "pureldp"
RESULTS = ROOT / "results" / "local.json"
PINS = ["pure-ldp==1.2.0", "numpy<2", "xxhash<4", "scipy<1.14", "scikit-learn<1.6",
        "statsmodels<0.15"]

PEER_SCRIPT = r"""
import json, sys, time, warnings
import numpy as np
warnings.filterwarnings("ignore")
from pure_ldp.frequency_oracles.local_hashing import LHClient, LHServer
from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
from pure_ldp.frequency_oracles.unary_encoding import UEClient, UEServer
from pure_ldp.frequency_oracles.hadamard_response import (HadamardResponseClient,
                                                          HadamardResponseServer)
d, eps, users = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
rng = np.random.default_rng(0)
out = {}
def run(name, client, server, n):
    data = rng.integers(1, d + 1, size=n)
    t = time.perf_counter()
    for v in data:
        server.aggregate(client.privatise(int(v)))
    server.estimate(1, suppress_warnings=True)
    dt = time.perf_counter() - t
    out[name] = {"users": n, "seconds": dt, "users_per_s": n / dt}
run("olh", LHClient(epsilon=eps, d=d, use_olh=True), LHServer(epsilon=eps, d=d, use_olh=True),
    users["olh"])
run("blh", LHClient(epsilon=eps, d=d, g=2), LHServer(epsilon=eps, d=d, g=2), users["blh"])
run("grr", DEClient(epsilon=eps, d=d), DEServer(epsilon=eps, d=d), users["grr"])
run("oue", UEClient(epsilon=eps, d=d, use_oue=True), UEServer(epsilon=eps, d=d, use_oue=True),
    users["oue"])
hs = HadamardResponseServer(epsilon=eps, d=d)
run("hr", HadamardResponseClient(epsilon=eps, d=d, hash_funcs=hs.get_hash_funcs()), hs,
    users["hr"])
import pure_ldp, xxhash
out["versions"] = {"pure_ldp": "1.2.0", "numpy": np.__version__, "xxhash": xxhash.VERSION}
print(json.dumps(out))
"""


def setup_venv() -> bool:
    """Create the pure-ldp venv (needs the package registry); False when it cannot."""
    try:
        if not (VENV / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *PINS], check=True)
        return True
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"pure-ldp venv setup failed: {exc}", file=sys.stderr)
        return False


def run_peer(d: int, eps: float, users: dict[str, int]) -> dict | None:
    py = VENV / "bin" / "python"
    if not py.exists():
        return None
    res = subprocess.run([str(py), "-c", PEER_SCRIPT, str(d), str(eps), json.dumps(users)],
                         capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        print("pure-ldp run failed:\n" + res.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run_dpkit(d: int, eps: float, n: int, repeat: int) -> dict:
    import dpkit.noise as noise
    from dpkit.local import (
        BinaryLocalHashing,
        GeneralizedRR,
        HadamardResponse,
        OptimizedLocalHashing,
        OptimizedUnaryEncoding,
    )

    x = noise.uniform_int(d, n)
    out: dict[str, dict] = {}
    for name, cls in [("grr", GeneralizedRR), ("hr", HadamardResponse),
                      ("olh", OptimizedLocalHashing), ("blh", BinaryLocalHashing)]:
        oracle = cls(d, epsilon=eps)
        dt = best_of(lambda o=oracle: o.estimate(o.aggregate(o.randomize(x))), repeat)
        out[name] = {"users": n, "seconds": dt, "users_per_s": n / dt}
    oue = OptimizedUnaryEncoding(d, epsilon=eps)
    n_full = max(n // 50, 1000)
    dt = best_of(lambda: oue.estimate(oue.aggregate(oue.randomize(x[:n_full]))), 1)
    out["oue"] = {"users": n_full, "seconds": dt, "users_per_s": n_full / dt}
    sample = oue.randomize(x[: min(n, 50_000)])
    reps = -(-n // len(sample))
    packed = np.tile(sample["bits"], (reps, 1))[:n]
    from dpkit.local import Reports

    big = Reports(oue.kind, {"bits": packed})
    dt = best_of(lambda: oue.estimate(oue.aggregate(big)), repeat)
    out["oue_aggregate"] = {"users": n, "seconds": dt, "users_per_s": n / dt,
                            "bytes_per_report": int(packed.shape[1])}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--setup", action="store_true", help="create/refresh the pure-ldp venv")
    ap.add_argument("--no-peer", action="store_true", help="skip pure-ldp")
    ap.add_argument("--users", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    d, eps = 1024, 1.0
    n = args.users or (200_000 if args.quick else 1_000_000)
    peer_users = ({"olh": 300, "blh": 300, "grr": 5000, "oue": 1000, "hr": 2000} if args.quick
                  else {"olh": 2000, "blh": 2000, "grr": 20000, "oue": 5000, "hr": 10000})
    if args.setup or (not args.no_peer and not (VENV / "bin" / "python").exists()):
        setup_venv()

    ours = run_dpkit(d, eps, n, args.repeat)
    peer = None if args.no_peer else run_peer(d, eps, peer_users)

    rows = []
    for name in ["grr", "hr", "olh", "blh", "oue", "oue_aggregate"]:
        row = {"oracle": name, "dpkit_users_per_s": ours[name]["users_per_s"],
               "dpkit_users": ours[name]["users"]}
        if peer and name in peer:
            row["pureldp_users_per_s"] = peer[name]["users_per_s"]
            row["speedup"] = ours[name]["users_per_s"] / peer[name]["users_per_s"]
        rows.append(row)
    by = {r["oracle"]: r for r in rows}
    targets = {
        "grr_ge_1e6_users_per_s": by["grr"]["dpkit_users_per_s"] >= 1e6,
        "hr_ge_1e6_users_per_s": by["hr"]["dpkit_users_per_s"] >= 1e6,
        "packed_ue_aggregation_ge_1e6_users_per_s": by["oue_aggregate"]["dpkit_users_per_s"]
        >= 1e6,
    }
    if peer:
        targets["olh_ge_100x_pureldp"] = by["olh"].get("speedup", 0) >= 100
        targets["blh_ge_100x_pureldp"] = by["blh"].get("speedup", 0) >= 100
    result = {
        "benchmark": "local frequency oracles, d = 1024, epsilon = 1",
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "numpy": np.__version__},
        "source": "dpkit.noise.secure() (os.urandom)",
        "rows": rows,
        "targets": targets,
        "pureldp": peer["versions"] if peer else None,
        "command": "python benchmarks/local_bench.py" + (" --quick" if args.quick else ""),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'oracle':<15}{'dpkit users/s':>16}{'pure-ldp users/s':>18}{'speedup':>10}")
    for r in rows:
        peer_s = f"{r['pureldp_users_per_s']:,.0f}" if "pureldp_users_per_s" in r else "-"
        sp = f"{r['speedup']:,.0f}x" if "speedup" in r else "-"
        print(f"{r['oracle']:<15}{r['dpkit_users_per_s']:>16,.0f}{peer_s:>18}{sp:>10}")
    print("targets:", json.dumps(targets))
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
