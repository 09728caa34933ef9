"""Per-example gradient norms and clipped sums, layer by layer, mostly without per-example grads.

Each trainable leaf module gets a *rule* with two jobs, given what the backward pass recorded
(the layer's input ``a`` and the gradient ``g`` of the loss with respect to its output, one row
per example, already rescaled to per-example losses):

* ``sq_norms`` -- ``||∇_θ ℓ_i||²`` over the layer's parameters, for every example ``i``;
* ``clipped_sum`` -- ``Σ_i c_i ∇_θ ℓ_i`` for clip factors ``c_i``.

Linear and Conv2d are *tapped*: a custom autograd function computes only the gradient with
respect to the layer's input and records ``(a, g)``, so autograd never forms the (unclipped)
weight gradient; the norms come from ``a`` and ``g`` (ghost norms: ``||g_i a_iᵀ||² =
||g_i||² ||a_i||²`` for one row per example, ``Σ_{t,t'} (a_t·a_t')(g_t·g_t')`` over a sequence
or the positions of a convolution when that is cheaper than forming the per-example gradient),
and the clipped sum is one weighted product ``(c ⊙ G)ᵀ A`` (book-keeping, Bu et al. 2023). The
private step then costs what the non-private one does, plus the norms.

Embedding and LayerNorm are *hooked*: a forward hook records the input and a hook on the output
records ``g``; their per-example norms are closed forms (token collisions for Embedding, the
normalised input for LayerNorm) and their clipped sums are an ``index_add`` and a small weighted
sum. Any other module with parameters falls back to ``torch.func``: ``vmap`` over examples of the
``vjp`` of the module, which materialises its per-example gradients (memory B x its parameters).

User level (``sq_norms_units``): the norm of the *sum* of a unit's per-example gradients. For
Linear and Conv2d a unit's rows (examples x positions) are one longer sequence, so its norm is
the ghost norm with within-unit Gram blocks ``Σ_{i,j∈u} Σ_{t,t'} (a_it·a_jt')(g_it·g_jt')`` or
the per-unit product, whichever is cheaper (units padded in buckets of similar size, see
:class:`~dpkit.learn.torch.units.BatchUnits`); Embedding sums ``g`` per (unit, token) key; the
others sum their per-example gradients per unit (``index_add``). The clipped sum needs nothing
new: ``Σ_u c_u Σ_{i∈u} ∇ℓ_i = Σ_i c_{u(i)} ∇ℓ_i``, the per-example rule with each example given
its unit's factor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812 - torch's own spelling
from torch.nn.grad import conv2d_input

from .units import BatchUnits

__all__ = ["LayerTap", "UnsupportedLayer", "rule_for"]


class UnsupportedLayer(ValueError):  # noqa: N818 - reads as a sentence
    """A module whose per-example gradients dpkit cannot compute (named in the message)."""


@dataclass
class LayerTap:
    """What one module's backward passes recorded in the current step: (inputs, grad_output)."""

    name: str
    module: Any  # an nn.Module; Any because torch types its attributes as Tensor | Module
    rule: Rule
    records: list[tuple[Any, Tensor]] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)
    paused: bool = False  # True while dpkit itself re-runs the module (the vmap fallback)

    def reset(self) -> None:
        self.records.clear()
        self.cache.clear()

    def params(self) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in self.module.named_parameters(recurse=False) if p.requires_grad]


class Rule:
    """Per-layer norms and clipped sums; subclasses say how the layer is tapped."""

    tapped = False  # True: the forward is replaced by a custom autograd function

    def check(self, module: nn.Module, name: str) -> None:
        """Raise :class:`UnsupportedLayer` if this module's configuration is not covered."""

    def sq_norms(self, tap: LayerTap) -> Tensor:
        raise NotImplementedError

    def per_example(self, tap: LayerTap) -> dict[str, Tensor]:
        """Per-example gradients ``(B, *p.shape)``, for rules whose layers make them cheaply."""
        raise NotImplementedError

    def sq_norms_units(self, tap: LayerTap, units: BatchUnits) -> Tensor:
        """``||Σ_{i∈u} ∇_θ ℓ_i||²`` over the layer's parameters, for every unit ``u`` of the
        batch. By default from the per-example gradients, summed per unit (``index_add``)."""
        per = self.per_example(tap)
        return sum(units.segment_sum(v).reshape(units.count, -1).pow(2).sum(1)  # type: ignore[return-value]
                   for v in per.values())

    def clipped_sum(self, tap: LayerTap, c: Tensor) -> dict[str, Tensor]:
        raise NotImplementedError

    def clipped_sum_into(self, tap: LayerTap, c: Tensor, out: dict[str, Tensor]) -> None:
        """Write :meth:`clipped_sum` into ``out`` (views of one flat buffer), zeros if absent."""
        got = self.clipped_sum(tap, c)
        for name, view in out.items():
            if name in got:
                view.copy_(got[name].reshape(view.shape))
            else:
                view.zero_()


