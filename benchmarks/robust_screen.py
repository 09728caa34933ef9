"""A cheap screen of saved base nets on the validation split (NOT a certificate).

    PYTHONPATH=src python benchmarks/robust_screen.py /tmp/a.pt[,/tmp/b.pt] [--n 1000]

For each of the last ``--val`` (500) training images (the split robust_bench.py ``--val 500``
holds out, so the nets must have been trained with ``--val 500``), ``--n`` noisy copies at
``--sigma`` through the nets (their averaged softmax, as robust_bench's ensemble) give the
frequency of the true class; the screen prints the fraction of images whose radius would reach
0.5 / 1.0 / 1.5 *if* CERTIFY (n = 10,000, alpha = 0.001) counted that same frequency, and the
mean of that radius. A tenth of CERTIFY's forward passes, for choosing among recipes; it agreed
with CERTIFY within 0.2 points at radius 1.0 on two nets (docs/beyond.md). The noise is torch's
(a screen, not a certificate); certificates come only from robust_bench.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import robust_train
from mnist_data import mnist_5k


def screen(paths: list[str], n: int, sigma: float, val: int, width: int, arch: str) -> dict:
    """The screen's figures for the nets saved at ``paths`` (state_dict lists, as --save)."""
    import torch
    from scipy import stats

    nets = []
    for path in paths:
        for state in torch.load(path):
            nets.append(robust_train.net(width, arch))
            nets[-1].load_state_dict(state)
            nets[-1].eval()
    x, y, _, _ = mnist_5k()
    xv, yv = torch.tensor(x[-val:]), y[-val:]
    g = torch.Generator().manual_seed(123)
    pa = np.empty(val)
    with torch.inference_mode():
        for i in range(val):
            noisy = xv[i] + sigma * torch.randn(n, 784, generator=g)
            probs = torch.stack([torch.softmax(m(noisy), 1) for m in nets]).sum(0)
            pa[i] = np.bincount(probs.argmax(1).numpy(), minlength=10)[yv[i]] / n
    k = np.round(pa * 10_000)  # the count CERTIFY's n = 10,000 would see at this frequency
    low = np.where(k > 0, stats.beta.ppf(0.001, np.maximum(k, 1), 10_000 - k + 1), 0.0)
    radius = np.where(low > 0.5, sigma * stats.norm.ppf(np.clip(low, 0.5, 1.0)), 0.0)
    out = {f"r{r}": float((radius >= r).mean()) for r in (0.5, 1.0, 1.5)}
    return {**out, "mean_radius": float(radius.mean()), "mean_pA": float(pa.mean())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("nets", help="saved state_dict files, comma-separated (one ensemble)")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--val", type=int, default=500)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--arch", default="strided", choices=("strided", "pool"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    t = time.perf_counter()
    res = screen(args.nets.split(","), args.n, args.sigma, args.val, args.width, args.arch)
    print(args.nets, " ".join(f"{k}={v:.3f}" for k, v in res.items()),
          f"{time.perf_counter() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
