"""DP federated averaging (McMahan et al. 2018, DP-FedAvg), user-level, as a simulation.

Each round samples every client independently with probability ``q`` (Poisson, exact
Bernoulli from :mod:`dpkit.noise`); a sampled client runs ``local_steps`` of SGD on its own data
from the current global model and reports its update ``Δ_u = w_u - w``, clipped to L2 norm
``C'``; the server releases ``round_k(Σ_u clip(Δ_u)) + round_k(N(0, σ²C²))`` on the grid 2^-k
(as in :mod:`dpkit.learn.torch.optimizer`: ``C' = C - √d 2^-k``), divides by the expected
number of clients ``q N`` and moves the model by ``server_lr`` times that (or, with
``server_momentum`` β, by ``server_lr`` times ``v ← β v +`` that: FedAvgM, Hsu et al. 2019);
``averaging`` returns the mean of the last global models instead of the last one. Both only
read released values: post-processing, free in privacy.
Clients with equally many examples are trained together by ``torch.func.vmap`` (the same steps
and batches as one client at a time, several times faster for the small models simulated here).

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
    # copies of the buffers: a batch-norm's running statistics, updated in place by a forward
    # pass, must not carry a client's data into the global model outside the noisy sum
    bufs = {n: b.detach().clone() for n, b in model.named_buffers()}
    for s in range(steps):
        lo = (s * batch) % max(len(x), 1)
        xb, yb = x[lo : lo + batch], y[lo : lo + batch]
        out = functional_call(model, {**dict(zip(names, local, strict=True)), **bufs}, (xb,))
        loss = torch.nn.functional.cross_entropy(out, yb)
        grads = torch.autograd.grad(loss, local)
        with torch.no_grad():
            for p, g in zip(local, grads, strict=True):
                p -= lr * g
    return torch.cat([(p.detach() - q.detach()).reshape(-1)
                      for p, q in zip(local, model.parameters(), strict=True)])


def _local_updates_vmapped(model: Any, X: Any, Y: Any, steps: int, lr: float,
                           batch: int) -> Any:
    """The updates of ``m`` clients with the same number of examples, ``X`` of shape
    ``(m, n_u, ...)``: the same SGD steps and batches as :func:`_local_update`, run for all
    clients at once by ``torch.func.vmap`` (one kernel per layer instead of one per client;
    the simulation is 10-50x faster for small models). Rows: the flattened updates."""
    import torch
    from torch.func import functional_call, grad, vmap

    names = [n for n, _ in model.named_parameters()]
    start = [p.detach() for p in model.parameters()]
    local = [p.unsqueeze(0).repeat(len(X), *([1] * p.dim())) for p in start]

    bufs = {n: b.detach().clone() for n, b in model.named_buffers()}  # see _local_update

    def loss(params: tuple[Any, ...], xb: Any, yb: Any) -> Any:
        out = functional_call(model, {**dict(zip(names, params, strict=True)), **bufs}, (xb,))
        return torch.nn.functional.cross_entropy(out, yb)

    step = vmap(grad(loss))
    n_u = X.shape[1]
    for s in range(steps):
        lo = (s * batch) % max(n_u, 1)
        grads = step(tuple(local), X[:, lo : lo + batch], Y[:, lo : lo + batch])
        local = [p - lr * g for p, g in zip(local, grads, strict=True)]
    return torch.cat([(p - q.unsqueeze(0)).reshape(len(X), -1)
                      for p, q in zip(local, start, strict=True)], 1)


def _stacked(clients: list[tuple[Any, Any]]) -> tuple[Any, Any] | None:
    """All clients' data as two stacked tensors when every client holds the same number of
    examples of the same shape (so one vmapped update serves them all); else None."""
    import torch

    shapes = {(tuple(x.shape), tuple(y.shape)) for x, y in clients}
    if len(shapes) != 1:
        return None
    return torch.stack([x for x, _ in clients]), torch.stack([y for _, y in clients])


def _clipped_sum(model: Any, clients: list[tuple[Any, Any]], stacked: tuple[Any, Any] | None,
                 chosen: list[int], clip: float, local: tuple[int, float, int]) -> Any:
    """``Σ_u clip(Δ_u)`` over the chosen clients, float64 (the only data-dependent value)."""
    import torch

    d = sum(p.numel() for p in model.parameters())
    total = torch.zeros(d, dtype=torch.float64)
    if not chosen:
        return total
    if stacked is not None:
        idx = torch.as_tensor(chosen)
        try:
            deltas = _local_updates_vmapped(model, stacked[0][idx], stacked[1][idx], *local)
        except RuntimeError:  # a module vmap cannot batch (dropout, batch-norm buffers)
            deltas = None
        if deltas is not None:
            scale = torch.clamp(clip / (deltas.norm(dim=1, keepdim=True) + 1e-12), max=1.0)
            return (deltas * scale).double().sum(0)
    for u in chosen:
        x, y = clients[u]
        delta = _local_update(model, x, y, *local)
        total += (delta * min(1.0, clip / (float(delta.norm()) + 1e-12))).double()
    return total


def _flat(model: Any) -> Any:
    import torch

    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _assign(model: Any, w: Any) -> None:
    """Write the flat vector ``w`` into ``model``'s parameters, in order."""
    import torch

    with torch.no_grad():
        lo = 0
        for p in model.parameters():
            p.copy_(w[lo : lo + p.numel()].view_as(p))
            lo += p.numel()


