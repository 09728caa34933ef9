"""Certified robustness on MNIST-5k: dpkit.robust.Smoothed around small CNNs trained with noise.

    PYTHONPATH=src python benchmarks/robust_bench.py --test 1000     # the whole test split
    PYTHONPATH=src python benchmarks/robust_bench.py --val 500 --test 200 --attack 0 --plot ''
                                                   # choose a recipe on 500 training images

Train (4,000 images, CPU, ``--threads``; ``--save``/``--load`` the state_dicts to skip it) an
ensemble of ``--ensemble`` (default 2) small strided CNNs, seeds ``--seed``.., each with
Gaussian noise augmentation at the smoothing ``sigma``, random ±2 px shifts and consistency
regularisation (Jeong & Shin 2020, ``--lam``), SGD + Nesterov, weight decay 5e-4, OneCycle
(benchmarks/robust_train.py: also elastic distortions, rotations, scalings, SmoothAdv, MACER and
a weight average, each an option, off by default); the base classifier is dpkit.robust.Ensemble
of traced and frozen copies of the members, combined by ``--combine`` (default: their averaged
softmax, Horvath et al. 2022), optionally with K-consensus early exit (``--consensus K``);
``--load`` takes ``FILE[:ARCH:WIDTH[:DX:DY]]`` members of mixed architectures
(benchmarks/robust_ensemble.py chooses them on validation). Certify the first ``--test`` test
images (or, with ``--val V``, the last V training images, the nets then trained on the rest)
with CERTIFY (n0 = 100, n = 10,000, alpha = 0.001, float32 noise from dpkit.noise's default
secure source); print certified
accuracy at radius 0.5 / 1.0 / 1.5 (Cohen et al. 2019 and, from the same counts, PixelDP's
radius at delta = 1e-5), time per image and per part, and run an L2 PGD attack (expectation
over noise, as Salman et al. 2019) inside each certified radius against the smoothed
classifier, checking with PREDICT that no certified prediction flips. Writes
docs/img/robust_certified.png.
The training noise and the attack's noise are the *user's* code, so they use torch's generator;
the certificate's noise comes only from dpkit.noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import dpkit.robust as robust  # noqa: E402
import robust_train  # noqa: E402
from mnist_data import mnist_5k  # noqa: E402

RADII = (0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)


def _ensemble(nets):  # type: ignore[no-untyped-def]
    """Several base nets as one classifier: the log of their mean softmax (argmax = the vote of
    the averaged probabilities; Horvath et al. 2022: ensembles reduce the base classifier's
    variance under noise, which raises pA)."""
    import torch

    class Ensemble(torch.nn.Module):
        def __init__(self, members) -> None:  # type: ignore[no-untyped-def]
            super().__init__()
            self.members = torch.nn.ModuleList(members)

        def forward(self, x):  # type: ignore[no-untyped-def]
            probs = torch.stack([torch.softmax(m(x), dim=1) for m in self.members]).mean(0)
            return torch.log(probs.clamp_min(1e-12))

    return nets[0] if len(nets) == 1 else Ensemble(nets).eval()


def pgd_smoothed(net, x: np.ndarray, label: int, eps: float, sigma: float,  # type: ignore[no-untyped-def]
                 steps: int = 20, m: int = 64) -> np.ndarray:
    """L2 PGD on the smoothed soft classifier: maximise -log E_noise[softmax(f(x+noise))_label]."""
    import torch

    g = torch.Generator().manual_seed(2)
    x0 = torch.tensor(x, dtype=torch.float32)
    delta = torch.zeros_like(x0, requires_grad=True)
    step = 2.5 * eps / steps
    for _ in range(steps):
        noise = sigma * torch.randn(m, x0.numel(), generator=g)
        probs = torch.softmax(net(x0 + delta + noise), dim=1).mean(0)
        loss = -torch.log(probs[label] + 1e-12)
        (grad,) = torch.autograd.grad(loss, delta)
        with torch.no_grad():
            delta += step * grad / (grad.norm() + 1e-12)
            norm = delta.norm()
            if norm > eps:  # project back onto the certified L2 ball
                delta *= eps / norm
    return (x0 + delta).detach().numpy().astype(np.float64)


def _inference_net(net):  # type: ignore[no-untyped-def]
    """The certification copy: traced and frozen (conv + ReLU fused), the user's own choice."""
    import torch

    with torch.no_grad():
        return torch.jit.optimize_for_inference(torch.jit.trace(net, torch.zeros(8, 784)))


