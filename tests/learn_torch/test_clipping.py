"""Ghost-norm / book-keeping clipped sums equal the per-example (torch.func vmap) reference."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from dpkit.learn.torch import make_private  # noqa: E402


class Scale(nn.Module):
    """A layer without a ghost-norm rule: exercised through the vmap fallback."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * self.w)


class Pool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(1)


def _models() -> dict[str, tuple[nn.Module, torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    B = 7
    y = torch.randint(0, 3, (B,))
    return {
        "linear": (nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)),
                   torch.randn(B, 5), y),
        "linear_seq": (nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3), Pool()),
                       torch.randn(B, 4, 5), y),
        "linear_seq_long": (nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 3), Pool()),
                            torch.randn(B, 9, 2), y),
        # short sequences and small images with many channels take the ghost (T x T) path
        "linear_seq_ghost": (nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3), Pool()),
                             torch.randn(B, 2, 8), y),
        "conv_ghost": (nn.Sequential(nn.Conv2d(8, 8, 3), nn.Flatten(), nn.Linear(32, 3)),
                       torch.randn(B, 8, 4, 4), y),
        "conv": (nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, stride=2), nn.ReLU(),
                               nn.Flatten(), nn.Linear(3 * 3 * 3, 3)),
                 torch.randn(B, 2, 6, 6), y),
        "embedding_layernorm": (nn.Sequential(nn.Embedding(6, 4, padding_idx=0), nn.LayerNorm(4),
                                              Pool(), nn.Linear(4, 3)),
                                torch.randint(0, 6, (B, 5)), y),
        "fallback": (nn.Sequential(nn.Linear(5, 4), Scale(4), nn.Linear(4, 3)),
                     torch.randn(B, 5), y),
    }


def _reference(model: nn.Module, x: torch.Tensor, y: torch.Tensor, C: float) -> torch.Tensor:
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    per = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    flat = torch.cat([per[k].reshape(x.shape[0], -1) for k in params], 1).double()
    norms = flat.norm(dim=1)
    c = (C / (norms + 1e-6)).clamp(max=1.0)
    return (flat * c[:, None]).sum(0)


@pytest.mark.parametrize("kind", list(_models()))
@pytest.mark.parametrize("C", [0.05, 100.0])  # most examples clipped / none clipped
def test_clipped_sum_matches_per_example_reference(kind: str, C: float) -> None:
    model, x, y = _models()[kind]
    ref = _reference(copy.deepcopy(model), x, y, C * (1 - 1e-6))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tr = make_private(model, opt, DataLoader(TensorDataset(x, y), batch_size=2),
                      max_grad_norm=C, noise_multiplier=1.0)
    nn.functional.cross_entropy(tr.module(x), y).backward()
    got = torch.cat([s.reshape(-1) for s in tr.optimizer.clipped_sums(x.shape[0])]).double()
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5 * C)


def test_tapped_linear_never_forms_the_unclipped_weight_gradient() -> None:
    model, x, y = _models()["linear"]
    tr = make_private(model, torch.optim.SGD(model.parameters(), lr=0.1),
                      DataLoader(TensorDataset(x, y), batch_size=2), max_grad_norm=1.0,
                      noise_multiplier=1.0)
    nn.functional.cross_entropy(tr.module(x), y).backward()
    assert all(p.grad is None for p in model.parameters())
    tr.detach()
    nn.functional.cross_entropy(model(x), y).backward()  # the module is its own again
    assert all(p.grad is not None for p in model.parameters())