def _calibrated(n: int, rounds: int, client_rate: float, max_update_norm: float,
                noise_multiplier: float | None, target_epsilon: float | None,
                target_delta: float | None, server_momentum: float) -> float:
    """Check the parameters (before any round) and return σ, calibrated by the PLD when a
    target is given."""
    if n < 1 or not 0 < client_rate <= 1 or rounds < 1:
        raise ValueError("need at least one client, 0 < client_rate <= 1 and rounds >= 1")
    if not (math.isfinite(max_update_norm) and max_update_norm > 0):
        raise ValueError(f"max_update_norm must be > 0 (got {max_update_norm!r})")
    if not 0 <= server_momentum < 1:
        raise ValueError(f"server_momentum must lie in [0, 1) (got {server_momentum!r})")
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
    return float(noise_multiplier)


def fedavg(model: Any, clients: list[tuple[Any, Any]], *, rounds: int, client_rate: float,
           max_update_norm: float, noise_multiplier: float | None = None,
           target_epsilon: float | None = None, target_delta: float | None = None,
           local_steps: int = 5, local_lr: float = 0.1, local_batch: int = 20,
           server_lr: float = 1.0, server_momentum: float = 0.0, averaging: float = 0.0,
           source: noise.Source | None = None) -> FedAvgResult:
    """Train ``model`` (a torch module, updated in place) by DP-FedAvg; see the module docstring.

    ``clients``: one ``(X, y)`` pair of tensors per client. Give ``noise_multiplier`` or
    ``target_epsilon`` with ``target_delta`` (``0 < δ < 1/len(clients)``).
    ``server_momentum`` β (FedAvgM, Hsu et al. 2019): the server steps by
    ``v ← β v + noisy mean update``; a function of released values only, so free in privacy.
    ``averaging``: the returned model is the mean of the global models of this last fraction of
    the rounds (Polyak averaging, post-processing: it averages the server's noise out; 0 keeps
    the last one).
    Clients holding equally many examples are trained together by ``torch.func.vmap``.
    """
    import torch

    n = len(clients)
    sigma = _calibrated(n, rounds, client_rate, max_update_norm, noise_multiplier,
                        target_epsilon, target_delta, server_momentum)
    if not 0 <= averaging <= 1:
        raise ValueError(f"averaging must lie in [0, 1] (got {averaging!r})")
    for i, (x, _) in enumerate(clients):
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            raise ValueError(f"client {i}: NaN or infinite features; clean them first")
    d = sum(p.numel() for p in model.parameters())
    k = max(0, math.ceil(math.log2(math.sqrt(d) / (1e-6 * max_update_norm))))
    clip = max_update_norm - math.sqrt(d) * 2.0**-k
    stacked = _stacked(clients)
    velocity = torch.zeros(d)
    start = int(rounds * (1.0 - averaging))
    mean = torch.zeros(d)
    for t in range(1, rounds + 1):
        chosen = np.flatnonzero(noise.bernoulli(client_rate, n, source=source)).tolist()
        total = _clipped_sum(model, clients, stacked, chosen, clip,
                             (local_steps, local_lr, local_batch))
        noisy = noise.gaussian_on_grid(total.numpy(), sigma * max_update_norm, k,
                                       source=source)
        velocity = server_momentum * velocity + torch.from_numpy(noisy / (client_rate * n)).float()
        w = _flat(model) + server_lr * velocity
        _assign(model, w)
        if t > start:  # Polyak averaging of the released models: post-processing
            mean += (w - mean) / (t - start)
    if rounds > start:
        _assign(model, mean)
    event = events.SelfComposed(events.PoissonSampled(client_rate, events.Gaussian(sigma)), rounds)
    return FedAvgResult(model, sigma, event, bool(source is not None and source.insecure))
