"""Benchmark: dpkit.learn vs diffprivlib 0.6.6 on UCI Adult, same run, same features; and the
private PAC threshold learner against its predicted excess error.

    python benchmarks/learn_bench.py                 # Adult, 10 seeds per epsilon (~2-4 min)
    python benchmarks/learn_bench.py --seeds 3       # quicker
    python benchmarks/learn_bench.py --part pac      # thresholds, 100 runs (~30 s)
    python benchmarks/learn_bench.py --part kmeans   # k-means on 5 blobs vs diffprivlib
    python benchmarks/learn_bench.py --part adult_val  # LR defaults re-checked on validation

Features (both libraries): ``dpkit.learn.adult.load_adult`` - one-hot over the categories
published in ``adult.names`` and numeric columns scaled by public bounds, so no statistic of
the rows leaks into the preprocessing; every row has L2 norm <= ``FEATURE_NORM`` = sqrt(14),
given to both as the data bound (dpkit ``feature_norm``, diffprivlib ``data_norm``). Rows with
``?`` dropped: 30,162 train / 15,060 test.

diffprivlib runs in its own venv (needs scikit-learn <= 1.5), found at
``benchmarks/.venvs/diffprivlib`` or ``--peer-venv``; create it with::

    python3 -m venv benchmarks/.venvs/diffprivlib
    benchmarks/.venvs/diffprivlib/bin/pip install diffprivlib==0.6.6 "scikit-learn<=1.5"

Guarantees compared: dpkit LogisticRegression is (ε, 1e-5)-DP (zCDP composition of Gaussian
gradient releases); diffprivlib's is ε-DP (objective perturbation, vector mechanism). Both
GaussianNB are ε-DP. Results: ``benchmarks/results/learn.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from dpkit.learn import (  # noqa: E402
    FiniteClassLearner,
    GaussianNB,
    KMeans,
    LogisticRegression,
    Thresholds,
    pac_excess_bound,
    threshold_excess,
)
from dpkit.learn.adult import FEATURE_NORM, load_adult  # noqa: E402
from dpkit.noise import seeded, uniform_float01, uniform_int  # noqa: E402

PEER = """
import json, sys, time, numpy as np, warnings
warnings.filterwarnings("ignore")
from diffprivlib.models import LogisticRegression, GaussianNB
d = np.load(sys.argv[1]); eps_list = json.loads(sys.argv[2]); seeds = int(sys.argv[3])
norm = float(sys.argv[4]); out = {}
for eps in eps_list:
    for name in ("logistic", "gaussian_nb"):
        accs, times = [], []
        for s in range(seeds):
            t = time.perf_counter()
            if name == "logistic":
                m = LogisticRegression(epsilon=eps, data_norm=norm, random_state=s)
            else:
                m = GaussianNB(epsilon=eps, bounds=(0.0, 1.0), random_state=s)
            m.fit(d["Xtr"], d["ytr"]); times.append(time.perf_counter() - t)
            accs.append(float(m.score(d["Xte"], d["yte"])))
        out[f"{name}@{eps}"] = {"acc": accs, "time": times}
print(json.dumps(out))
"""

PEER_KMEANS = """
import json, sys, time, numpy as np, warnings
warnings.filterwarnings("ignore")
from diffprivlib.models import KMeans
d = np.load(sys.argv[1]); eps_list = json.loads(sys.argv[2]); seeds = int(sys.argv[3]); out = {}
for eps in eps_list:
    vals, times = [], []
    for s in range(seeds):
        t = time.perf_counter()
        m = KMeans(n_clusters=5, epsilon=eps, bounds=(-1.0, 1.0), random_state=s).fit(d["X"])
        times.append(time.perf_counter() - t)
        c = m.cluster_centers_
        vals.append(float(((d["X"][:, None, :] - c[None]) ** 2).sum(2).min(1).sum()))
    out[f"kmeans@{eps}"] = {"acc": vals, "time": times}
