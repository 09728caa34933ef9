"""User-level DP-SGD: privacy units, the cap on a unit's examples, and a batch's unit segments.

A *privacy unit* (a user, a patient, a writer) owns one or more examples, and the neighbouring
relation adds or removes all of them at once. DP-SGD then protects the unit if (1) the Poisson
sampling picks *units*, each unit's examples all in or all out of a batch, and (2) the optimizer
clips the *sum* of a unit's per-example gradients to ``C``: one unit then moves the clipped sum
by at most ``C`` in L2, exactly what one example moved it by at example level, so a step is the
same ``PoissonSampled(q, Gaussian(σ))`` event with ``q`` the units' sampling rate (McMahan et al.
2018, "Learning differentially private recurrent language models").

:class:`UnitPlan` is built once, before training, from public things and the unit ids: it
validates the ids (a missing id cannot be protected, so it is refused), caps each unit at
``max_examples_per_unit`` examples (extra ones dropped by a rule drawn from :mod:`dpkit.noise`
before training: a unit's kept examples depend on its own examples and that draw only) and groups
the kept examples by unit. :class:`BatchUnits` describes one batch: which unit each example
belongs to, and the padded per-unit views the layer rules use for per-unit norms.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpkit import noise

__all__ = ["BatchUnits", "UnitPlan", "unit_codes"]

_MISSING = ("a missing unit id cannot be protected (its examples would belong to no unit): "
            "drop those examples, or give each of them its own id")


def _refuse_missing(where: int, what: str) -> None:
    raise ValueError(f"units[{where}] is {what}: {_MISSING}")


def _object_codes(arr: np.ndarray) -> np.ndarray:
    """Codes of an object array of hashable ids (None / NaN / negative numbers refused)."""
    index: dict[Any, int] = {}
    out = np.empty(len(arr), dtype=np.int64)
    for i, v in enumerate(arr.tolist()):
        if v is None:
            _refuse_missing(i, "None")
        if isinstance(v, numbers.Real) and not isinstance(v, bool):
            if math.isnan(v):
                _refuse_missing(i, "NaN")
            if v < 0:
                _refuse_missing(i, f"negative ({v!r}; -1 often marks a missing id)")
        out[i] = index.setdefault(v, len(index))
    return out


def unit_codes(units: Any, n: int) -> np.ndarray:
    """Unit ids (one per example) as codes ``0..U-1`` (int64); a clear error for bad ids.

    Accepts integer ids ``>= 0``, finite floats ``>= 0``, strings, or an object array of
    hashable ids. Refused: a length other than ``n``, ``None`` / NaN ids, negative ids (``-1``
    is the usual "missing" marker), booleans.
    """
    if isinstance(units, Tensor):
        units = units.detach().cpu().numpy()
    arr = np.asarray(units)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"units must be 1-d with one unit id per example ({n} examples); got "
                         f"shape {arr.shape}")
    kind = arr.dtype.kind
    if kind == "b" or kind not in "iufUSO":
        raise TypeError(f"unit ids must be integers or strings (got dtype {arr.dtype})")
    if kind == "O":
        return _object_codes(arr)
    if kind == "f" and n and not np.all(np.isfinite(arr)):
        _refuse_missing(int(np.flatnonzero(~np.isfinite(arr))[0]), "NaN or infinite")
    if kind in "if" and n and np.any(arr < 0):
        i = int(np.flatnonzero(arr < 0)[0])
        _refuse_missing(i, f"negative ({arr[i]!r}; -1 often marks a missing id)")
    return np.unique(arr, return_inverse=True)[1].astype(np.int64).reshape(-1)


@dataclass(frozen=True)
class UnitPlan:
    """The units of a dataset, capped and grouped: what the Poisson loader samples.

    ``kept``: dataset indices of the kept examples, grouped by unit (unit ``u``'s examples are
    ``kept[starts[u]:starts[u + 1]]``); ``dropped``: examples removed by the cap.
    """

    kept: np.ndarray
    starts: np.ndarray
    dropped: int
    max_examples_per_unit: int | None

    @property
    def n_units(self) -> int:
        return len(self.starts) - 1

    @property
    def n_examples(self) -> int:
        return len(self.kept)

    @classmethod
    def build(cls, units: Any, n: int, max_examples_per_unit: int | None,
              source: noise.Source | None) -> UnitPlan:
        """Validate ``units`` (one id per example), cap each unit, group the kept examples.

        The cap keeps, in each unit with more than ``max_examples_per_unit`` examples, those of
        smallest priority, the priorities drawn uniformly by :mod:`dpkit.noise` for every example
        (a public rule: which examples a unit keeps depends on that unit and the draw only).
        """
        m = max_examples_per_unit
        if m is not None and (isinstance(m, bool) or not isinstance(m, numbers.Integral)
                              or m < 1):
            raise ValueError(f"max_examples_per_unit must be None or an int >= 1 (got {m!r})")
        codes = unit_codes(units, n)
        if m is None:
            order = np.argsort(codes, kind="stable")
        else:
            prio = noise.uniform_float01(n, source=source)
            order = np.lexsort((prio, codes))
        counts = np.bincount(codes) if n else np.zeros(0, dtype=np.int64)
        first = np.concatenate(([0], np.cumsum(counts)))
        if m is not None:  # rank of each example inside its unit, in priority order
            rank = np.arange(n) - first[codes[order]]
            order = order[rank < m]
            counts = np.minimum(counts, m)
        starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        return cls(order.astype(np.int64), starts, int(n - len(order)),
                   None if m is None else int(m))

    def batch(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Dataset indices of the ``selected`` units' examples, and each one's unit (0, 1, ...
        in the order of ``selected``): the units come whole and contiguous."""
        lo, hi = self.starts[selected], self.starts[selected + 1]
        lengths = hi - lo
        total = int(lengths.sum())
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(lengths) else lengths
        pos = np.repeat(lo - offsets, lengths) + np.arange(total)
        return self.kept[pos], np.repeat(np.arange(len(selected)), lengths)


