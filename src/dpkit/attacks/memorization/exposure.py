"""Exposure of a canary (Carlini et al., "The Secret Sharer", USENIX Security 2019), computed
exactly, and the extraction attack.

The model scores a candidate secret ``s`` by its log-perplexity given the canary's prefix,
``Px(s) = -log2 P(s | prefix)`` (bits). With ``R`` the candidate space of the canary's format
and ``rank(s)`` = 1 + the number of candidates with a strictly smaller ``Px``,

    exposure(s) = log2 |R| - log2 rank(s),

between 0 and ``log2 |R|`` (19.93 bits for ``|R| = 10^6``). A canary the model never saw has a
uniformly random rank, so its expected exposure is about ``1/ln 2 = 1.44`` bits and
``P(exposure >= t) <= 2^-t``; full exposure means the model ranks the secret first, and then the
extraction attack (decode the most likely secret from the prefix) recovers it.

Two exact ways to find the rank, both walking the trie of candidates one pattern character at a
time (a fixed-window model scores a node from its last ``window`` characters only, so every
level is one batched pass; the prefix's share of the hidden layer is computed once per level
and each digit slot adds a row of a per-position table, see :class:`_Levels`):

* :func:`candidate_costs` enumerates all ``|R|`` candidates (the paper's enumeration);
* :func:`rank_pruned` is the paper's shortest-path search in batched form: ``Px`` only grows
  along a path (every step adds ``-log2 p >= 0``), so a node whose partial cost already reaches
  the canary's cost cannot lead to a better candidate and is dropped. Exact, and fast when the
  canary is exposed (few better candidates); as slow as enumeration when it is not.
Scores are computed in float64 (on a double copy of the model): in float32, candidates a few
1e-5 bits apart swap places between batch shapes, and near a random canary's score there are
thousands of candidates per bit. Candidates within 1e-9 bits of the canary count as ties.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from .canaries import CanaryFormat
from .model import BOS, CharLM, as_module, encode, one_thread

__all__ = ["Exposure", "candidate_costs", "exposure", "extract", "log_perplexity",
           "rank_pruned"]

_TIE = 1e-9  # bits; float64 scores of one candidate agree to ~1e-12 across batch shapes
_LN2 = math.log(2.0)


@dataclass(frozen=True)
class Exposure:
    """One canary's rank and exposure, and how the rank was found."""

    secret: str
    rank: int
    size: int
    log_perplexity: float  # bits
    method: str
    seconds: float
    nodes: int  # trie nodes scored by the model

    @property
    def exposure(self) -> float:
        return exposure(self.rank, self.size)


def exposure(rank: int, size: int) -> float:
    """``log2 size - log2 rank`` (bits)."""
    if not 1 <= rank <= size:
        raise ValueError(f"rank must lie in [1, {size}] (got {rank})")
    return math.log2(size) - math.log2(rank)


def _scorer(model: CharLM | object) -> CharLM:
    """A float64 copy of the model (the caller's model is left as it is)."""
    return copy.deepcopy(as_module(model)).double().eval()


