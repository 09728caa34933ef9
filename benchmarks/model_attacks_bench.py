"""Attacks on models (docs/attacks.md, sections 9 and 10): model inversion on MNIST-5k and LiRA
membership inference on MNIST-5k and Adult, non-private vs dpkit's private estimators.

    python benchmarks/model_attacks_bench.py                 # everything, seed 2024
    python benchmarks/model_attacks_bench.py --only lira     # or: inversion
    python benchmarks/model_attacks_bench.py --repeats 3     # LiRA spread over 3 seeds

Writes ``benchmarks/results/model_attacks[_<only>].json`` and redraws
``docs/img/attack_inversion_4000.png``, ``attack_inversion_100.png`` and ``attack_lira.png``.
One torch thread (the models are small; the machine is shared). Needs the data in
``../shared/data`` (or ``$DPKIT_DATA``), torch and matplotlib.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from dpkit.cli.attack_model_runs import attack_inversion, attack_membership_model

ROOT = Path(__file__).resolve().parents[1]


def _log(msg: str) -> None:
    print(f"  {msg[:200]}", file=sys.stderr, flush=True)


def _clean(x: Any) -> Any:
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return x if isinstance(x, (int, float, str)) else str(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["inversion", "lira"], default=None)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--repeats", type=int, default=1, help="LiRA runs with seeds seed, seed+1, …")
    ap.add_argument("--img", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: benchmarks/results/model_attacks[_<only>].json")
    args = ap.parse_args()
    name = "model_attacks" + (f"_{args.only}" if args.only else "") + ".json"
    args.out = args.out or ROOT / "benchmarks" / "results" / name
    torch.set_num_threads(1)
    out: dict[str, Any] = {"seed": args.seed, "machine": "2 shared CPU cores, torch 1 thread"}
    if args.only in (None, "inversion"):
        for rows in (4000, 100):  # 400 rows per digit; ten per digit (a class = few people)
            t = time.perf_counter()
            s = attack_inversion(seed=args.seed, train_rows=rows, plot_dir=args.img, log=_log)
            out[f"inversion_{rows}"] = {
                "seconds": time.perf_counter() - t,
                "rows": [{k: _clean(v) for k, v in r.items()} for r in s.to_dicts()]}
            print(f"inversion {rows} rows: {out[f'inversion_{rows}']['seconds']:.0f} s",
                  flush=True)
    if args.only in (None, "lira"):
        runs = []
        for r in range(args.repeats):
            t = time.perf_counter()
            s = attack_membership_model(seed=args.seed + r,
                                        plot_dir=args.img if r == 0 else None, log=_log)
            runs.append({"seconds": time.perf_counter() - t,
                         "rows": [{k: _clean(v) for k, v in d.items()} for d in s.to_dicts()]})
            print(f"lira seed {args.seed + r}: {runs[-1]['seconds']:.0f} s", flush=True)
        out["lira"] = runs
        if len(runs) > 1:  # spread of the headline numbers over the seeds
            spread = {}
            for i, row in enumerate(runs[0]["rows"]):
                key = f"{row['data']} {row['model']}"
                vals = [run["rows"][i]["TPR@1%"] for run in runs]
                spread[key] = {"TPR@1% mean": statistics.mean(vals),
                               "TPR@1% sd": statistics.stdev(vals)}
            out["lira_spread"] = spread
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False))
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
