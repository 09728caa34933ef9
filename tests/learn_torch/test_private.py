"""make_private: noise scale, accounting, Poisson batches and the refusals before any step."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from dpkit import accounting, events, noise  # noqa: E402
from dpkit.learn.torch import UnsupportedLayer, make_private  # noqa: E402


def _setup(n: int = 200, batch: int = 20, **kw):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x, y = torch.randn(n, 6), torch.randint(0, 2, (n,))
    net = nn.Sequential(nn.Linear(6, 50), nn.ReLU(), nn.Linear(50, 2))
    kw.setdefault("max_grad_norm", 1.0)
    if "target_epsilon" not in kw:
        kw.setdefault("noise_multiplier", 1.3)
    return make_private(net, torch.optim.SGD(net.parameters(), lr=0.1),
                        DataLoader(TensorDataset(x, y), batch_size=batch), **kw)


def _train(tr, epochs: int = 1) -> None:  # type: ignore[no-untyped-def]
    for _ in range(epochs):
        for x, y in tr.data_loader:
            tr.optimizer.zero_grad()
            nn.functional.cross_entropy(tr.module(x), y).backward()
            tr.optimizer.step()


def test_noise_has_the_stated_scale_and_sits_on_the_grid() -> None:
    # zero data gradient (lr 0 and a zero-input batch are not needed: read the noise before the
    # update by stepping once with a constant loss), so p.grad * q n / (σ C) ~ N(0, 1)
    tr = _setup(max_grad_norm=2.0, noise_multiplier=0.7, source=noise.seeded(11))
    x, _ = next(iter(tr.data_loader))
    (tr.module(x).sum() * 0.0).backward()
    tr.optimizer.step()
    z = torch.cat([p.grad.reshape(-1) for p in tr.module.parameters()]).double().numpy()
    z = z * tr.sample_rate * tr.data_loader.n / (0.7 * 2.0)
    d = z.size  # 452 coordinates: std error of the sample sd ~ 1/sqrt(2d) = 0.033
    # 6 standard errors: false-failure probability about 2e-9
    assert abs(z.std() - 1.0) < 6 / math.sqrt(2 * d)
    assert abs(z.mean()) < 6 / math.sqrt(d)


def test_gaussian_float_moments_and_tails() -> None:
    z = noise.gaussian_float(1.0, 400_000, source=noise.seeded(5))
    # sd error 1/sqrt(2n) = 0.0011, kurtosis error sqrt(24/n) = 0.0077: 6-sigma bounds,
    # false-failure probability < 1e-8
    assert abs(z.std() - 1.0) < 0.0067
    assert abs(((z / z.std()) ** 4).mean() - 3.0) < 0.047
    assert abs(float(np.mean(z > 2.0)) - 0.02275) < 6 * math.sqrt(0.0228 / 400_000)


def test_grid_release_is_on_the_grid_and_exact() -> None:
    x = np.linspace(-3, 3, 1001)
    y = noise.gaussian_on_grid(x, 0.5, 24, source=noise.seeded(1))
    assert np.all(y * 2**24 == np.rint(y * 2**24))
    with pytest.raises(ValueError, match="coarser grid"):
        noise.gaussian_on_grid(np.array([1e9]), 1.0, 40)


def test_epsilon_is_the_pld_of_the_event() -> None:
    tr = _setup()
    _train(tr, 2)
    assert tr.steps == 2 * 10
    e = events.SelfComposed(events.PoissonSampled(0.1, events.Gaussian(1.3)), 20)
    assert tr.event() == e
    assert tr.epsilon(1e-5) == accounting.epsilon(e, delta=1e-5, method="pld")
    # never below the RDP bound's truth side: PLD is tighter than RDP but within it
    assert tr.epsilon(1e-5) <= accounting.epsilon(e, delta=1e-5, method="rdp")


def test_target_epsilon_is_met_after_the_planned_epochs() -> None:
    tr = _setup(target_epsilon=2.0, target_delta=1e-4, epochs=3)
    e = tr.event(steps=30)
    eps = accounting.epsilon(e, delta=1e-4, method="pld")
    assert eps <= 2.0 and eps > 1.98


def test_budget_is_charged_up_front_and_caps_the_steps() -> None:
    budget = accounting.Budget(epsilon=2.5, delta=1e-5, accountant="pld")
    tr = _setup(target_epsilon=2.0, target_delta=1e-5, epochs=1, budget=budget)
    assert budget.spent.epsilon > 1.9
    _train(tr, 1)
    with pytest.raises(RuntimeError, match="charged for 10 steps"):
        _train(tr, 1)
    with pytest.raises(accounting.BudgetExceeded):
        _setup(target_epsilon=2.0, target_delta=1e-5, epochs=1, budget=budget)


def test_batches_are_poisson() -> None:
    tr = _setup(n=2000, batch=100, source=noise.seeded(3))
    sizes = [int(x.shape[0]) for _ in range(5) for x, _ in tr.data_loader]
    # 100 batches of Binomial(2000, 0.05): mean 100, sd 9.75; mean of 100 has sd 0.975
    assert abs(np.mean(sizes) - 100) < 6 * 0.975
    assert 4 < np.std(sizes) < 16 and len(set(sizes)) > 10


@pytest.mark.parametrize(("kw", "message"), [
    ({"target_epsilon": 0.0, "target_delta": 1e-5, "epochs": 1}, "target_epsilon must be"),
    ({"target_epsilon": -1.0, "target_delta": 1e-5, "epochs": 1}, "target_epsilon must be"),
    ({"target_epsilon": 1.0, "target_delta": 0.01, "epochs": 1}, r"target_delta must lie in"),
    ({"target_epsilon": 1.0, "target_delta": 1e-5}, "need target_delta= and epochs="),
    ({"max_grad_norm": float("nan")}, "max_grad_norm must be"),
    ({"noise_multiplier": 1.0, "target_epsilon": 1.0}, "exactly one of"),
])
def test_bad_numbers_are_refused(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _setup(**kw)


def test_nan_data_refused_before_any_step() -> None:
    x = torch.randn(50, 3)
    x[7, 1] = float("nan")
    net = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="NaN"):
        make_private(net, torch.optim.SGD(net.parameters(), lr=0.1),
                     DataLoader(TensorDataset(x, torch.zeros(50, dtype=torch.long)),
                                batch_size=5), max_grad_norm=1.0, noise_multiplier=1.0)


def test_unsupported_layers_refused_before_any_step() -> None:
    net = nn.Sequential(nn.Linear(3, 4), nn.GRU(4, 4))
    data = DataLoader(TensorDataset(torch.zeros(10, 3)), batch_size=2)
    with pytest.raises(UnsupportedLayer, match="GRU has no ghost-norm rule"):
        make_private(net, torch.optim.SGD(net.parameters(), lr=0.1), data,
                     max_grad_norm=1.0, noise_multiplier=1.0, fallback=None)
    bn = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    with pytest.raises(UnsupportedLayer, match="BatchNorm1d mixes the examples"):
        make_private(bn, torch.optim.SGD(bn.parameters(), lr=0.1), data,
                     max_grad_norm=1.0, noise_multiplier=1.0)


def test_a_batch_not_from_the_poisson_loader_is_refused() -> None:
    tr = _setup()
    x, y = torch.randn(20, 6), torch.randint(0, 2, (20,))
    nn.functional.cross_entropy(tr.module(x), y).backward()
    with pytest.raises(RuntimeError, match="Poisson-sampled"):
        tr.optimizer.step()
    assert all(p.grad is None for p in tr.module.parameters())  # nothing released


def test_seeded_source_says_insecure() -> None:
    assert "INSECURE" in repr(_setup(source=noise.seeded(0)))
    assert not _setup().insecure


def test_exact_noise_kind_trains() -> None:
    tr = _setup(noise_kind="exact", source=noise.seeded(2))
    _train(tr, 1)
    g = torch.cat([p.grad.reshape(-1) for p in tr.module.parameters()]).double().numpy()
    k = tr.optimizer.k
    scaled = g * tr.sample_rate * tr.data_loader.n * 2.0**k
    assert np.all(np.isfinite(g)) and np.allclose(scaled, np.rint(scaled), atol=1e-3)