def _seq(x: Tensor) -> Tensor:
    """(B, ..., d) -> (B, T, d)."""
    return x.reshape(x.shape[0], -1, x.shape[-1])


def _ghost_or_full(a: Tensor, g: Tensor) -> Tensor:
    """``||Σ_t g_t a_tᵀ||²_F`` per example for a (B,T,da), g (B,T,dg): whichever is cheaper."""
    T, da, dg = a.shape[1], a.shape[2], g.shape[2]
    if T == 1:
        return (a[:, 0] ** 2).sum(1) * (g[:, 0] ** 2).sum(1)
    if T * T * (da + dg) <= T * da * dg:
        return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
    return torch.bmm(g.transpose(1, 2), a).pow(2).sum((1, 2))


def _unit_norms(a: Tensor, g: Tensor, units: BatchUnits, weight: bool, bias: bool) -> Tensor:
    """``||Σ_{i∈u} Σ_t g_{i,t} a_{i,t}ᵀ||²_F`` (if ``weight``) plus ``||Σ_{i∈u} Σ_t g_{i,t}||²``
    (if ``bias``) per unit, a (B, T, da), g (B, T, dg). A unit's rows are one longer sequence:
    the ghost norm with its within-unit Gram blocks, or the per-unit product if cheaper; the
    bias term is the sum of the g Gram block (or of the unit's summed g)."""
    parts = []
    for ua, ug in zip(units.grouped(a), units.grouped(g), strict=True):
        rows, da, dg = ua.shape[1], ua.shape[2], ug.shape[2]
        out = torch.zeros(ua.shape[0], dtype=ug.dtype)
        if rows * rows * (da + dg) <= rows * da * dg:
            gram = torch.bmm(ug, ug.transpose(1, 2))
            if weight:
                out = out + (torch.bmm(ua, ua.transpose(1, 2)) * gram).sum((1, 2))
            if bias:
                out = out + gram.sum((1, 2))
        else:
            if weight:
                out = out + torch.bmm(ug.transpose(1, 2), ua).pow(2).sum((1, 2))
            if bias:
                out = out + ug.sum(1).pow(2).sum(1)
        parts.append(out)
    return units.scatter(parts)


class _TapLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, tap: LayerTap) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.tap = tap
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, None, None, None]:
        x, weight = ctx.saved_tensors
        ctx.tap.records.append((x.detach(), g.detach()))
        gx = g @ weight if ctx.needs_input_grad[0] else None
        return gx, None, None, None


