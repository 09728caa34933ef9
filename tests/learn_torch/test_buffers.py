"""The private optimizer's buffers kept across steps: fresh noise every step, no aliasing."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from dpkit.learn.torch import make_private  # noqa: E402


def _noise_only_steps(steps: int) -> tuple[list[np.ndarray], object]:
    """Grads of ``steps`` steps whose data gradient is zero: each is the step's noise alone."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(20, 100), nn.Tanh(), nn.Linear(100, 10))
    data = TensorDataset(torch.randn(400, 20), torch.randint(0, 10, (400,)))
    tr = make_private(net, torch.optim.SGD(net.parameters(), lr=0.0),
                      DataLoader(data, batch_size=40), max_grad_norm=1.0, noise_multiplier=1.0)
    out = []
    it = iter(tr.data_loader)
    for _ in range(steps):
        x, _ = next(it)
        tr.optimizer.zero_grad()
        (tr.module(x).sum() * 0.0).backward()
        tr.optimizer.step()  # secure source: the next step's noise is drawn on a thread now
        if tr.optimizer._pending is not None:  # let the draw ahead finish: it must not alias
            tr.optimizer._pending.result()
        grads: list[Any] = [p.grad for p in net.parameters()]
        out.append(torch.cat([g.reshape(-1) for g in grads]).numpy().copy())
    tr.detach()
    return out, tr


def test_each_step_gets_fresh_noise_although_the_buffers_are_reused() -> None:
    grads, _ = _noise_only_steps(3)
    d = grads[0].size  # 3,110 coordinates
    for a, b in ((0, 1), (1, 2), (0, 2)):
        # independent N(0, s²) vectors: correlation ~ N(0, 1/d); 6/sqrt(d) is a 6-sigma bound
        # (false-failure probability ~2e-9 each). Reused noise would give correlation 1.
        r = float(np.corrcoef(grads[a], grads[b])[0, 1])
        assert abs(r) < 6 / math.sqrt(d), (a, b, r)
    for g in grads:  # and each is the stated noise: sd σC/(q n) = 1/40 per coordinate
        assert abs(g.std() * 40 - 1.0) < 6 / math.sqrt(2 * d)


def test_grads_survive_the_draw_ahead_and_share_one_buffer() -> None:
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(8, 30), nn.ReLU(), nn.Linear(30, 3))
    data = TensorDataset(torch.randn(300, 8), torch.randint(0, 3, (300,)))
    tr = make_private(net, torch.optim.SGD(net.parameters(), lr=0.0),
                      DataLoader(data, batch_size=30), max_grad_norm=1.0, noise_multiplier=1.0)
    ptrs = set()
    opt: Any = tr.optimizer
    for i, (x, y) in enumerate(tr.data_loader):
        tr.optimizer.zero_grad()
        nn.functional.cross_entropy(tr.module(x), y).backward()
        tr.optimizer.step()
        grads: list[Any] = [p.grad for p in net.parameters()]
        before = [g.clone() for g in grads]
        if tr.optimizer._pending is not None:
            tr.optimizer._pending.result()  # the next draw wrote its buffer meanwhile
        assert all(torch.equal(b, p.grad) for b, p in zip(before, net.parameters(), strict=True))
        ptrs.add(opt._flat.data_ptr())
        ptrs.add(opt._noise.ctypes.data)
        if i == 3:
            break
    assert len(ptrs) == 2  # one clipped-sum/gradient buffer and one noise buffer, every step
    tr.detach()


def test_a_constant_work_source_draws_ahead_within_the_release_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a constant-work project the next step's noise is drawn ahead on the thread too, with
    a share of the release's failure bound reserved when it is handed out
    (``noise.reserve_share``): every request, on either thread, gets its own part and all of
    them stay within the release's ``2^-bits``; the shares follow the charging thread's order,
    so the plans do not depend on how the two threads interleave."""
    import threading

    from dpkit import noise
    from dpkit.noise import constant

    seen: list[tuple[str, int]] = []
    real = constant.request_bits

    def spy(src: noise.ConstantWork) -> int:
        bits = real(src)
        seen.append((threading.current_thread().name, bits))
        return bits

    monkeypatch.setattr(constant, "request_bits", spy)
    torch.manual_seed(2)
    net = nn.Linear(4, 2)
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    tr = make_private(net, torch.optim.SGD(net.parameters(), lr=0.1),
                      DataLoader(data, batch_size=10), max_grad_norm=1.0, noise_multiplier=1.0,
                      source=noise.ConstantWork(noise.secure(), bits=40), noise_kind="exact")
    opt: Any = tr.optimizer
    with noise.charge_scope():
        for i, (x, y) in enumerate(tr.data_loader):
            tr.optimizer.zero_grad()
            nn.functional.cross_entropy(tr.module(x), y).backward()
            tr.optimizer.step()
            if i == 2:
                break
        opt._pending.result()  # the draw for a fourth step, handed out inside the scope
    assert opt._executor is not None  # drawn ahead on the thread
    ahead = [b for name, b in seen if name.startswith("dpkit-noise")]
    assert len(ahead) == 4  # one exact request per step (10 coordinates: one chunk)
    assert sum(2.0 ** -(b - 40) for _, b in seen) <= 1.0, seen
    tr.detach()
