"""Benchmark: a DP-SGD fit through the curator on a constant-work project, CPU and wall time.

    PYTHONPATH=$PWD/src python benchmarks/constant_work_fit_bench.py               # ~3-5 min
    PYTHONPATH=$PWD/src python benchmarks/constant_work_fit_bench.py --epochs 5 --repeats 5

Three modes of the same fit (``cur.fit(MLPClassifier(...), "SELECT x0, ..., x9 FROM t",
label="k")``, 20,000 rows, Poisson rate 0.05: 20 steps an epoch), on two projects over the
same rows, both at ε = 3, δ = 1e-6 with the OS CSPRNG (a secure project draws the next step's
noise ahead on a thread):

- ``today``: ``constant_work=False``;
- ``fixed``: ``constant_work=True``, the next step's noise drawn ahead on the thread with its
  reserved share of the release's failure bound (``noise.reserve_share``);
- ``inline``: ``constant_work=True``, drawn in line (``DPOptimizer.draw_ahead = False``: what a
  constant-work fit did before the share existed).

Each repeat runs the three modes once, in an order that rotates per repeat (load drift favours
none); a fit is timed by the wall clock and by this process's CPU time (all its threads: the
drawing thread and torch's too) together. Prints per model and mode the median of each clock,
the ratio of medians to ``today`` with the min-max of the per-repeat ratios, and the 1-minute
load average before and after (the machine may be shared). Then, per model, the one thing
the thread can hide: a step's noise draw (``gaussian_float`` of the model's parameter count,
the curator's default float noise), best of 20 calls, on the OS CSPRNG with and without
``ConstantWork``, and that draw's share of a median step of the ``fixed`` mode.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time

import numpy as np

import dpkit as dp

MODES = ("today", "fixed", "inline")
MODELS: dict[str, tuple[int, ...]] = {"logistic": (), "MLP (64,)": (64,),
                                      "MLP (256, 256)": (256, 256)}


def _projects(tmp: str) -> dict[bool, dp.Curator]:
    import pandas as pd

    rng = np.random.default_rng(0)  # the table's rows (not noise)
    n = 20_000
    cols = {f"x{j}": rng.normal(0, 1, n).round(3) for j in range(10)}
    k = (cols["x0"] + cols["x1"] > 0).astype(int) + (cols["x2"] > 0.5).astype(int)
    rows = pd.DataFrame({"uid": range(n), "k": [f"c{v}" for v in k], **cols})
    out = {}
    for fixed in (False, True):
        cur = dp.Curator.create(f"{tmp}/p{int(fixed)}.dpkit", epsilon=3.0, delta=1e-6,
                                accountant="approx", constant_work=fixed)
        cur.add_table("t", rows, privacy_unit="uid", max_rows_per_unit=1,
                      bounds={c: (-4, 4) for c in cols}, domains={"k": ["c0", "c1", "c2"]})
        out[fixed] = cur
    return out


def _fit(curs: dict[bool, dp.Curator], mode: str, hidden: tuple[int, ...],
         epochs: int) -> tuple[float, float]:
    from dpkit.learn import MLPClassifier
    from dpkit.learn.torch.optimizer import DPOptimizer

    DPOptimizer.draw_ahead = mode != "inline"
    try:
        model = MLPClassifier(hidden, epochs=epochs, sample_rate=0.05, max_grad_norm=1.0)
        query = "SELECT " + ", ".join(f"x{j}" for j in range(10)) + " FROM t"
        wall, cpu = time.perf_counter(), time.process_time()
        curs[mode != "today"].fit(model, query, label="k", epsilon=0.005, delta=1e-9)
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        DPOptimizer.draw_ahead = True


def _report(name: str, times: dict[str, list[tuple[float, float]]]) -> None:
    for c, clock in enumerate(("wall", "cpu")):
        base = [t[c] for t in times["today"]]
        cells = [f"today {statistics.median(base) * 1e3:7.0f} ms"]
        for mode in MODES[1:]:
            mine = [t[c] for t in times[mode]]
            ratios = [m / b for m, b in zip(mine, base, strict=True)]
            cells.append(f"{mode} {statistics.median(mine) * 1e3:7.0f} ms "
                         f"({statistics.median(mine) / statistics.median(base):.2f}; "
                         f"{min(ratios):.2f}-{max(ratios):.2f})")
        print(f"{name:16s} {clock:4s}  " + "   ".join(cells))


def _draw_cost(hidden: tuple[int, ...], step_s: float) -> str:
    """The best-of-20 time of one step's noise draw, plain and constant-work, and the
    constant-work draw's share of a step of ``step_s`` seconds."""
    from dpkit import noise

    sizes = (10, *hidden, 3)  # 10 features, 3 classes: weights and biases of each layer
    dim = sum(a * b + b for a, b in itertools.pairwise(sizes))
    out = []
    for src in (noise.secure(), noise.ConstantWork(noise.secure(), bits=46)):
        best = float("inf")
        for _ in range(20):
            t = time.perf_counter()
            noise.gaussian_float(1.0, dim, source=src)
            best = min(best, time.perf_counter() - t)
        out.append(best)
    return (f"  one step's noise draw ({dim:,} parameters): {out[0] * 1e6:.0f} us today, "
            f"{out[1] * 1e6:.0f} us constant work = {out[1] / step_s:.2%} of a fixed-mode step")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--only", default="", help="run the models whose name contains this")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    curs = _projects(tmp)
    print(f"load {os.getloadavg()[0]:.1f}; {args.epochs} epochs of 20 steps; "
          f"{args.repeats} repeats; ms per fit, ratio of medians to today (min-max per repeat)")
    for name, hidden in MODELS.items():
        if args.only not in name:
            continue
        _fit(curs, "fixed", hidden, 1)  # warm: torch's kernels, the plan caches
        times: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
        for r in range(args.repeats):
            for mode in MODES[r % 3:] + MODES[: r % 3]:
                times[mode].append(_fit(curs, mode, hidden, args.epochs))
        _report(name, times)
        step = statistics.median(t[0] for t in times["fixed"]) / (20 * args.epochs)
        print(_draw_cost(hidden, step))
        print(f"  (load {os.getloadavg()[0]:.1f})")
    for cur in curs.values():
        cur.close()


if __name__ == "__main__":
    main()