class BatchUnits:
    """One batch's units: ``seg[i]`` is example ``i``'s unit in ``0..count-1``.

    Per-unit norms of a layer whose per-example gradient is ``Σ_t g_t a_tᵀ`` need each unit's
    rows side by side: :meth:`grouped` stacks them, padded with zero rows (which add nothing to
    either a Gram matrix or a product), in buckets of units of similar size (sizes in
    ``(s/2, s]``, padded to the bucket's largest), so one large unit does not pad every other.
    The loader's batches hold whole units in a row; when they are also all of one size (the
    usual case) a bucket is a free reshape of the batch, no copy. The index book-keeping runs
    in numpy: on a busy machine each small torch op costs a thread wake-up.
    """

    def __init__(self, ids: Any, batch: int) -> None:
        arr = ids.detach().cpu().numpy() if isinstance(ids, Tensor) else np.asarray(ids)
        if arr.ndim != 1 or arr.shape[0] != batch:
            raise ValueError(f"units must give one unit per example of the batch ({batch}); "
                             f"got shape {arr.shape}")
        seg = np.unique(arr, return_inverse=True)[1].reshape(-1).astype(np.int64)
        self.seg = torch.from_numpy(seg)
        self.count = int(seg.max()) + 1 if batch else 0
        counts = np.bincount(seg, minlength=self.count)
        in_a_row = bool(np.all(seg[1:] >= seg[:-1]))
        order = np.arange(batch) if in_a_row else np.argsort(seg, kind="stable")
        starts = np.cumsum(counts) - counts
        bucket = np.ceil(np.log2(np.maximum(counts, 1))).astype(np.int64)
        self.padded = False
        # (units of the bucket, gather index or None for a free reshape, padded size)
        self.buckets: list[tuple[Tensor, Tensor | None, int]] = []
        for b in np.unique(bucket).tolist():
            us = np.flatnonzero(bucket == b)
            size = int(counts[us].max())
            if in_a_row and len(us) == self.count and bool(np.all(counts == size)):
                self.buckets.append((torch.from_numpy(us), None, size))
                continue
            col = np.arange(size)
            pos = np.minimum(starts[us][:, None] + col[None, :], max(batch - 1, 0))
            # padding points one past the last example: a zero row appended by grouped()
            index = np.where(col[None, :] < counts[us][:, None], order[pos], batch)
            self.buckets.append((torch.from_numpy(us), torch.from_numpy(index), size))
            self.padded = True

    def grouped(self, x: Tensor) -> list[Tensor]:
        """``(N, T, d)`` -> per bucket ``(units, s T, d)``: each unit's rows as one sequence."""
        if not self.padded:
            return [x.reshape(len(us), -1, x.shape[-1]) for us, _, _ in self.buckets]
        padded = torch.cat([x, x.new_zeros((1, *x.shape[1:]))], 0)
        return [x.reshape(len(us), -1, x.shape[-1]) if index is None else
                padded[index].reshape(index.shape[0], -1, x.shape[-1])
                for us, index, _ in self.buckets]

    def segment_sum(self, x: Tensor) -> Tensor:
        """``(N, ...) -> (count, ...)``: the sum over each unit's examples (through
        :meth:`grouped`: ``index_add_`` was 10x slower here)."""
        flat = x.reshape(x.shape[0], 1, -1)
        parts = [v.sum(1) for v in self.grouped(flat)]
        return self.scatter(parts, flat.shape[-1], x.dtype).reshape(self.count, *x.shape[1:])

    def scatter(self, parts: list[Tensor], width: int = 0,
                dtype: torch.dtype = torch.float32) -> Tensor:
        """Per-bucket values (one row per unit of the bucket) back into ``(count[, width])``."""
        if parts:
            dtype = parts[0].dtype
        if len(parts) == 1 and self.buckets[0][1] is None:  # the whole batch, units in order
            return parts[0]
        out = torch.zeros((self.count, width) if width else self.count, dtype=dtype)
        for (us, _, _), v in zip(self.buckets, parts, strict=True):
            out[us] = v
        return out
