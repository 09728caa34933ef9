"""Training side of benchmarks/robust_bench.py: base classifiers for randomized smoothing.

The smoothed classifier's certificate (Cohen et al. 2019) holds for *any* base classifier; how
large the certified radius is depends only on how often the base net is right on noisy copies.
This module is about raising that frequency with 4,000 MNIST images:

* public data augmentation (no privacy is claimed for any data here; the transforms use no
  statistics of the data): integer shifts, small rotations and scalings, and the elastic
  distortions of Simard et al. 2003, all drawn from torch's generator (the user's code; the
  certificate's noise comes only from dpkit.noise);
* the training objective: noise augmentation (Cohen et al. 2019) with consistency
  regularisation over ``copies`` noisy copies (Jeong & Shin 2020: ``lam`` times the KL from
  their mean prediction to each, plus ``eta`` times the mean's entropy), optionally a one-step
  SmoothAdv attack on the smoothed soft classifier (Salman et al. 2019) and the MACER
  radius hinge (Zhai et al. 2020);
* an exponential moving average of the weights (``--ema``), the copy that is certified.
"""

from __future__ import annotations

import argparse
import copy
import math

import numpy as np

__all__ = ["add_train_args", "net", "train"]


def net(width: int = 16, arch: str = "strided", dropout: float = 0.0,  # type: ignore[no-untyped-def]
        seed: int = 0):
    """``strided``: two 5x5 stride-2 convs + FC (~0.8M multiply-adds at width 16);
    ``pool``: LeNet-style 5x5 convs at stride 1, each followed by 2x2 max pooling (the base
    classifier of Cohen et al. / Jeong & Shin on MNIST; ~3M multiply-adds at width 16)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    w = width
    if arch == "strided":
        body = [nn.Conv2d(1, w, 5, stride=2, padding=2), nn.ReLU(),  # 14x14
                nn.Conv2d(w, 2 * w, 5, stride=2, padding=2), nn.ReLU()]  # 7x7
    elif arch == "pool":
        body = [nn.Conv2d(1, w, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),  # 14x14
                nn.Conv2d(w, 2 * w, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)]  # 7x7
    else:
        raise ValueError(f"arch must be 'strided' or 'pool' (got {arch!r})")
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), *body, nn.Flatten(),
                         nn.Dropout(dropout), nn.Linear(2 * w * 49, 4 * w), nn.ReLU(),
                         nn.Dropout(dropout), nn.Linear(4 * w, 10))


def shift(xb, g, pad: int = 2):  # type: ignore[no-untyped-def]
    """Random per-example translations of up to ``pad`` pixels (zero fill): a public transform."""
    import torch

    b = xb.shape[0]
    img = torch.nn.functional.pad(xb.view(b, 28, 28), (pad, pad, pad, pad))
    dev = xb.device
    dy = torch.randint(0, 2 * pad + 1, (b, 1, 1), generator=g, device=dev)
    dx = torch.randint(0, 2 * pad + 1, (b, 1, 1), generator=g, device=dev)
    rows = torch.arange(28, device=dev).view(1, 28, 1) + dy
    cols = torch.arange(28, device=dev).view(1, 1, 28) + dx
    return img[torch.arange(b, device=dev).view(b, 1, 1), rows, cols].reshape(b, 784)


def _elastic_field(b: int, g, alpha: float, smooth: float):  # type: ignore[no-untyped-def]
    """Simard et al. 2003: uniform(-1, 1) displacements per pixel, smoothed by a Gaussian of
    ``smooth`` px and scaled by ``alpha`` px; returned in grid_sample's [-1, 1] units."""
    import torch
    from torch.nn import functional as F  # noqa: N812

    half = max(1, math.ceil(3 * smooth))
    t = torch.arange(-half, half + 1, dtype=torch.float32, device=g.device)
    k = torch.exp(-t**2 / (2 * smooth**2))
    k = k / k.sum()
    field = torch.rand(b, 2, 28, 28, generator=g, device=g.device) * 2 - 1
    # separable blur, one channel per displacement axis
    field = F.conv2d(field, k.view(1, 1, 1, -1).repeat(2, 1, 1, 1), padding=(0, half), groups=2)
    field = F.conv2d(field, k.view(1, 1, -1, 1).repeat(2, 1, 1, 1), padding=(half, 0), groups=2)
    return (alpha * 2 / 28) * field.permute(0, 2, 3, 1)


