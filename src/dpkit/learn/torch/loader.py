"""Poisson-sampled batches: the sampling that DP-SGD's accounting assumes.

Each step includes every example independently with probability ``q`` (so batch sizes vary and
may be 0); the accountant's ``PoissonSampled(q, ·)`` event is true only for batches drawn this
way, which is why :func:`dpkit.learn.torch.make_private` replaces the user's loader with this
one and the private optimizer refuses a step whose batch did not come from it.

With ``units`` (a :class:`~dpkit.learn.torch.units.UnitPlan`) the loader samples *units*: each
unit is in a batch independently with probability ``q`` and brings all its kept examples
(contiguous in the batch); ``last_units`` tells the optimizer which unit each example is from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset
from torch.utils.data.dataloader import default_collate

from dpkit import noise

from .units import UnitPlan

__all__ = ["PoissonLoader", "check_finite"]


def check_finite(batch: Any, where: str) -> None:
    """Raise ``ValueError`` if a float tensor in ``batch`` holds NaN or ±inf."""
    tensors = batch if isinstance(batch, list | tuple) else [batch]
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(
                torch.isfinite(t).all()):
            raise ValueError(f"{where}: tensor {i} of the data holds NaN or infinite values; "
                             "clean or impute them before training (a non-finite input makes "
                             "the per-example gradient, and its clipping, meaningless)")


class PoissonLoader:
    """``steps`` batches per epoch, each example in each batch independently with prob. ``q``.

    Iterate it like a ``DataLoader``; ``len()`` is the number of steps per epoch. Randomness
    comes from ``source`` (a :mod:`dpkit.noise` source; the OS CSPRNG by default). ``units``:
    sample whole units instead (module docstring); ``n`` is then the number of kept examples.
    """

    def __init__(self, dataset: Dataset[Any], *, sample_rate: float, steps: int,
                 collate_fn: Callable[[list[Any]], Any] | None = None,
                 source: noise.Source | None = None, units: UnitPlan | None = None) -> None:
        self.dataset = dataset
        self.units = units
        self.n = len(dataset) if units is None else units.n_examples  # type: ignore[arg-type]
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate must lie in (0, 1] (got {sample_rate!r})")
        self.sample_rate = float(sample_rate)
        self.steps = int(steps)
        self.collate_fn = collate_fn or default_collate
        self.source = source
        self.batches_out = 0  # batches handed out: the private optimizer checks it advances
        self.last_batch_size = 0
        self.last_units: torch.Tensor | None = None  # user level: each example's unit

    def __len__(self) -> int:
        return self.steps

    def _indices(self) -> torch.Tensor:
        if self.units is not None:
            mask = noise.bernoulli(self.sample_rate, self.units.n_units, source=self.source)
            idx, seg = self.units.batch(mask.nonzero()[0])
            self.last_units = torch.from_numpy(seg)
            return torch.from_numpy(idx)
        mask = noise.bernoulli(self.sample_rate, self.n, source=self.source)
        return torch.from_numpy(mask.nonzero()[0])

    def _batch(self, idx: torch.Tensor) -> Any:
        if isinstance(self.dataset, TensorDataset):
            return [t[idx] for t in self.dataset.tensors]
        if idx.numel() == 0:  # an empty batch keeps the shapes of a real one
            one = self.collate_fn([self.dataset[0]])
            return [t[:0] for t in one] if isinstance(one, list | tuple) else one[:0]
        return self.collate_fn([self.dataset[int(i)] for i in idx])

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.steps):
            idx = self._indices()
            batch = self._batch(idx)
            if not isinstance(self.dataset, TensorDataset):  # make_private checked those whole
                check_finite(batch, "a Poisson batch")
            self.last_batch_size = int(idx.numel())
            self.batches_out += 1
            yield batch