class LinearRule(Rule):
    tapped = True

    def forward(self, module: nn.Linear, tap: LayerTap, x: Tensor) -> Tensor:
        return _TapLinearFn.apply(x, module.weight, module.bias, tap)

    def _merged(self, tap: LayerTap) -> tuple[Tensor, Tensor]:
        if len(tap.records) == 1:
            x, g = tap.records[0]
            return (x, g) if x.dim() == 2 else (_seq(x), _seq(g))
        # a layer used several times in one forward: its uses are one longer sequence
        a = torch.cat([_seq(x) for x, _ in tap.records], 1)
        g = torch.cat([_seq(y) for _, y in tap.records], 1)
        return a, g

    def sq_norms(self, tap: LayerTap) -> Tensor:
        a, g = self._merged(tap)
        m = tap.module
        if a.dim() == 2:  # one row per example: ||g_i a_iᵀ||² = ||g_i||² ||a_i||²
            gn = torch.linalg.vector_norm(g, dim=1).square_()
            out = gn * torch.linalg.vector_norm(a, dim=1).square_() if m.weight.requires_grad \
                else torch.zeros_like(gn)
            return out + gn if m.bias is not None and m.bias.requires_grad else out
        out = _ghost_or_full(a, g) if m.weight.requires_grad else torch.zeros(a.shape[0])
        if m.bias is not None and m.bias.requires_grad:
            out = out + g.sum(1).pow(2).sum(1)
        return out

    def sq_norms_units(self, tap: LayerTap, units: BatchUnits) -> Tensor:
        a, g = self._merged(tap)
        if a.dim() == 2:
            a, g = a[:, None], g[:, None]
        m = tap.module
        return _unit_norms(a, g, units, bool(m.weight.requires_grad),
                           m.bias is not None and bool(m.bias.requires_grad))

    def clipped_sum(self, tap: LayerTap, c: Tensor) -> dict[str, Tensor]:
        out = {n: torch.empty_like(p) for n, p in tap.params()}
        self.clipped_sum_into(tap, c, out)
        return out

    def clipped_sum_into(self, tap: LayerTap, c: Tensor, out: dict[str, Tensor]) -> None:
        a, g = self._merged(tap)
        gc = g * (c[:, None] if g.dim() == 2 else c[:, None, None])
        gc2, a2 = gc.reshape(-1, gc.shape[-1]), a.reshape(-1, a.shape[-1])
        if "weight" in out:  # the book-keeping product, straight into the flat buffer
            torch.mm(gc2.T, a2, out=out["weight"])
        if "bias" in out:
            torch.sum(gc2, 0, out=out["bias"])


class _TapConvFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, tap: LayerTap) -> Tensor:
        m: Any = tap.module
        ctx.save_for_backward(x, weight)
        ctx.tap = tap
        return F.conv2d(x, weight, bias, m.stride, m.padding, m.dilation, m.groups)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, None, None, None]:
        x, weight = ctx.saved_tensors
        m: Any = ctx.tap.module
        ctx.tap.records.append((x.detach(), g.detach()))
        gx = None
        if ctx.needs_input_grad[0]:
            gx = conv2d_input(x.shape, weight, g, m.stride, m.padding, m.dilation,
                                            m.groups)
        return gx, None, None, None


class Conv2dRule(Rule):
    tapped = True

    def check(self, module: nn.Module, name: str) -> None:
        assert isinstance(module, nn.Conv2d)
        if module.groups != 1 or module.padding_mode != "zeros" or isinstance(module.padding, str):
            raise UnsupportedLayer(f"{name}: Conv2d with groups != 1, a padding mode other "
                                   "than 'zeros' or string padding is not tapped")

    def forward(self, module: nn.Conv2d, tap: LayerTap, x: Tensor) -> Tensor:
        return _TapConvFn.apply(x, module.weight, module.bias, tap)

    def _ag(self, tap: LayerTap) -> tuple[Tensor, Tensor]:
        if len(tap.records) != 1:
            raise UnsupportedLayer(f"{tap.name}: a Conv2d used more than once per forward")
        x, g = tap.records[0]
        m = tap.module
        u = F.unfold(x, m.kernel_size, m.dilation, m.padding, m.stride)  # (B, cin k k, T)
        return u.transpose(1, 2), g.reshape(g.shape[0], g.shape[1], -1).transpose(1, 2)

    def sq_norms(self, tap: LayerTap) -> Tensor:
        a, g = self._ag(tap)
        out = _ghost_or_full(a, g)
        if tap.module.bias is not None:
            out = out + g.sum(1).pow(2).sum(1)
        return out

    def sq_norms_units(self, tap: LayerTap, units: BatchUnits) -> Tensor:
        a, g = self._ag(tap)
        return _unit_norms(a, g, units, True, tap.module.bias is not None)

    def clipped_sum(self, tap: LayerTap, c: Tensor) -> dict[str, Tensor]:
        a, g = self._ag(tap)
        gc = g * c[:, None, None]
        w = gc.reshape(-1, g.shape[-1]).T @ a.reshape(-1, a.shape[-1])
        out = {"weight": w.reshape(tap.module.weight.shape)}
        if tap.module.bias is not None:
            out["bias"] = gc.sum((0, 1))
        return out


