"""Plot: statistical-query logistic regression, central vs local model, accuracy against n.

    python benchmarks/learn_sq_plot.py            # ~1 min -> docs/img/learn_sq_central_vs_local.png
    python benchmarks/learn_sq_plot.py --seeds 2  # quicker

Data: x uniform on [-1, 1]^4, P(y = 1 | x) = σ(3 x·(2, -1, 1, 0.5)) (Bayes accuracy ~0.87), a
fresh test set of 20,000 rows. The same learner (``SQLogisticRegression``, 10 SQ gradient steps)
asks its queries to three oracles: exact (no privacy, the SQ learner's own ceiling), central
(ε = 1, δ = 1e-7, Gaussian, replace-one) and local (ε = 1 per user, randomized response via
``dpkit.local.LocalSQOracle``; each user answers one coordinate of one step). Mean and spread
(min-max) over seeds. Figures also go to ``benchmarks/results/learn_sq.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from dpkit.learn import SQLogisticRegression  # noqa: E402
from dpkit.noise import seeded, uniform_float01  # noqa: E402

W = np.array([2.0, -1.0, 1.0, 0.5])
SIZES = [1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000]


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    src = seeded(seed)
    X = uniform_float01((n, 4), source=src) * 2 - 1
    p = 1 / (1 + np.exp(-3 * X @ W))
    return X, (uniform_float01(n, source=src) < p).astype(np.int64)


def exact_sq(X: np.ndarray, y: np.ndarray, steps: int) -> SQLogisticRegression:
    """The same descent with exact answers: what the SQ learner reaches without noise."""
    m = SQLogisticRegression(epsilon=1.0, bounds=(-1, 1), classes=[0, 1], max_iter=steps)
    Z = np.hstack([X, np.ones((len(X), 1))])
    w = np.zeros(Z.shape[1])
    for _ in range(steps):
        w -= 4.0 * 2.0 / Z.shape[1] * (Z.T @ (1 / (1 + np.exp(-Z @ w)) - y)) / len(Z)
    m.coef_, m.intercept_ = w[None, :-1], w[-1:]
    m.classes_, m.n_features_in_ = np.array([0, 1]), X.shape[1]
    m.lower_, m.upper_ = np.full(4, -1.0), np.full(4, 1.0)
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE.parent / "docs" / "img"
                    / "learn_sq_central_vs_local.png")
    args = ap.parse_args()
    Xt, yt = data(20_000, 12345)
    res: dict[str, dict[int, list[float]]] = {"exact": {}, "central": {}, "local": {}}
    for n in SIZES:
        for s in range(args.seeds):
            X, y = data(n, 1000 * s + 7)
            res["exact"].setdefault(n, []).append(exact_sq(X, y, 10).score(Xt, yt))
            for model in ("central", "local"):
                m = SQLogisticRegression(epsilon=1.0, delta=1e-7, bounds=(-1, 1), classes=[0, 1],
                                         model=model, max_iter=10, random_state=s).fit(X, y)
                res[model].setdefault(n, []).append(m.score(Xt, yt))
        print(n, {k: round(float(np.mean(v[n])), 4) for k, v in res.items()}, flush=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, style in (("exact", "k--"), ("central", "o-"), ("local", "s-")):
        mean = [np.mean(res[name][n]) for n in SIZES]
        lo = [np.min(res[name][n]) for n in SIZES]
        hi = [np.max(res[name][n]) for n in SIZES]
        label = {"exact": "exact SQ answers (no privacy)", "central": "central, ε=1 (Gaussian)",
                 "local": "local, ε=1 per user (RR)"}[name]
        ax.plot(SIZES, mean, style, label=label)
        if name != "exact":
            ax.fill_between(SIZES, lo, hi, alpha=0.2)
    ax.set_xscale("log")
    ax.set_xlabel("n (rows / users)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"SQ logistic regression, 10 steps, d=4 (mean, min-max of {args.seeds} seeds)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    summary = {k: {str(n): [float(np.mean(v[n])), float(np.min(v[n])), float(np.max(v[n]))]
                   for n in SIZES} for k, v in res.items()}
    (HERE / "results" / "learn_sq.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
