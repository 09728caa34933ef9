"""DP-SGD: dpkit.learn.torch against the non-private step and Opacus 1.6, in the same run.

    PYTHONPATH=src python benchmarks/dpsgd_bench.py            # speed, memory, epsilon
    PYTHONPATH=src python benchmarks/dpsgd_bench.py --accuracy # + MNIST-5k MLPClassifier (slow)
    PYTHONPATH=src python benchmarks/dpsgd_bench.py --fedavg   # DP-FedAvg on MNIST-5k only
    PYTHONPATH=src python benchmarks/dpsgd_bench.py --units --steps 4  # user level vs example
    PYTHONPATH=src python benchmarks/dpsgd_bench.py --units-accuracy   # MNIST-5k, users of 4

Speed: a 784-1000-1000-10 ReLU MLP, SGD, expected batch 1024, CPU, torch threads = 2. Each
variant runs in its own fresh process (so peak RSS is its own), Opacus in its venv
(``benchmarks/.venvs/opacus``: ``pip install torch==2.13.0 opacus==1.6.0``); the variants are
interleaved over ``--repeats`` rounds and the ratios are per round (median and range), because
the machine is shared. Epsilon: the same (q, σ, steps) through dpkit's PLD and Opacus's RDP and
PRV accountants.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPACUS_PY = next((p for p in [HERE / ".venvs" / "opacus" / "bin" / "python",
                              HERE.parents[2] / "main" / "benchmarks" / ".venvs" / "opacus" / "bin"
                              / "python"] if p.exists()), None)
N, BATCH, DIMS = 8192, 1024, (784, 1000, 1000, 10)
SIGMA, C = 1.0, 1.0
UNIT = 4  # examples per privacy unit in the user-level timing (--units)


def _net():  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(0)
    layers = []
    for i, (a, b) in enumerate(itertools.pairwise(DIMS)):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.ReLU()] if i < len(DIMS) - 2 else [])
    return torch.nn.Sequential(*layers)


def _data():  # type: ignore[no-untyped-def]
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(1)
    x = torch.rand(N, DIMS[0], generator=g)
    y = torch.randint(0, DIMS[-1], (N,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH)


def _timed(loader, model, opt, loss_fn, steps: int, extra=None) -> dict:  # type: ignore[no-untyped-def]
    times, noise = [], []
    it = iter(loader)
    for _ in range(steps + 1):  # the first step warms up
        xb, yb = next(it)
        t = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
        times.append(time.perf_counter() - t)
        if extra is not None:
            noise.append(extra())
    return {"step_s": times[1:], "noise_s": noise[1:],
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def worker(kind: str, steps: int) -> dict:
    import torch

    torch.set_num_threads(2)
    model, loader = _net(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ce = torch.nn.functional.cross_entropy
    if kind == "nonprivate":
        return _timed(loader, model, opt, ce, steps)
    if kind == "dpkit":
        from dpkit.learn.torch import make_private

        tr = make_private(model, opt, loader, max_grad_norm=C, noise_multiplier=SIGMA)
        return _timed(tr.data_loader, tr.module, tr.optimizer, ce, steps,
                      lambda: tr.optimizer.last_noise_s)
    from opacus import PrivacyEngine

    mode = {"opacus_hooks": "hooks", "opacus_ghost": "ghost"}[kind]
    engine = PrivacyEngine()
    crit = torch.nn.CrossEntropyLoss()
    out = engine.make_private(module=model, optimizer=opt, data_loader=loader, criterion=crit,
                              noise_multiplier=SIGMA, max_grad_norm=C, grad_sample_mode=mode,
                              poisson_sampling=True)
    if mode == "ghost":
        model, opt, crit, loader = out
    else:
        model, opt, loader = out
    return _timed(loader, model, opt, crit, steps)


def _variant(kind: str):  # type: ignore[no-untyped-def]
    """(loader, model, optimizer, loss, noise-time getter) for one variant, set up as its users
    would: the non-private step, dpkit's make_private, Opacus's make_private (hooks / ghost)."""
    import torch

    model, loader = _net(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ce = torch.nn.functional.cross_entropy
    if kind == "nonprivate":
        return loader, model, opt, ce, None
    if kind.startswith("dpkit"):
        import numpy as np

        from dpkit.learn.torch import make_private

        # user level: units of UNIT consecutive examples, sampled whole (same expected batch)
        units = np.arange(N) // UNIT if "units" in kind else None
        tr = make_private(model, opt, loader, max_grad_norm=C, noise_multiplier=SIGMA,
                          units=units)
        if kind.endswith("no_noise"):  # clipping overhead alone: a zero noise vector
            zeros = np.zeros(tr.optimizer.dim)  # one buffer, as the noise itself
            tr.optimizer._next_noise = lambda: zeros  # type: ignore[method-assign]
        return tr.data_loader, tr.module, tr.optimizer, ce, lambda: tr.optimizer.last_noise_s
    from opacus import PrivacyEngine

    mode = {"opacus_hooks": "hooks", "opacus_ghost": "ghost"}[kind]
    crit = torch.nn.CrossEntropyLoss()
    out = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader,
                                       criterion=crit, noise_multiplier=SIGMA, max_grad_norm=C,
                                       grad_sample_mode=mode, poisson_sampling=True)
    if mode == "ghost":
        model, opt, crit, loader = out
    else:
        model, opt, loader = out
    return loader, model, opt, crit, None


def _block(setup: tuple, it: list, steps: int, k: str) -> tuple[float, float]:  # type: ignore[type-arg]
    """``steps`` consecutive steps of one variant: (wall seconds, process CPU seconds) per step.

    CPU time (all threads of this process) is far less sensitive than wall time to the other
    jobs on a shared machine; it counts work, so it cannot show the noise thread's overlap.

    dpkit draws the next step's noise on a thread while the next forward/backward runs; the
    draw started by the block's last step is waited for *inside* the block, so every step of
    the block pays for one draw and no draw overlaps another variant's steps.
    """
    loader, model, opt, loss_fn, _ = setup
    total = 0.0
    cpu = time.process_time()
    for _ in range(steps):
        try:
            xb, yb = next(it[0])
        except StopIteration:
            it[0] = iter(loader)
            xb, yb = next(it[0])
        t = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
        total += time.perf_counter() - t
    pending = getattr(opt, "_pending", None)
    if k.startswith("dpkit") and pending is not None:
        t = time.perf_counter()
        pending.result()
        total += time.perf_counter() - t
    return total / steps, (time.process_time() - cpu) / steps


def interleaved(rounds: int, hooks_rounds: int, block: int = 3,
                kinds: list[str] | None = None) -> dict:
    """All variants in ONE process, a block of ``block`` steps of each in turn per round:
    same-time ratios (the machine is shared, so only same-round ratios mean much)."""
    import torch

    torch.set_num_threads(2)
    kinds = kinds or ["nonprivate", "dpkit", "dpkit_no_noise", "opacus_ghost", "opacus_hooks"]
    setups = {k: _variant(k) for k in kinds}
    iters = {k: [iter(v[0])] for k, v in setups.items()}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    cpus: dict[str, list[float]] = {k: [] for k in kinds}
    noise: list[float] = []
    for r in range(rounds + 1):  # round 0 warms up
        for k in kinds:
            if k == "opacus_hooks" and r > hooks_rounds:
                continue
            per_step, cpu = _block(setups[k], iters[k], 1 if k == "opacus_hooks" else block, k)
            if r:
                times[k].append(per_step)
                cpus[k].append(cpu)
                if k == "dpkit":
                    noise.append(setups[k][4]())
    return {"step_s": times, "cpu_s": cpus, "noise_s": noise, "block": block}


def _run(kind: str, steps: int) -> dict:
    py = str(OPACUS_PY) if kind.startswith("opacus") else sys.executable
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    out = subprocess.run([py, __file__, "--worker", kind, "--steps", str(steps)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _epsilons(steps: int, q: float, delta: float) -> dict:
    from dpkit import accounting, events

    e = events.SelfComposed(events.PoissonSampled(q, events.Gaussian(SIGMA)), steps)
    res = {"dpkit_pld": accounting.epsilon(e, delta=delta, method="pld")}
    if OPACUS_PY is not None:
        code = ("import json;from opacus.accountants import RDPAccountant, PRVAccountant\n"
                "r={}\nfor name, A in (('rdp', RDPAccountant), ('prv', PRVAccountant)):\n"
                f" a=A(); a.history=[({SIGMA}, {q}, {steps})]\n"
                f" r['opacus_'+name]=a.get_epsilon({delta})\nprint(json.dumps(r))")
        out = subprocess.run([str(OPACUS_PY), "-c", code], capture_output=True, text=True,
                             check=True)
        res.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return res


def speed(repeats: int, steps: int) -> None:
    kinds = ["nonprivate", "dpkit"] + (["opacus_ghost", "opacus_hooks"] if OPACUS_PY else [])
    rounds = []
    for r in range(repeats):
        got = {}
        for k in kinds:
            if k == "opacus_hooks" and r > 0:
                continue  # 7.5 GB of per-example gradients per step: one round is enough
            got[k] = _run(k, 2 if k == "opacus_hooks" else steps)
        rounds.append(got)
        print(f"round {r}: " + ", ".join(f"{k} {statistics.median(v['step_s']):.3f}s"
                                         for k, v in got.items()), flush=True)
    med = {k: [statistics.median(rd[k]["step_s"]) for rd in rounds if k in rd] for k in kinds}
    base = [statistics.median(rd["nonprivate"]["step_s"]) for rd in rounds]

    def ratio(a: str, b: list[float] | None = None, inv: bool = False) -> str:
        rs = [(y / x if inv else x / y) for x, y in zip(med[a], b or base, strict=False)]
        return f"{statistics.median(rs):.2f}x (range {min(rs):.2f}-{max(rs):.2f})"

    print("\nseparate processes, median step: " +
          ", ".join(f"{k} {statistics.median(v):.3f}s" for k, v in med.items()))
    print(f"dpkit / non-private: {ratio('dpkit')} (the interleaved figures above are the fairer "
          "ones: these processes run one after another under a changing load)")
    for k in kinds[2:]:
        print(f"{k} / dpkit: {ratio(k, med['dpkit'])}")
    rss = {k: statistics.median([rd[k]["maxrss_mb"] for rd in rounds if k in rd]) for k in kinds}
    print("peak RSS (MB): " + ", ".join(f"{k} {v:.0f}" for k, v in rss.items()))
    print(f"dpkit peak RSS / non-private: {rss['dpkit'] / rss['nonprivate']:.3f}")


def same_time(rounds: int) -> None:
    """Ratios from the interleaved run (Opacus venv: it holds torch, opacus, numpy, scipy)."""
    if OPACUS_PY is None:
        print("no Opacus venv: skipping the interleaved run")
        return
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    out = subprocess.run([str(OPACUS_PY), __file__, "--worker", "interleaved", "--steps",
                          str(rounds)], env=env, capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    st = res["step_s"]
    base = st["nonprivate"]
    print(f"\ninterleaved, {rounds} rounds: median step " +
          ", ".join(f"{k} {statistics.median(v):.3f}s" for k, v in st.items()))
    for k in ("dpkit", "dpkit_no_noise", "opacus_ghost", "opacus_hooks"):
        n = len(st[k])
        rs = sorted(st[k][i] / base[i] for i in range(n))
        print(f"  {k} / non-private, per round: median {statistics.median(rs):.2f}x "
              f"(range {rs[0]:.2f}-{rs[-1]:.2f}, {n} rounds)")
    for k in ("opacus_ghost", "opacus_hooks"):
        n = len(st[k])
        rs = sorted(st[k][i] / st["dpkit"][i] for i in range(n))
        print(f"  {k} / dpkit, per round: median {statistics.median(rs):.2f}x "
              f"(range {rs[0]:.2f}-{rs[-1]:.2f})")
    cp = res.get("cpu_s", {})
    if cp:
        print("  process CPU time per step (all threads; work, not wall): " +
              ", ".join(f"{k} {statistics.median(v):.3f}s" for k, v in cp.items() if v))
        for k in ("dpkit", "dpkit_no_noise", "opacus_ghost", "opacus_hooks"):
            n = len(cp[k])
            rs = sorted(cp[k][i] / cp["nonprivate"][i] for i in range(n))
            print(f"  CPU {k} / non-private, per round: median {statistics.median(rs):.2f}x "
                  f"(range {rs[0]:.2f}-{rs[-1]:.2f}, {n} rounds)")
        for k in ("opacus_ghost", "opacus_hooks"):
            rs = sorted(cp[k][i] / cp["dpkit"][i] for i in range(len(cp[k])))
            print(f"  CPU {k} / dpkit: median {statistics.median(rs):.2f}x "
                  f"(range {rs[0]:.2f}-{rs[-1]:.2f})")
    nz = res["noise_s"]
    print(f"  dpkit secure noise draw (1.8 M Gaussians, on its thread, overlapping the next "
          f"forward/backward; blocks of {res['block']} steps, the last draw waited for in the "
          f"block): median {statistics.median(nz):.3f}s")


def accuracy() -> None:
    """MNIST-5k: the recipe chosen on validation by ``mnist_sweep.py`` (a linear head on
    ``ScatterFeatures``), 3 seeds per ε, and the old defaults on raw pixels beside it."""
    sys.path.insert(0, str(HERE))
    from dpkit.learn.features import ScatterFeatures
    from dpkit.learn.mlp import MLPClassifier
    from mnist_data import mnist_5k

    Xtr, ytr, Xte, yte = mnist_5k()
    per_eps = {1.0: {"learning_rate": 3.0, "momentum": 0.0, "averaging": 0.0},
               3.0: {"learning_rate": 1.0, "momentum": 0.9, "averaging": 0.5}}
    for eps, extra in per_eps.items():
        accs, old = [], []
        for seed in range(3):
            clf = MLPClassifier((), epsilon=eps, delta=1e-5, epochs=80, batch_size=250,
                                max_grad_norm=0.1, schedule="cosine", classes=list(range(10)),
                                features=ScatterFeatures((28, 28), normalize="example"),
                                random_state=100 + seed, **extra).fit(Xtr, ytr)  # type: ignore[arg-type]
            accs.append(clf.score(Xte, yte))
            old.append(MLPClassifier(epsilon=eps, delta=1e-5, random_state=seed)
                       .fit(Xtr, ytr).score(Xte, yte))
        print(f"MNIST-5k eps={eps}: recipe {accs} (mean {statistics.mean(accs):.3f}), "
              f"old defaults on pixels {old} (mean {statistics.mean(old):.3f}), "
              f"epsilon spent {clf.epsilon_:.4f}")


def units_accuracy(seeds: int = 3) -> None:
    """MNIST-5k, the same recipe at example level and at user level with users of UNIT training
    rows (consecutive rows of the shuffled split): what protecting a whole user costs in
    accuracy at the same ε (each user's summed gradient is clipped to the same C)."""
    import numpy as np

    sys.path.insert(0, str(HERE))
    from dpkit.learn.features import ScatterFeatures
    from dpkit.learn.mlp import MLPClassifier
    from mnist_data import mnist_5k

    Xtr, ytr, Xte, yte = mnist_5k()
    feats = ScatterFeatures((28, 28), normalize="example")  # public, row-wise: applied once
    Ftr, Fte = feats.transform(Xtr), feats.transform(Xte)
    users = np.arange(len(Xtr)) // UNIT
    per_eps = {1.0: {"learning_rate": 3.0, "momentum": 0.0, "averaging": 0.0},
               3.0: {"learning_rate": 1.0, "momentum": 0.9, "averaging": 0.5}}
    for eps, extra in per_eps.items():
        for level, units in (("example", None), (f"user ({UNIT} rows)", users)):
            accs = []
            for seed in range(seeds):
                clf = MLPClassifier((), epsilon=eps, delta=1e-5, epochs=80, batch_size=250,
                                    max_grad_norm=0.1, schedule="cosine",
                                    classes=list(range(10)), random_state=100 + seed,
                                    **extra).fit(Ftr, ytr, units=units)  # type: ignore[arg-type]
                accs.append(round(clf.score(Fte, yte), 4))
            print(f"MNIST-5k eps={eps} {level}-level: {accs} (mean {statistics.mean(accs):.4f}), "
                  f"epsilon spent {clf.epsilon_:.4f}", flush=True)


def fed(seeds: int = 5) -> None:
    """DP-FedAvg on MNIST-5k: 100 clients of 40 examples, IID and non-IID, at ε = 8 and 3, the
    recipe chosen on validation by ``fedavg_sweep.py`` (its ``CHOSEN``), ``seeds`` test seeds."""
    sys.path.insert(0, str(HERE))
    import fedavg_sweep

    fedavg_sweep.main(["--chosen", "--seeds", str(seeds)])


def user_level(rounds: int) -> None:
    """User-level step (units of UNIT examples, per-unit clipping) against the example-level
    one and the non-private step, interleaved in one process; per-round ratios."""
    kinds = ["nonprivate", "dpkit", "dpkit_units", "dpkit_no_noise", "dpkit_units_no_noise"]
    r = interleaved(rounds, 0, kinds=kinds)
    for key in ("step_s", "cpu_s"):
        t = r[key]
        for a, b in [("dpkit_units", "dpkit"), ("dpkit_units_no_noise", "dpkit_no_noise"),
                     ("dpkit_units", "nonprivate"), ("dpkit", "nonprivate")]:
            ratios = [x / y for x, y in zip(t[a], t[b], strict=True)]
            print(f"{key} {a} / {b}: median {statistics.median(ratios):.3f}x "
                  f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds)")
        print(f"{key} medians (s): " + ", ".join(f"{k} {statistics.median(v):.3f}"
                                                  for k, v in t.items()))
    print(f"load average: {os.getloadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--fedavg", action="store_true", help="only the DP-FedAvg accuracy runs")
    ap.add_argument("--interleaved-only", action="store_true",
                    help="only the same-process interleaved timing (3 x --steps rounds)")
    ap.add_argument("--units", action="store_true",
                    help="only the user-level timing (units of 4) against example level")
    ap.add_argument("--units-accuracy", action="store_true",
                    help="MNIST-5k accuracy at example and user level (users of 4 rows)")
    a = ap.parse_args()
    if a.units_accuracy:
        units_accuracy()
        return
    if a.units:
        user_level(a.steps)
        return
    if a.fedavg:
        fed()
        return
    if a.interleaved_only:
        same_time(a.steps * 3)
        return
    if a.worker == "interleaved":
        print(json.dumps(interleaved(a.steps, 2)))
        return
    if a.worker:
        print(json.dumps(worker(a.worker, a.steps)))
        return
    print(f"epsilon, q={BATCH / N}, sigma={SIGMA}, 3 epochs: "
          f"{_epsilons(3 * N // BATCH, BATCH / N, 1e-5)}")
    print(f"epsilon, q=0.01, sigma={SIGMA}, 10000 steps: {_epsilons(10000, 0.01, 1e-5)}")
    same_time(a.steps * 3)
    speed(a.repeats, a.steps)
    if a.accuracy:
        accuracy()


if __name__ == "__main__":
    main()
