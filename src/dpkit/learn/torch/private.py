"""``make_private``: DP-SGD on the user's own module, optimizer and data, with dpkit's accountant.

Guarantee: after ``T`` steps, the trained parameters (and every intermediate model) are
(ε, δ)-DP for add/remove-one-example neighbours, with ε = ``training.epsilon(δ)``: the PLD
upper bound of ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` (``q`` the sampling rate,
``σ`` the noise multiplier; see :mod:`dpkit.learn.torch.optimizer` for why one step is that
event). The user's training loop runs unchanged: iterate ``training.data_loader``, call
``loss.backward()`` and ``training.optimizer.step()``.

User level (``units=``, one privacy-unit id per example): the same ε for add/remove-one-**unit**
neighbours (all of a unit's examples at once). The loader samples units with rate ``q`` (each
unit's examples all in or all out) and the optimizer clips the sum of a unit's per-example
gradients to ``C``, so one unit moves a step's clipped sum by at most ``C``, as one example did:
the event is the same ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)``
(:mod:`dpkit.learn.torch.units`).
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpkit import accounting, events, noise

from .layers import LayerTap, UnsupportedLayer, rule_for
from .loader import PoissonLoader, check_finite
from .optimizer import DPOptimizer
from .units import UnitPlan, unit_codes

__all__ = ["PrivateTraining", "TrainingSummary", "make_private"]


@dataclass(frozen=True)
class TrainingSummary:
    """What a finished training may show of itself: its public parameters and privacy, no row.

    :meth:`PrivateTraining.summary` makes it; ``MLPClassifier`` keeps it as ``training_`` after
    a fit through the curator, whose model goes to the analyst: the training object itself
    holds the loader (every row read, the unit codes) and the exact row and unit counts
    (FINDINGS.md G1). Every field here is fixed before the read (the plan) or is noise.
    """

    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int
    neighbours: str
    insecure: bool
    expected_batch_size: float | None  # the divisor: public (fixed) or q N̂ (noisy)

    def event(self, steps: int | None = None) -> events.Event:
        """The privacy event of ``steps`` steps (default: the steps taken)."""
        return _event(self.sample_rate, self.noise_multiplier,
                      self.steps if steps is None else steps)

    def epsilon(self, delta: float) -> float:
        """Upper bound on ε at ``delta`` for the steps taken (dpkit's PLD accountant)."""
        return _epsilon(self.event(), self.steps, delta)


def _event(sample_rate: float, noise_multiplier: float, steps: int) -> events.Event:
    one = events.PoissonSampled(sample_rate, events.Gaussian(noise_multiplier))
    return events.SelfComposed(one, max(steps, 1)) if steps else events.PureDP(0.0)


def _epsilon(event: events.Event, steps: int, delta: float) -> float:
    return 0.0 if steps == 0 else accounting.epsilon(event, delta=delta, method="pld")


@dataclass
class PrivateTraining:
    """What :func:`make_private` returns: the objects to train with and their privacy."""

    module: nn.Module
    optimizer: DPOptimizer
    data_loader: PoissonLoader
    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    taps: list[LayerTap]
    units: UnitPlan | None = None  # user level: the units sampled (None: each example its own)

    @property
    def steps(self) -> int:
        return self.optimizer.steps

    @property
    def insecure(self) -> bool:
        """True when the noise came from a seeded (reproducible, insecure) source."""
        src = self.optimizer.source
        return bool(src is not None and src.insecure)

    @property
    def neighbours(self) -> str:
        """The neighbouring relation the guarantee is for."""
        return "add/remove one example" if self.units is None else "add/remove one unit"

    def event(self, steps: int | None = None) -> events.Event:
        """The privacy event of ``steps`` steps (default: the steps taken so far); the same at
        example and user level (module docstring), for the neighbours :attr:`neighbours`."""
        return _event(self.sample_rate, self.noise_multiplier,
                      self.steps if steps is None else steps)

    def epsilon(self, delta: float) -> float:
        """Upper bound on ε at ``delta`` for the steps taken so far (dpkit's PLD accountant)."""
        return _epsilon(self.event(), self.steps, delta)

    def summary(self) -> TrainingSummary:
        """The public part of this training (no data, no count): see :class:`TrainingSummary`."""
        return TrainingSummary(self.noise_multiplier, self.max_grad_norm, self.sample_rate,
                               self.steps, self.neighbours, self.insecure,
                               self.optimizer.expected_batch_size)

    def detach(self) -> None:
        """Give the module its own forward back, remove dpkit's hooks, stop the noise thread."""
        self.optimizer.close()
        for t in self.taps:
            for h in t.handles:
                h.remove()
            t.module.__dict__.pop("forward", None)
            t.reset()

    def __repr__(self) -> str:
        note = ", INSECURE noise source (tests only)" if self.insecure else ""
        if self.units is not None:
            note = f", user level: {self.units.n_units} units{note}"
        return (f"PrivateTraining(noise_multiplier={self.noise_multiplier:.4g}, max_grad_norm="
                f"{self.max_grad_norm:g}, sample_rate={self.sample_rate:.4g}, steps={self.steps}"
                f"{note})")


def _hook_forward(tap: LayerTap, module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
    # a module returning a tuple (an RNN's (output, h_n)) is tapped on its first output; a
    # gradient reaching another output would be missed, so it is flagged and refused at step()
    rest: list[Any] = []
    if isinstance(out, tuple | list) and out:
        out, rest = out[0], list(out[1:])
    if tap.paused or not isinstance(out, torch.Tensor) or not out.requires_grad:
        return
    x = args[0].detach() if isinstance(args[0], torch.Tensor) else args[0]

    def keep(g: torch.Tensor) -> None:
        tap.records.append((x, g.detach()))

    def flag(g: torch.Tensor) -> None:
        tap.cache["other_output_used"] = True

    out.register_hook(keep)
    for r in rest:
        if isinstance(r, torch.Tensor) and r.requires_grad:
            r.register_hook(flag)


def attach(module: nn.Module, fallback: bool) -> list[LayerTap]:
    """Tap or hook every module that owns trainable parameters; refuse what cannot be covered."""
    taps: list[LayerTap] = []
    for name, m in module.named_modules():
        own = [p for p in m.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        label = name or type(module).__name__
        if any(True for _ in m.children()):
            raise UnsupportedLayer(f"{label}: a module with both its own trainable parameters "
                                   "and submodules; move the parameters into a leaf module")
        taps.append(LayerTap(label, m, rule_for(m, label, fallback)))
    if not taps:
        raise ValueError("the module has no trainable parameters")
    for t in taps:
        if t.rule.tapped:
            t.module.forward = functools.partial(t.rule.forward, t.module, t)  # type: ignore[attr-defined,method-assign]
        else:
            t.handles.append(t.module.register_forward_hook(functools.partial(_hook_forward, t)))
    return taps


def _check_numbers(max_grad_norm: float, noise_multiplier: float | None,
                   target_epsilon: float | None, target_delta: float | None,
                   epochs: int | None, n: int, budget: Any, what: str = "examples") -> None:
    if not (math.isfinite(max_grad_norm) and max_grad_norm > 0):
        raise ValueError(f"max_grad_norm must be a finite number > 0 (got {max_grad_norm!r})")
    if (noise_multiplier is None) == (target_epsilon is None):
        raise ValueError("give exactly one of noise_multiplier= and target_epsilon=")
    if noise_multiplier is not None and not (math.isfinite(noise_multiplier)
                                             and noise_multiplier > 0):
        raise ValueError(f"noise_multiplier must be > 0 (got {noise_multiplier!r})")
    if target_epsilon is not None and not (math.isfinite(target_epsilon) and target_epsilon > 0):
        raise ValueError(f"target_epsilon must be a finite number > 0 (got {target_epsilon!r})")
    if (target_epsilon is not None or budget is not None) and (
            target_delta is None or epochs is None):
        raise ValueError("target_epsilon= and budget= need target_delta= and epochs=")
    if target_delta is not None and not 0.0 < target_delta < 1.0 / n:
        raise ValueError(f"target_delta must lie in (0, 1/n) = (0, {1.0 / n:.3g}) for n={n} "
                         f"{what} (got {target_delta!r}); a larger δ allows releasing one of "
                         f"the {what} outright")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)
                               or epochs < 1):
        raise ValueError(f"epochs must be an int >= 1 (got {epochs!r})")


def _loader_of(data_loader: Any) -> tuple[Any, int, Any]:
    if isinstance(data_loader, PoissonLoader):  # its units, if any, are read by make_private
        return data_loader.dataset, data_loader.steps, data_loader.collate_fn
    if not isinstance(data_loader, DataLoader):
        raise TypeError(f"data_loader must be a torch DataLoader (got {type(data_loader)!r})")
    if isinstance(data_loader.dataset, torch.utils.data.IterableDataset):
        raise ValueError("an IterableDataset cannot be Poisson-sampled: DP-SGD's accounting "
                         "needs random access to the examples")
    return data_loader.dataset, len(data_loader), data_loader.collate_fn


def make_private(module: nn.Module, optimizer: torch.optim.Optimizer, data_loader: Any, *,
                 max_grad_norm: float, noise_multiplier: float | None = None,
                 target_epsilon: float | None = None, target_delta: float | None = None,
                 epochs: int | None = None, budget: accounting.Budget | None = None,
                 loss_reduction: str = "mean", fallback: str | None = "vmap",
                 noise_kind: str = "float", source: noise.Source | None = None,
                 units: Any = None, max_examples_per_unit: int | None = None,
                 allow_empty: bool = False,
                 expected_batch_size: float | None = None) -> PrivateTraining:
    """Make ``module``'s training with ``optimizer`` on ``data_loader`` DP-SGD.

    (ε, δ)-DP for add/remove-one-example neighbours, or add/remove-one-unit neighbours with
    ``units`` (module docstring). The batch size of ``data_loader`` sets the sampling rate
    ``q = 1 / len(data_loader)``, one epoch being ``len(data_loader)`` Poisson batches (with
    ``units``, ``q`` is the rate at which *units* are sampled, so a batch still holds about
    ``batch_size`` examples on average). ``target_epsilon`` (with ``target_delta``, ``epochs``)
    picks the smallest noise multiplier whose PLD ε after ``epochs`` epochs is at most the
    target. ``budget`` is charged for all ``epochs`` up front; training further is refused.
    ``loss_reduction``: "mean" or "sum", how the loss combines the batch's examples.
    ``fallback="vmap"`` computes per-example gradients with ``torch.func`` for modules without a
    ghost-norm rule; ``None`` refuses them. ``noise_kind``: "float" (precise, fast, the
    default) or "exact" (discrete Gaussian on the grid); ``source``: a :mod:`dpkit.noise`
    source (the OS CSPRNG by default; ``noise.seeded(s)`` is reproducible and insecure).

    ``units``: user level. One privacy-unit id per example of the dataset (ints >= 0 or
    strings; ``None`` / NaN / negative ids such as -1 are refused: a missing id cannot be
    protected); each unit's summed gradient is clipped to ``max_grad_norm`` and units are
    Poisson-sampled whole. ``max_examples_per_unit`` (public): a unit keeps at most this many
    examples, the others dropped before training by priorities drawn from ``source`` (as the
    curator bounds rows per unit), which bounds a unit's share of a batch; None keeps them all
    (the guarantee does not need the cap: the unit's sum is clipped whatever its size).
    ``target_delta`` must then be below 1/(number of units). ``allow_empty``: accept a dataset
    of zero examples (every step then releases noise alone), for data whose size is itself
    private, so that its emptiness must not decide a refusal. ``expected_batch_size``: the
    divisor of the noisy sum (default ``q n``, which treats ``n`` as public, as every DP-SGD
    library does); pass a public number when ``n`` is private.

    >>> import torch, dpkit.noise
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> from dpkit.learn.torch import make_private
    >>> data = TensorDataset(torch.zeros(100, 3), torch.zeros(100, dtype=torch.long))
    >>> net = torch.nn.Linear(3, 2)
    >>> tr = make_private(net, torch.optim.SGD(net.parameters(), lr=0.1),
    ...                   DataLoader(data, batch_size=10), max_grad_norm=1.0,
    ...                   noise_multiplier=1.0, source=dpkit.noise.seeded(0))
    >>> for x, y in tr.data_loader:
    ...     torch.nn.functional.cross_entropy(tr.module(x), y).backward()
    ...     tr.optimizer.step(); tr.optimizer.zero_grad()
    >>> round(tr.epsilon(1e-5), 2) > 0
    True

    User level, 25 users of 4 examples each (the same event, for add/remove-one-user):

    >>> net = torch.nn.Linear(3, 2)
    >>> tr = make_private(net, torch.optim.SGD(net.parameters(), lr=0.1),
    ...                   DataLoader(data, batch_size=10), max_grad_norm=1.0,
    ...                   noise_multiplier=1.0, units=torch.arange(100) // 4,
    ...                   max_examples_per_unit=4, source=dpkit.noise.seeded(0))
    >>> tr.neighbours, tr.units.n_units
    ('add/remove one unit', 25)
    """
    dataset, steps_per_epoch, collate = _loader_of(data_loader)
    n = len(dataset)
    if (n < 1 and not allow_empty) or steps_per_epoch < 1:
        raise ValueError("the data loader is empty")
    codes, plan = _units_of(data_loader, units, max_examples_per_unit, n)
    n_units = plan.n_units if plan is not None else None if codes is None else \
        int(codes.max(initial=-1)) + 1
    _check_numbers(max_grad_norm, noise_multiplier, target_epsilon, target_delta, epochs,
                   max(n if n_units is None else n_units, 1), budget,
                   "examples" if n_units is None else "units")
    _check_choices(loss_reduction, noise_kind, fallback)
    if expected_batch_size is not None and not (math.isfinite(expected_batch_size)
                                                and expected_batch_size > 0):
        raise ValueError(f"expected_batch_size must be a finite number > 0 (got "
                         f"{expected_batch_size!r})")
    if isinstance(dataset, TensorDataset):
        check_finite(list(dataset.tensors), "the dataset")
    q = 1.0 / steps_per_epoch
    total = None if epochs is None else epochs * steps_per_epoch
    if target_epsilon is not None:
        assert total is not None and target_delta is not None
        noise_multiplier = accounting.calibrate.dpsgd_noise_multiplier(
            sampling_probability=q, steps=total, target_epsilon=target_epsilon,
            delta=target_delta, method="pld")
    assert noise_multiplier is not None
    _check_optimizer(module, optimizer)
    if codes is not None:  # after every check: a refused call draws nothing
        plan = UnitPlan.build(codes, n, max_examples_per_unit, source)
    if budget is not None:  # charged before any step: a refusal spends nothing, trains nothing
        assert total is not None
        budget.charge(events.SelfComposed(
            events.PoissonSampled(q, events.Gaussian(noise_multiplier)), total),
            # only the 'approx' accountant books a δ share per charge; the others use the budget's
            delta=target_delta if budget.accountant == "approx" else None)
    taps = attach(module, fallback == "vmap")
    loader = PoissonLoader(dataset, sample_rate=q, steps=steps_per_epoch, collate_fn=collate,
                           source=source, units=plan)
    opt = DPOptimizer(optimizer, taps=taps, loader=loader, noise_multiplier=noise_multiplier,
                      max_grad_norm=max_grad_norm, loss_reduction=loss_reduction,
                      exact_noise=noise_kind == "exact", source=source,
                      max_steps=total if budget is not None else None,
                      expected_batch_size=expected_batch_size)
    return PrivateTraining(module, opt, loader, float(noise_multiplier), float(max_grad_norm),
                           q, taps, plan)


def _check_choices(loss_reduction: str, noise_kind: str, fallback: str | None) -> None:
    if loss_reduction not in ("mean", "sum"):
        raise ValueError(f"loss_reduction must be 'mean' or 'sum' (got {loss_reduction!r})")
    if noise_kind not in ("float", "exact"):
        raise ValueError(f"noise_kind must be 'float' or 'exact' (got {noise_kind!r})")
    if fallback not in ("vmap", None):
        raise ValueError(f"fallback must be 'vmap' or None (got {fallback!r})")


def _units_of(data_loader: Any, units: Any, max_examples_per_unit: int | None,
              n: int) -> tuple[np.ndarray | None, UnitPlan | None]:
    """The checked unit codes of ``units=``, or the plan of a user-level PoissonLoader."""
    own = data_loader.units if isinstance(data_loader, PoissonLoader) else None
    m = max_examples_per_unit
    if m is not None and (isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1):
        raise ValueError(f"max_examples_per_unit must be None or an int >= 1 (got {m!r})")
    if units is None:
        if m is not None and own is None:
            raise ValueError("max_examples_per_unit needs units= (one unit id per example)")
        return None, own
    if own is not None:
        raise ValueError("the PoissonLoader already samples units; do not pass units= too")
    return unit_codes(units, n), None


def _check_optimizer(module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer (got {type(optimizer)!r})")
    mine = {id(p) for p in module.parameters()}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in mine:
                raise ValueError("the optimizer updates a parameter that is not in the module; "
                                 "its gradient would not be private")
