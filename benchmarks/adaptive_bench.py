"""The reusable-holdout experiment (Dwork et al., Science 2015, Fig. 2): standard vs Thresholdout.

    python benchmarks/adaptive_bench.py --n 10000 --d 10000 --reps 100

``n`` training, ``n`` holdout and ``n`` fresh rows of ``d`` pure-noise ±1 features with random
labels. The analyst selects features by their correlation on train and holdout and reads the
holdout accuracy of the classifier over the ``k`` strongest; with exact holdout answers that
accuracy climbs while fresh data stay at 50%. Thresholdout uses the paper's parameters (threshold
0.04 and sigma 0.01 on the correlation scale, i.e. 0.02 and 0.005 on the [0, 1] mean scale that
:class:`dpkit.adaptive.Thresholdout` takes). Writes ``benchmarks/results/adaptive.json`` and,
with matplotlib, ``docs/img/thresholdout.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from dpkit import noise
from dpkit.adaptive import Thresholdout
from dpkit.adaptive.experiment import HoldoutRun, noise_rows, run_selection

KS = [0, 10, 20, 50, 100, 200, 300, 400, 500]
ROOT = Path(__file__).resolve().parents[1]


def one_rep(n: int, d: int, seed: int) -> tuple[HoldoutRun, HoldoutRun]:
    src = noise.seeded(seed)
    rows_t, rows_h, rows_f = (noise_rows(n, d, src) for _ in range(3))
    train, holdout, fresh = ((r[:, :d], r[:, d]) for r in (rows_t, rows_h, rows_f))
    standard = run_selection(train, holdout, fresh, KS)
    th = Thresholdout(rows_t, rows_h, threshold=0.02, sigma=0.005, budget=10**6,
                      max_epsilon=float("inf"), source=noise.seeded(10**6 + seed))
    return standard, run_selection(train, holdout, fresh, KS, reusable=th)


def adult_rows(seed: int, noise_features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adult with real signal, classes balanced: its 109 public-domain features made ±1 (one-hot
    as is, numeric columns split at the middle of their public range), ``noise_features``
    pure-noise ±1 columns beside them, the label (income) ±1 last; the training file split at
    random into train and holdout, the test file as the fresh data. Column-major int8."""
    from dpkit.learn.adult import load_adult

    xtr, ytr, xte, yte = load_adult()
    src = noise.seeded(seed)

    def balanced(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # as many <=50K rows as >50K ones (the vote classifier has no intercept: on the raw
        # 25/75 split every classifier reads the majority rate)
        pos, neg = np.flatnonzero(y > 0), np.flatnonzero(y <= 0)
        neg = neg[noise.permutation(len(neg), source=src)[:len(pos)]]
        keep = np.sort(np.concatenate([pos, neg]))
        return x[keep], y[keep]

    xtr, ytr = balanced(xtr, ytr)
    xte, yte = balanced(xte, yte)

    def signs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        feats = np.where(x >= 0.5, 1, -1).astype(np.int8)
        extra = (2 * noise.fair_bits((len(y), noise_features), source=src).astype(np.int8)
                 - 1).astype(np.int8)
        lab = np.where(y > 0, 1, -1).astype(np.int8)[:, None]
        return np.asfortranarray(np.hstack([feats, extra, lab]))

    order = noise.permutation(len(ytr), source=src)
    half = len(ytr) // 2
    a, b = order[:half], order[half:]
    return signs(xtr[a], ytr[a]), signs(xtr[b], ytr[b]), signs(xte, yte)


def adult_rep(seed: int, noise_features: int) -> tuple[HoldoutRun, HoldoutRun]:
    rows_t, rows_h, rows_f = adult_rows(seed, noise_features)
    d = rows_t.shape[1] - 1
    train, holdout, fresh = ((r[:, :d], r[:, d]) for r in (rows_t, rows_h, rows_f))
    standard = run_selection(train, holdout, fresh, KS)
    th = Thresholdout(rows_t, rows_h, threshold=0.02, sigma=0.005, budget=10**6,
                      max_epsilon=float("inf"), source=noise.seeded(10**6 + seed))
    return standard, run_selection(train, holdout, fresh, KS, reusable=th)


def summary(runs: list[HoldoutRun]) -> dict[str, list[float]]:
    return {part: np.mean([getattr(r, part) for r in runs], axis=0).round(4).tolist()
            for part in ("train", "holdout", "fresh")}


def plot(result: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, name in zip(axes, ("standard", "thresholdout"), strict=True):
        data = result[name]
        assert isinstance(data, dict)
        for part, style in (("train", "-"), ("holdout", "--"), ("fresh", ":")):
            ax.plot(KS, data[part], style, label=part)
        ax.set_title(f"{name} holdout")
        ax.set_xlabel("features kept (k)")
        ax.axhline(0.5, color="grey", lw=0.5)
    axes[0].set_ylabel("accuracy (mean over runs)")
    axes[0].legend()
    fig.suptitle(f"pure-noise data, n = d = {result['n']}, {result['reps']} runs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--plot", action="store_true", help="write docs/img/thresholdout.png")
    ap.add_argument("--adult", type=int, metavar="NOISE", default=None,
                    help="Adult (real signal, ../shared/data) with NOISE pure-noise features "
                         "beside its own, instead of pure-noise data")
    args = ap.parse_args()
    t0 = time.perf_counter()
    std_runs, th_runs = [], []
    for r in range(args.reps):
        s, t = (one_rep(args.n, args.d, r) if args.adult is None else
                adult_rep(r, args.adult))
        std_runs.append(s)
        th_runs.append(t)
    seconds = time.perf_counter() - t0
    gap_std = max(abs(a - b) for a, b in zip(summary(std_runs)["holdout"],
                                             summary(std_runs)["fresh"], strict=True))
    th = summary(th_runs)
    gap_th = max(abs(a - b) for a, b in zip(th["holdout"], th["fresh"], strict=True))
    result = {"data": "pure noise" if args.adult is None else
              f"Adult + {args.adult} noise features", "n": args.n, "d": args.d,
              "reps": args.reps, "ks": KS, "seconds": round(seconds, 1),
              "standard": summary(std_runs), "thresholdout": th,
              "max_gap_holdout_fresh": {"standard": round(gap_std, 4),
                                        "thresholdout": round(gap_th, 4)},
              "over_threshold_answers_mean": float(np.mean([r.over_threshold for r in th_runs])),
              "holdout_epsilon_mean": float(np.mean([r.epsilon or 0.0 for r in th_runs]))}
    out = ROOT / "benchmarks" / "results" / (
        "adaptive.json" if args.adult is None else "adaptive_adult.json")
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("standard", "thresholdout")},
                     indent=1))
    for name in ("standard", "thresholdout"):
        data = result[name]
        assert isinstance(data, dict)
        print(name, "holdout", data["holdout"], "fresh", data["fresh"])
    if args.plot:
        plot(result, ROOT / "docs" / "img" / ("thresholdout.png" if args.adult is None else
                                              "thresholdout_adult.png"))


if __name__ == "__main__":
    main()
