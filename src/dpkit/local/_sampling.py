"""Exact Bernoulli matrices with a quarter of the randomness of one word per draw.

``Bernoulli(p)`` is ``[U < p]`` for a uniform real U. Its first 8 bits (one uniform byte ``u``)
decide unless ``u = floor(256 p)`` (probability 1/256); those lanes finish with an exact
``Bernoulli(256 p - floor(256 p))`` from :func:`dpkit.noise.bernoulli`. So
P[True] = floor(256p)/256 + (256p - floor(256p))/256 = p exactly. Bytes come from
:func:`dpkit.noise.uniform_int` with ``high = 2^56`` (seven uniform bytes per draw).
Unary encoding, RAPPOR and CMS clients draw d such bits per user; reading 1 byte instead of 4
per bit makes them ~3x faster on the OS CSPRNG.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpkit import noise
from dpkit.noise import Source

__all__ = ["bernoulli_matrix"]


def bernoulli_matrix(p: Fraction, shape: tuple[int, ...], *,
                     source: Source | None = None) -> np.ndarray:
    """Independent exact Bernoulli(p) booleans of the given shape (p a rational in [0, 1])."""
    p = Fraction(p)
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1] (got {p})")
    n = math.prod(shape)
    if p in (0, 1) or n == 0:
        return np.full(shape, p == 1, dtype=bool)
    words = -(-n // 7)
    w = noise.uniform_int(1 << 56, words, source=source)
    u = w.astype("<u8").view(np.uint8).reshape(words, 8)[:, :7].reshape(-1)[:n]  # low 7 bytes
    T = math.floor(p * 256)
    out = u < T
    tie = np.flatnonzero(u == T)
    if tie.size:
        out[tie] = noise.bernoulli(p * 256 - T, tie.size, source=source)
    return out.reshape(shape)