def parts(net, fast, sigma: float, x0: np.ndarray,  # type: ignore[no-untyped-def]
          reps: int = 3) -> dict:
    """Seconds per 10,000 noisy copies of the image ``x0``, each part alone (median of
    ``reps``; real noisy copies, since K-consensus's cost depends on how often members agree)."""
    import torch

    import dpkit.noise as noise

    buf = np.empty((2000, 784), np.float32)
    xb = torch.from_numpy(noise.gaussian_float32(sigma, (2000, 784)) + x0.astype(np.float32))

    def forward(model):  # type: ignore[no-untyped-def]
        with torch.inference_mode():
            for _ in range(5):
                model(xb if isinstance(model, torch.nn.Module) else xb.numpy())

    jobs = {"noise_float64": lambda: [noise.gaussian_float(sigma, (2000, 784)) for _ in range(5)],
            "noise_float32": lambda: [noise.gaussian_float32(sigma, (2000, 784), out=buf)
                                      for _ in range(5)],
            "forward_eager": lambda: forward(net), "forward_base_classifier": lambda: forward(fast)}
    out = {}
    for name, job in jobs.items():
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            job()
            times.append(time.perf_counter() - t)
        out[name] = [statistics.median(times), min(times), max(times)]
    return out


def _curve(labels: np.ndarray, radii: np.ndarray, y: np.ndarray) -> list[float]:
    ok = labels == y
    return [float(np.mean(ok & (radii >= r))) for r in RADII]


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sigma", type=float, default=0.5)
    robust_train.add_train_args(ap)
    ap.add_argument("--ensemble", type=int, default=2, help="base nets averaged (seeds s..s+k-1)")
    ap.add_argument("--seed", type=int, default=0, help="first member's seed s")
    ap.add_argument("--combine", default="softmax", choices=robust.ensemble.COMBINES,
                    help="how CERTIFY's base classifier combines the members")
    ap.add_argument("--temperature", type=float, default=1.0, help="softmax temperature")
    ap.add_argument("--consensus", type=int, default=0,
                    help="K-consensus: the first K members agreeing answer alone (0: off)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--val", type=int, default=0,
                    help="hold out the last VAL training images and certify them, not the test")
    ap.add_argument("--float64", action="store_true", help="float64 noise (slower, same math)")
    ap.add_argument("--save", default="", help="save the trained nets' state_dicts here")
    ap.add_argument("--load", default="",
                    help="skip training: load state_dicts (files, comma-separated: one ensemble)")
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--offset", type=int, default=0, help="certify images offset..offset+test")
    ap.add_argument("--merge", default="",
                    help="combine --out files of runs over disjoint images (comma-separated)")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--attack", type=int, default=30, help="certified images to attack")
    ap.add_argument("--parts", type=int, default=1, help="time each part per 10k copies (0: no)")
    ap.add_argument("--out", default="", help="write the results JSON here too")
    ap.add_argument("--plot", default=str(HERE.parent / "docs" / "img" / "robust_certified.png"),
                    help="'' for no plot")
    return ap.parse_args()


def _shifted(net, dx: int, dy: int):  # type: ignore[no-untyped-def]
    """``net`` on its input translated by (dx, dy) pixels, zero fill: a fixed function of the
    input, so a shifted copy is one more deterministic ensemble member (test-time
    augmentation; the members were trained on random shifts of up to ``--shift`` px)."""
    import torch

    class Shifted(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x):  # type: ignore[no-untyped-def]
            img = x.reshape(-1, 28, 28)
            pad = torch.nn.functional.pad(img, (max(dx, 0), max(-dx, 0), max(dy, 0), max(-dy, 0)))
            top, left = max(-dy, 0), max(-dx, 0)
            return self.net(pad[:, top:top + 28, left:left + 28].reshape(-1, 784))

    return Shifted().eval()


def load_nets(specs: str, args):  # type: ignore[no-untyped-def]
    """Nets from ``--save`` files: ``FILE[:ARCH:WIDTH[:DX:DY]]``, comma-separated (ARCH and
    WIDTH default to ``--arch``/``--width``; DX, DY: the net sees its input shifted by that
    many pixels; a file holds one state_dict or a list of them)."""
    import torch

    nets = []
    for spec in specs.split(","):
        path, *rest = spec.split(":")
        arch = rest[0] if rest else args.arch
        width = int(rest[1]) if len(rest) > 1 else args.width
        dx, dy = (int(rest[2]), int(rest[3])) if len(rest) > 3 else (0, 0)
        obj = torch.load(path)
        # a single state_dict is what earlier versions of this script saved
        for state in [obj] if isinstance(obj, dict) else obj:
            net = robust_train.net(width, arch, args.dropout)
            net.load_state_dict(state)
            nets.append(_shifted(net.eval(), dx, dy) if dx or dy else net.eval())
    return nets


