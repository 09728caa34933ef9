"""DP federated averaging (McMahan et al. 2018, DP-FedAvg), user-level, as a simulation.

Each round samples every client independently with probability ``q`` (Poisson, exact
Bernoulli from :mod:`dpkit.noise`); a sampled client runs ``local_steps`` of SGD on its own data
from the current global model and reports its update ``Δ_u = w_u - w``, clipped to L2 norm
``C'``; the server releases ``round_k(Σ_u clip(Δ_u)) + round_k(N(0, σ²C²))`` on the grid 2^-k
(as in :mod:`dpkit.learn.torch.optimizer`: ``C' = C - √d 2^-k``), divides by the expected
number of clients ``q N`` and moves the model by ``server_lr`` times that.

Guarantee: the sequence of global models is (ε, δ)-DP for add/remove-one-**client**
neighbours (all of a client's examples at once: user-level), ε the PLD upper bound of
``SelfComposed(PoissonSampled(q, Gaussian(σ)), rounds)``. What a client does locally is
arbitrary: only its clipped update reaches the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import accounting, events, noise

__all__ = ["FedAvgResult", "fedavg", "split_clients"]


@dataclass
class FedAvgResult:
    """The trained model (a torch module), the noise multiplier and the privacy event."""

    model: Any
    noise_multiplier: float
    event: events.Event
    insecure: bool

    def epsilon(self, delta: float) -> float:
        """PLD upper bound on ε at ``delta`` (user-level)."""
        return accounting.epsilon(self.event, delta=delta, method="pld")


def split_clients(y: np.ndarray, n_clients: int, *, iid: bool = True,
                  shards_per_client: int = 2,
                  source: noise.Source | None = None) -> list[np.ndarray]:
    """Indices per client: IID (a random equal split) or non-IID (label-sorted shards, McMahan
    et al. 2017: each client gets ``shards_per_client`` shards of one or two labels)."""
    n = len(y)
    if iid:
        perm = noise.permutation(n, source=source)
        return [np.sort(p) for p in np.array_split(perm, n_clients)]
    order = np.argsort(y, kind="stable")
    shards = np.array_split(order, n_clients * shards_per_client)
    pick = noise.permutation(len(shards), source=source)
    return [np.sort(np.concatenate([shards[j] for j in pick[i::n_clients]]))
            for i in range(n_clients)]


def _local_update(model: Any, x: Any, y: Any, steps: int, lr: float, batch: int) -> Any:
    import torch
    from torch.func import functional_call

    local = [p.detach().clone().requires_grad_(True) for p in model.parameters()]

    names = [n for n, _ in model.named_parameters()]
    for s in range(steps):
        lo = (s * batch) % max(len(x), 1)
        xb, yb = x[lo : lo + batch], y[lo : lo + batch]
        out = functional_call(model, dict(zip(names, local, strict=True)), (xb,))
        loss = torch.nn.functional.cross_entropy(out, yb)
        grads = torch.autograd.grad(loss, local)
        with torch.no_grad():
            for p, g in zip(local, grads, strict=True):
                p -= lr * g
    return torch.cat([(p.detach() - q.detach()).reshape(-1)
                      for p, q in zip(local, model.parameters(), strict=True)])


def fedavg(model: Any, clients: list[tuple[Any, Any]], *, rounds: int, client_rate: float,
           max_update_norm: float, noise_multiplier: float | None = None,
           target_epsilon: float | None = None, target_delta: float | None = None,
           local_steps: int = 5, local_lr: float = 0.1, local_batch: int = 20,
           server_lr: float = 1.0, source: noise.Source | None = None) -> FedAvgResult:
    """Train ``model`` (a torch module, updated in place) by DP-FedAvg; see the module docstring.

    ``clients``: one ``(X, y)`` pair of tensors per client. Give ``noise_multiplier`` or
    ``target_epsilon`` with ``target_delta`` (``0 < δ < 1/len(clients)``).
    """
    import torch

    n = len(clients)
    if n < 1 or not 0 < client_rate <= 1 or rounds < 1:
        raise ValueError("need at least one client, 0 < client_rate <= 1 and rounds >= 1")
    if not (math.isfinite(max_update_norm) and max_update_norm > 0):
        raise ValueError(f"max_update_norm must be > 0 (got {max_update_norm!r})")
    if target_epsilon is not None:
        if not (math.isfinite(target_epsilon) and target_epsilon > 0):
            raise ValueError(f"target_epsilon must be > 0 (got {target_epsilon!r})")
        if target_delta is None or not 0 < target_delta < 1 / n:
            raise ValueError(f"target_delta must lie in (0, 1/{n}) for {n} clients "
                             f"(got {target_delta!r})")
        noise_multiplier = accounting.calibrate.dpsgd_noise_multiplier(
            sampling_probability=client_rate, steps=rounds, target_epsilon=target_epsilon,
            delta=target_delta, method="pld", rtol=1e-3)
    if noise_multiplier is None or not noise_multiplier > 0:
        raise ValueError("give noise_multiplier > 0 or target_epsilon with target_delta")
    for i, (x, _) in enumerate(clients):
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            raise ValueError(f"client {i}: NaN or infinite features; clean them first")
    d = sum(p.numel() for p in model.parameters())
    k = max(0, math.ceil(math.log2(math.sqrt(d) / (1e-6 * max_update_norm))))
    clip = max_update_norm - math.sqrt(d) * 2.0**-k
    for _ in range(rounds):
        chosen = np.flatnonzero(noise.bernoulli(client_rate, n, source=source))
        total = torch.zeros(d, dtype=torch.float64)
        for u in chosen.tolist():
            x, y = clients[u]
            delta = _local_update(model, x, y, local_steps, local_lr, local_batch)
            total += (delta * min(1.0, clip / (float(delta.norm()) + 1e-12))).double()
        noisy = noise.gaussian_on_grid(total.numpy(), noise_multiplier * max_update_norm, k,
                                       source=source)
        step = torch.from_numpy(noisy / (client_rate * n)).float()
        with torch.no_grad():
            lo = 0
            for p in model.parameters():
                p += server_lr * step[lo : lo + p.numel()].view_as(p)
                lo += p.numel()
    event = events.SelfComposed(
        events.PoissonSampled(client_rate, events.Gaussian(noise_multiplier)), rounds)
    return FedAvgResult(model, float(noise_multiplier), event,
                        bool(source is not None and source.insecure))
