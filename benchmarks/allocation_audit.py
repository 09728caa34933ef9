"""Empirical privacy audit of `allocate`'s prices on neighbouring markets.

    python benchmarks/allocation_audit.py [--trials 1000] [--epsilon 1 4] [--buyers 1000]

D: the benchmark's scarce market (n buyers, k = 10 goods, values U[0, 1] seeded as in
allocation_bench.py, 50 copies per good, default rounds); D': D plus one buyer who values good 0
at 1 and the rest at 0. `allocate` runs `trials` times on each with a seeded source; the
likelihood-ratio statistic of the billboard and the final price of good 0 are audited with
Clopper-Pearson bounds (dpkit.attacks.audit_allocation). Each row: the certified lower bound on
epsilon at delta_a beside the accountant's epsilon(delta_a) for the claimed noise (the claim is
epsilon at delta = 1e-6). Writes benchmarks/results/allocation_audit.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from dpkit import noise
from dpkit.attacks.audit_allocation import audit_allocation

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 4.0])
    ap.add_argument("--buyers", type=int, default=1000)
    ap.add_argument("--confidence", type=float, default=0.999)
    a = ap.parse_args()
    values = noise.uniform_float01((a.buyers, 10), source=noise.seeded(0))
    rows = []
    for eps in a.epsilon:
        t = time.perf_counter()
        r = audit_allocation(values, 50, epsilon=eps, delta=1e-6, trials=a.trials,
                             deltas=(0.01, 0.05, 0.2), confidence=a.confidence,
                             source=noise.seeded(7))
        row = {"epsilon": eps, "delta": 1e-6, "buyers": a.buyers, "trials": a.trials,
               "confidence": a.confidence, "mu": round(r.mu, 4),
               "certified": {str(d): round(x, 4) for d, x in r.epsilon_lower.items()},
               "profile": {str(d): round(x, 4) for d, x in r.profile.items()},
               "final_price_certified": round(r.price_audit.epsilon_lower, 4),
               "statistic_mean_D_Dprime": [round(float(s.mean()), 3) for s in r.statistics],
               "seconds": round(time.perf_counter() - t, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    (ROOT / "benchmarks" / "results" / "allocation_audit.json").write_text(
        json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
