"""Unintended memorization: the exposure figure of docs/attacks.md (section 8), in one run.

    python benchmarks/memorization_bench.py --plot              # figure into docs/img
    python benchmarks/memorization_bench.py --method both       # also check pruned == enumerate
    python benchmarks/memorization_bench.py --lines 1000 --epochs 6 --models none,user:3

Plants canaries ("ann's code is 281-264", |R| = 10^6) 0, 1, 4, 16 and 64 times (four canaries
per count, each canary's copies by one writer; the 2,000 generated lines are dealt to 1,000
writers) into the seeded grammar corpus, trains the character-level model without DP, with
dpkit's DP-SGD at record level (one line) at ε = 3 and at user level (one writer) at ε = 8, 3,
1 (``--models``), and prints exposure (exact rank over all 10^6 candidates) and the extraction
attack's success per model and insertion count, and where the time went (training, rank
search, extraction). ``--method both`` finds every rank by both exact methods (pruned
shortest-path search and full enumeration), which must agree, and times them side by side.
Results go to ``benchmarks/results/memorization.json`` (``memorization_both.json`` with
``--method both``). All randomness is seeded (``--seed``): the numbers are reproducible, and
INSECURE by design. Needs the ``[torch]`` extra (and ``[plots]`` for ``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import dpkit as dp
from dpkit.attacks.memorization import experiment
from dpkit.attacks.memorization.model import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def _models(text: str) -> list[tuple[float | None, str | None]]:
    """``none,record:3,user:8`` -> [(None, None), (3.0, "record"), (8.0, "user")]."""
    out: list[tuple[float | None, str | None]] = []
    for item in text.split(","):
        unit, _, eps = item.strip().partition(":")
        out.append((None, None) if unit.lower() == "none" else (float(eps), unit))
    return out


def _rank_times(m: experiment.ModelResult) -> dict[str, list[float]]:
    """Seconds of each rank search of ``m``'s canaries, by method."""
    out: dict[str, list[float]] = {}
    for c in m.canaries:
        for e in (c.exposure, c.other):
            if e is not None:
                out.setdefault(e.method, []).append(e.seconds)
    return out


def _phases(res: experiment.MemorizationResult) -> dict[str, float]:
    """Wall seconds spent training, searching ranks (each method) and extracting."""
    out = {"training": round(sum(m.train_seconds for m in res.models), 1)}
    for m in res.models:
        for method, ts in _rank_times(m).items():
            out[f"rank {method}"] = round(out.get(f"rank {method}", 0.0) + sum(ts), 1)
    out["extraction"] = round(sum(c.extract_seconds for m in res.models for c in m.canaries), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="none,record:3,user:8,user:3,user:1",
                    help="none (no DP) or unit:epsilon, comma-separated")
    ap.add_argument("--insertions", default="0,1,4,16,64")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--writers", type=int, default=None, help="default lines // 2")
    ap.add_argument("--method", default="enumerate", choices=["enumerate", "pruned", "both"])
    ap.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", action="store_true", help="write docs/img/attack_memorization.png")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    load0 = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    res = experiment.run(models=_models(args.models),
                         insertions=[int(r) for r in args.insertions.split(",")],
                         writers=args.writers,
                         repeats=args.repeats, lines=args.lines,
                         config=TrainConfig(epochs=args.epochs), method=args.method,
                         source=dp.noise.seeded(args.seed))
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(" | ".join(experiment.MemorizationResult.COLUMNS))
    for row in res.rows():
        print(" | ".join(str(v) for v in row))
    models: list[dict[str, object]] = []
    phases = _phases(res)
    out = {"seconds_total": round(total, 1), "cpu_seconds": round(cpu, 1),
           "load_before": load0, "load_after": os.getloadavg(), "phases_wall_s": phases,
           "writers": res.writers, "models": models}
    for m in res.models:
        times = "; ".join(f"{k} median {np.median(v):.2f} s [{min(v):.2f}, {max(v):.2f}]"
                          for k, v in _rank_times(m).items())
        agree = all(c.other.rank == c.exposure.rank for c in m.canaries if c.other is not None)
        eps = "-" if m.epsilon is None else f"{m.epsilon:.3f} (sigma {m.noise_multiplier:.3f})"
        print(f"{m.label}: PLD eps {eps}, train {m.train_seconds:.1f} s, loss {m.loss:.3f}; "
              f"rank search per canary: {times}"
              + ("; methods agree: " + str(agree) if args.method == "both" else ""))
        models.append({
            "label": m.label, "unit": m.unit, "epsilon": m.epsilon,
            "noise_multiplier": m.noise_multiplier,
            "train_seconds": round(m.train_seconds, 1), "loss": m.loss,
            "canaries": [{"insertions": c.canary.insertions, "rank": c.exposure.rank,
                          "exposure": c.exposure.exposure, "greedy": c.extracted,
                          "beam": c.beam_extracted, "secret": c.canary.secret,
                          "rank_s": {e.method: round(e.seconds, 3)
                                     for e in (c.exposure, c.other) if e is not None},
                          "agree": None if c.other is None else c.other.rank == c.exposure.rank}
                         for c in m.canaries]})
    print(f"total {total:.0f} s wall, {cpu:.0f} s CPU (lines {args.lines}, writers "
          f"{res.writers}, epochs {args.epochs}, seed {args.seed}; shared 2-core machine, load "
          f"average before {load0[0]:.1f}, after {os.getloadavg()[0]:.1f}); wall by phase: "
          + ", ".join(f"{k} {v:.0f} s" for k, v in phases.items()))
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    name = "memorization.json" if args.method != "both" else "memorization_both.json"
    (results / name).write_text(json.dumps(out, indent=1))
    if args.plot:
        print("wrote", experiment.plot(res, args.out / "attack_memorization.png"))


if __name__ == "__main__":
    main()