class EmbeddingRule(Rule):
    def check(self, module: nn.Module, name: str) -> None:
        assert isinstance(module, nn.Embedding)
        if module.max_norm is not None or module.scale_grad_by_freq or module.sparse:
            raise UnsupportedLayer(f"{name}: Embedding with max_norm, scale_grad_by_freq or "
                                   "sparse gradients is not supported")

    def _ig(self, tap: LayerTap) -> tuple[Tensor, Tensor]:
        if len(tap.records) != 1:
            raise UnsupportedLayer(f"{tap.name}: an Embedding used more than once per forward")
        idx, g = tap.records[0]
        B = g.shape[0]
        idx = idx.reshape(B, -1)
        g = g.reshape(B, idx.shape[1], -1)
        pad = tap.module.padding_idx
        if pad is not None:  # the padding row gets no gradient
            g = g * (idx != pad).unsqueeze(-1)
        return idx, g

    def sq_norms(self, tap: LayerTap) -> Tensor:
        idx, g = self._ig(tap)
        same = (idx[:, :, None] == idx[:, None, :]).to(g.dtype)
        return (same * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))

    def sq_norms_units(self, tap: LayerTap, units: BatchUnits) -> Tensor:
        # a unit's gradient has one row per token it used: sum its occurrences' g per (unit,
        # token) key with index_add, then square; linear in the tokens, whatever the unit size
        idx, g = self._ig(tap)
        v = int(tap.module.num_embeddings)
        key = (units.seg[:, None] * v + idx).reshape(-1)
        uniq, inv = torch.unique(key, return_inverse=True)
        rows = torch.zeros(uniq.numel(), g.shape[-1], dtype=g.dtype)
        rows.index_add_(0, inv, g.reshape(-1, g.shape[-1]))
        out = torch.zeros(units.count, dtype=g.dtype)
        return out.index_add_(0, torch.div(uniq, v, rounding_mode="floor"), rows.pow(2).sum(1))

    def clipped_sum(self, tap: LayerTap, c: Tensor) -> dict[str, Tensor]:
        idx, g = self._ig(tap)
        w = torch.zeros_like(tap.module.weight)
        w.index_add_(0, idx.reshape(-1), (g * c[:, None, None]).reshape(-1, g.shape[-1]))
        return {"weight": w}


class LayerNormRule(Rule):
    def per_example(self, tap: LayerTap) -> dict[str, Tensor]:
        if len(tap.records) != 1:
            raise UnsupportedLayer(f"{tap.name}: a LayerNorm used more than once per forward")
        x, g = tap.records[0]
        m = tap.module
        dims = tuple(range(1, x.dim() - len(m.normalized_shape)))
        out = {}
        if m.weight is not None and m.weight.requires_grad:
            xhat = F.layer_norm(x, m.normalized_shape, None, None, m.eps)
            out["weight"] = (g * xhat).sum(dims) if dims else g * xhat
        if m.bias is not None and m.bias.requires_grad:
            out["bias"] = g.sum(dims) if dims else g
        return out

    def sq_norms(self, tap: LayerTap) -> Tensor:
        per = self.per_example(tap)
        return sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in per.values())  # type: ignore[return-value]

    def clipped_sum(self, tap: LayerTap, c: Tensor) -> dict[str, Tensor]:
        per = self.per_example(tap)
        return {k: torch.tensordot(c, v, dims=1) for k, v in per.items()}


