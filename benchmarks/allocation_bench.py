"""Joint-DP allocation: welfare / OPT and over-allocation against epsilon, beside tatonnement.

    python benchmarks/allocation_bench.py [--runs 10] [--supply 100 50] [--plot | --plot-only]

n = 1,000 unit-demand buyers, k = 10 goods, values U[0, 1] (seeded), delta = 1e-6, neighbours:
add/remove one buyer ((eps, delta)-joint DP). OPT is the exact welfare optimum (scipy's
assignment solver). Rows: dpkit's `allocate` with the default margin ("auto": 0.75 SD of the
main phase's averaged demand noise held back per good), dpkit without a margin, and plain noisy
tatonnement (equal noise per round, fixed steps, last prices) under the same accounting.
"welfare" counts every assigned buyer (an over-sold copy included); "feasible" keeps each
over-sold good's best `supply` buyers.
Writes benchmarks/results/allocation.json (and docs/img/markets_allocation.png with --plot).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from dpkit import noise
from dpkit.markets import allocate
from dpkit.markets.allocation import welfare_optimum

ROOT = Path(__file__).resolve().parents[1]
EPSILONS = [0.5, 1.0, 2.0, 4.0]
METHODS = {"dpkit": dict(method="dpkit"), "dpkit, no margin": dict(method="dpkit", margin=0.0),
           "tatonnement": dict(method="tatonnement")}


def run(supply: int, eps: float, runs: int, n: int = 1000, k: int = 10) -> list[dict]:
    out: dict[str, dict[str, list[float]]] = {m: {"w": [], "f": [], "o": [], "g": []}
                                              for m in METHODS}
    for r in range(runs):
        values = noise.uniform_float01((n, k), source=noise.seeded(r))
        opt, _ = welfare_optimum(values, supply)
        for name, kw in METHODS.items():
            a = allocate(values, supply, epsilon=eps, delta=1e-6,
                         source=noise.seeded(10**6 + r), **kw)  # type: ignore[arg-type]
            out[name]["w"].append(a.welfare / opt)
            out[name]["f"].append(a.feasible_welfare / opt)
            out[name]["o"].append(a.over_allocation_share)
            got = np.bincount(a.assignment + 1, minlength=k + 1)[1:]
            out[name]["g"].append(float(np.mean(got > supply)))  # goods sold beyond supply
    return [{"supply": supply, "epsilon": eps, "method": m, "runs": runs,
             "welfare": round(float(np.mean(d["w"])), 4),
             "feasible_welfare": round(float(np.mean(d["f"])), 4),
             "feasible_min": round(float(np.min(d["f"])), 4),
             "feasible_max": round(float(np.max(d["f"])), 4),
             "over_allocation": round(float(np.mean(d["o"])), 4),
             "over_allocation_min": round(float(np.min(d["o"])), 4),
             "over_allocation_max": round(float(np.max(d["o"])), 4),
             "goods_over_supply": round(float(np.mean(d["g"])), 4)} for m, d in out.items()]


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    supplies = sorted({r["supply"] for r in rows}, reverse=True)
    fig, axes = plt.subplots(2, len(supplies), figsize=(5 * len(supplies), 6), squeeze=False)
    for col, s in enumerate(supplies):
        for m in METHODS:
            sel = [r for r in rows if r["supply"] == s and r["method"] == m]
            eps = [r["epsilon"] for r in sel]
            line = axes[0][col].plot(eps, [r["feasible_welfare"] for r in sel], marker="o",
                                     label=m)[0]
            axes[1][col].plot(eps, [100 * r["over_allocation"] for r in sel], marker="o",
                              label=m)
            if m == "dpkit" and "feasible_max" in sel[0]:  # the spread over the runs
                axes[0][col].fill_between(eps, [r["feasible_min"] for r in sel],
                                          [r["feasible_max"] for r in sel],
                                          color=line.get_color(), alpha=0.15)
                axes[1][col].fill_between(eps, [100 * r["over_allocation_min"] for r in sel],
                                          [100 * r["over_allocation_max"] for r in sel],
                                          color=line.get_color(), alpha=0.15)
        axes[0][col].axhline(0.9, color="grey", ls=":", label="target 0.9 OPT")
        axes[1][col].axhline(2.0, color="grey", ls=":", label="target 2%")
        axes[0][col].set(title=f"{s} copies of each of 10 goods, n = 1,000", xscale="log",
                         ylabel="feasible welfare / OPT (band: min-max)")
        axes[1][col].set(xscale="log", xlabel="ε (δ = 1e-6, joint DP)",
                         ylabel="over-allocated, % of supply")
        axes[1][col].set_yscale("symlog", linthresh=1.0)
        axes[1][col].set_ylim(bottom=0)
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xticks(EPSILONS, [f"{e:g}" for e in EPSILONS])
            ax.minorticks_off()
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--supply", type=int, nargs="+", default=[100, 50])
    ap.add_argument("--plot", action="store_true")
    ap.add_argument("--plot-only", action="store_true", help="redraw from the results file")
    a = ap.parse_args()
    out = ROOT / "benchmarks" / "results" / "allocation.json"
    if a.plot_only:
        plot(json.loads(out.read_text()), ROOT / "docs" / "img" / "markets_allocation.png")
        return
    rows = []
    t = time.perf_counter()
    for s in a.supply:
        for eps in EPSILONS:
            for row in run(s, eps, a.runs):
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"{time.perf_counter() - t:.0f} s")
    (ROOT / "benchmarks" / "results").mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    if a.plot:
        plot(rows, ROOT / "docs" / "img" / "markets_allocation.png")


if __name__ == "__main__":
    main()
