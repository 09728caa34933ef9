"""User-level DP-SGD (``make_private(..., units=)``): per-unit clipping equals a brute-force
per-unit gradient by autograd, one unit moves the noiseless sum by at most C, units are sampled
whole, the event is the example-level one, and bad unit ids are refused before anything runs."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import Tensor, nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from dpkit import noise  # noqa: E402
from dpkit.learn.torch import PoissonLoader, make_private  # noqa: E402
from dpkit.learn.torch.units import BatchUnits, UnitPlan  # noqa: E402


class Scale(nn.Module):
    """A layer without a ghost-norm rule: exercised through the vmap fallback."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, d))

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(x * self.w)


class Pool(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.mean(1)


class First(nn.Module):
    """An RNN's output sequence, without h_n."""

    def forward(self, out: tuple[Tensor, Tensor]) -> Tensor:
        return out[0]


class LastState(nn.Module):
    """A char model that reads the GRU's h_n: refused (only the first output is tapped)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.rnn, self.out = nn.Embedding(6, 4), nn.GRU(4, 5, batch_first=True), \
            nn.Linear(5, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.rnn(self.emb(x))[1][0])


B = 9
# units of sizes 3, 2, 1, 1, 2 in a scattered order: buckets of sizes (2, 4], 2 and 1
IDS = torch.tensor([7, 7, 0, 3, 7, 0, 12, 4, 4])
# three units of 3 in a row, as the loader hands them out: the free-reshape path
IDS_IN_A_ROW = torch.arange(B) // 3


def _models() -> dict[str, tuple[nn.Module, Tensor]]:
    torch.manual_seed(0)
    return {
        "linear": (nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)), torch.randn(B, 5)),
        # wide enough that the per-unit norm takes the ghost path (Gram blocks of the unit)
        "linear_wide": (nn.Sequential(nn.Linear(40, 40), nn.Tanh(), nn.Linear(40, 3)),
                        torch.randn(B, 40)),
        "linear_seq": (nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3), Pool()),
                       torch.randn(B, 4, 5)),
        "linear_seq_ghost": (nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3), Pool()),
                             torch.randn(B, 2, 8)),
        "conv": (nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, stride=2), nn.ReLU(),
                               nn.Flatten(), nn.Linear(3 * 3 * 3, 3)), torch.randn(B, 2, 6, 6)),
        "conv_ghost": (nn.Sequential(nn.Conv2d(8, 8, 3), nn.Flatten(), nn.Linear(32, 3)),
                       torch.randn(B, 8, 4, 4)),
        "embedding_layernorm": (nn.Sequential(nn.Embedding(6, 4, padding_idx=0), nn.LayerNorm(4),
                                              Pool(), nn.Linear(4, 3)),
                                torch.randint(0, 6, (B, 5))),
        "fallback": (nn.Sequential(nn.Linear(5, 4), Scale(4), nn.Linear(4, 3)),
                     torch.randn(B, 5)),
        # a GRU: vmap cannot batch its kernel, so one vjp per example / unit in a loop
        "gru": (nn.Sequential(nn.Embedding(6, 4), nn.GRU(4, 5, batch_first=True), First(),
                              Pool(), nn.Linear(5, 3)), torch.randint(0, 6, (B, 5))),
        "lstm": (nn.Sequential(nn.LSTM(3, 4, batch_first=True), First(), Pool(), nn.Linear(4, 3)),
                 torch.randn(B, 5, 3)),
    }


def _flat_grad(model: nn.Module, loss: Tensor) -> Tensor:
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]).double()


def _brute_force(model: nn.Module, x: Tensor, y: Tensor, ids: Tensor,
                 C: float) -> Tensor:
    """Σ_u clip_C(∇ Σ_{i∈u} ℓ_i), each unit's gradient by plain autograd on its own examples."""
    total = None
    for u in torch.unique(ids).tolist():
        rows = ids == u
        loss = nn.functional.cross_entropy(model(x[rows]), y[rows], reduction="sum")
        g = _flat_grad(model, loss)
        g = g * min(1.0, C / (float(g.norm()) + 1e-6))
        total = g if total is None else total + g
    assert total is not None
    return total


def _private(model: nn.Module, C: float, **kw):  # type: ignore[no-untyped-def]
    x = torch.zeros(20, 1)
    return make_private(model, torch.optim.SGD(model.parameters(), lr=0.1),
                        DataLoader(TensorDataset(x, x), batch_size=2), max_grad_norm=C,
                        noise_multiplier=1.0, **kw)


def _clipped(tr, x: Tensor, y: Tensor, ids) -> Tensor:  # type: ignore[no-untyped-def]
    tr.optimizer.zero_grad()
    nn.functional.cross_entropy(tr.module(x), y).backward()
    sums = tr.optimizer.clipped_sums(x.shape[0], ids)
    return torch.cat([s.reshape(-1) for s in sums]).double().clone()


@pytest.mark.parametrize("kind", list(_models()))
@pytest.mark.parametrize("C", [0.05, 100.0])  # most units clipped / none clipped
@pytest.mark.parametrize("in_a_row", [False, True])
def test_per_unit_clipped_sum_matches_brute_force_autograd(kind: str, C: float,
                                                           in_a_row: bool) -> None:
    model, x = _models()[kind]
    y = torch.arange(B) % 3
    ids = IDS_IN_A_ROW if in_a_row else IDS
    assert (BatchUnits(ids, B).buckets[0][1] is None) == in_a_row
    ref = _brute_force(copy.deepcopy(model), x, y, ids, C * (1 - 1e-6))
    got = _clipped(_private(model, C), x, y, ids)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5 * C)


