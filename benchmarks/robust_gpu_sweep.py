"""A recipe sweep for the smoothed MNIST-5k classifier on a GPU, chosen on validation only.

    DPKIT_DATA=/path/to/data python benchmarks/robust_gpu_sweep.py --out DIR --budget 420

The CPU sweeps of benchmarks/robust_train.py cost 12-19 minutes per net on the shared machine,
so only a handful of recipes were ever compared (docs/beyond.md). On a GPU a net trains in
seconds: this script trains every recipe of ``RECIPES`` with two seeds on the first 3,500
training images (worker processes sharing the GPU), screens each net on the 500 held-out
training images with CERTIFY's own counting rule (n0 = 100 copies choose the class, n = 10,000
count it, Clopper-Pearson at alpha = 0.001: exactly robust_ensemble.py's offline certificate,
but with torch's noise, paired across nets by a fixed generator per image), ranks recipes by
the mean of their seeds at radius 1.0 (ties: mean radius), screens the two-seed ensembles of
the best, then trains the best ``--finals`` recipes on all 4,000 training images with seeds
0..3 for the test certificate, which only benchmarks/robust_bench.py gives (on the CPU, with
dpkit.noise's secure source, under the time limit). No test image is read here.
``--ensembles`` instead trains the validation members of ``ENSEMBLES`` and screens those
ensembles (softmax averaging, optionally K-consensus, exactly dpkit.robust.Ensemble's rule) on
the same paired noise. Figures of the session-9 runs: docs/beyond.md.

Everything is written as it finishes (``DIR/sweep.json``; ``DIR/val_nets.pt`` and
``DIR/final_nets.pt``: ``{name: [state_dict, ...]}``), and the script stops starting work
when ``--budget`` seconds have passed, so a time limit never loses what was done.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import robust_train  # noqa: E402
from mnist_data import mnist_5k  # noqa: E402

N0, N, ALPHA, VAL = 100, 10_000, 0.001, 500

# last session's chosen recipe (SmoothAdv 1.5 + EMA 0.995 over the default consistency recipe)
BASE = {"adv": 1.5, "ema": 0.995}
RECIPES: dict[str, dict] = {
    "base": {},
    "ep150": {"epochs": 150},
    "ep300": {"epochs": 300},
    "copies4": {"copies": 4},
    "copies4_ep150": {"copies": 4, "epochs": 150},
    "copies8_ep150": {"copies": 8, "epochs": 150},
    "lam10": {"lam": 10.0},
    "lam2": {"lam": 2.0},
    "st055": {"sigma_train": 0.55},
    "st060": {"sigma_train": 0.60},
    "adv2": {"adv": 2.0},
    "adv1": {"adv": 1.0},
    "adv2_ep150": {"adv": 2.0, "epochs": 150},
    "macer1": {"macer": 1.0},
    "macer05_ep150": {"macer": 0.5, "epochs": 150},
    "w20": {"width": 20},
    "w24": {"width": 24},
    "w20_ep150": {"width": 20, "epochs": 150},
    "rot10": {"rotate": 10.0, "scale": 0.1},
    "lr005": {"lr": 0.05},
    "batch64": {"batch": 64},
    "ema999_ep150": {"ema": 0.999, "epochs": 150},
    "plain_ep150": {"adv": 0.0, "ema": 0.0, "epochs": 150},
    "ls01": {"smoothing": 0.1},
    "combo_ep150": {"copies": 4, "sigma_train": 0.55, "epochs": 150},
    "combo_ep300": {"copies": 4, "sigma_train": 0.55, "epochs": 300},
    "sig060": {"sigma": 0.6},
    "sig060_ep150": {"sigma": 0.6, "epochs": 150},
    # the second round: the first round's ranking said longer training and width 20 help
    "ep600": {"epochs": 600},
    "w20_ep300": {"width": 20, "epochs": 300},
    "copies8_ep300": {"copies": 8, "epochs": 300},
    "w20_copies4_ep300": {"width": 20, "copies": 4, "epochs": 300},
    # the third round (session 11): the LeNet-style ``pool`` arch, never swept; at width 8 it
    # costs the strided width-16 net's multiply-adds (~0.8M), so it fits the 1 s/image limit
    "pool_w8_ep300": {"arch": "pool", "width": 8, "epochs": 300},
    "pool_w10_ep300": {"arch": "pool", "width": 10, "epochs": 300},
    "pool_ep300": {"arch": "pool", "epochs": 300},
}


def recipe_args(overrides: dict) -> argparse.Namespace:
    """robust_train's defaults, then BASE, then the recipe's ``overrides`` (plus ``sigma``)."""
    ap = argparse.ArgumentParser()
    robust_train.add_train_args(ap)
    args = ap.parse_args([])
    args.sigma = 0.5
    for key, value in {**BASE, **overrides}.items():
        setattr(args, key, value)
    return args


def _counts(nets, xs, sigma: float, seed: int, device: str):  # type: ignore[no-untyped-def]
    """Per image: the class chosen on n0 copies and its count on the next n (soft average of
    ``nets``), with copies from torch's generator ``seed + i`` on ``device`` (paired noise)."""
    import torch

    chosen, counts = np.empty(len(xs), np.int64), np.empty(len(xs), np.int64)
    with torch.inference_mode():
        for i, x in enumerate(xs):
            g = torch.Generator(device=device).manual_seed(seed + i)
            noisy = x + sigma * torch.randn(N0 + N, x.numel(), generator=g, device=device)
            probs = torch.stack([torch.softmax(net(noisy), 1) for net in nets]).sum(0)
            votes = probs.argmax(1)
            chosen[i] = int(torch.bincount(votes[:N0], minlength=10).argmax())
            counts[i] = int((votes[N0:] == chosen[i]).sum())
    return chosen, counts


