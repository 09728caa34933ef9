"""The private optimizer: per-example clipping, Gaussian noise on a grid, then the user's step.

One step of DP-SGD (Abadi et al. 2016) on a Poisson batch ``B`` of expected size ``qn``:

    ĝ = ( round_k( Σ_{i∈B} clip_C'(∇ℓ_i) ) + round_k(N(0, σ²C² I)) ) / (q n)

with ``clip_C'(v) = v · min(1, C'/‖v‖)``. Under add/remove-one neighbours the clipped sum moves
by at most ``C'`` in L2 and the grid rounding (``round_k`` to ``2^-k``, both sides) by at most
``√d 2^-k`` more; ``C' = C - √d 2^-k`` makes the total ``C``, so a step is the Gaussian
mechanism ``Gaussian(σ)`` on a Poisson(q) sample: the event ``PoissonSampled(q, Gaussian(σ))``.
The division and the optimizer's update are post-processing.

User level (the loader samples whole units): ``clip_C'`` applies to ``Σ_{i∈u} ∇ℓ_i``, one term
per sampled unit ``u``, so under add/remove-one-unit neighbours the same argument gives the same
event, ``q`` the units' rate; the divisor stays ``q n`` (``n`` the examples kept), the expected
number of examples, so a mean loss keeps its scale. Dividing by ``q n`` treats ``n`` as public
(as every DP-SGD library does); where it is not (a curator's read), ``expected_batch_size``
gives a public divisor instead. Floating-point error in forming the
float32 sum is not covered (as in every DP-SGD library; it is ~1e-7 relative).

Memory: two buffers live across steps, the float32 clipped sum (which becomes the gradients,
in place) and the float64 noise in grid units; the grid pass works through a float64 scratch
of 2^17 coordinates. The grid stays float64 on purpose: at ``2^-k`` fine enough that rounding
costs C a millionth, the noise alone spans ~2^35 grid steps, past float32's 2^24 exact
integers, so a float32 pass would not be exact. A secure source (constant-work or not) draws
step t+1's noise into the noise buffer on a thread once step t has consumed it (never while it
is read).
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpkit import noise
from dpkit.noise.grid import grid_exponent

from .layers import LayerTap, UnsupportedLayer
from .loader import PoissonLoader
from .units import BatchUnits

__all__ = ["DPOptimizer", "grid_exponent"]

_CHUNK = 1 << 17


class DPOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer: ``step()`` privatises the gradients, then runs the original step.

    Shares ``param_groups`` and ``state`` with the wrapped optimizer (LR schedulers work on it).
    """

    #: draw the next step's noise on a thread when the source is not seeded (:meth:`_next_noise`);
    #: False draws it in line (a benchmark compares the two)
    draw_ahead: bool = True

    def __init__(self, original: torch.optim.Optimizer, *, taps: list[LayerTap],
                 loader: PoissonLoader, noise_multiplier: float, max_grad_norm: float,
                 loss_reduction: str, exact_noise: bool, source: noise.Source | None,
                 max_steps: int | None, expected_batch_size: float | None = None) -> None:
        super().__init__(original.param_groups, original.defaults)
        self.original = original
        self.param_groups = original.param_groups
        self.state = original.state
        self.taps = taps
        self.loader = loader
        self.noise_multiplier = float(noise_multiplier)
        self.max_grad_norm = float(max_grad_norm)
        self.loss_reduction = loss_reduction
        self.exact_noise = exact_noise
        self.source = source
        self.max_steps = max_steps
        self.expected_batch_size = expected_batch_size  # the divisor; None: q n
        self.steps = 0
        self._seen = loader.batches_out
        self.params = [p for t in taps for _, p in t.params()]
        self.dim = sum(p.numel() for p in self.params)
        self.k = grid_exponent(self.dim, self.max_grad_norm)
        self.clip_norm = self.max_grad_norm - math.sqrt(self.dim) * 2.0**-self.k
        self.last_noise_s = 0.0  # wall time of the last noise draw, for benchmarks
        self._flat: Tensor | None = None  # buffers kept across steps (see clipped_flat)
        self._noise: np.ndarray | None = None
        self._scratch: np.ndarray | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._draw_ahead = False
        self._pending: Future[tuple[np.ndarray, float]] | None = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for t in self.taps:
            t.reset()
        self.original.zero_grad(set_to_none)

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        if closure is not None:
            with torch.enable_grad():
                closure()
        self._check_batch()
        flat = self.clipped_flat(self.loader.last_batch_size, self.loader.last_units)
        self._noise_into_grads(flat)
        self.steps += 1
        for t in self.taps:
            t.reset()
        return self.original.step()

    def _check_batch(self) -> None:
        if self.loader.batches_out == self._seen:
            raise RuntimeError("step() without a new batch from training.data_loader: the "
                               "privacy accounting assumes each step's batch is Poisson-sampled "
                               "by it; iterate training.data_loader, not the original loader")
        if self.loader.batches_out != self._seen + 1:
            raise RuntimeError("several batches were drawn from training.data_loader for one "
                               "step(); call step() once per batch")
        self._seen = self.loader.batches_out
        if self.max_steps is not None and self.steps >= self.max_steps:
            raise RuntimeError(f"the budget was charged for {self.max_steps} steps; training "
                               "longer needs a new make_private with more epochs")

    def clipped_sums(self, batch: int, units: Any = None) -> list[Tensor]:
        """``Σ_i clip_C'(∇ℓ_i)`` per parameter, from what the last backward recorded; with
        ``units`` (one id per example of the batch), ``Σ_u clip_C'(Σ_{i∈u} ∇ℓ_i)``."""
        flat = self.clipped_flat(batch, units)
        out, lo = [], 0
        for p in self.params:
            out.append(flat[lo : lo + p.numel()].view_as(p))
            lo += p.numel()
        return out

    @torch.no_grad()
    def clipped_flat(self, batch: int, units: Any = None) -> Tensor:
        """The clipped sums of all parameters, concatenated into one float32 vector.

        ``units``: None clips each example's gradient; else one unit id per example of the
        batch, and each unit's summed gradient is clipped (user level). The vector is a buffer
        kept across steps (fresh pages cost a page fault each, which dominated the private
        step's extra time here): valid until the next step.
        """
        if self._flat is None:
            self._flat = torch.empty(self.dim, dtype=torch.float32)
        flat = self._flat
        for t in self.taps:  # flagged by the forward hook (private.py): refuse, never miss it
            if t.cache.get("other_output_used"):
                raise UnsupportedLayer(
                    f"{t.name}: the loss uses an output of this module other than its first "
                    "(e.g. an RNN's h_n); only the first output of a module returning a tuple "
                    "is supported (read the state from the output sequence instead)")
        live = [t for t in self.taps if t.records]
        for t in live:
            for _, g in t.records:
                if g.shape[0] != batch:
                    raise RuntimeError(f"{t.name}: its output has {g.shape[0]} rows for a batch "
                                       f"of {batch}; the batch dimension must come first")
        if batch == 0 or not live:
            return flat.zero_()
        # a mean loss scales each example's gradient by 1/batch: undo it in the factors
        scale = float(batch) if self.loss_reduction == "mean" else 1.0
        bu = None if units is None else BatchUnits(units, batch)
        sq = sum(t.rule.sq_norms(t) if bu is None else t.rule.sq_norms_units(t, bu)
                 for t in live)
        norms = torch.as_tensor(sq).sqrt() * scale
        finite = torch.isfinite(norms)
        c = (self.clip_norm / (norms + 1e-6)).clamp(max=1.0) * scale
        if bu is not None:  # Σ_u c_u Σ_{i∈u} ∇ℓ_i: each example takes its unit's factor
            c, finite = c[bu.seg], finite[bu.seg]
        if not bool(finite.all()):
            # weights that overflowed (post-processing of noise) make some examples' gradient
            # NaN: those contribute zero, a clip like any other; refusing the step would say
            # whether the batch held such a row (FINDINGS.md G3)
            c = torch.where(finite, c, torch.zeros_like(c))
            _zero_examples(self.taps, ~finite)
        lo = 0
        for t in self.taps:
            views = {}
            for n, p in t.params():
                views[n] = flat[lo : lo + p.numel()].view(p.shape)
                lo += p.numel()
            if t.records:
                t.rule.clipped_sum_into(t, c, views)
            else:  # a layer this forward did not use: its clipped sum is zero
                for v in views.values():
                    v.zero_()
        return flat

    def _draw(self) -> tuple[np.ndarray, float]:
        """The next step's noise in grid units (data-independent), and the time it took.

        Written chunk by chunk into one float64 buffer kept across steps: the sampler's
        transient words and floats stay ~2 MB, and no fresh 14 MB array is paged in per step.
        """
        sigma = self.noise_multiplier * self.max_grad_norm
        scale = 2.0**self.k
        start = time.perf_counter()
        if self._noise is None:
            self._noise = np.empty(self.dim, dtype=np.float64)
        z = self._noise
        for lo in range(0, self.dim, _CHUNK):
            m = min(_CHUNK, self.dim - lo)
            if self.exact_noise:
                z[lo : lo + m] = noise.discrete_gaussian((sigma * scale) ** 2, m,
                                                         source=self.source)
            else:  # drawn in place: no transient array per chunk
                np.rint(noise.gaussian_float(sigma * scale, m, source=self.source,
                                             out=z[lo : lo + m]), out=z[lo : lo + m])
        return z, time.perf_counter() - start

    def _next_noise(self) -> np.ndarray:
        """This step's noise; unless seeded, drawn ahead on a thread (:meth:`_ahead`).

        The noise does not depend on the data, so drawing it while the next forward and backward
        run changes nothing in the guarantee; it hides the draw on machines with idle cores. A
        seeded source draws in line, so a seeded run stays reproducible. On a
        ``noise.ConstantWork`` source (a constant-work project) the release's failure bound is
        split among the requests of the charging thread (``noise.charge_scope``); the draw
        handed to the thread takes its share of that bound when it is handed out
        (``noise.reserve_share``, in this thread's order), and its requests split that share
        (``noise.shared_scope``): the release's requests, on both threads, still sum to the
        bound its ``δ_t`` pays for, and each request's plan follows from the program order of
        its own thread, not from how the two threads interleave.
        """
        if not self.draw_ahead or (self.source is not None and self.source.insecure):
            z, self.last_noise_s = self._draw()
            return z
        if self._pending is None:
            self._pending = self._submit()
        z, self.last_noise_s = self._pending.result()
        self._pending, self._draw_ahead = None, True
        return z

    def _submit(self) -> Future[tuple[np.ndarray, float]]:
        """Hand the next draw to the thread, with its share of this release's failure bound."""
        share = noise.reserve_share() if isinstance(self.source, noise.ConstantWork) else None
        return self._pool().submit(self._draw_in, share)

    def _draw_in(self, share: noise.ScopeShare | None) -> tuple[np.ndarray, float]:
        with noise.shared_scope(share):
            return self._draw()

    def _ahead(self) -> None:
        """Start drawing the next step's noise into the (one) buffer, now that it is consumed."""
        if self._draw_ahead:
            self._pending, self._draw_ahead = self._submit(), False

    def close(self) -> None:
        """Stop drawing noise ahead (the training is over)."""
        if self._executor is not None:
            if self._pending is not None:
                self._pending.cancel()
            self._draw_ahead = False
            self._executor.shutdown(wait=False)
            self._executor, self._pending = None, None

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="dpkit-noise")
        return self._executor

    def _noise_into_grads(self, flat: Tensor) -> None:
        sigma = self.noise_multiplier * self.max_grad_norm
        scale = 2.0**self.k
        zt = torch.from_numpy(self._next_noise())
        # release on the grid 2^-k (module docstring): both terms are integers times 2^-k, and
        # their sum is exact in float64 (checked below)
        # exact while |sum| + |noise| < 2^52 grid steps: |noise| <= 12.2 σ for the float
        # sampler (the exact sampler is checked), and each coordinate of the sum is clamped to
        # the rest (1-Lipschitz: the sensitivity holds). It was a refusal when the batch size
        # (private) times C' reached it: a failure after the charge on large batches only
        zmax = float(zt.abs().max()) if self.exact_noise else 13.0 * sigma * scale
        if zmax >= 2.0**51:  # the noise alone: no data in this test
            raise FloatingPointError("the noise is too large for the grid 2^-k to be exact in "
                                     "float64; use a smaller noise_multiplier or max_grad_norm")
        lim = 2.0**52 - math.ceil(zmax) - 1.0
        # chunk by chunk, in place in the clipped-sum buffer (it becomes the gradient), through
        # one float64 scratch of _CHUNK coordinates: no full-size float64 copy exists. In numpy,
        # single-threaded: ~90 small torch ops right after the clipping GEMMs ran into the
        # intra-op threads still spinning from them (10-50x slower on 2 busy cores).
        if self._scratch is None:
            self._scratch = np.empty(min(_CHUNK, self.dim), dtype=np.float64)
        expected = self.loader.sample_rate * self.loader.n if self.expected_batch_size is None \
            else self.expected_batch_size
        denom = scale * expected
        f, z = flat.numpy(), zt.numpy()
        for lo in range(0, self.dim, _CHUNK):
            hi = min(lo + _CHUNK, self.dim)
            s64 = self._scratch[: hi - lo]
            np.multiply(f[lo:hi], scale, out=s64, dtype=np.float64)  # a power of 2: exact
            np.rint(s64, out=s64)
            np.clip(s64, -lim, lim, out=s64)
            s64 += z[lo:hi]
            np.divide(s64, denom, out=f[lo:hi], casting="same_kind")
        self._ahead()
        lo = 0
        for p in self.params:
            p.grad = flat[lo : lo + p.numel()].view_as(p).to(p.dtype)
            lo += p.numel()


def _zero_examples(taps: list[LayerTap], bad: Tensor) -> None:
    """Zero what the backward recorded for the examples ``bad`` (batch dimension first), so
    that their clipping factor 0 gives 0 and not 0 × NaN."""
    for t in taps:
        t.records[:] = [_zeroed(rec, bad) for rec in t.records]


def _zeroed(x: Any, bad: Tensor) -> Any:
    if isinstance(x, tuple | list):
        return type(x)(_zeroed(v, bad) for v in x)
    if isinstance(x, Tensor) and x.is_floating_point() and x.dim() and x.shape[0] == len(bad):
        return torch.where(bad.view(-1, *([1] * (x.dim() - 1))), torch.zeros_like(x), x)
    return x