print(json.dumps(out))
"""
CENTRES = [[0.6, 0.6], [-0.6, 0.6], [0.6, -0.6], [-0.6, -0.6], [0.0, 0.0]]


def _summary(accs: list[float], times: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(accs)), "sd": float(np.std(accs, ddof=1)) if len(accs) > 1
            else 0.0, "min": float(np.min(accs)), "max": float(np.max(accs)),
            "time_s": float(np.median(times)), "runs": len(accs)}


def run_dpkit(data: tuple, eps_list: list[float], seeds: int) -> dict[str, dict[str, float]]:
    Xtr, ytr, Xte, yte = data
    out = {}
    for eps in eps_list:
        for name in ("logistic", "gaussian_nb"):
            accs, times = [], []
            for s in range(seeds):
                t = time.perf_counter()
                if name == "logistic":
                    m = LogisticRegression(epsilon=eps, delta=1e-5, feature_norm=FEATURE_NORM,
                                           classes=[0, 1], random_state=s)
                else:
                    m = GaussianNB(epsilon=eps, bounds=(0.0, 1.0), classes=[0, 1],
                                   random_state=s)
                m.fit(Xtr, ytr)
                times.append(time.perf_counter() - t)
                accs.append(m.score(Xte, yte))
            out[f"{name}@{eps}"] = _summary(accs, times)
            print(f"dpkit       {name:12s} eps={eps:<4} {out[f'{name}@{eps}']}", flush=True)
    return out


def run_peer(venv: Path, data: tuple, eps_list: list[float], seeds: int) -> dict:
    py = venv / "bin" / "python"
    if not py.exists():
        return {"error": f"no virtual environment at {venv} (see this file's docstring)"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "adult.npz"
        np.savez(path, Xtr=data[0], ytr=data[1], Xte=data[2], yte=data[3])
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        proc = subprocess.run([str(py), "-c", PEER, str(path), json.dumps(eps_list), str(seeds),
                               repr(FEATURE_NORM)], capture_output=True, text=True, env=env,
                              check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    raw = json.loads(proc.stdout)
    out = {k: _summary(v["acc"], v["time"]) for k, v in raw.items()}
    for k, v in out.items():
        print(f"diffprivlib {k:20s} {v}", flush=True)
    return out


def kmeans_data(n: int = 10_000) -> np.ndarray:
    """Five square blobs (half-width 0.2) in [-1, 1]^2, from dpkit.noise (seeded)."""
    src = seeded(77)
    label = uniform_int(5, n, source=src)
    return np.asarray(CENTRES)[label] + (uniform_float01((n, 2), source=src) - 0.5) * 0.4


def run_kmeans(venv: Path, eps_list: list[float], seeds: int) -> dict:
    """Inertia (sum of squared distances) relative to the true centres' inertia, both sides."""
    X = kmeans_data()
    base = float(((X[:, None, :] - np.asarray(CENTRES)[None]) ** 2).sum(2).min(1).sum())
    out: dict = {"dpkit": {}, "diffprivlib": {}, "true_centres_inertia": base}
    for eps in eps_list:
        vals, times = [], []
        for s in range(seeds):
            t = time.perf_counter()
            m = KMeans(n_clusters=5, epsilon=eps, bounds=(-1, 1), random_state=s).fit(X)
            times.append(time.perf_counter() - t)
            vals.append(-m.score(X) / base)
        out["dpkit"][f"kmeans@{eps}"] = _summary(vals, times)
    py = venv / "bin" / "python"
    if py.exists():
        with tempfile.TemporaryDirectory() as tmp:
            np.savez(Path(tmp) / "k.npz", X=X)
            proc = subprocess.run([str(py), "-c", PEER_KMEANS, str(Path(tmp) / "k.npz"),
                                   json.dumps(eps_list), str(seeds)], capture_output=True,
                                  text=True, check=False)
        if proc.returncode == 0:
            raw = json.loads(proc.stdout)
            out["diffprivlib"] = {k: _summary([a / base for a in v["acc"]], v["time"])
                                  for k, v in raw.items()}
        else:
            out["diffprivlib"] = {"error": proc.stderr[-2000:]}
    print(json.dumps(out, indent=1))
    return out


def run_pac(runs: int) -> dict[str, float]:
    """Thresholds on 1,024 points, n = 1,000, ε = 1: uniform rows, target at 512 (realizable);
    excess true error = |t - 512| / 1024, exact for the uniform distribution."""
    m, n, eps = 1024, 1000, 1.0
    ex = []
    for r in range(runs):
        src = seeded(1000 + r)
        x = uniform_int(m, n, source=src)
        f = FiniteClassLearner(hypotheses=Thresholds(m), epsilon=eps, random_state=src)
        ex.append(abs(f.fit(x[:, None], (x >= 512).astype(int)).index_ - 512) / m)
    bound, estimate = threshold_excess(n, m, eps)
    out = {"runs": runs, "mean_excess": float(np.mean(ex)),
           "se": float(np.std(ex, ddof=1) / np.sqrt(runs)), "predicted": estimate,
           "rigorous_bound": bound, "generic_bound_beta_0.05": pac_excess_bound(m + 1, eps) / n}
    print(json.dumps(out, indent=1))
    return out