def certify_offline(chosen: np.ndarray, counts: np.ndarray, labels: np.ndarray,
                    sigma: float) -> dict:
    """Cohen et al.'s CERTIFY from the counts: radius sigma * Phi^-1(pA_lower) where the
    Clopper-Pearson lower bound exceeds 1/2 and the class is right, else 0."""
    from scipy import stats

    low = np.where(counts > 0, stats.beta.ppf(ALPHA, np.maximum(counts, 1), N - counts + 1), 0.0)
    radius = np.where((low > 0.5) & (chosen == labels), sigma * stats.norm.ppf(
        np.clip(low, 0.5, 1.0)), 0.0)
    out = {f"r{r}": float((radius >= r).mean()) for r in (0.5, 0.75, 1.0, 1.25, 1.5)}
    return {**out, "mean_radius": float(radius.mean())}


def _worker(jobs, results, device: str, val: int) -> None:  # type: ignore[no-untyped-def]
    """Train (and, for validation nets, screen) each job until the queue says stop."""
    import torch

    torch.backends.cudnn.benchmark = True
    x, y, _, _ = mnist_5k()
    xv = torch.tensor(x[-val:], device=device)
    while True:
        job = jobs.get()
        if job is None:
            return
        name, overrides, seed, final = job
        args = recipe_args(overrides)
        t = time.perf_counter()
        xtr, ytr = (x, y) if final else (x[:-val], y[:-val])
        net = robust_train.train(xtr, ytr, args, seed, device=device)
        res = {"name": name, "seed": seed, "final": final, "train_s": time.perf_counter() - t}
        if not final:
            chosen, counts = _counts([net], xv, args.sigma, 123, device)
            res.update(certify_offline(chosen, counts, y[-val:], args.sigma))
        state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
        results.put((res, state))