class _Levels:
    """The model's next-character log2-probabilities after ``prefix + partial secret``.

    The hidden layer is linear in the window's embeddings, so its input is a sum of one
    ``(VOCAB, hidden)`` table per window position (``P[k] = embed @ W_k^T``). For a trie level
    every fixed character (prefix, literal pattern characters) adds one constant row, computed
    once, and each digit slot still in the window adds a row picked by that node's digit: a
    level costs ``nodes x hidden`` additions, the ``tanh`` and the small output layer, not a
    ``window x embed x hidden`` product per node. Float64 throughout (module docstring).
    """

    def __init__(self, model: CharLM | object, fmt: CanaryFormat) -> None:
        m = _scorer(model)
        w, hidden = m.window, m.hidden.out_features
        with torch.no_grad():
            weight = m.hidden.weight.reshape(hidden, w, -1)
            self.tables = torch.einsum("ve,hke->kvh", m.embed.weight, weight)  # (w, V, H)
            self.bias = m.hidden.bias.clone()
        self.out = m.out
        self.fmt, self.window = fmt, w
        self.digit_tokens = torch.tensor(encode("0123456789"))

    @torch.no_grad()
    def log2p(self, j: int, idx: np.ndarray) -> np.ndarray:
        """``(len(idx), VOCAB)`` log2-probabilities of pattern character ``j`` for the nodes
        whose digits so far, read as a number, are ``idx``."""
        fmt, w = self.fmt, self.window
        seq: list[str | int] = [BOS] * w + list(fmt.prefix) + list(fmt.pattern[:j])
        const = self.bias.clone()
        slots: list[int] = []  # window positions of the digit slots, oldest first
        for k, ch in enumerate(seq[-w:]):
            if ch == "D":
                slots.append(k)
            else:
                const += self.tables[k, ch if isinstance(ch, int) else encode(ch)[0]]
        pre = const[None, :] + self._digits(slots, idx)
        logits = self.out(torch.tanh(pre))
        return torch.log_softmax(logits, -1).numpy() / _LN2

    def _digits(self, slots: list[int], idx: np.ndarray) -> torch.Tensor:
        """The digit slots' share of the hidden input; the window holds the newest
        ``len(slots)`` digits, i.e. ``idx mod 10^len(slots)``."""
        m = len(slots)
        if m == 0:  # no digit in the window (yet, or any more): every node has the same input
            return torch.zeros(len(idx), len(self.bias), dtype=self.bias.dtype)
        low = idx % 10**m
        rows = [self.tables[k][self.digit_tokens] for k in slots]  # (10, H) each, oldest first
        if len(idx) * m < 10**m:  # few nodes (a pruned level): gather per slot
            out = torch.zeros(len(idx), len(self.bias), dtype=self.bias.dtype)
            for s, r in enumerate(rows):
                out += r[torch.from_numpy(low // 10 ** (m - 1 - s) % 10)]
            return out
        table = rows[0]  # every filling of the m slots, built by broadcasting
        for r in rows[1:]:
            table = (table[:, None, :] + r[None, :, :]).reshape(-1, r.shape[1])
        return table if len(idx) == 10**m and bool(np.all(np.diff(low) == 1)) else \
            table[torch.from_numpy(low)]


def _walk(model: CharLM | object, fmt: CanaryFormat, *, below: float | None = None,
          beam: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Costs (bits) and indices of the trie's leaves, level by level; ``below`` prunes nodes
    whose cost reaches it, ``beam`` keeps the ``beam`` cheapest nodes per level."""
    with one_thread():
        return _walk_levels(_Levels(model, fmt), fmt, below=below, beam=beam)


def _walk_levels(levels: _Levels, fmt: CanaryFormat, *, below: float | None,
                 beam: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    digit_ids = levels.digit_tokens.numpy()
    cost = np.zeros(1)
    idx = np.zeros(1, dtype=np.int64)
    nodes = 0
    for j, ch in enumerate(fmt.pattern):
        if len(idx) == 0:
            break
        logp = levels.log2p(j, idx)
        nodes += len(idx)
        if ch == "D":
            cost = (cost[:, None] - logp[:, digit_ids]).reshape(-1)
            idx = (idx[:, None] * 10 + np.arange(10)).reshape(-1)
        else:
            cost = cost - logp[:, encode(ch)[0]]
        keep: np.ndarray | None = None
        if below is not None:
            keep = np.flatnonzero(cost < below)
        if beam is not None and len(cost) > beam:
            keep = np.argpartition(cost, beam - 1)[:beam]
        if keep is not None:
            cost, idx = cost[keep], idx[keep]
    return cost, idx, nodes


def candidate_costs(model: CharLM | object, fmt: CanaryFormat) -> np.ndarray:
    """``Px`` (bits) of every candidate, in candidate-index order (``fmt.size`` values)."""
    cost, idx, _ = _walk(model, fmt)
    out = np.empty(fmt.size)
    out[idx] = cost
    return out


def log_perplexity(model: CharLM | object, fmt: CanaryFormat, secret: str) -> float:
    """``-log2 P(secret | fmt.prefix)`` under ``model`` (bits)."""
    m = _scorer(model)
    ids = encode(fmt.prefix + secret)
    n0 = len(fmt.prefix)
    full = torch.tensor([[BOS, *ids]])
    with torch.no_grad():
        logp = torch.log_softmax(m(full)[0], -1).double().numpy() / _LN2
    return float(-sum(logp[n0 + k, ids[n0 + k]] for k in range(len(secret))))


def rank_enumerate(model: CharLM | object, fmt: CanaryFormat, secret: str) -> Exposure:
    """Exact rank by scoring all ``|R|`` candidates."""
    t0 = time.perf_counter()
    i = fmt.index(secret)
    cost, idx, nodes = _walk(model, fmt)
    c = float(cost[np.flatnonzero(idx == i)[0]])
    rank = 1 + int(np.count_nonzero(cost < c - _TIE))
    return Exposure(secret, rank, fmt.size, c, "enumerate", time.perf_counter() - t0, nodes)


def rank_pruned(model: CharLM | object, fmt: CanaryFormat, secret: str) -> Exposure:
    """Exact rank by the pruned (shortest-path) search; see the module docstring."""
    t0 = time.perf_counter()
    fmt.index(secret)
    c = log_perplexity(model, fmt, secret)
    cost, _, nodes = _walk(model, fmt, below=c - _TIE)
    rank = 1 + len(cost)
    return Exposure(secret, rank, fmt.size, c, "pruned", time.perf_counter() - t0, nodes)


def extract(model: CharLM | object, fmt: CanaryFormat, *, beam: int = 1) -> str:
    """The extraction attack: decode the most likely secret after ``fmt.prefix``.

    ``beam=1`` is greedy decoding (most likely digit at each slot); a wider beam keeps the
    ``beam`` most likely partial secrets per slot. The attacker knows the format (prefix and
    layout), not the digits.
    """
    if beam < 1:
        raise ValueError(f"beam must be >= 1 (got {beam})")
    cost, idx, _ = _walk(model, fmt, beam=beam)
    return fmt.secret(int(idx[int(np.argmin(cost))]))