def warp(xb, g, degrees: float = 0.0, scale: float = 0.0,  # type: ignore[no-untyped-def]
         elastic: float = 0.0, elastic_sigma: float = 4.0):
    """Random rotations up to ``degrees``, scalings by a factor in [1 - scale, 1 + scale] and
    elastic distortions of strength ``elastic`` px, in one bilinear resampling (zero fill)."""
    import torch
    from torch.nn import functional as F  # noqa: N812

    b, dev = xb.shape[0], xb.device
    theta = (torch.rand(b, generator=g, device=dev) * 2 - 1) * math.radians(degrees)
    inv = 1 / (1 + (torch.rand(b, generator=g, device=dev) * 2 - 1) * scale)  # out -> in
    cos, sin = torch.cos(theta) * inv, torch.sin(theta) * inv
    zero = torch.zeros(b, device=dev)
    mat = torch.stack([torch.stack([cos, -sin, zero], 1), torch.stack([sin, cos, zero], 1)], 1)
    grid = F.affine_grid(mat, [b, 1, 28, 28], align_corners=False)
    if elastic > 0:
        grid = grid + _elastic_field(b, g, elastic, elastic_sigma)
    return F.grid_sample(xb.view(b, 1, 28, 28), grid, align_corners=False).reshape(b, 784)


def augment(xb, g, args):  # type: ignore[no-untyped-def]
    """The public transforms of ``args`` (shift, then rotation/scale/elastic)."""
    xb = shift(xb, g, args.shift) if args.shift else xb
    if args.rotate or args.scale or args.elastic:
        xb = warp(xb, g, args.rotate, args.scale, args.elastic, args.elastic_sigma)
    return xb


def _macer_hinge(mean, yb, gamma: float):  # type: ignore[no-untyped-def]
    """MACER's radius term (Zhai et al. 2020) on the soft smoothed probabilities ``mean``:
    hinge(gamma - (Phi^-1(p_y) - Phi^-1(p_runner-up))) over examples the soft classifier gets
    right, i.e. push the (soft) certified radius sigma/2 * (...) up to sigma/2 * gamma."""
    import torch

    p = mean.clamp(1e-4, 1 - 1e-4)
    top2 = p.topk(2, dim=1)
    right = top2.indices[:, 0] == yb
    if not bool(right.any()):
        return mean.sum() * 0
    gap = torch.special.ndtri(top2.values[right, 0]) - torch.special.ndtri(top2.values[right, 1])
    return torch.relu(gamma - gap).sum() / len(yb)


def smooth_loss(model, xb, yb, sigma: float, args, g):  # type: ignore[no-untyped-def]
    """Cross-entropy on ``copies`` noisy copies + lam * KL(mean || each) + eta * H(mean)
    (Jeong & Shin 2020), + macer * sigma/2 * MACER hinge; ``lam = macer = 0``: plain noise
    augmentation on one copy (Cohen et al. 2019)."""
    import torch
    from torch.nn import functional as F  # noqa: N812

    b = xb.shape[0]
    copies = args.copies if (args.lam > 0 or args.macer > 0) else 1
    noisy = xb.repeat(copies, 1) + sigma * torch.randn(copies * b, 784, generator=g,
                                                       device=xb.device)
    logits = model(noisy)
    loss = F.cross_entropy(logits, yb.repeat(copies), label_smoothing=args.smoothing)
    if copies == 1:
        return loss
    logp = F.log_softmax(logits, dim=1).view(copies, b, -1)
    mean = logp.exp().mean(0)
    log_mean = torch.log(mean.clamp_min(1e-12))
    if args.lam > 0:
        kl = (mean * (log_mean - logp)).sum(-1).mean()
        entropy = -(mean * log_mean).sum(-1).mean()
        loss = loss + args.lam * kl + args.eta * entropy
    if args.macer > 0:  # inverse temperature as MACER's beta: a softer vote is differentiable
        soft = F.softmax(args.macer_beta * logits, dim=1).view(copies, b, -1).mean(0)
        loss = loss + args.macer * sigma / 2 * _macer_hinge(soft, yb, args.macer_gamma)
    return loss


def smooth_adv(model, xb, yb, sigma: float, eps: float, g, m: int = 2):  # type: ignore[no-untyped-def]
    """SmoothAdv-lite (Salman et al. 2019), one step: move each x by ``eps`` in L2 along the
    gradient of -log E_noise[softmax(f(x + delta + noise))_y] (``m`` draws), the attack on the
    smoothed *soft* classifier whose certified radius the training then defends."""
    import torch
    from torch.nn import functional as F  # noqa: N812

    b = xb.shape[0]
    delta = torch.zeros_like(xb, requires_grad=True)
    noise = sigma * torch.randn(m * b, 784, generator=g, device=xb.device)
    probs = F.softmax(model((xb + delta).repeat(m, 1) + noise), dim=1).view(m, b, -1).mean(0)
    loss = -torch.log(probs.gather(1, yb[:, None]).clamp_min(1e-12)).sum()
    (grad,) = torch.autograd.grad(loss, delta)
    step = grad / grad.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (xb + eps * step).detach()


