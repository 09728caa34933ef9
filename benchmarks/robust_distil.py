"""Distil a smoothed ensemble into one net: train it on the ensemble's soft labels under noise.

    PYTHONPATH=src python benchmarks/robust_distil.py --teacher v0.pt,v1.pt,... --val 500 \\
        --epochs 30 --save student.pt

K-consensus makes a six-member ensemble cost ~2 members per noisy copy; a student that imitates
the ensemble's averaged softmax on the *same noisy copies* would cost one (Salman et al. 2019
and Jeong & Shin 2020 train under the smoothing noise; here the target is the teacher's
probabilities, as in knowledge distillation). Each step draws two noisy copies of each image at
``--sigma``, and the loss is the cross-entropy to the teacher's mean softmax on that copy plus
``--hard`` times the ordinary cross-entropy to the label (``--shift``: random translations
first, as the members' recipe). Choose it on validation with
robust_ensemble.py (``logits`` then ``screen``) like any member. The training noise is the
user's code (torch's generator), not dpkit.noise, as in robust_bench.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import robust_train  # noqa: E402
from mnist_data import mnist_5k  # noqa: E402
from robust_bench import load_nets  # noqa: E402


def distil(x: np.ndarray, y: np.ndarray, teachers, args):  # type: ignore[no-untyped-def]
    """SGD + Nesterov, weight decay 5e-4, OneCycle (the members' recipe) on soft targets."""
    import torch
    from torch.nn import functional as F  # noqa: N812

    net = robust_train.net(args.width, "strided", 0.0, args.seed)
    steps = (len(x) + args.batch - 1) // args.batch
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, epochs=args.epochs,
                                                steps_per_epoch=steps)
    xt, yt = torch.tensor(x), torch.tensor(y)
    g = torch.Generator().manual_seed(7 + 1000 * args.seed)
    for _ in range(args.epochs):
        perm = torch.randperm(len(xt), generator=g)
        for i in range(0, len(xt), args.batch):
            idx = perm[i:i + args.batch]
            xb = robust_train.shift(xt[idx], g, args.shift) if args.shift else xt[idx]
            noisy = xb.repeat(2, 1) + args.sigma * torch.randn(2 * len(idx), 784,
                                                                      generator=g)
            with torch.inference_mode():
                target = torch.stack([torch.softmax(t(noisy), 1) for t in teachers]).mean(0)
            logits = net.train()(noisy)
            loss = -(target.clone() * F.log_softmax(logits, 1)).sum(1).mean()
            loss = loss + args.hard * F.cross_entropy(logits, yt[idx].repeat(2))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return net.eval()


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher", required=True, help="FILE[:ARCH:WIDTH],... (robust_bench)")
    ap.add_argument("--val", type=int, default=500, help="train on all but the last VAL")
    ap.add_argument("--sigma", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--shift", type=int, default=0, help="random shifts up to this many px")
    ap.add_argument("--hard", type=float, default=0.5, help="weight of the label's loss")
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    xtr, ytr, _, _ = mnist_5k()
    if args.val:
        xtr, ytr = xtr[:-args.val], ytr[:-args.val]
    spec = argparse.Namespace(arch="strided", width=16, dropout=0.0)
    with torch.no_grad():
        teachers = [torch.jit.optimize_for_inference(torch.jit.trace(n, torch.zeros(8, 784)))
                    for n in load_nets(args.teacher, spec)]
    t = time.perf_counter()
    net = distil(xtr, ytr, teachers, args)
    torch.save([net.state_dict()], args.save)
    print(f"distilled from {len(teachers)} teachers in {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
