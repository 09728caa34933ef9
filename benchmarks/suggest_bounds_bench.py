"""``suggest_bounds`` on UCI Adult's numeric columns: equal cells against log-scale cells.

For each numeric column, declared over a range an owner would write without looking at the
data, and each epsilon: the suggested bounds of ``--runs`` runs (one seeded project per grid,
so the runs are reproducible and independent draws), their median and 10th-90th percentiles,
beside the true 1st/99th percentiles; then the error of a DP sum (and mean) of the column
clamped to the suggested bounds against clamped to the true percentiles: the expected RMSE
``sqrt(bias² + 2 (max(|lo|, |hi|) / eps_sum)²)`` of the Laplace sum (add/remove one row,
``eps_sum = 1``), the bias the clamp's, averaged over the runs' bounds, as a share of the true
sum. Needs Adult (../shared/data, or $DPKIT_DATA).

    python benchmarks/suggest_bounds_bench.py --runs 50
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp
from dpkit.engine import Curator
from dpkit.learn.adult import data_dir

#: Adult's numeric columns (adult.names: index in the file) and the range declared for each
COLUMNS: dict[str, tuple[int, tuple[int, int]]] = {
    "age": (0, (0, 120)),
    "fnlwgt": (2, (0, 10_000_000)),
    "education_num": (4, (0, 20)),
    "capital_gain": (10, (0, 1_000_000)),
    "capital_loss": (11, (0, 100_000)),
    "hours_per_week": (12, (0, 168)),
}
EPSILONS = (0.1, 0.5, 1.0)
EPS_SUM = 1.0


def load() -> pd.DataFrame:
    folder = data_dir()
    if folder is None:
        raise SystemExit("Adult not found: set DPKIT_DATA to the folder holding adult.data.gz")
    idx = [i for i, _ in COLUMNS.values()]
    return pd.read_csv(folder / "adult.data.gz", header=None, usecols=idx,
                       names=[n for n, (i, _) in sorted(COLUMNS.items(), key=lambda c: c[1][0])],
                       skipinitialspace=True)


def sum_rmse(x: np.ndarray, lo: float, hi: float) -> float:
    """Expected RMSE of the Laplace sum of ``x`` clamped to ``[lo, hi]`` (bias and noise)."""
    bias = float(np.sum(np.clip(x, lo, hi)) - np.sum(x))
    scale = max(abs(lo), abs(hi)) / EPS_SUM
    return math.sqrt(bias * bias + 2.0 * scale * scale)


def run(df: pd.DataFrame, runs: int, grid: str, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cur = Curator.create(Path(tmp) / "p.dpkit", epsilon=1000.0, delta=0.0,
                             source=dp.noise.seeded(seed))
        bounds = {c: r for c, (_, r) in COLUMNS.items()}
        cur.add_table("adult", df, bounds=bounds)
        for col in COLUMNS:
            for eps in EPSILONS:
                got = [cur.suggest_bounds("adult", col, epsilon=eps, grid=grid)
                       for _ in range(runs)]
                out[f"{col}@{eps:g}"] = {"bounds": [list(g["bounds"]) for g in got],
                                         "grid": got[0].get("grid", "")}
    return out


def summary(df: pd.DataFrame, res: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for col in COLUMNS:
        x = df[col].to_numpy(dtype=np.float64)
        q1, q99 = np.quantile(x, [0.01, 0.99])
        ref = sum_rmse(x, q1, q99)
        total = float(np.sum(x))
        for eps in EPSILONS:
            row: dict[str, Any] = {"column": col, "epsilon": eps, "true": [q1, q99],
                                   "sum_rmse_true_pct": 100 * ref / total}
            for grid, r in res.items():
                b = np.array(r[f"{col}@{eps:g}"]["bounds"])
                row[grid] = {
                    "grid": r[f"{col}@{eps:g}"]["grid"],
                    "lower": np.percentile(b[:, 0], [50, 10, 90]).tolist(),
                    "upper": np.percentile(b[:, 1], [50, 10, 90]).tolist(),
                    "sum_rmse_pct": 100 * float(np.mean([sum_rmse(x, lo, hi) for lo, hi in b]))
                    / total}
            rows.append(row)
    return rows


def show(rows: list[dict[str, Any]]) -> None:
    def rng(v: list[float]) -> str:
        return f"{v[0]:.6g} ({v[1]:.6g}-{v[2]:.6g})"

    print("| column | ε | true 1% / 99% | linear: lower | linear: upper | auto: lower | "
          "auto: upper | sum RMSE % (true q / linear / auto) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lin, auto = r["linear"], r["auto"]
        print(f"| {r['column']} | {r['epsilon']:g} | {r['true'][0]:.6g} / {r['true'][1]:.6g} | "
              f"{rng(lin['lower'])} | {rng(lin['upper'])} | {rng(auto['lower'])} | "
              f"{rng(auto['upper'])} | {r['sum_rmse_true_pct']:.3g} / "
              f"{lin['sum_rmse_pct']:.3g} / {auto['sum_rmse_pct']:.3g} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="benchmarks/results/suggest_bounds.json")
    a = ap.parse_args()
    df = load()
    t = time.perf_counter()
    res = {g: run(df, a.runs, g, a.seed) for g in ("linear", "auto")}
    rows = summary(df, res)
    show(rows)
    print(f"({time.perf_counter() - t:.0f} s)")
    Path(a.out).write_text(json.dumps({"runs": a.runs, "seed": a.seed, "rows": rows,
                                       "grids": {g: {k: v["grid"] for k, v in r.items()}
                                                 for g, r in res.items()}}, indent=1))


if __name__ == "__main__":
    main()
