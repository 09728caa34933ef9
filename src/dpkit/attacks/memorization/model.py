"""A small character-level language model, trained with or without dpkit's DP-SGD (torch).

The model is a fixed-window neural LM (Bengio et al. 2003): the next character is predicted
from the last ``window`` characters, embedded, concatenated, through one ``tanh`` hidden layer.
Its layers are an ``Embedding`` and two ``Linear`` -- all with ghost-norm rules in
:mod:`dpkit.learn.torch`, so the private step costs about what the plain one does -- and a
fixed window makes exposure enumeration cheap (a candidate's score needs only its own last
``window`` characters, see :mod:`dpkit.attacks.memorization.exposure`).

Privacy of :func:`train` with ``epsilon``, ε the PLD bound of dpkit's accountant after the given
epochs. Record level (``units=None``): the weights are (ε, δ)-DP for add/remove-one-*line*
neighbours (each line, a canary copy included, is one record); a canary inserted ``r`` times is
``r`` records, covered only by the group guarantee for ``r`` records, which grows with ``r``.
User level (``units``: one writer id per line): (ε, δ)-DP for add/remove-one-*writer*
neighbours (all of a writer's lines at once; writers Poisson-sampled whole, each writer's summed
gradient clipped, :func:`dpkit.learn.torch.make_private` with ``units=``), so a canary whose
``r`` copies one writer wrote is covered by ε itself, whatever ``r``.
Weights are initialised and batches drawn with :mod:`dpkit.noise` (a seeded source is
reproducible and insecure).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import noise

from .canaries import ALPHABET, MAX_LINE

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("dpkit.attacks.memorization needs PyTorch: pip install 'dpkit[torch]'"
                      ) from exc

__all__ = ["BOS", "EOS", "PAD", "CharLM", "TrainConfig", "Trained", "encode_lines", "init_weights",
           "one_thread", "train"]

PAD, BOS, EOS = 0, 1, 2
_CODE = {c: i + 3 for i, c in enumerate(ALPHABET)}
VOCAB = len(ALPHABET) + 3


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread inside the block, then restore the caller's setting.

    The model is tiny: a second OpenMP thread saves little, and on a loaded machine its
    spinning workers multiplied the CPU time of training by ~10 (measured: 54.5 CPU-s for the
    plain model with torch's default two threads at load 13, 5.8 CPU-s with one; the numbers it
    computes are the same).
    """
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def encode(text: str) -> list[int]:
    """Token ids of ``text`` (characters of :data:`ALPHABET` only)."""
    try:
        return [_CODE[c] for c in text]
    except KeyError as exc:
        raise ValueError(f"character {exc.args[0]!r} is outside the alphabet {ALPHABET!r}"
                         ) from None