@pytest.mark.parametrize("kind", ["linear", "linear_wide", "conv", "embedding_layernorm"])
def test_a_large_unit_and_singletons_match_brute_force(kind: str) -> None:
    """A unit of 21 examples (padded to 32) beside singletons: correct for large units too."""
    model, x = _models()[kind]
    xs = torch.cat([x, x, x[:6]])[:24]
    ys = torch.arange(24) % 3
    ids = torch.tensor([0] * 21 + [1, 2, 3])
    ref = _brute_force(copy.deepcopy(model), xs, ys, ids, 0.5 * (1 - 1e-6))
    got = _clipped(_private(model, 0.5), xs, ys, ids)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["linear", "linear_seq", "conv", "embedding_layernorm",
                                  "fallback"])
def test_k_copies_in_one_unit_are_one_example_with_k_times_its_gradient(kind: str) -> None:
    """A unit of k identical examples contributes clip(k ∇ℓ(x0)): the sum, not each copy."""
    model, x = _models()[kind]
    k, C = 4, 0.3
    xs = torch.cat([x[:1].repeat(k, *[1] * (x.dim() - 1)), x[1:4]])
    ys = torch.tensor([1] * k + [0, 2, 1])
    ids = torch.tensor([5] * k + [1, 2, 3])
    ref_model = copy.deepcopy(model)
    g0 = k * _flat_grad(ref_model, nn.functional.cross_entropy(ref_model(x[:1]), ys[:1],
                                                               reduction="sum"))
    assert float(g0.norm()) > C  # the copies' sum is clipped (each copy alone might not be)
    ref = g0 * C / float(g0.norm())
    for j in range(1, 4):
        gj = _flat_grad(ref_model, nn.functional.cross_entropy(ref_model(x[j : j + 1]),
                                                               ys[k + j - 1 : k + j],
                                                               reduction="sum"))
        ref = ref + gj * min(1.0, C / float(gj.norm()))
    got = _clipped(_private(model, C), xs, ys, ids)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["linear", "conv", "embedding_layernorm"])
def test_adding_one_unit_moves_the_noiseless_sum_by_at_most_C(kind: str) -> None:
    model, x = _models()[kind]
    C = 0.2
    tr = _private(model, C)
    y = torch.arange(B) % 3
    d = _clipped(tr, x[:5], y[:5], IDS[:5])
    # D' = D plus a unit of 4 examples (big gradients: their sum alone is far above C)
    d2 = _clipped(tr, x, y, torch.cat([IDS[:5], torch.full((4,), 99)]))
    moved = float((d2 - d).norm())
    assert moved <= C * (1 + 1e-5)
    assert moved > 0.9 * C  # and it is the unit's whole clipped sum, not nothing


def test_units_are_sampled_whole_and_capped_by_a_seeded_public_rule() -> None:
    units = np.r_[[0] * 10, [1], [2] * 3, np.arange(3, 40)]  # one unit of 10, then small ones
    plan = UnitPlan.build(units, len(units), 2, noise.seeded(0))
    assert plan.n_units == 40 and plan.n_examples == 2 + 1 + 2 + 37 and plan.dropped == 9
    again = UnitPlan.build(units, len(units), 2, noise.seeded(0))
    assert np.array_equal(plan.kept, again.kept)  # seeded: reproducible
    other = [set(UnitPlan.build(units, len(units), 2, noise.seeded(s)).kept[:2].tolist())
             for s in range(6)]
    assert len({frozenset(o) for o in other}) > 1  # a draw, not the first rows
    data = TensorDataset(torch.arange(len(units)))
    loader = PoissonLoader(data, sample_rate=0.3, steps=50, source=noise.seeded(1), units=plan)
    kept_of = {u: set(plan.kept[plan.starts[u]:plan.starts[u + 1]].tolist()) for u in range(40)}
    seen = 0
    for (batch,) in loader:
        got = set(batch.tolist())
        assert loader.last_units is not None and len(loader.last_units) == len(batch)
        for rows in kept_of.values():
            assert rows <= got or not rows & got  # all in or all out
        seen += len(got)
    assert seen > 0