class VmapRule(Rule):
    """The ``torch.func`` fallback: per-example gradients of any per-example-separable module.

    ``vmap`` over examples of the module's ``vjp`` (per-example gradients, memory B x its
    parameters). When ``vmap`` cannot batch the module (an RNN's fused kernel), the norms come
    from one ``vjp`` per example (per unit at user level) in a loop, and the clipped sum from
    one ``vjp`` of the whole batch with each cotangent row scaled by its factor (``Σ_i c_i
    ∇ℓ_i`` is the gradient of ``Σ_i c_i ℓ_i``): slower, the same numbers. A module returning a
    tuple (an RNN's ``(output, h_n)``) is differentiated through its first output only; a loss
    that uses another output is refused.
    """

    def check(self, module: nn.Module, name: str) -> None:
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            raise UnsupportedLayer(f"{name}: {type(module).__name__} mixes the examples of a "
                                   "batch, so no per-example gradient exists; use GroupNorm or "
                                   "LayerNorm")

    def _record(self, tap: LayerTap) -> tuple[Tensor, Tensor]:
        if len(tap.records) != 1:
            raise UnsupportedLayer(f"{tap.name}: a fallback module used more than once per "
                                   "forward")
        return tap.records[0]

    def _pull(self, tap: LayerTap, x: Tensor, g: Tensor) -> dict[str, Tensor]:
        """``gᵀ ∂(module(x))/∂θ`` by ``torch.func.vjp``, as a dict of parameter gradients."""
        from torch.func import functional_call, vjp

        params = {n: p.detach() for n, p in tap.params()}

        def f(p: dict[str, Tensor]) -> Tensor:
            out = functional_call(tap.module, p, (x,))
            return out[0] if isinstance(out, tuple | list) else out  # see _hook_forward

        tap.paused = True  # dpkit's own re-runs of the module record nothing
        try:
            # grad mode on: the clipping runs under no_grad, and some kernels (oneDNN's LSTM)
            # keep the workspace their backward needs only when grad mode is on
            with torch.enable_grad():
                return vjp(f, params)[1](g)[0]  # type: ignore[no-any-return]
        finally:
            tap.paused = False

    def per_example(self, tap: LayerTap) -> dict[str, Tensor]:
        """Per-example gradients by ``vmap`` (cached); raises if ``vmap`` cannot batch it."""
        from torch.func import vmap

        x, g = self._record(tap)
        if "per_example" not in tap.cache:
            def one(xi: Tensor, gi: Tensor) -> dict[str, Tensor]:
                return self._pull(tap, xi.unsqueeze(0), gi.unsqueeze(0))
            try:
                tap.cache["per_example"] = vmap(one)(x, g)
            except RuntimeError as exc:
                tap.cache["per_example"] = exc
        got = tap.cache["per_example"]
        if isinstance(got, Exception):
            raise got
        return got  # type: ignore[no-any-return]

    def _batched(self, tap: LayerTap) -> bool:
        if isinstance(tap.module, nn.RNNBase):
            # vmap has no batching rule for the fused RNN kernels: it errs (GRU) or loops
            # internally with a warning (LSTM); the explicit loop is as fast, and per unit faster
            return False
        try:
            self.per_example(tap)
        except RuntimeError:
            return False
        return True

    def _looped(self, tap: LayerTap, groups: list[Tensor]) -> Tensor:
        """``||Σ_{i∈group} ∇ℓ_i||²`` for each group of rows, one ``vjp`` per group."""
        x, g = self._record(tap)
        out = torch.zeros(len(groups), dtype=g.dtype)
        for j, rows in enumerate(groups):
            grads = self._pull(tap, x[rows], g[rows])
            out[j] = sum(v.pow(2).sum() for v in grads.values())
        return out

    def sq_norms(self, tap: LayerTap) -> Tensor:
        if not self._batched(tap):
            return self._looped(tap, [torch.tensor([i]) for i in range(tap.records[0][1].shape[0])])
        per = self.per_example(tap)
        return sum(v.reshape(v.shape[0], -1).pow(2).sum(1) for v in per.values())  # type: ignore[return-value]

    def sq_norms_units(self, tap: LayerTap, units: BatchUnits) -> Tensor:
        if self._batched(tap):
            return super().sq_norms_units(tap, units)
        return self._looped(tap, [torch.nonzero(units.seg == u).reshape(-1)
                                  for u in range(units.count)])

    def clipped_sum(self, tap: LayerTap, c: Tensor) -> dict[str, Tensor]:
        if not self._batched(tap):
            x, g = self._record(tap)
            return self._pull(tap, x, g * c.reshape(-1, *[1] * (g.dim() - 1)).to(g.dtype))
        per = self.per_example(tap)
        return {k: torch.tensordot(c, v, dims=1) for k, v in per.items()}


RULES: dict[type, Rule] = {
    nn.Linear: LinearRule(),
    nn.Conv2d: Conv2dRule(),
    nn.Embedding: EmbeddingRule(),
    nn.LayerNorm: LayerNormRule(),
}


def rule_for(module: nn.Module, name: str, fallback: bool) -> Rule:
    """The rule for ``module`` (exact type match), the vmap fallback, or a clear refusal."""
    rule = RULES.get(type(module))
    if rule is not None:
        rule.check(module, name)
        return rule
    if not fallback:
        raise UnsupportedLayer(f"{name}: {type(module).__name__} has no ghost-norm rule (rules: "
                               f"{', '.join(t.__name__ for t in RULES)}); pass "
                               "fallback='vmap' to use per-example gradients from torch.func")
    VmapRule().check(module, name)
    return VmapRule()
