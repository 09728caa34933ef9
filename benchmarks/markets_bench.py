"""Digital-goods pricing: revenue / OPT against epsilon and n, beside baselines and the theory.

    python benchmarks/markets_bench.py --runs 100 [--plot]

Values U[0, 1] (drawn with dpkit.noise, seeded), a 1,000-price grid, OPT = the best fixed price
on the grid at the values. dpkit: the exponential mechanism (eps-DP under replace-one, hence
eps-approximately truthful). Baselines: a posted price of 0.5 fixed in advance (truthful, needs
the distribution to be known), a uniformly random grid price (truthful), and the non-private
optimal price (revenue OPT, not truthful: one buyer can move it). The theory column is the
high-probability shortfall (B/eps)(ln|grid| + ln 20) (monotonic scores) at level 0.95, as a
ratio of OPT.
Writes benchmarks/results/markets.json (and docs/img/markets_revenue.png with --plot).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from dpkit import noise
from dpkit.markets import digital_goods_price, price_grid, revenue_curve

ROOT = Path(__file__).resolve().parents[1]
EPSILONS = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0]
NS = [100, 1000, 10000]


def run(n: int, eps: float, runs: int) -> dict[str, float]:
    grid = price_grid(1.0, 1000)
    ratios, fixed, rand, bound = [], [], [], []
    for r in range(runs):
        values = noise.uniform_float01(n, source=noise.seeded(r))
        res = digital_goods_price(values, epsilon=eps, prices=grid,
                                  source=noise.seeded(10**6 + r))
        rev = revenue_curve(values, grid)
        ratios.append(res.revenue / res.optimum)
        fixed.append(rev[499] / res.optimum)  # the grid price 0.5
        rand.append(float(rev.mean()) / res.optimum)  # expectation of a random grid price
        bound.append(max(0.0, 1 - res.revenue_shortfall / res.optimum))
    a = np.asarray(ratios)
    return {"n": n, "epsilon": eps, "dpkit_mean": round(float(a.mean()), 5),
            "dpkit_p05": round(float(np.quantile(a, 0.05)), 5),
            "fixed_0.5": round(float(np.mean(fixed)), 5),
            "random_price": round(float(np.mean(rand)), 5),
            "theory_at_0.95": round(float(np.mean(bound)), 5)}


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for n in NS:
        sel = [r for r in rows if r["n"] == n]
        ax.plot([r["epsilon"] for r in sel], [r["dpkit_mean"] for r in sel], "o-",
                label=f"dpkit, n = {n}")
        ax.plot([r["epsilon"] for r in sel], [r["theory_at_0.95"] for r in sel], ":",
                color=ax.lines[-1].get_color(), label=f"guarantee (95%), n = {n}")
    ax.axhline(rows[0]["random_price"], color="grey", lw=0.8, label="random price")
    ax.set_xscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("revenue / OPT")
    ax.set_ylim(0, 1.01)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = [run(n, eps, args.runs) for n in NS for eps in EPSILONS]
    for r in rows:
        print(r)
    out = {"runs": args.runs, "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    (ROOT / "benchmarks" / "results" / "markets.json").write_text(json.dumps(out, indent=1))
    if args.plot:
        plot(rows, ROOT / "docs" / "img" / "markets_revenue.png")


if __name__ == "__main__":
    main()
