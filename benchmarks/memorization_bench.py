"""Unintended memorization: the exposure figure of docs/attacks.md (section 8), in one run.

    python benchmarks/memorization_bench.py --plot              # figure into docs/img
    python benchmarks/memorization_bench.py --lines 1000 --epochs 6 --epsilons none,3

Plants canaries ("ann's code is 281-264", |R| = 10^6) 0, 1, 4, 16 and 64 times (two canaries
per count) into the seeded grammar corpus, trains the character-level model without DP and with
dpkit's DP-SGD at each ε, and prints exposure (exact rank over all 10^6 candidates) and the
extraction attack's success per model and insertion count. Ranks are found by both exact
methods (pruned shortest-path search and full enumeration), which must agree; their times are
printed side by side. Results go to ``benchmarks/results/memorization.json``. All randomness
is seeded (``--seed``): the numbers are reproducible, and INSECURE by design. Needs the
``[torch]`` extra (and ``[plots]`` for ``--plot``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import dpkit as dp
from dpkit.attacks.memorization import experiment
from dpkit.attacks.memorization.model import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def _epsilons(text: str) -> list[float | None]:
    return [None if e.strip().lower() in ("none", "inf") else float(e) for e in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epsilons", default="none,8,3,1")
    ap.add_argument("--insertions", default="0,1,4,16,64")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", action="store_true", help="write docs/img/attack_memorization.png")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    t0, c0 = time.perf_counter(), time.process_time()
    res = experiment.run(epsilons=_epsilons(args.epsilons),
                         insertions=[int(r) for r in args.insertions.split(",")],
                         repeats=args.repeats, lines=args.lines,
                         config=TrainConfig(epochs=args.epochs), method="both",
                         source=dp.noise.seeded(args.seed))
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(" | ".join(experiment.MemorizationResult.COLUMNS))
    for row in res.rows():
        print(" | ".join(str(v) for v in row))
    models: list[dict[str, object]] = []
    out = {"seconds_total": round(total, 1), "cpu_seconds": round(cpu, 1), "models": models}
    for m in res.models:
        pr = [c.exposure.seconds for c in m.canaries]
        en = [c.other.seconds for c in m.canaries if c.other is not None]
        agree = all(c.other is not None and c.other.rank == c.exposure.rank for c in m.canaries)
        eps = "-" if m.epsilon is None else f"{m.epsilon:.3f} (sigma {m.noise_multiplier:.3f})"
        print(f"{m.label}: PLD eps {eps}, train {m.train_seconds:.1f} s, loss {m.loss:.3f}; "
              f"rank search per canary: pruned median {np.median(pr):.2f} s "
              f"[{min(pr):.2f}, {max(pr):.2f}], enumerate median {np.median(en):.2f} s "
              f"[{min(en):.2f}, {max(en):.2f}]; methods agree: {agree}")
        models.append({
            "label": m.label, "epsilon": m.epsilon, "noise_multiplier": m.noise_multiplier,
            "train_seconds": round(m.train_seconds, 1), "loss": m.loss,
            "canaries": [{"insertions": c.canary.insertions, "rank": c.exposure.rank,
                          "exposure": c.exposure.exposure, "greedy": c.extracted,
                          "beam": c.beam_extracted, "pruned_s": c.exposure.seconds,
                          "pruned_nodes": c.exposure.nodes,
                          "enumerate_s": None if c.other is None else c.other.seconds}
                         for c in m.canaries]})
    print(f"total {total:.0f} s wall, {cpu:.0f} s CPU (lines {args.lines}, epochs "
          f"{args.epochs}, seed {args.seed}; shared 2-core machine)")
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "memorization.json").write_text(json.dumps(out, indent=1))
    if args.plot:
        print("wrote", experiment.plot(res, args.out / "attack_memorization.png"))


if __name__ == "__main__":
    main()
