"""Choosing a smoothed ensemble on validation, from each member's outputs on shared noise.

    # 1. each member's logits on the same noisy copies of the 500 validation images (cached)
    PYTHONPATH=src python benchmarks/robust_ensemble.py logits --dir /tmp/ens \\
        --members v0.pt:strided:16,v1.pt:strided:16,v2.pt:strided:8 --val 500
    # 2. CERTIFY (n0 = 100, n = 10,000, alpha = 0.001) every candidate from those outputs
    PYTHONPATH=src python benchmarks/robust_ensemble.py screen --dir /tmp/ens \\
        --sets 'v0;v0+v1;v0+v1+v2' --combine softmax,logits,vote --consensus 0,2

Members are ``robust_bench.py --val V --ensemble 1 --seed s --save FILE`` nets (trained on the
training split less its last V images); a member is ``FILE[:ARCH:WIDTH]``, its name the file's
stem. ``logits`` draws, for validation image ``i``, the noisy copies from
``dpkit.noise.seeded(seed + i)`` (float32, as the benchmark certifies), so every member sees
the *same* ``n0 + n`` copies of every image: candidates are compared on paired noise, and an
ensemble of any subset, combined by any rule (dpkit.robust.Ensemble's ``softmax``, ``logits``,
``vote``, K-consensus), is certified offline exactly as CERTIFY would with that noise, without
running a net again. Seeded noise is for choosing only; the test figure comes from
robust_bench.py with the default secure source. Outputs are stored as float16 (a label flips
only where two scores agree to 3 decimal places).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dpkit.noise as noise  # noqa: E402
import dpkit.robust as robust  # noqa: E402
from mnist_data import mnist_5k  # noqa: E402
from robust_bench import load_nets  # noqa: E402

N0, ALPHA = 100, 0.001


def member_logits(net, images: np.ndarray, ids: np.ndarray, sigma: float,  # type: ignore[no-untyped-def]
                  total: int, seed: int, batch: int = 2020) -> np.ndarray:
    """``(len(images), total, C)`` float16 outputs of one net on the shared noisy copies
    (image ``ids[i]``'s copies from ``seeded(seed + ids[i])``, whatever subset is computed)."""
    import torch

    with torch.no_grad():
        fast = torch.jit.optimize_for_inference(torch.jit.trace(net, torch.zeros(8, 784)))
    out: np.ndarray | None = None
    buf = np.empty((batch, images.shape[1]), np.float32)
    for i, x in enumerate(images):
        src = noise.seeded(seed + int(ids[i]))
        for j in range(0, total, batch):
            b = min(batch, total - j)
            xb = noise.gaussian_float32(sigma, (b, images.shape[1]), source=src, out=buf[:b])
            xb += x
            with torch.inference_mode():
                logits = fast(torch.from_numpy(xb)).numpy()
            if out is None:
                out = np.empty((len(images), total, logits.shape[1]), np.float16)
            out[i, j:j + b] = logits
    assert out is not None
    return out


def cmd_logits(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    xtr, ytr, _, _ = mnist_5k()
    x, y = xtr[-args.val:][:args.images], ytr[-args.val:][:args.images]
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "y.npy", y)
    ids = np.arange(len(x))
    if (out / "hard.npy").exists():  # later members: only the images that are not easy
        ids = np.load(out / "hard.npy")
        x = x[ids]
    for spec in args.members.split(","):
        name = Path(spec.split(":")[0]).stem + "".join(f"_{v}" for v in spec.split(":")[3:])
        if (out / f"{name}.npy").exists():
            continue
        (net,) = load_nets(spec, argparse.Namespace(arch="strided", width=16, dropout=0.0))
        t = time.perf_counter()
        np.save(out / f"{name}.npy", member_logits(net, x, ids, args.sigma, N0 + args.n,
                                                    args.seed))
        print(f"{name}: {time.perf_counter() - t:.0f} s", flush=True)


def certify_from_labels(labels: np.ndarray, y: np.ndarray, sigma: float
                        ) -> tuple[np.ndarray, np.ndarray]:
    """CERTIFY on precomputed base-classifier labels ``(images, n0 + n)``: guess from the first
    n0, count the guess on the n fresh ones, Clopper-Pearson at alpha, Cohen's radius. Returns
    the radius of each correctly certified image (0 otherwise) and each image's pA estimate."""
    from scipy import stats

    k = labels.shape[1] - N0
    guess = np.array([np.bincount(row[:N0], minlength=10).argmax() for row in labels])
    n_a = (labels[:, N0:] == guess[:, None]).sum(axis=1)
    lower = np.where(n_a > 0, stats.beta.ppf(ALPHA, np.maximum(n_a, 1), k - n_a + 1), 0.0)
    radius = np.where(lower > 0.5, sigma * stats.norm.ppf(np.clip(lower, 0.5, 1.0)), 0.0)
    return np.where(guess == y, radius, 0.0), n_a / k


def summary(radius: np.ndarray, pa: np.ndarray) -> dict:
    """Certified accuracy at 0.5 / 1.0 / 1.5 and the mean pA estimate."""
    return {**{str(r): float(np.mean((radius > 0) & (radius >= r))) for r in (0.5, 1.0, 1.5)},
            "mean_pA": round(float(np.mean(pa)), 5)}


def combined_labels(outs: list[np.ndarray], combine: str, consensus: int,
                    temperature: float) -> tuple[np.ndarray, float]:
    """dpkit.robust.Ensemble on stored outputs (one image at a time, to bound memory); also the
    mean number of members evaluated per noisy copy (the forward cost)."""
    current = [0]
    ens = robust.Ensemble([_Stored(o, current) for o in outs], num_classes=outs[0].shape[-1],
                          combine=combine, consensus=consensus, temperature=temperature)
    labels = np.empty(outs[0].shape[:2], np.int64)
    index = np.arange(outs[0].shape[1], dtype=np.float32)[:, None]  # rows name themselves
    split = 0
    for i in range(outs[0].shape[0]):
        current[0] = i
        res = ens(index)
        labels[i] = res if res.ndim == 1 else res.argmax(axis=1)
        if consensus:
            first = [outs[m][i].astype(np.float32).argmax(axis=1) for m in range(consensus)]
            split += int(np.sum(np.any([f != first[0] for f in first[1:]], axis=0)))
    cost = len(outs) if not consensus else consensus + (len(outs) - consensus) * split / labels.size
    return labels, cost


class _Stored:
    """A 'member' that answers from stored outputs: the batch holds row indices of the noisy
    copies of image ``current[0]``."""

    def __init__(self, out: np.ndarray, current: list[int]) -> None:
        self.out, self.current = out, current

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        return np.asarray(self.out[self.current[0], batch[:, 0].astype(np.int64)], np.float32)


def cmd_screen(args: argparse.Namespace) -> None:
    """Certify every candidate. With ``hard.npy`` (from ``hard``), members stored on the hard
    images only are combined there, and every easy image keeps ``--easy-as``'s certificate."""
    d = Path(args.dir)
    y = np.load(d / "y.npy")
    hard = np.load(d / "hard.npy") if (d / "hard.npy").exists() else np.arange(len(y))
    easy = np.setdiff1d(np.arange(len(y)), hard)
    radius = np.zeros(len(y))
    pa = np.ones(len(y))
    if len(easy):
        ref = np.load(d / f"{args.easy_as}.npy", mmap_mode="r")[easy].astype(np.float32)
        radius[easy], pa[easy] = certify_from_labels(ref.argmax(-1), y[easy], args.sigma)
    rows = []
    for members in args.sets.split(";"):
        names = members.split("+")
        outs = [np.load(d / f"{n}.npy", mmap_mode="r") for n in names]
        outs = [o if len(o) == len(hard) else o[hard] for o in outs]
        for combine in args.combine.split(","):
            for k in map(int, args.consensus.split(",")):
                if k > len(names) or (len(names) == 1 and (combine != "softmax" or k)):
                    continue
                for temp in map(float, args.temperature.split(",")):
                    labels, cost = combined_labels(outs, combine, k, temp)
                    radius[hard], pa[hard] = certify_from_labels(labels, y[hard], args.sigma)
                    row = {"members": members, "combine": combine, "consensus": k,
                           "temperature": temp, "forward_cost": round(cost, 2),
                           **summary(radius, pa)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


def cmd_hard(args: argparse.Namespace) -> None:
    """The images any of ``--members`` (stored on all images) gets right on less than
    ``--below`` of the noisy copies: later members are computed on these only."""
    d = Path(args.dir)
    y = np.load(d / "y.npy")
    pas = [(np.load(d / f"{n}.npy", mmap_mode="r").astype(np.float32).argmax(-1) == y[:, None])
           .mean(axis=1) for n in args.members.split(",")]
    hard = np.flatnonzero(np.min(pas, axis=0) < args.below)
    np.save(d / "hard.npy", hard)
    print(f"{len(hard)} of {len(y)} images are hard (pA < {args.below} for a member)")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("--members", required=True, help="FILE[:ARCH:WIDTH],...")
    lg.add_argument("--val", type=int, default=500)
    lg.add_argument("--images", type=int, default=500, help="first IMAGES validation images")
    lg.add_argument("--n", type=int, default=10_000)
    lg.add_argument("--seed", type=int, default=1000, help="image i's noise: seeded(seed + i)")
    lg.add_argument("--threads", type=int, default=1)
    sc = sub.add_parser("screen")
    sc.add_argument("--sets", required=True, help="';'-separated sets of '+'-joined names")
    sc.add_argument("--combine", default="softmax")
    sc.add_argument("--consensus", default="0")
    sc.add_argument("--temperature", default="1")
    sc.add_argument("--out", default="", help="append the rows (JSON lines) here")
    sc.add_argument("--easy-as", default="", help="the member whose certificates the easy "
                    "images keep (with hard.npy)")
    hd = sub.add_parser("hard")
    hd.add_argument("--members", required=True, help="names stored on all images")
    hd.add_argument("--below", type=float, default=0.999)
    for p in (lg, sc, hd):
        p.add_argument("--dir", required=True)
        p.add_argument("--sigma", type=float, default=0.5)
    args = ap.parse_args()
    {"logits": cmd_logits, "screen": cmd_screen, "hard": cmd_hard}[args.cmd](args)


if __name__ == "__main__":
    main()