def test_batch_units_segments_and_buckets() -> None:
    bu = BatchUnits(IDS, B)
    assert bu.count == 5
    x = torch.arange(B, dtype=torch.float64)[:, None, None]  # (B, 1, 1)
    sums = bu.segment_sum(x[:, 0, 0])
    assert sums.tolist() == [2 + 5, 3, 7 + 8, 0 + 1 + 4, 6]  # units 0, 3, 4, 7, 12
    parts = bu.grouped(x)
    assert sorted(p.shape[1] for p in parts) == [1, 2, 3]  # padded to the largest in (s/2, s]
    assert bu.scatter([p.sum((1, 2)) for p in parts]).tolist() == sums.tolist()


def test_the_event_is_the_example_level_one() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(120, 4), torch.randint(0, 2, (120,))
    trs = []
    for units in (None, np.arange(120) // 3):
        net = nn.Linear(4, 2)
        trs.append(make_private(net, torch.optim.SGD(net.parameters(), lr=0.1),
                                DataLoader(TensorDataset(x, y), batch_size=12),
                                max_grad_norm=1.0, target_epsilon=2.0, target_delta=1e-3,
                                epochs=3, units=units))
    ex, us = trs
    assert us.noise_multiplier == ex.noise_multiplier and us.sample_rate == ex.sample_rate
    assert us.event(30) == ex.event(30)
    assert us.neighbours == "add/remove one unit" and ex.neighbours == "add/remove one example"
    assert "40 units" in repr(us)


def _train(units, seed: int = 3):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x, y = torch.randn(64, 5), torch.randint(0, 3, (64,))
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    tr = make_private(net, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                      DataLoader(TensorDataset(x, y), batch_size=16), max_grad_norm=0.5,
                      noise_multiplier=1.1, source=noise.seeded(seed), units=units)
    for xb, yb in tr.data_loader:
        tr.optimizer.zero_grad()
        nn.functional.cross_entropy(tr.module(xb), yb).backward()
        tr.optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def test_units_none_is_unchanged_and_singleton_units_are_example_level() -> None:
    # golden from the code before user level existed (same seeds; torch 2.13 CPU; regenerated
    # on branch noisefast, whose float Gaussian sampler draws other values from the same
    # seed): units=None must keep today's results (bit for bit when written; a tolerance here,
    # for other BLAS builds)
    base = _train(None)
    golden = [0.1627911627292633, 0.45189303159713745, 0.2118263691663742, 0.2963695526123047]
    torch.testing.assert_close(base[:4], torch.tensor(golden), rtol=1e-5, atol=1e-6)
    # every example its own unit: the same batches (one Bernoulli per unit = per example) and
    # the same clipping, so the same model up to float rounding
    torch.testing.assert_close(_train(np.arange(64)), base, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(_train(np.arange(64) // 4), base)  # real units do change it


def test_a_loss_through_an_rnns_h_n_is_refused() -> None:
    tr = _private(LastState(), 1.0)
    x = torch.randint(0, 6, (4, 5))
    nn.functional.cross_entropy(tr.module(x), torch.zeros(4, dtype=torch.long)).backward()
    with pytest.raises(ValueError, match="other than its first"):
        tr.optimizer.clipped_sums(4, torch.arange(4) // 2)


@pytest.mark.parametrize(("units", "match"), [
    (np.r_[np.arange(19), -1], "negative"),
    (np.r_[np.arange(19.0), np.nan], "NaN"),
    (np.array([*range(19), None], dtype=object), "None"),
    (np.arange(19), "one unit id per example"),
    (np.zeros(20, dtype=bool), "integers or strings"),
])
def test_bad_unit_ids_are_refused_before_anything_runs(units, match: str) -> None:  # type: ignore[no-untyped-def]
    net = nn.Linear(1, 2)
    with pytest.raises((ValueError, TypeError), match=match):
        _private(net, 1.0, units=units)
    assert "forward" not in net.__dict__  # nothing attached: the Linear was not tapped


def test_unit_level_numbers_are_checked() -> None:
    net = nn.Linear(1, 2)
    with pytest.raises(ValueError, match="needs units="):
        _private(net, 1.0, max_examples_per_unit=2)
    with pytest.raises(ValueError, match="max_examples_per_unit"):
        _private(net, 1.0, units=np.arange(20), max_examples_per_unit=0)
    x = torch.zeros(20, 1)
    with pytest.raises(ValueError, match=r"n=4 units"):  # δ against the units, not the examples
        make_private(net, torch.optim.SGD(net.parameters(), lr=0.1),
                     DataLoader(TensorDataset(x, x), batch_size=2), max_grad_norm=1.0,
                     target_epsilon=1.0, target_delta=0.3, epochs=1, units=np.arange(20) // 5)
    ok = _private(net, 1.0, units=np.array([f"user{i // 2}" for i in range(20)]),
                  max_examples_per_unit=np.int64(1))  # a numpy int is an int
    assert ok.units is not None and ok.units.n_units == 10 and ok.units.n_examples == 10