class Sweep:
    """The main process: a queue of jobs, worker processes, and the files in ``out``."""

    def __init__(self, out: Path, workers: int, device: str, budget: float,
                 val: int = VAL) -> None:
        import torch.multiprocessing as mp

        self.out, self.device, self.t0, self.budget = out, device, time.time(), budget
        self.val = val
        ctx = mp.get_context("spawn")
        self.jobs, self.results = ctx.Queue(), ctx.Queue()
        self.procs = [ctx.Process(target=_worker, args=(self.jobs, self.results, device, val))
                      for _ in range(workers)]
        for p in self.procs:
            p.start()
        self.log: list[dict] = []
        self.nets: dict[str, dict[str, list]] = {"val": {}, "final": {}}

    def left(self) -> float:
        return self.budget - (time.time() - self.t0)

    def run(self, jobs: list[tuple[str, dict, int, bool]], until: float) -> None:
        """Submit ``jobs`` and collect them until done or ``until`` seconds of budget are left
        (workers finish their current net; unstarted jobs are dropped)."""
        import torch

        for job in jobs:
            self.jobs.put(job)
        pending = len(jobs)
        while pending and self.left() > until:
            try:
                res, state = self.results.get(timeout=5)
            except queue.Empty:
                continue
            pending -= 1
            kind = "final" if res["final"] else "val"
            self.nets[kind].setdefault(res["name"], []).append(state)
            res["elapsed_s"] = round(time.time() - self.t0, 1)
            self.log.append(res)
            print(json.dumps(res), flush=True)
            (self.out / "sweep.json").write_text(json.dumps(self.log, indent=1))
            if kind == "final":
                torch.save(self.nets["final"], self.out / "final_nets.pt")
        while True:  # drop what was not started
            try:
                self.jobs.get_nowait()
            except queue.Empty:
                break
        torch.save(self.nets["val"], self.out / "val_nets.pt")

    def stop(self) -> None:
        for _ in self.procs:
            self.jobs.put(None)
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()


def ranking(log: list[dict]) -> list[tuple[str, float, float, int]]:
    """Recipes by the mean over seeds of radius-1.0 accuracy, then mean radius."""
    by: dict[str, list[dict]] = {}
    for r in log:
        if not r["final"]:
            by.setdefault(r["name"], []).append(r)
    rows = [(n, float(np.mean([r["r1.0"] for r in rs])),
             float(np.mean([r["mean_radius"] for r in rs])), len(rs)) for n, rs in by.items()]
    return sorted(rows, key=lambda row: (row[3] >= 2, row[1], row[2]), reverse=True)


def ensembles(sweep: Sweep, top: list[str]) -> list[dict]:
    """The two-seed soft ensemble of each of the ``top`` recipes, screened like the nets."""
    import torch

    x, y, _, _ = mnist_5k()
    xv = torch.tensor(x[-sweep.val:], device=sweep.device)
    out = []
    for name in top:
        states = sweep.nets["val"].get(name, [])
        if len(states) < 2 or sweep.left() < 60:
            continue
        args = recipe_args(RECIPES[name])
        nets = []
        for state in states[:2]:
            net = robust_train.net(args.width, args.arch, args.dropout).to(sweep.device)
            net.load_state_dict(state)
            nets.append(net.eval())
        chosen, counts = _counts(nets, xv, args.sigma, 123, sweep.device)
        res = {"ensemble": name, **certify_offline(chosen, counts, y[-sweep.val:], args.sigma)}
        print(json.dumps(res), flush=True)
        out.append(res)
    return out


def ensemble_votes(probs, members: list[int], consensus: int):  # type: ignore[no-untyped-def]
    """dpkit.robust.Ensemble's labels from the members' softmax outputs ``probs`` (k, b, C):
    the mean softmax's argmax, or with ``consensus`` K the first K members' class where their
    argmaxes agree (the base classifier a K-consensus ensemble certifies)."""
    full = probs[members].mean(0).argmax(1)
    if not consensus:
        return full
    first = probs[members[:consensus]].argmax(2)
    agree = (first == first[0]).all(0)
    return first[0].where(agree, full)


ENSEMBLES = {  # (name, [(recipe, seed)], K): validation evidence for members of the test nets
    "ep300 s0+s1": ([("ep300", 0), ("ep300", 1)], 0),
    "ep300 x4": ([("ep300", s) for s in range(4)], 0),
    "ep300 x4 K=2": ([("ep300", s) for s in range(4)], 2),
    "w20_ep300 s0+s1": ([("w20_ep300", 0), ("w20_ep300", 1)], 0),
    "w20_ep300 x4 K=2": ([("w20_ep300", s) for s in range(4)], 2),
    "ep300 s0 + w20_ep300 s0": ([("ep300", 0), ("w20_ep300", 0)], 0),
    "ep300 s0,s1 + w20_ep300 s0,s1 K=2": ([("ep300", 0), ("ep300", 1), ("w20_ep300", 0),
                                           ("w20_ep300", 1)], 2),
    "all 8 K=2": ([("ep300", s) for s in range(4)] + [("w20_ep300", s) for s in range(4)], 2),
}


