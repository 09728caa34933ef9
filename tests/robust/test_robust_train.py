"""The training side of the robustness benchmark (benchmarks/robust_train.py): its public
transforms, the MACER hinge, the one-step SmoothAdv point and the weight average."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import Tensor  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import robust_train as rt  # noqa: E402


def _args(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    rt.add_train_args(ap)
    ap.add_argument("--sigma", type=float, default=0.5)
    return ap.parse_args(list(argv))


def _digits(b: int = 16) -> Tensor:
    """Bars of random position and thickness on a 28x28 canvas (no data files needed)."""
    rng = np.random.default_rng(0)
    img = np.zeros((b, 28, 28), np.float32)
    for i in range(b):
        c, w = rng.integers(6, 20), rng.integers(2, 5)
        img[i, 4:24, c:c + w] = 1.0
    return torch.tensor(img.reshape(b, 784))


def test_warp_without_distortion_is_the_identity() -> None:
    x = _digits()
    out = rt.warp(x, torch.Generator().manual_seed(0))
    assert torch.allclose(out, x, atol=1e-5)


def test_elastic_moves_pixels_in_proportion_to_alpha_and_keeps_the_range() -> None:
    x = _digits()
    moved = []
    for alpha in (4.0, 34.0):
        out = rt.warp(x, torch.Generator().manual_seed(1), elastic=alpha)
        assert out.shape == x.shape and float(out.min()) >= 0.0 and float(out.max()) <= 1.0
        moved.append(float((out - x).abs().mean()))
    # a field 8.5 times stronger moves more ink; both move some, neither erases the image
    assert 0 < moved[0] < moved[1]
    out = rt.warp(x, torch.Generator().manual_seed(1), elastic=34.0)
    assert float(out.sum()) > 0.5 * float(x.sum())


def test_elastic_field_is_smooth_and_scaled_in_grid_units() -> None:
    field = rt._elastic_field(64, torch.Generator().manual_seed(2), alpha=34.0, smooth=4.0)
    px = field * 28 / 2  # back to pixels
    assert px.shape == (64, 28, 28, 2)
    # neighbouring pixels move together (smoothness): their difference is far below the spread
    assert float((px[:, 1:] - px[:, :-1]).std()) < 0.3 * float(px.std())
    assert 0.3 < float(px.std()) < 5.0


def test_augment_applies_only_what_is_asked() -> None:
    x = _digits()
    assert torch.equal(rt.augment(x, torch.Generator(), _args("--shift", "0")), x)
    out = rt.augment(x, torch.Generator().manual_seed(3), _args("--rotate", "10", "--scale",
                                                                  "0.1", "--elastic", "20"))
    assert out.shape == x.shape and not torch.equal(out, x)


def test_macer_hinge_is_zero_past_the_margin_and_counts_only_right_examples() -> None:
    from scipy import stats

    gap = stats.norm.ppf(0.999) - stats.norm.ppf(0.0005)  # ~6.4
    p = torch.tensor([[0.999, 0.0005] + [0.0005 / 8] * 8, [0.6, 0.4] + [0.0] * 8])
    y = torch.tensor([0, 1])  # the second is wrong: no radius term for it
    assert float(rt._macer_hinge(p, y, gamma=gap - 0.1)) == 0.0
    assert float(rt._macer_hinge(p, y, gamma=gap + 1.0)) == pytest.approx(1.0 / 2, rel=1e-3)
    assert float(rt._macer_hinge(p, torch.tensor([1, 1]), gamma=8.0)) == 0.0


def test_smooth_adv_moves_each_point_by_eps_and_lowers_the_soft_vote() -> None:
    torch.manual_seed(0)
    model = rt.net(width=4).eval()
    x, y = _digits(8), torch.arange(8) % 10
    adv = rt.smooth_adv(model, x, y, 0.5, 1.0, torch.Generator().manual_seed(4), m=8)
    assert torch.allclose((adv - x).norm(dim=1), torch.ones(8), atol=1e-4)
    g = torch.Generator().manual_seed(5)
    noise = 0.5 * torch.randn(256, 8, 784, generator=g)

    def vote(z: Tensor) -> Tensor:
        with torch.no_grad():
            p = torch.softmax(model((z[None] + noise).reshape(-1, 784)), 1).view(256, 8, -1)
        return p.mean(0).gather(1, y[:, None]).squeeze(1)

    # a first-order step against the soft vote lowers it for most points
    assert int((vote(adv) < vote(x)).sum()) >= 6


def test_train_runs_every_option_and_ema_returns_the_average() -> None:
    x = _digits(64).numpy()
    y = (np.arange(64) % 10).astype(np.int64)
    args = _args("--epochs", "1", "--batch", "32", "--width", "4", "--elastic", "34", "--rotate",
                 "10", "--scale", "0.1", "--copies", "3", "--macer", "1", "--adv", "0.5",
                 "--ema", "0.5")
    out = rt.train(x, y, args, seed=0)
    assert not out.training
    assert out(torch.tensor(x[:3])).shape == (3, 10)
    plain = rt.train(x, y, _args("--epochs", "1", "--batch", "32", "--width", "4", "--ema",
                                 "0.5", "--lam", "0"), seed=0)
    raw = rt.train(x, y, _args("--epochs", "1", "--batch", "32", "--width", "4", "--lam", "0"),
                   seed=0)
    # same draws, same steps: the average differs from the last iterate
    diff = sum(float((a - b).detach().abs().sum()) for a, b in
               zip(plain.parameters(), raw.parameters(), strict=True))
    assert diff > 0
