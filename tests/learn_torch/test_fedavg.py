"""DP-FedAvg: client splits, user-level accounting, clipping of client updates, refusals."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dpkit import accounting, events, noise  # noqa: E402
from dpkit.learn.fedavg import fedavg, split_clients  # noqa: E402


def _clients(n: int = 10, m: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(m, 3, generator=g), torch.randint(0, 2, (m,), generator=g))
            for _ in range(n)]


def test_splits_cover_every_example_once() -> None:
    y = np.repeat(np.arange(10), 40)
    for iid in (True, False):
        parts = split_clients(y, 100, iid=iid, source=noise.seeded(1))
        assert len(parts) == 100 and sorted(np.concatenate(parts).tolist()) == list(range(400))
    non_iid = split_clients(y, 100, iid=False, source=noise.seeded(1))
    assert max(len(set(y[p])) for p in non_iid) <= 2  # two label-sorted shards per client


def test_event_and_epsilon_are_user_level_pld() -> None:
    model = torch.nn.Linear(3, 2)
    r = fedavg(model, _clients(), rounds=3, client_rate=0.5, max_update_norm=1.0,
               noise_multiplier=2.0, source=noise.seeded(0))
    e = events.SelfComposed(events.PoissonSampled(0.5, events.Gaussian(2.0)), 3)
    assert r.event == e and r.insecure
    assert r.epsilon(1e-3) == accounting.epsilon(e, delta=1e-3, method="pld")


def test_one_client_moves_the_model_by_at_most_its_clip() -> None:
    # with (almost) no noise, one round with every client is the mean of clipped updates
    clients = _clients(n=4)
    model = torch.nn.Linear(3, 2)
    before = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    fedavg(model, clients, rounds=1, client_rate=1.0, max_update_norm=0.01,
           noise_multiplier=1e-9, local_lr=10.0, source=noise.seeded(0))
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert float((after - before).norm()) <= 0.01 + 1e-6  # mean of 4 updates of norm <= 0.01


def test_bad_input_refused() -> None:
    model = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="target_delta must lie in"):
        fedavg(model, _clients(), rounds=2, client_rate=0.5, max_update_norm=1.0,
               target_epsilon=1.0, target_delta=0.5)
    with pytest.raises(ValueError, match="target_epsilon must be > 0"):
        fedavg(model, _clients(), rounds=2, client_rate=0.5, max_update_norm=1.0,
               target_epsilon=-1.0, target_delta=1e-3)
    bad = _clients()
    bad[3][0][0, 0] = float("nan")
    with pytest.raises(ValueError, match="client 3: NaN"):
        fedavg(model, bad, rounds=1, client_rate=0.5, max_update_norm=1.0, noise_multiplier=1.0)


def test_vmapped_clients_train_as_the_loop_does() -> None:
    # equal-size clients are trained together by torch.func.vmap: the same steps, the same
    # batches, so the clipped sum equals the one-client-at-a-time loop's (float rounding aside)
    from dpkit.learn import fedavg as fa

    clients = _clients(n=6)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    stacked = fa._stacked(clients)
    assert stacked is not None and fa._stacked([*clients, _clients(1, 5)[0]]) is None
    local = (4, 0.3, 3)  # 4 steps of 3 rows: the last batch wraps to a short one
    a = fa._clipped_sum(model, clients, stacked, [0, 2, 5], 0.05, local)
    b = fa._clipped_sum(model, clients, None, [0, 2, 5], 0.05, local)
    assert torch.allclose(a, b, atol=1e-6) and float(a.norm()) > 0


def test_server_momentum_is_checked_and_changes_only_the_server_step() -> None:
    with pytest.raises(ValueError, match="server_momentum must lie in"):
        fedavg(torch.nn.Linear(3, 2), _clients(), rounds=1, client_rate=1.0,
               max_update_norm=1.0, noise_multiplier=1.0, server_momentum=1.0)
    runs = []
    for beta in (0.0, 0.9):
        model = torch.nn.Linear(3, 2)
        torch.nn.init.zeros_(model.weight)
        torch.nn.init.zeros_(model.bias)
        r = fedavg(model, _clients(), rounds=3, client_rate=1.0, max_update_norm=1.0,
                   noise_multiplier=1.0, server_momentum=beta, source=noise.seeded(0))
        runs.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
        assert r.event == events.SelfComposed(events.PoissonSampled(1.0, events.Gaussian(1.0)), 3)
    assert not torch.allclose(runs[0], runs[1])  # same event, a different (free) server step


def test_averaging_returns_the_mean_of_the_last_global_models() -> None:
    with pytest.raises(ValueError, match="averaging must lie in"):
        fedavg(torch.nn.Linear(3, 2), _clients(), rounds=1, client_rate=1.0,
               max_update_norm=1.0, noise_multiplier=1.0, averaging=1.5)
    ends = {}
    for rounds, avg in ((1, 0.0), (2, 0.0), (2, 1.0)):
        model = torch.nn.Linear(3, 2)
        torch.nn.init.zeros_(model.weight)
        torch.nn.init.zeros_(model.bias)
        fedavg(model, _clients(), rounds=rounds, client_rate=1.0, max_update_norm=1.0,
               noise_multiplier=1.0, averaging=avg, source=noise.seeded(0))
        ends[rounds, avg] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    # same seed: the 2-round run passes through the 1-round model, so the mean of the two
    # global models is (w1 + w2) / 2
    assert torch.allclose(ends[2, 1.0], (ends[1, 0.0] + ends[2, 0.0]) / 2, atol=1e-6)


def test_a_module_vmap_cannot_batch_trains_one_client_at_a_time() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5),
                                torch.nn.Linear(4, 2))
    before = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    fedavg(model, _clients(n=4), rounds=1, client_rate=1.0, max_update_norm=1.0,
           noise_multiplier=1e-9, source=noise.seeded(0))
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert 0 < float((after - before).norm()) <= 1.0 + 1e-6


def test_batch_norm_statistics_never_leave_the_clients() -> None:
    # a forward pass updates a batch-norm's running mean in place: only the noisy sum of
    # clipped updates may move the global model, so its buffers stay as they were
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Linear(4, 2))
    fedavg(model, _clients(n=4), rounds=2, client_rate=1.0, max_update_norm=1.0,
           noise_multiplier=1.0, source=noise.seeded(0))
    bn = model[1]
    assert torch.equal(bn.running_mean, torch.zeros(4)) and torch.equal(bn.running_var,
                                                                         torch.ones(4))
