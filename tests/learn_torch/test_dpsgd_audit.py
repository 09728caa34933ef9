"""An empirical audit of one DP-SGD step (``make_private``), record and user level.

A linear module with loss ``Σ_i w·x_i`` has per-example gradient ``x_i``: background examples
give 0, a canary unit of k copies of ``10·e_1`` the largest gradient there is. With q = 1, SGD
at lr 1 and a public divisor of 1, the step moves ``w[0]`` by minus (clipped sum + N(0, σ²C²)):
the auditor sees the mechanism's output directly (white-box, one step, the strongest
observation). On D (background only) and D' (background + the canary unit) the certified lower
bound of :func:`dpkit.attacks.audit.empirical_epsilon` (confidence 0.95, so a false failure has
probability at most 0.05 for a correct implementation, fixed by the seeds) must stay below the
claimed ε of one step at user level, where the unit's summed gradient is clipped to C. The same
audit of record-level clipping on the same unit (k copies clipped one by one: a shift of k·C)
must exceed that claim: the audit can fail, and per-unit clipping is what keeps it from failing.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from dpkit import accounting, noise  # noqa: E402
from dpkit.attacks.audit import empirical_epsilon  # noqa: E402
from dpkit.learn.torch import make_private  # noqa: E402

SIGMA, C, K, STEPS, DELTA = 2.0, 1.0, 16, 1500, 1e-5


def _steps(canary: bool, units: bool, seed: int) -> tuple[np.ndarray, float]:
    """The released moves of ``w[0]`` (negated) over ``STEPS`` independent steps, and the ε
    the training object claims for one step at ``DELTA``."""
    background = torch.zeros(4, 3)
    x = torch.cat([background, 10.0 * torch.eye(3)[:1].repeat(K, 1)]) if canary else background
    ids = np.r_[np.arange(4), np.full(K, 99)] if canary else np.arange(4)
    net = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        net.weight.zero_()
    tr = make_private(net, torch.optim.SGD(net.parameters(), lr=1.0),
                      DataLoader(TensorDataset(x), batch_size=len(x)), max_grad_norm=C,
                      noise_multiplier=SIGMA, loss_reduction="sum", expected_batch_size=1.0,
                      source=noise.seeded(seed), units=ids if units else None)
    out = np.empty(STEPS)
    for t in range(STEPS):
        before = float(net.weight.detach()[0, 0])
        for (xb,) in tr.data_loader:  # q = 1: one batch holding every example
            tr.optimizer.zero_grad()
            tr.module(xb).sum().backward()
            tr.optimizer.step()
        out[t] = before - float(net.weight.detach()[0, 0])
    return out, accounting.epsilon(tr.event(1), delta=DELTA, method="pld")


def test_one_step_stays_under_its_claim_at_user_level_and_record_level_clipping_does_not() -> None:
    on_d, claimed = _steps(canary=False, units=True, seed=1)
    on_user, claimed_user = _steps(canary=True, units=True, seed=2)
    on_record, _ = _steps(canary=True, units=False, seed=3)
    assert claimed == claimed_user  # the event is public: the same on D and D'
    user = empirical_epsilon(on_d, on_user, delta=DELTA)
    record = empirical_epsilon(on_d, on_record, delta=DELTA)
    assert user.epsilon_lower < claimed, (user, claimed)
    assert record.epsilon_lower > claimed, (record, claimed)  # k·C: the group of k leaks