def screen_ensembles(sweep: Sweep) -> dict:
    """Train the validation members of ``ENSEMBLES`` and screen every ensemble on shared noise
    (each image's copies drawn once, every member run on them)."""
    import torch

    members = sorted({m for ms, _ in ENSEMBLES.values() for m in ms})
    sweep.run([(n, RECIPES[n], s, False) for n, s in members], until=40)
    states = {}
    for name, nets_of in sweep.nets["val"].items():  # each name's nets in completion order
        seeds = [r["seed"] for r in sweep.log if r["name"] == name and not r["final"]]
        states.update({(name, seed): st for seed, st in zip(seeds, nets_of, strict=True)})
    nets: list = []
    index: dict[tuple[str, int], int] = {}
    for key in members:
        if key not in states:
            continue
        args = recipe_args(RECIPES[key[0]])
        net = robust_train.net(args.width, args.arch, args.dropout).to(sweep.device)
        net.load_state_dict(states[key])
        index[key] = len(nets)
        nets.append(net.eval())
    x, y, _, _ = mnist_5k()
    xv, yv = torch.tensor(x[-sweep.val:], device=sweep.device), y[-sweep.val:]
    todo = {n: ([index[m] for m in ms], k) for n, (ms, k) in ENSEMBLES.items()
            if all(m in index for m in ms)}
    chosen = {n: np.empty(len(xv), np.int64) for n in todo}
    counts = {n: np.empty(len(xv), np.int64) for n in todo}
    with torch.inference_mode():
        for i, xi in enumerate(xv):
            g = torch.Generator(device=sweep.device).manual_seed(123 + i)
            noisy = xi + 0.5 * torch.randn(N0 + N, xi.numel(), generator=g, device=sweep.device)
            probs = torch.stack([torch.softmax(net(noisy), 1) for net in nets])
            for n, (ms, k) in todo.items():
                votes = ensemble_votes(probs, ms, k)
                chosen[n][i] = int(torch.bincount(votes[:N0], minlength=10).argmax())
                counts[n][i] = int((votes[N0:] == chosen[n][i]).sum())
    out = {n: certify_offline(chosen[n], counts[n], yv, 0.5) for n in todo}
    for n, res in out.items():
        print("ENSEMBLE", n, json.dumps(res), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/robust_sweep"))
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for the whole sweep")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--recipes", default="", help="comma-separated subset of RECIPES")
    ap.add_argument("--seeds", type=int, default=2, help="validation seeds per recipe")
    ap.add_argument("--finals", type=int, default=2, help="recipes trained on all 4,000")
    ap.add_argument("--final-seeds", type=int, default=4)
    ap.add_argument("--val", type=int, default=VAL, help="held-out images (smoke: fewer)")
    ap.add_argument("--epochs", type=int, default=0, help="override every recipe's epochs (smoke)")
    ap.add_argument("--ensembles", action="store_true",
                    help="only train the members of ENSEMBLES and screen those ensembles")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.recipes.split(",") if args.recipes else list(RECIPES)
    if args.epochs:
        for name in names:
            RECIPES[name] = {**RECIPES[name], "epochs": args.epochs}
    sweep = Sweep(out, args.workers, args.device, args.budget, args.val)
    if args.ensembles:
        try:
            res = screen_ensembles(sweep)
            (out / "ensembles.json").write_text(json.dumps(res, indent=1))
        finally:
            sweep.stop()
        return
    try:
        # seed 0 of every recipe first, then seed 1, so a short budget still ranks them all
        jobs = [(n, RECIPES[n], s, False) for s in range(args.seeds) for n in names]
        sweep.run(jobs, until=0.45 * args.budget)
        rank = ranking(sweep.log)
        print("RANKING", json.dumps(rank), flush=True)
        ens = ensembles(sweep, [r[0] for r in rank[:3]])
        finals = [r[0] for r in rank[:args.finals]]
        sweep.run([(n, RECIPES[n], s, True) for s in range(args.final_seeds) for n in finals],
                  until=15)
        summary = {"ranking": rank, "ensembles": ens, "finals": finals,
                   "recipes": {n: {**BASE, **RECIPES[n]} for n in names},
                   "elapsed_s": round(time.time() - sweep.t0, 1)}
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print("SUMMARY", json.dumps(summary), flush=True)
    finally:
        sweep.stop()


if __name__ == "__main__":
    main()
