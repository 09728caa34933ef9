"""Attacks: the measurements and pictures of docs/attacks.md, regenerated in one run.

    python benchmarks/attacks_bench.py                       # everything, figures into docs/img
    python benchmarks/attacks_bench.py --out /tmp/figs --quick
    python benchmarks/attacks_bench.py --only recovery,membership

Parts (``--only``):

* ``recovery`` -- Dinur-Nissim reconstruction (n = 256, m = 1024) against fresh noise of growing
  size: L1 LP with random subsets, L1 LP with hash-defined subsets, the Dinur-Nissim LP told
  the bound, all against uniform ``±E`` noise, and the L1 LP against discrete Laplace noise of
  scale ``E``; mean over ``--repeats`` populations; LP solve times. Figure
  ``attack_recovery.png``.
* ``curator`` -- the same attack against the dpkit curator (total ε = 1, spent evenly over the
  1024 queries), then one query more (refused).
* ``difference`` / ``average`` -- the tables of :mod:`dpkit.attacks.cli_commands`.
* ``membership`` -- ROC on a released count and LiRA on logistic regression; figures
  ``attack_roc_aggregate.png``, ``attack_roc_model.png``.
* ``audit`` -- the per-mechanism audit report; ``one_run`` -- the one-run calculator figure
  ``attack_one_run.png``.

All randomness is seeded (``--seed``): the numbers are reproducible, and INSECURE by design.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import dpkit as dp
from dpkit.attacks import cli_commands as cc
from dpkit.attacks import plots
from dpkit.attacks import reconstruction as rec
from dpkit.attacks.report import audit_mechanisms, to_markdown

PARTS = ("recovery", "curator", "difference", "average", "membership", "audit", "one_run")


def _markdown(summary: cc.AttackSummary) -> str:
    head = "| " + " | ".join(summary.columns) + " |"
    rule = "|" + "---|" * len(summary.columns)
    body = ["| " + " | ".join(cc._fmt(v) for v in row) + " |" for row in summary.rows]
    return "\n".join([f"**{summary.title}**", "", head, rule, *body, *[
        f"\n_{n}_" for n in summary.notes]])


def recovery(out: Path, *, seed: int, repeats: int, quick: bool) -> None:
    levels = [0, 2, 4, 8, 16, 32, 64, 128] if not quick else [0, 4, 16, 64]
    curves = {}
    configs = [
        ("L1 LP, random subsets, uniform ±E", "uniform", "random", False),
        ("L1 LP, hashed subsets, uniform ±E", "uniform", "hashed", False),
        ("Dinur-Nissim LP told E, uniform ±E", "uniform", "random", True),
        ("L1 LP, random subsets, Laplace scale E", "laplace", "random", False),
    ]
    print("| noise E | " + " | ".join(c[0] for c in configs) + " |")
    print("|---:|" + "---:|" * len(configs))
    t0 = time.perf_counter()
    for label, kind, subsets, known in configs:
        curves[label] = rec.recovery_sweep(levels, n=256, queries=1024, noise=kind,
                                           subsets=subsets, known_bound=known,
                                           repeats=repeats, source=dp.noise.seeded(seed))
    elapsed = time.perf_counter() - t0
    for i, e in enumerate(levels):
        print(f"| {e} | " + " | ".join(f"{100 * curves[c[0]][i][1]:.1f}%" for c in configs)
              + " |")
    solves = len(levels) * len(configs) * repeats
    print(f"\n{solves} attacks (population, 1024 queries, LP) in {elapsed:.0f} s "
          f"({elapsed / solves:.2f} s each)")
    t0 = time.perf_counter()
    cur = cc.attack_reconstruct(noise_levels=(), curator_epsilon=1.0, seed=seed)
    rate = float(cur.rows[0][-1].rstrip("%")) / 100
    print(f"\ndpkit curator, total ε = 1 over 1024 queries (DLap scale 1024 each): "
          f"{100 * rate:.1f}% recovered; {cur.notes[-1]} ({time.perf_counter() - t0:.0f} s)")
    p = plots.plot_recovery(curves, out / "attack_recovery.png", n=256, queries=1024,
                            points={"dpkit curator, total ε = 1 (Laplace 1024)": (1024, rate)})
    print(f"wrote {p}")


def curator(*, seed: int) -> None:
    t0 = time.perf_counter()
    s = cc.attack_reconstruct(noise_levels=(), curator_epsilon=1.0, seed=seed)
    print(_markdown(s))
    print(f"\n({time.perf_counter() - t0:.0f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs"
                    / "img")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(PARTS))
    args = ap.parse_args()
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise SystemExit(f"unknown parts {bad}; choose from {', '.join(PARTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for part in parts:
        print(f"\n## {part}\n")
        t0 = time.perf_counter()
        if part == "recovery":
            recovery(args.out, seed=args.seed, repeats=1 if args.quick else args.repeats,
                     quick=args.quick)
        elif part == "curator":
            curator(seed=args.seed)
        elif part == "difference":
            print(_markdown(cc.attack_difference(seed=args.seed)))
        elif part == "average":
            print(_markdown(cc.attack_average(seed=args.seed)))
        elif part == "membership":
            s = cc.attack_membership(seed=args.seed, plot_dir=args.out,
                                     trials=20_000 if args.quick else 200_000)
            print(_markdown(s))
            print("\n" + "\n".join(f"wrote {f}" for f in s.files))
        elif part == "audit":
            rows = audit_mechanisms(trials=2000 if args.quick else 20_000,
                                    source=dp.noise.seeded(args.seed))
            print(to_markdown(rows))
        elif part == "one_run":
            print(f"wrote {plots.plot_one_run(args.out / 'attack_one_run.png')}")
            s = cc.attack_one_run(canaries=1000, guesses=1000, correct=1000)
            print(_markdown(s))
        print(f"\n({part}: {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