def run_adult_validation(seeds: int) -> dict:
    """Re-check LogisticRegression's defaults without the test split: 24,162 rows to fit, the
    other 6,000 training rows to validate (permutation seed 1), over a small grid of
    (max_iter, learning_rate) at ε = 1 and 3; then the defaults and the validation winner on
    the test split, ``seeds`` seeds each."""
    Xtr, ytr, Xte, yte = load_adult()
    perm = np.random.RandomState(1).permutation(len(Xtr))
    fit, val = perm[:-6000], perm[-6000:]
    out: dict = {"grid": {}, "test": {}}
    for eps in (1.0, 3.0):
        best = (-1.0, 100, 10.0)
        for it in (50, 100, 200, 300):
            for lr in (3.0, 10.0, 30.0):
                accs = [LogisticRegression(epsilon=eps, delta=1e-5, feature_norm=FEATURE_NORM,
                                           classes=[0, 1], max_iter=it, learning_rate=lr,
                                           random_state=s).fit(Xtr[fit], ytr[fit])
                        .score(Xtr[val], ytr[val]) for s in range(3)]
                out["grid"][f"{eps}/{it}/{lr}"] = float(np.mean(accs))
                print(f"val eps={eps} max_iter={it} lr={lr}: {np.mean(accs):.4f}", flush=True)
                best = max(best, (float(np.mean(accs)), it, lr))
        for name, it, lr in (("defaults", 100, 10.0), ("validation_best", best[1], best[2])):
            accs, times = [], []
            for s in range(seeds):
                t = time.perf_counter()
                m = LogisticRegression(epsilon=eps, delta=1e-5, feature_norm=FEATURE_NORM,
                                       classes=[0, 1], max_iter=it, learning_rate=lr,
                                       random_state=100 + s).fit(Xtr, ytr)
                times.append(time.perf_counter() - t)
                accs.append(m.score(Xte, yte))
            out["test"][f"{name}@{eps}"] = {"max_iter": it, "learning_rate": lr,
                                            **_summary(accs, times)}
            print(f"test eps={eps} {name} (max_iter={it}, lr={lr}): "
                  f"{out['test'][f'{name}@{eps}']}", flush=True)
    return out


def plot(adult: dict, path: Path) -> None:
    """Accuracy against ε, dpkit beside diffprivlib, mean with min-max bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for lib, marker in (("dpkit", "o"), ("diffprivlib", "s")):
        for model, style in (("logistic", "-"), ("gaussian_nb", ":")):
            cells = {float(k.split("@")[1]): v for k, v in adult.get(lib, {}).items()
                     if k.startswith(model + "@")}
            if not cells:
                continue
            eps = sorted(cells)
            mean = np.array([cells[e]["mean"] for e in eps])
            err = [mean - [cells[e]["min"] for e in eps], [cells[e]["max"] for e in eps] - mean]
            ax.errorbar(eps, mean, yerr=err, fmt=marker + style, capsize=3,
                        label=f"{lib} {model.replace('_', ' ')}")
    ax.axhline(0.842, color="k", ls="--", lw=1, label="non-private LR (same features)")
    ax.axhline(0.754, color="grey", ls="-.", lw=1, label="majority class")
    ax.set_xscale("log")
    ax.set_xlabel("ε")
    ax.set_ylabel("Adult test accuracy")
    ax.set_title(f"Adult, {adult['seeds']} seeds per point (mean, min-max)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["adult", "adult_val", "pac", "kmeans", "all"],
                    default="all")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--epsilons", default="0.1,0.3,1,3")
    ap.add_argument("--peer-venv", type=Path, default=HERE / ".venvs" / "diffprivlib")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "learn.json")
    ap.add_argument("--plot", type=Path, default=HERE.parent / "docs" / "img"
                    / "learn_adult_accuracy.png", help="where the accuracy-vs-epsilon PNG goes")
    args = ap.parse_args()
    res: dict = {"machine": f"{platform.processor() or platform.machine()}, "
                            f"{os.cpu_count()} cores (shared)", "python": platform.python_version()}
    if args.part in ("adult", "all"):
        eps_list = [float(e) for e in args.epsilons.split(",")]
        data = load_adult()
        res["adult"] = {"seeds": args.seeds, "dpkit": run_dpkit(data, eps_list, args.seeds),
                        "diffprivlib": run_peer(args.peer_venv, data, eps_list, args.seeds)}
    if args.part == "adult_val":
        res["adult_validation"] = run_adult_validation(args.seeds)
    if args.part in ("pac", "all"):
        res["pac_thresholds"] = run_pac(100)
    if args.part in ("kmeans", "all"):
        res["kmeans_blobs"] = run_kmeans(args.peer_venv, [0.3, 1.0, 3.0], args.seeds)
    if "adult" in res and args.plot is not None:
        plot(res["adult"], args.plot)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.exists():  # keep the other part's figures from an earlier run
        res = {**json.loads(args.out.read_text()), **res}
    args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