def encode_lines(lines: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``[BOS, c0 .. c_{n-1}]`` and targets ``[c0 .. c_{n-1}, EOS]``, PAD to MAX_LINE+1."""
    n, width = len(lines), MAX_LINE + 1
    x = np.full((n, width), PAD, dtype=np.int64)
    y = np.full((n, width), PAD, dtype=np.int64)
    for i, line in enumerate(lines):
        ids = encode(line[:MAX_LINE])
        x[i, 0] = BOS
        x[i, 1:len(ids) + 1] = ids
        y[i, :len(ids)] = ids
        y[i, len(ids)] = EOS
    return torch.from_numpy(x), torch.from_numpy(y)


class CharLM(nn.Module):
    """Next-character logits from the last ``window`` tokens (left-padded with BOS)."""

    def __init__(self, *, window: int = 16, embed: int = 8, hidden: int = 128) -> None:
        super().__init__()
        self.window = int(window)
        self.embed = nn.Embedding(VOCAB, embed)
        self.hidden = nn.Linear(window * embed, hidden)
        self.out = nn.Linear(hidden, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: (B, T) token ids -> (B, T, VOCAB) logits of the token after each position."""
        left = torch.full((x.shape[0], self.window - 1), BOS, dtype=x.dtype, device=x.device)
        e = self.embed(torch.cat([left, x], 1))                    # (B, T+w-1, E)
        win = e.unfold(1, self.window, 1)                           # (B, T, E, w)
        win = win.transpose(2, 3).reshape(x.shape[0], x.shape[1], -1)  # oldest token first
        return self.out(torch.tanh(self.hidden(win)))

    def last_logits(self, ctx: torch.Tensor) -> torch.Tensor:
        """``ctx``: (N, window) token ids, the last ``window`` tokens -> (N, VOCAB) logits."""
        e = self.embed(ctx).reshape(ctx.shape[0], -1)
        return self.out(torch.tanh(self.hidden(e)))


def init_weights(model: CharLM, source: noise.Source | None) -> None:
    """torch's default ranges, drawn by dpkit.noise (the only source of randomness)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.zero_()
                continue
            bound = 1.0 if p is model.embed.weight else 1.0 / math.sqrt(p.shape[1])
            u = noise.uniform_float01(tuple(p.shape), source=source)
            p.copy_(torch.from_numpy((2.0 * u - 1.0) * bound))


@dataclass(frozen=True)
class TrainConfig:
    """How to train: ``epsilon=None`` is the non-private baseline (plain Adam, shuffled batches).

    With ``epsilon``: DP-SGD (Adam on clipped, noised gradients) through
    :func:`dpkit.learn.torch.make_private`, noise calibrated for ``epsilon`` at ``delta`` after
    ``epochs`` epochs of Poisson batches of expected size ``batch_size``.
    """

    epochs: int = 20
    batch_size: int = 128
    learning_rate: float = 3e-3
    epsilon: float | None = None
    delta: float = 1e-5
    max_grad_norm: float = 1.0
    window: int = 16
    embed: int = 8
    hidden: int = 128
    dp_batch_size: int = 500
    dp_learning_rate: float = 5e-3


@dataclass
class Trained:
    """A trained model and what its training cost in privacy (``epsilon`` ``None``: none)."""

    model: CharLM
    epsilon: float | None
    delta: float | None
    noise_multiplier: float | None
    seconds: float
    final_loss: float


def _loss(model: CharLM, x: torch.Tensor, y: torch.Tensor, reduction: str) -> torch.Tensor:
    logits = model(x)
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1),
                                       ignore_index=PAD, reduction=reduction)


def _train_plain(model: CharLM, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig,
                 source: noise.Source | None) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    loss = torch.tensor(0.0)
    for _ in range(cfg.epochs):
        order = torch.from_numpy(noise.permutation(len(x), source=source))
        for start in range(0, len(x), cfg.batch_size):
            idx = order[start:start + cfg.batch_size]
            opt.zero_grad()
            loss = _loss(model, x[idx], y[idx], "mean")
            loss.backward()
            opt.step()
    return float(loss.detach())


def _train_private(model: CharLM, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig,
                   units: np.ndarray | None,
                   source: noise.Source | None) -> tuple[float, float, float]:
    from torch.utils.data import DataLoader, TensorDataset

    from dpkit.learn.torch import make_private

    assert cfg.epsilon is not None
    loader = DataLoader(TensorDataset(x, y), batch_size=cfg.dp_batch_size)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.dp_learning_rate)
    tr = make_private(model, opt, loader, max_grad_norm=cfg.max_grad_norm,
                      target_epsilon=cfg.epsilon, target_delta=cfg.delta, epochs=cfg.epochs,
                      loss_reduction="sum", source=source,
                      units=None if units is None else torch.from_numpy(units))
    last = 0.0
    try:
        for _ in range(cfg.epochs):
            for xb, yb in tr.data_loader:
                tr.optimizer.zero_grad()
                # per-line loss = the sum over its characters; the batch loss sums lines (at
                # user level the optimizer sums a writer's lines before clipping)
                loss = _loss(model, xb, yb, "sum")
                loss.backward()
                tr.optimizer.step()
                last = float(loss.detach()) / max(int((yb != PAD).sum()), 1)
    finally:
        tr.detach()
    return last, tr.epsilon(cfg.delta), tr.noise_multiplier


def train(lines: Sequence[str], cfg: TrainConfig, *,
          units: Sequence[int] | np.ndarray | None = None,
          source: noise.Source | None = None) -> Trained:
    """Train a :class:`CharLM` on ``lines``; see the module docstring.

    ``units``: with ``cfg.epsilon``, one writer id per line for user-level DP (``None``: each
    line is its own record). Ignored without DP (the plain model has no privacy unit).
    """
    import time

    writers = None if units is None or cfg.epsilon is None else np.asarray(units, dtype=np.int64)
    if writers is not None and writers.shape != (len(lines),):
        raise ValueError(f"units must give one writer id per line ({len(lines)}; got shape "
                         f"{writers.shape})")

    if cfg.epsilon is not None and not (math.isfinite(cfg.epsilon) and cfg.epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, or None for no DP "
                         f"(got {cfg.epsilon!r})")
    if cfg.epochs < 1 or cfg.batch_size < 1 or cfg.dp_batch_size < 1:
        raise ValueError("epochs and batch sizes must be >= 1")
    x, y = encode_lines(lines)
    model = CharLM(window=cfg.window, embed=cfg.embed, hidden=cfg.hidden)
    init_weights(model, source)
    t0 = time.perf_counter()
    with one_thread():
        if cfg.epsilon is None:
            loss = _train_plain(model, x, y, cfg, source)
            out = Trained(model, None, None, None, 0.0, loss)
        else:
            loss, eps, sigma = _train_private(model, x, y, cfg, writers, source)
            out = Trained(model, eps, cfg.delta, sigma, 0.0, loss)
    out.seconds = time.perf_counter() - t0
    model.eval()
    return out


def as_module(trained: Trained | Any) -> CharLM:
    """The :class:`CharLM` of a :class:`Trained` (or the model itself)."""
    m = trained.model if isinstance(trained, Trained) else trained
    if not isinstance(m, CharLM):
        raise TypeError(f"expected a CharLM or Trained (got {type(m)!r}): exposure needs the "
                        "model's next-character log-probabilities")
    return m
