"""MSE vs ε for dpkit's local frequency oracles: exact formulas and simulated points.

    python benchmarks/local_mse_plot.py                 # writes docs/img/local_mse.png
    python benchmarks/local_mse_plot.py --reps 20       # more simulation repetitions

Lines: the exact per-user variance of a count estimate at frequency 0 (``oracle.
per_user_variance``, i.e. Var(ĉ_v)/n for a value nobody holds) for d = 1024, on a log scale.
Markers: empirical mean squared error / n from ``--reps`` simulated rounds of n = 20,000 users
(values uniform on the first 32 of d = 1024, so most values are absent), averaged over the
absent values. Needs matplotlib (``pip install dpkit[plots]``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import dpkit.noise as noise
    from dpkit.local import (
        BinaryLocalHashing,
        GeneralizedRR,
        HadamardResponse,
        OptimizedLocalHashing,
        OptimizedUnaryEncoding,
        SymmetricUnaryEncoding,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--users", type=int, default=20_000)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "local_mse.png")
    args = ap.parse_args(argv)

    d = 1024
    oracles = [("GRR", GeneralizedRR), ("SUE", SymmetricUnaryEncoding),
               ("OUE", OptimizedUnaryEncoding), ("BLH", BinaryLocalHashing),
               ("OLH", OptimizedLocalHashing), ("HR (1-bit)", HadamardResponse)]
    eps_line = np.linspace(0.25, 6.0, 47)
    eps_pts = [0.5, 1.0, 2.0, 4.0]
    src = noise.seeded(2024)
    x = noise.uniform_int(32, args.users, source=src)
    truth = np.bincount(x, minlength=d)
    absent = truth == 0

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=130)
    for i, (label, cls) in enumerate(oracles):
        color = f"C{i}"
        style = "--" if label in ("BLH", "OLH") else "-"  # BLH = HR and OLH ~ OUE exactly
        ax.plot(eps_line, [cls(d, epsilon=float(e)).per_user_variance for e in eps_line],
                color=color, label=label, linestyle=style, linewidth=1.6 if style == "-" else 2.2)
        pts = []
        for e in eps_pts:
            o = cls(d, epsilon=e)
            n_sim = args.users if cls is not SymmetricUnaryEncoding and \
                cls is not OptimizedUnaryEncoding else args.users // 4
            xs, tr = x[:n_sim], np.bincount(x[:n_sim], minlength=d)
            err = [np.mean((o.estimate(o.randomize(xs, source=src)).counts - tr)[absent] ** 2)
                   for _ in range(args.reps)]
            pts.append(np.mean(err) / n_sim)
        ax.scatter(eps_pts, pts, color=color, marker="o", s=22, zorder=3)
    ax.set_yscale("log")
    ax.set_xlabel("ε (per report)")
    ax.set_ylabel("Var(count estimate) / n   (value frequency 0)")
    ax.set_title(f"dpkit.local frequency oracles, d = {d}: exact variance (lines), "
                 "simulated MSE (dots)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
