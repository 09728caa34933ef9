"""Attacks: the measurements and pictures of docs/attacks.md, regenerated in one run.

    python benchmarks/attacks_bench.py                       # everything, figures into docs/img
    python benchmarks/attacks_bench.py --out /tmp/figs --quick
    python benchmarks/attacks_bench.py --only recovery,membership

Parts (``--only``):

* ``recovery`` -- Dinur-Nissim reconstruction (n = 256, m = 1024) against fresh noise of growing
  size: L1 LP with random subsets, L1 LP with hash-defined subsets, the Dinur-Nissim LP told
  the bound, least squares (plain and box-constrained), all against uniform ``±E`` noise, and
  the L1 LP against discrete Laplace noise of scale ``E``; mean over ``--repeats`` populations;
  the least-squares prediction; seconds per attack; then all three attacks on the same 1024
  answers of a dpkit curator (total ε = 1) and one query more (refused). Figure
  ``attack_recovery.png``; numbers in ``benchmarks/results/attacks.json``.
* ``near_line`` -- where the table sits near 60%: every attack on the same answers of 24
  populations at E = 64, 128, 256 (mean ± standard error), and HiGHS interior point vs dual
  simplex for the Dinur-Nissim LP at E = 16 (about 2 minutes).
* ``curator`` -- the CLI's reconstruction summary against the dpkit curator (total ε = 1,
  spent evenly over the 1024 queries), then one query more (refused).
* ``difference`` / ``average`` -- the tables of :mod:`dpkit.cli.attack_runs`.
* ``membership`` -- ROC on a released count and LiRA on logistic regression; figures
  ``attack_roc_aggregate.png``, ``attack_roc_model.png``.
* ``audit`` -- the per-mechanism audit report; ``one_run`` -- the one-run calculator figure
  ``attack_one_run.png``.

All randomness is seeded (``--seed``): the numbers are reproducible, and INSECURE by design.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import dpkit as dp
from dpkit.attacks import oracles as orc
from dpkit.attacks import plots
from dpkit.attacks import reconstruction as rec
from dpkit.attacks.report import audit_mechanisms, to_markdown
from dpkit.cli import attack_runs as cc

PARTS = ("recovery", "near_line", "curator", "difference", "average", "membership", "audit",
         "one_run")


def _markdown(summary: cc.AttackSummary) -> str:
    head = "| " + " | ".join(summary.columns) + " |"
    rule = "|" + "---|" * len(summary.columns)
    body = ["| " + " | ".join(cc._fmt(v) for v in row) + " |" for row in summary.rows]
    return "\n".join([f"**{summary.title}**", "", head, rule, *body, *[
        f"\n_{n}_" for n in summary.notes]])


N, M = 256, 1024
#: (label, noise, subsets, attack, told the bound)
CONFIGS = [
    ("L1 LP, random subsets, uniform ±E", "uniform", "random", "lp", False),
    ("L1 LP, hashed subsets, uniform ±E", "uniform", "hashed", "lp", False),
    ("Dinur-Nissim LP told E, uniform ±E", "uniform", "random", "lp", True),
    ("least squares, random subsets, uniform ±E", "uniform", "random", "lsq", False),
    ("box least squares, random subsets, uniform ±E", "uniform", "random", "lsq-box", False),
    ("L1 LP, random subsets, Laplace scale E", "laplace", "random", "lp", False),
]
LSQ_LABEL = "least squares, predicted (Φ(0.5/(σ·sqrt(diag (AᵀA)⁻¹))))"


def _predicted(levels: list[float], *, seed: int, matrices: int = 4) -> list[tuple[float, float]]:
    """The least-squares prediction, averaged over ``matrices`` realised random subset
    matrices (``reconstruction.lsq_predicted_rate``)."""
    src = dp.noise.seeded(seed)
    As = [rec.subset_matrix(rec.random_subsets(rec.make_population(N, source=src).qid, M,
                                               source=src)) for _ in range(matrices)]
    return [(float(e), float(sum(rec.lsq_predicted_rate(A, rec.uniform_noise_variance(e))
                                 for A in As) / matrices)) for e in levels]


def _curator(*, seed: int) -> dict[str, Any]:
    """1024 random-subset queries at ε = 1/1024 against a curator holding ε = 1, every attack
    on the same answers, then one question more (refused)."""
    t0 = time.perf_counter()
    src = dp.noise.seeded(seed)
    people = rec.make_population(N, source=src)
    with tempfile.TemporaryDirectory(prefix="dpkit-bench-") as tmp:
        cur = orc.curator_for(people, Path(tmp) / "t.dpkit", epsilon=1.0, source=src)
        try:
            oracle = orc.CuratorOracle(cur, epsilon=1 / M)
            qs = rec.random_subsets(people.qid, M, source=src)
            t1 = time.perf_counter()
            y = oracle.ask(qs)
            per_query = (time.perf_counter() - t1) / M
            extra = orc.CuratorOracle(cur, epsilon=1 / M)
            extra.ask(rec.random_subsets(people.qid, 1, source=src))
            spent = cur.budget().spent
        finally:
            cur.close()
    A = rec.subset_matrix(qs)
    rates = {
        "L1 LP": rec.recovery_rate(rec.lp_attack(A, y), people.secret),
        "least squares": rec.recovery_rate(rec.lsq_attack(A, y), people.secret),
        "box least squares": rec.recovery_rate(rec.lsq_attack(A, y, box=True), people.secret),
    }
    return {"answered": oracle.answered, "refused": oracle.refused + extra.refused,
            "spent_epsilon": spent, "seconds_per_query": per_query, "rates": rates,
            "seconds": time.perf_counter() - t0}


def recovery(out: Path, *, seed: int, repeats: int, quick: bool) -> dict[str, Any]:
    levels = [0, 2, 4, 8, 16, 32, 64, 128] if not quick else [0, 4, 16, 64]
    curves, seconds = {}, {}
    for label, kind, subsets, attack, known in CONFIGS:
        t0 = time.perf_counter()
        curves[label] = rec.recovery_sweep(levels, n=N, queries=M, noise=kind,
                                           subsets=subsets, known_bound=known, attack=attack,
                                           repeats=repeats, source=dp.noise.seeded(seed))
        seconds[label] = (time.perf_counter() - t0) / (len(levels) * repeats)
    predicted = _predicted(levels, seed=seed + 1)
    fine = _predicted([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128], seed=seed + 1)
    print(f"n = {N}, m = {M}, mean of {repeats} populations per point (seed {seed})\n")
    print("| noise E | " + " | ".join(c[0] for c in CONFIGS) + " | least squares, predicted |")
    print("|---:|" + "---:|" * (len(CONFIGS) + 1))
    for i, e in enumerate(levels):
        print(f"| {e} | " + " | ".join(f"{100 * curves[c[0]][i][1]:.1f}%" for c in CONFIGS)
              + f" | {100 * predicted[i][1]:.1f}% |")
    print("\nseconds per attack (population, 1024 queries, oracle, solve): "
          + ", ".join(f"{k}: {v:.2f}" for k, v in seconds.items()))
    c = _curator(seed=seed)
    print("\ndpkit curator, total ε = 1 over 1024 queries (DLap scale 1024 each): "
          + ", ".join(f"{k} {100 * v:.1f}%" for k, v in c["rates"].items())
          + f"; answered {c['answered']}, refused {c['refused']} more, spent ε = "
          f"{c['spent_epsilon']:.6g}; {1000 * c['seconds_per_query']:.0f} ms per query")
    p = plots.plot_recovery(
        curves, out / "attack_recovery.png", n=N, queries=M,
        points={f"dpkit curator, total ε = 1 (Laplace 1024), {k}": (1024, v)
                for k, v in c["rates"].items()},
        predictions={LSQ_LABEL: [(0.0, 1.0), *fine]})
    print(f"wrote {p}")
    return {"n": N, "queries": M, "seed": seed, "repeats": repeats, "levels": levels,
            "curves": {k: [r for _, r in v] for k, v in curves.items()},
            "least_squares_predicted": [r for _, r in predicted],
            "seconds_per_attack": seconds, "curator": c}


def near_line(*, populations: int = 24, seed0: int = 7000) -> dict[str, Any]:
    """Where the recovery table sits near 60%: every attack on the same answers for
    ``populations`` populations (seeds ``seed0 + k``) at E = 64, 128, 256; mean ± standard
    error. Then HiGHS interior point vs dual simplex for the Dinur-Nissim LP at E = 16."""
    import numpy as np
    from scipy.optimize import linprog

    out: dict[str, Any] = {}
    for e in (64, 128, 256):
        rates: dict[str, list[float]] = {"Dinur-Nissim LP told E": [], "box least squares": [],
                                         "least squares": [], "L1 LP": []}
        for k in range(populations):
            src = dp.noise.seeded(seed0 + k)
            people = rec.make_population(N, source=src)
            qs = rec.random_subsets(people.qid, M, source=src)
            A = rec.subset_matrix(qs)
            y = orc.NoisyOracle(people, scale=e, source=src).ask(qs)
            guesses = {"Dinur-Nissim LP told E": rec.lp_attack(A, y, noise_bound=e),
                       "box least squares": rec.lsq_attack(A, y, box=True),
                       "least squares": rec.lsq_attack(A, y)}
            if e < 256:
                guesses["L1 LP"] = rec.lp_attack(A, y)
            for name, g in guesses.items():
                rates[name].append(rec.recovery_rate(g, people.secret))
        row = {k: (float(np.mean(v)), float(np.std(v) / np.sqrt(len(v))))
               for k, v in rates.items() if v}
        out[str(e)] = row
        print(f"E = {e}: " + ", ".join(f"{k} {100 * m:.1f}% ± {100 * se:.1f}"
                                       for k, (m, se) in row.items()))
    solvers: dict[str, list[float]] = {"highs-ipm": [], "highs-ds": []}
    for k in range(4):
        src = dp.noise.seeded(8100 + k)
        people = rec.make_population(N, source=src)
        qs = rec.random_subsets(people.qid, M, source=src)
        A = rec.subset_matrix(qs)
        y = orc.NoisyOracle(people, scale=16, source=src).ask(qs)
        for method in solvers:
            r = linprog(np.zeros(N), A_ub=np.vstack([A, -A]), b_ub=np.concatenate(
                [y + 16, 16 - y]), bounds=[(0.0, 1.0)] * N, method=method)
            solvers[method].append(rec.recovery_rate(np.rint(r.x), people.secret))
    out["solvers_E16"] = solvers
    print("Dinur-Nissim LP told E = 16, four populations: " + "; ".join(
        f"{k} {100 * min(v):.0f}-{100 * max(v):.0f}%" for k, v in solvers.items()))
    return out


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
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results"
                    / "attacks.json", help="where the recovery numbers go ('' to skip)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(PARTS))
    args = ap.parse_args()
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise SystemExit(f"unknown parts {bad}; choose from {', '.join(PARTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for part in parts:
        print(f"\n## {part}\n")
        t0 = time.perf_counter()
        if part == "recovery":
            results["recovery"] = recovery(args.out, seed=args.seed,
                                           repeats=1 if args.quick else args.repeats,
                                           quick=args.quick)
        elif part == "near_line":
            results["near_line"] = near_line()
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
    if results and str(args.json) not in ("", ".") and not args.quick:
        # merge: a run of some parts keeps the others' earlier numbers
        old = json.loads(args.json.read_text()) if args.json.exists() else {}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**old, **results}, indent=1, ensure_ascii=False)
                             + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
