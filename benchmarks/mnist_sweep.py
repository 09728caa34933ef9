"""Tune MLPClassifier's DP-SGD recipe on MNIST-5k on a VALIDATION split, then test the winner.

    PYTHONPATH=src python benchmarks/mnist_sweep.py --jobs 16 --budget-s 300   # ~8 min, 16 cores
    PYTHONPATH=src python benchmarks/mnist_sweep.py --config '{"features": "scatter"}'  # test one
    PYTHONPATH=src python benchmarks/mnist_sweep.py --opacus --seeds 5  # Opacus, same recipe
    PYTHONPATH=src python benchmarks/mnist_sweep.py --validate '[{...}, ...]' --eps 1 --seeds 3
        # given configurations on the validation split only (-> results/mnist_validate.json)
    PYTHONPATH=src python benchmarks/mnist_sweep.py --recipes '{"1.0": {...}, "3.0": {...}}'
        # each recipe on test (--seeds) and Opacus with the same recipes, in one run

Protocol (so the test split never guides a choice):
1. the 4,000 training rows (``mnist_data.mnist_5k``: shuffled with seed 0) are split again,
   3,200 to fit / 800 to validate (permutation seed 1); the 1,000 test rows are not read;
2. random search over the grid below (fixed search seed), one seed per configuration, as many
   as ``--budget-s`` allows, for each ε in {1, 3}; the 6 best per ε are re-run with 2 more
   seeds and the best mean validation accuracy wins;
3. the winner of each ε is fitted on all 4,000 training rows and scored on the 1,000 test rows,
   5 seeds (mean ± sd, min-max); the shipped defaults are scored the same way beside it.
The tuning itself reads the training rows without privacy (as in the published DP-SGD results
that the peers quote): the figures are the accuracy of a *fixed* recipe, not of a private
search. δ = 1e-5 throughout. Features: raw pixels / 255 (784), or
``dpkit.learn.features.ScatterFeatures`` (833, a fixed row-wise transform: free in privacy),
raw or standardised per example.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

GRID: dict[str, list[Any]] = {
    "features": ["pixels", "scatter", "scatter_norm"],
    "hidden": [(), (64,), (256,)],
    "q": [1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0],  # sampling rate: batch = q n, 1/q steps an epoch
    "epochs": [10, 20, 40, 80],
    "max_grad_norm": [0.1, 1.0],
    "lr_c": [0.03, 0.1, 0.3, 1.0, 3.0],  # learning rate x clip norm: the size of a clipped step
    "momentum": [0.0, 0.9],
    "schedule": ["constant", "cosine"],
    "averaging": [0.0, 0.5],
    "activation": ["tanh"],
}
_DATA: dict[str, Any] = {}


def _features(X: np.ndarray) -> dict[str, np.ndarray]:
    from dpkit.learn.features import ScatterFeatures

    S = ScatterFeatures((28, 28)).transform(X)
    norm = (S - S.mean(1, keepdims=True)) / (S.std(1, keepdims=True) + 1e-6)  # = "example"
    return {"pixels": X, "scatter": S, "scatter_norm": norm.astype(np.float32)}


def _load() -> dict[str, Any]:
    if not _DATA:
        from mnist_data import mnist_5k

        Xtr, ytr, Xte, yte = mnist_5k()
        both = np.r_[Xtr, Xte]
        feats = _features(both)
        perm = np.random.RandomState(1).permutation(4000)
        _DATA.update(feats=feats, ytr=ytr, yte=yte, fit=perm[:3200], val=perm[3200:])
    return _DATA


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)
    _load()


def run_one(cfg: dict[str, Any], eps: float, seed: int, final: bool) -> dict[str, Any]:
    """Fit one configuration; validation accuracy, or test accuracy when ``final``."""
    from dpkit.learn import MLPClassifier

    d = _load()
    F = d["feats"][cfg["features"]]
    if final:
        A, ya, B, yb = F[:4000], d["ytr"], F[4000:], d["yte"]
    else:
        A, ya = F[:4000][d["fit"]], d["ytr"][d["fit"]]
        B, yb = F[:4000][d["val"]], d["ytr"][d["val"]]
    t = time.perf_counter()
    clf = MLPClassifier(tuple(cfg["hidden"]), epsilon=eps, delta=1e-5, epochs=cfg["epochs"],
                        batch_size=int(np.ceil(cfg["q"] * len(A))), averaging=cfg["averaging"],
                        max_grad_norm=cfg["max_grad_norm"],
                        learning_rate=cfg["lr_c"] / cfg["max_grad_norm"],
                        momentum=cfg["momentum"], activation=cfg["activation"],
                        schedule=cfg["schedule"], classes=list(range(10)),
                        random_state=seed).fit(A, ya)
    return {"cfg": cfg, "eps": eps, "seed": seed, "acc": clf.score(B, yb),
            "epsilon_spent": clf.epsilon_, "fit_s": time.perf_counter() - t}


def _sample(rng: random.Random) -> dict[str, Any]:
    return {k: rng.choice(v) for k, v in GRID.items()}


def search(pool: ProcessPoolExecutor, jobs: int, budget_s: float,
           eps_list: list[float]) -> list[dict[str, Any]]:
    rng = random.Random(2026)
    done: list[dict[str, Any]] = []
    pending: set[Any] = set()
    stop = time.perf_counter() + budget_s
    i = 0
    cfg = _sample(rng)
    while time.perf_counter() < stop or pending:
        while time.perf_counter() < stop and len(pending) < 2 * jobs:
            if i and i % len(eps_list) == 0:  # each configuration runs at every epsilon
                cfg = _sample(rng)
            pending.add(pool.submit(run_one, cfg, eps_list[i % len(eps_list)], 0, False))
            i += 1
        if not pending:
            break
        got, pending = wait(pending, timeout=5, return_when=FIRST_COMPLETED)
        for f in got:
            try:
                done.append(f.result())
            except Exception as exc:  # a bad configuration is data too
                print("failed:", exc, flush=True)
    return done


def refine(pool: ProcessPoolExecutor, done: list[dict[str, Any]], eps: float,
           top: int = 6) -> dict[str, Any]:
    """The best of the ``top`` first-round configurations after 2 more seeds (mean of 3)."""
    mine = sorted((r for r in done if r["eps"] == eps), key=lambda r: -r["acc"])[:top]
    futs = {id(r): [pool.submit(run_one, r["cfg"], eps, s, False) for s in (1, 2)]
            for r in mine}
    scored = []
    for r in mine:
        accs = [r["acc"]] + [f.result()["acc"] for f in futs[id(r)]]
        scored.append({"cfg": r["cfg"], "val_accs": accs, "val_mean": statistics.mean(accs)})
    scored.sort(key=lambda s: -s["val_mean"])
    for s in scored:
        print(f"eps={eps} val {s['val_mean']:.4f} {s['val_accs']} {s['cfg']}", flush=True)
    return scored[0]


def final(pool: ProcessPoolExecutor, cfg: dict[str, Any], eps: float,
          seeds: int) -> dict[str, Any]:
    runs = [f.result() for f in [pool.submit(run_one, cfg, eps, 100 + s, True)
                                 for s in range(seeds)]]
    accs = [r["acc"] for r in runs]
    out = {"cfg": cfg, "eps": eps, "test_accs": accs, "mean": statistics.mean(accs),
           "sd": statistics.stdev(accs) if len(accs) > 1 else 0.0, "min": min(accs),
           "max": max(accs), "epsilon_spent": max(r["epsilon_spent"] for r in runs),
           "fit_s": statistics.median(r["fit_s"] for r in runs)}
    print(f"TEST eps={eps}: {out['mean']:.4f} ± {out['sd']:.4f} ({out['min']:.3f}-"
          f"{out['max']:.3f}) spent {out['epsilon_spent']:.4f} {cfg}", flush=True)
    return out


PEER = """
import json, math, sys, warnings
import numpy as np, torch
warnings.filterwarnings("ignore")
from opacus import PrivacyEngine
torch.set_num_threads(1)
d = np.load(sys.argv[1]); cfg = json.loads(sys.argv[2]); out = []
A, ya = torch.from_numpy(d["A"]), torch.from_numpy(d["ya"])
B, yb = torch.from_numpy(d["B"]), d["yb"]
for eps in (1.0, 3.0):
    c = cfg[str(eps)]
    for seed in range(int(sys.argv[3])):
        torch.manual_seed(100 + seed)
        sizes = [A.shape[1], *c.get("hidden", []), 10]; layers = []
        for i in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
            torch.nn.init.zeros_(layers[-1].bias)
            if i < len(sizes) - 2:
                layers.append(torch.nn.Tanh() if c.get("activation", "tanh") == "tanh"
                              else torch.nn.ReLU())
        net = torch.nn.Sequential(*layers)
        opt = torch.optim.SGD(net.parameters(), lr=c["lr"], momentum=c["momentum"])
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(A, ya),
                                             batch_size=c["batch"])
        net, opt, loader = PrivacyEngine(accountant="prv").make_private_with_epsilon(
            module=net, optimizer=opt, data_loader=loader, target_epsilon=eps,
            target_delta=1e-5, epochs=c["epochs"], max_grad_norm=c["clip"])
        total = c["epochs"] * len(loader); start = int(total * (1 - c["averaging"])); step = 0
        avg = [torch.zeros_like(p) for p in net.parameters()]
        for _ in range(c["epochs"]):
            for xb, yb_ in loader:
                f = (0.5 * (1 + math.cos(math.pi * step / total))
                     if c.get("schedule", "cosine") == "cosine" else 1.0)
                for g in opt.param_groups:
                    g["lr"] = c["lr"] * f
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(xb), yb_, reduction="mean").backward()
                opt.step(); step += 1
                if step > start:
                    with torch.no_grad():
                        for a, p in zip(avg, net.parameters()):
                            a.add_(p.detach() - a, alpha=1.0 / (step - start))
        if step > start:
            with torch.no_grad():
                for a, p in zip(avg, net.parameters()):
                    p.copy_(a)
        with torch.no_grad():
            acc = float((net(B).argmax(1).numpy() == yb).mean())
        out.append({"eps": eps, "seed": seed, "acc": acc})
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
print(json.dumps(out))
"""


def peer_opacus(venv: Path, res: dict[str, Any], seeds: int) -> dict[str, Any]:
    """Opacus 1.6 with the same features, network, schedule and recipe as ``res["test"]``
    (torch's default initialisation, its PRV accountant calibrating σ)."""
    import subprocess
    import tempfile

    d = _load()
    F = d["feats"]["scatter_norm"]
    cfg: dict[str, dict[str, Any]] = {}
    for key in ("1.0", "3.0"):
        c = res["test"][key]["cfg"]
        cfg[key] = {"lr": c["lr_c"] / c["max_grad_norm"], "momentum": c["momentum"],
                    "batch": int(np.ceil(c["q"] * 4000)), "epochs": c["epochs"],
                    "clip": c["max_grad_norm"], "averaging": c["averaging"],
                    "hidden": list(c["hidden"]), "activation": c["activation"],
                    "schedule": c["schedule"]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.npz"
        np.savez(path, A=F[:4000], ya=d["ytr"], B=F[4000:], yb=d["yte"])
        proc = subprocess.run([str(venv / "bin" / "python"), "-c", PEER, str(path),
                               json.dumps(cfg), str(seeds)], capture_output=True, text=True,
                              check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    out: dict[str, Any] = {}
    for e in (1.0, 3.0):
        accs = [r["acc"] for r in runs if r["eps"] == e]
        out[str(e)] = {"test_accs": accs, "mean": statistics.mean(accs),
                       "sd": statistics.stdev(accs) if len(accs) > 1 else 0.0}
        print(f"OPACUS eps={e}: {out[str(e)]}", flush=True)
    return out


def validate(pool: ProcessPoolExecutor, cfgs: list[dict[str, Any]], eps: float,
             seeds: int) -> list[dict[str, Any]]:
    """Given configurations on the validation split only (``seeds`` seeds each), best first."""
    futs = [[pool.submit(run_one, c, eps, s, False) for s in range(seeds)] for c in cfgs]
    out = []
    for c, fs in zip(cfgs, futs, strict=True):
        accs = [f.result()["acc"] for f in fs]
        out.append({"cfg": c, "eps": eps, "val_accs": accs, "val_mean": statistics.mean(accs)})
        print(f"VAL eps={eps} {out[-1]['val_mean']:.4f} {accs} {c}", flush=True)
    return sorted(out, key=lambda r: -r["val_mean"])


def _opacus_venv() -> Path | None:
    return next((p for p in [HERE / ".venvs" / "opacus",
                             HERE.parents[2] / "main" / "benchmarks" / ".venvs" / "opacus"]
                 if (p / "bin" / "python").exists()), None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--config", type=json.loads, default=None,
                    help="a JSON configuration to score on test for both epsilons")
    ap.add_argument("--validate", type=json.loads, default=None,
                    help="a JSON list of configurations to score on validation only (--eps)")
    ap.add_argument("--eps", type=float, default=1.0, help="the epsilon of --validate")
    ap.add_argument("--recipes", type=json.loads, default=None,
                    help='{"1.0": cfg, "3.0": cfg}: test each (--seeds seeds), and Opacus with '
                    "the same recipes, in one run")
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default results/mnist_sweep.json; mnist_validate.json "
                    "with --validate)")
    ap.add_argument("--opacus", action="store_true",
                    help="only: Opacus 1.6 (benchmarks/.venvs/opacus) with the recipe in --out")
    a = ap.parse_args()
    name = ("mnist_validate.json" if a.validate is not None else
            "mnist_recipe.json" if a.recipes is not None else "mnist_sweep.json")
    a.out = a.out or HERE / "results" / name
    if a.opacus:
        old = json.loads(a.out.read_text())
        venv = _opacus_venv()
        if venv is None:
            raise SystemExit("no Opacus venv: see /work/shared/RECIPES.md (benchmarks/.venvs)")
        old["opacus_same_recipe"] = peer_opacus(venv, old, a.seeds)
        a.out.write_text(json.dumps(old, indent=1, default=str) + "\n")
        return
    eps_list = [1.0, 3.0]
    res: dict[str, Any] = {"jobs": a.jobs, "budget_s": a.budget_s, "grid": GRID}
    with ProcessPoolExecutor(a.jobs, initializer=_init_worker) as pool:
        if a.recipes is not None:
            res["test"] = {e: final(pool, {**_sample(random.Random(0)), **c}, float(e), a.seeds)
                           for e, c in a.recipes.items()}
        elif a.validate is not None:
            base = _sample(random.Random(0))
            res["validate"] = validate(pool, [{**base, **c} for c in a.validate], a.eps,
                                       a.seeds)
        elif a.config is not None:
            res["given"] = [final(pool, {**_sample(random.Random(0)), **a.config}, e, a.seeds)
                            for e in eps_list]
        else:
            t = time.perf_counter()
            done = search(pool, a.jobs, a.budget_s, eps_list)
            res["search"] = done
            print(f"{len(done)} runs in {time.perf_counter() - t:.0f}s", flush=True)
            res["best"] = {str(e): refine(pool, done, e) for e in eps_list}
            res["test"] = {str(e): final(pool, res["best"][str(e)]["cfg"], e, a.seeds)
                           for e in eps_list}
    if a.recipes is not None and (venv := _opacus_venv()) is not None:
        res["opacus_same_recipe"] = peer_opacus(venv, res, a.seeds)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