def _ema_update(avg, model, decay: float) -> None:  # type: ignore[no-untyped-def]
    import torch

    with torch.no_grad():
        for pa, pm in zip(avg.parameters(), model.parameters(), strict=True):
            pa.mul_(decay).add_(pm, alpha=1 - decay)


def train(x: np.ndarray, y: np.ndarray, args, seed: int = 0,  # type: ignore[no-untyped-def]
          device: str = "cpu"):
    """Noise augmentation at ``args.sigma_train`` (Cohen et al. 2019) with the public transforms
    of :func:`augment`, the loss of :func:`smooth_loss` (on SmoothAdv points when ``--adv``, its
    radius ramped up over the first ``--adv-warmup`` epochs); SGD, Nesterov momentum, weight
    decay 5e-4, OneCycle. With ``--ema d`` the returned net is the moving average of the
    weights (decay d per step). ``seed`` varies the initialisation and the order; ``device``
    (e.g. ``"cuda"``) is where to train (the CPU's draws are those of earlier versions)."""
    import torch

    model = net(args.width, args.arch, args.dropout, seed).to(device)
    avg = copy.deepcopy(model) if args.ema > 0 else None
    lr, batch, epochs = args.lr, args.batch, args.epochs
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    steps = (len(x) + batch - 1) // batch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, epochs=epochs, steps_per_epoch=steps)
    xt, yt = torch.tensor(x, device=device), torch.tensor(y, device=device)
    g = torch.Generator(device=device).manual_seed(1 + 1000 * seed)
    sigma = args.sigma_train or args.sigma
    for epoch in range(epochs):
        perm = torch.randperm(len(xt), generator=g, device=device)
        for i in range(0, len(xt), batch):
            idx = perm[i:i + batch]
            xb, yb = augment(xt[idx], g, args), yt[idx]
            if args.adv > 0:
                eps = args.adv * min(1.0, (epoch + 1) / max(1, args.adv_warmup))
                xb = smooth_adv(model.eval(), xb, yb, sigma, eps, g, args.copies)
            loss = smooth_loss(model.train(), xb, yb, sigma, args, g)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            if avg is not None:
                _ema_update(avg, model, args.ema)
    return (avg if avg is not None else model).eval()


def add_train_args(ap: argparse.ArgumentParser) -> None:
    """The training options of robust_bench.py (defaults: the recipe measured in docs)."""
    ap.add_argument("--sigma-train", type=float, default=0.0,
                    help="training noise if not --sigma (a little above it can help)")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--lam", type=float, default=5.0, help="consistency weight (0: plain)")
    ap.add_argument("--eta", type=float, default=0.5, help="entropy weight of the consistency")
    ap.add_argument("--copies", type=int, default=2, help="noisy copies per example (lam > 0)")
    ap.add_argument("--lr", type=float, default=0.1, help="OneCycle peak learning rate")
    ap.add_argument("--arch", default="strided", choices=("strided", "pool"))
    ap.add_argument("--width", type=int, default=16, help="channels of the first conv")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--shift", type=int, default=2, help="random shifts up to this many px")
    ap.add_argument("--rotate", type=float, default=0.0, help="random rotations (degrees)")
    ap.add_argument("--scale", type=float, default=0.0, help="random scalings by 1 +- this")
    ap.add_argument("--elastic", type=float, default=0.0,
                    help="elastic distortion strength alpha in px (Simard et al.: 34; 0: off)")
    ap.add_argument("--elastic-sigma", type=float, default=4.0,
                    help="smoothness of the elastic field in px (Simard et al.: 4)")
    ap.add_argument("--smoothing", type=float, default=0.0, help="label smoothing")
    ap.add_argument("--adv", type=float, default=0.0,
                    help="SmoothAdv one-step L2 radius on training points (0: off)")
    ap.add_argument("--adv-warmup", type=int, default=10, help="epochs to ramp --adv up")
    ap.add_argument("--macer", type=float, default=0.0, help="MACER hinge weight (0: off)")
    ap.add_argument("--macer-gamma", type=float, default=8.0, help="MACER hinge margin")
    ap.add_argument("--macer-beta", type=float, default=16.0, help="MACER inverse temperature")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="certify the moving average of the weights, decay per step (0: off)")
    ap.add_argument("--batch", type=int, default=128)