def _base_net(args, xtr: np.ndarray, ytr: np.ndarray):  # type: ignore[no-untyped-def]
    """Train (or ``--load``) the ``--ensemble`` members; return them and their soft average
    as one torch module (for the clean accuracy and the attack's gradients)."""
    import torch

    if args.load:
        nets = load_nets(args.load, args)
    else:
        seeds = range(args.seed, args.seed + args.ensemble)
        nets = [robust_train.train(xtr, ytr, args, seed) for seed in seeds]
    if args.save:
        torch.save([n.state_dict() for n in nets], args.save)
    return nets, _ensemble(nets)


def base_classifier(nets, args):  # type: ignore[no-untyped-def]
    """What CERTIFY runs: one traced net, or dpkit.robust.Ensemble of traced members combined
    by ``--combine`` (with ``--consensus`` K-consensus early exit)."""
    fast = [_inference_net(n) for n in nets]
    if len(fast) == 1:
        return fast[0]
    return robust.Ensemble(fast, num_classes=10, combine=args.combine,
                           temperature=args.temperature, consensus=args.consensus)


def _certify_all(smoothed, x: np.ndarray, y: np.ndarray, args):  # type: ignore[no-untyped-def]
    """CERTIFY each image; with ``--out``, each answer is also appended to OUT.jsonl at once
    (a run cut short on a busy machine still leaves its certified images)."""
    k, sigma = len(x), args.sigma
    labels, radii, pix, times, cpu = np.empty(k, int), np.empty(k), np.empty(k), [], []
    log = open(args.out + ".jsonl", "a") if args.out else None  # noqa: SIM115
    for i in range(k):
        t, c = time.perf_counter(), time.process_time()
        labels[i], radii[i] = smoothed.certify(x[i], n0=100, n=args.n, alpha=0.001,
                                               batch_size=2000)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        pa = robust.bounds.stats.norm.cdf(radii[i] / sigma) if radii[i] > 0 else 0.5
        pix[i] = robust.pixeldp_radius(sigma, pa, 1 - pa, delta=1e-5)
        if log:
            log.write(json.dumps({"i": args.offset + i, "label": int(labels[i]),
                                  "radius": radii[i], "pixeldp": pix[i], "y": int(y[i]),
                                  "s": times[-1], "cpu_s": cpu[-1]}) + "\n")
            log.flush()
    if log:
        log.close()
    return labels, radii, pix, times, cpu


def _read_out(path: str) -> dict:
    """An ``--out`` JSON, or the OUT.jsonl of a run cut short (per-image answers only)."""
    if not path.endswith(".jsonl"):
        return dict(json.loads(Path(path).read_text()))
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    keys = {"labels": "label", "radii": "radius", "pixeldp_radii": "pixeldp", "y": "y",
            "times": "s", "cpu": "cpu_s"}
    return {**{k: [r[v] for r in rows] for k, v in keys.items()}, "attack": {"attacked": 0}}


def merge(args: argparse.Namespace) -> None:
    """One result from several ``--out`` files over disjoint images (run side by side)."""
    parts_ = [_read_out(f) for f in args.merge.split(",")]
    labels, radii, pix, y, times = (np.concatenate([np.asarray(r[key]) for r in parts_])
                                    for key in ("labels", "radii", "pixeldp_radii", "y", "times"))
    cohen, pixel = _curve(labels, radii, y), _curve(labels, pix, y)
    res = {**parts_[0], "test_images": len(y), "abstain": float(np.mean(labels < 0)),
           "certified_accuracy": dict(zip(map(str, RADII), cohen, strict=True)),
           "pixeldp_accuracy": dict(zip(map(str, RADII), pixel, strict=True)),
           "s_per_image_median": statistics.median(times.tolist()),
           "s_per_image_range": [float(times.min()), float(times.max())],
           "cpu_s_per_image_median": statistics.median(
               [c for r in parts_ for c in r.get("cpu", [])] or [0.0]),
           "attack": [r["attack"] for r in parts_ if r["attack"]["attacked"]]}
    res = {k: v for k, v in res.items()
           if k not in ("labels", "radii", "pixeldp_radii", "y", "times", "cpu")}
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    if args.plot:
        plot(cohen, pixel, args, len(y))


def main() -> None:
    args = _args()
    if args.merge:
        merge(args)
        return
    import torch

    torch.set_num_threads(args.threads)
    xtr, ytr, xte, yte = mnist_5k()
    if args.val:  # choose a recipe on images carved from the training split, never the test
        xtr, ytr, xte, yte = xtr[:-args.val], ytr[:-args.val], xtr[-args.val:], ytr[-args.val:]
    t0 = time.perf_counter()
    nets, net = _base_net(args, xtr, ytr)
    train_s = time.perf_counter() - t0
    print(f"train: {train_s:.0f} s ({args.epochs} epochs, sigma={args.sigma})",
          flush=True)
    with torch.no_grad():
        clean = float((net(torch.tensor(xte)).argmax(1).numpy() == yte).mean())
    fast = base_classifier(nets, args)
    smoothed = robust.Smoothed(fast, args.sigma, 10, float32=not args.float64)
    xte, yte = xte[args.offset:], yte[args.offset:]
    k = min(args.test, len(xte))
    labels, radii, pix, times, cpu = _certify_all(smoothed, xte[:k], yte[:k], args)
    cohen, pixel = _curve(labels, radii, yte[:k]), _curve(labels, pix, yte[:k])
    res = {"split": "validation" if args.val else "test", "test_images": k,
           "clean_base_accuracy": clean, "abstain": float(np.mean(labels < 0)),
           "certified_accuracy": dict(zip(map(str, RADII), cohen, strict=True)),
           "pixeldp_accuracy": dict(zip(map(str, RADII), pixel, strict=True)),
           "s_per_image_median": statistics.median(times) if times else 0.0,
           "s_per_image_range": [min(times), max(times)] if times else [],
           "cpu_s_per_image_median": statistics.median(cpu) if cpu else 0.0,
           "train_s": train_s,
           "recipe": {key: v for key, v in vars(args).items()
                      if key not in ("save", "load", "out", "plot")}}
    if args.parts:
        res["parts_s_per_10k"] = parts(net, fast, args.sigma, xte[0])
    res["attack"] = attack(net, smoothed, xte[:k], yte[:k], labels, radii, args)
    print(json.dumps(res, indent=1))
    if args.out:  # with the per-image answers, for --merge
        per_image = {"labels": labels.tolist(), "radii": radii.tolist(),
                     "pixeldp_radii": pix.tolist(), "y": yte[:k].tolist(), "times": times,
                     "cpu": cpu}
        Path(args.out).write_text(json.dumps({**res, **per_image}) + "\n")
    if args.plot:
        plot(cohen, pixel, args, k)


def attack(net, smoothed, x, y, labels, radii, args) -> dict:  # type: ignore[no-untyped-def]
    """PGD inside each certified radius; PREDICT (n = 2,000, alpha = 0.001) at the attack point."""
    import torch

    done = flips = abstains = base_flips = plain_flips = 0
    drops = []
    for i in np.flatnonzero((labels == y) & (radii > 0))[: args.attack]:
        adv = pgd_smoothed(net, x[i], int(labels[i]), float(radii[i]), args.sigma)
        before = smoothed.counts(x[i], 2000)[labels[i]] / 2000
        after = smoothed.counts(adv, 2000)[labels[i]] / 2000
        drops.append(float(before - after))
        pred = smoothed.predict(adv, n=2000, alpha=0.001)
        flips += int(pred not in (labels[i], robust.ABSTAIN))
        abstains += int(pred == robust.ABSTAIN)
        with torch.no_grad():
            out = net(torch.tensor(adv[None], dtype=torch.float32))
            base_flips += int(out.argmax() != labels[i])
        plain = pgd_smoothed(net, x[i], int(labels[i]), float(radii[i]), 0.0, m=1)
        with torch.no_grad():  # the same attack on f alone, no noise: f is not robust
            out = net(torch.tensor(plain[None], dtype=torch.float32))
            plain_flips += int(out.argmax() != labels[i])
        done += 1
    return {"attacked": done, "smoothed_flips": flips, "smoothed_abstains": abstains,
            "base_classifier_flips_at_adv_point": base_flips,
            "base_classifier_flips_under_plain_pgd_same_radius": plain_flips,
            "mean_drop_in_pA": statistics.mean(drops) if drops else 0.0}


def plot(cohen: list[float], pixel: list[float], args, k: int) -> None:  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot(RADII, cohen, marker="o", label="randomized smoothing (Cohen et al.)")
    ax.plot(RADII, pixel, marker="s", label="PixelDP radius, delta=1e-5 (same counts)")
    ax.set_xlabel("L2 radius")
    ax.set_ylabel("certified accuracy")
    ax.set_title(f"MNIST-5k, {k} test images, sigma={args.sigma}, n={args.n}, alpha=0.001",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
