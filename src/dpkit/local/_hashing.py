"""Hash families with exact independence guarantees, and the fast Walsh-Hadamard transform.

* **Bit-linear family** (per-user hashes in local hashing): for ``x`` with bits
  ``x_0 … x_{L-1}``, ``h_{a,b}(x) = (b + Σ_j a_j x_j) mod g`` with ``a ∈ Z_g^L``, ``b ∈ Z_g``
  uniform. For ``x ≠ v`` some bit differs, the difference of that bit is ±1 (a unit mod g), so
  ``h(x) - h(v) = Σ_j a_j (x_j - v_j)`` is exactly uniform on Z_g and independent of ``h(v)``
  (which ``b`` makes uniform): the family is *exactly* pairwise independent for every ``g >= 2``.
  A seed is ``L + 1`` digits in ``[0, g)``, drawn from :mod:`dpkit.noise`.
* **Simple tabulation** (public hashes in sketches): split a 64-bit key into 8 bytes,
  ``h(x) = (Σ_c T_c[byte_c(x)]) mod m`` with independent uniform tables. Exactly 3-wise
  independent (Pătraşcu-Thorup 2012: among three distinct keys one has a byte unique to it).
"""

from __future__ import annotations

import base64
import math

import numpy as np

from dpkit import noise
from dpkit.noise import Source

__all__ = [
    "TabulationHash",
    "bitlinear_hash",
    "domain_bits",
    "fwht",
    "uniform_digits",
]


def domain_bits(d: int) -> int:
    """Number of bits ``L`` so that every value in ``[0, d)`` fits (at least 1)."""
    return max(1, (d - 1).bit_length())


def uniform_digits(g: int, shape: tuple[int, int], source: Source | None) -> np.ndarray:
    """Independent uniform digits in ``[0, g)``, several digits per 32-bit draw (exact).

    ``shape = (m, n)``: returns an ``(m, n)`` int64 array (digit-major, contiguous rows).
    """
    m, n = shape
    per = max(1, math.floor(32 / math.log2(g))) if g > 1 else m
    while per > 1 and g**per >= 1 << 32:
        per -= 1
    per = min(per, m)
    words = -(-m // per)
    raw = noise.uniform_int(g**per, (words, n), source=source)
    out = np.empty((words, per, n), dtype=np.int64)
    if g & (g - 1) == 0:
        shift, mask = g.bit_length() - 1, g - 1
        for t in range(per):
            np.bitwise_and(raw >> (shift * t), mask, out=out[:, t, :])
    else:
        for t in range(per):
            q = raw // g
            np.subtract(raw, q * g, out=out[:, t, :])
            raw = q
    return out.reshape(words * per, n)[:m]


def bitlinear_hash(seeds: np.ndarray, values: np.ndarray, g: int) -> np.ndarray:
    """``h_i(values_i)`` for digit-major seeds ``(a_0 … a_{L-1}, b)``, shape ``(L + 1, n)``."""
    L = seeds.shape[0] - 1
    x = np.asarray(values).astype(np.int64, copy=False)
    acc = seeds[L].astype(np.int64)
    for j in range(L):
        acc += seeds[j] * ((x >> j) & 1)
    return acc % g


def fwht(x: np.ndarray) -> np.ndarray:
    """Unnormalised Walsh-Hadamard transform along the last axis (length a power of two).

    ``out[..., v] = Σ_j (-1)^{popcount(j & v)} x[..., j]``; O(D log D).
    """
    # float64 or int64 by the input: one ndarray type for both branches
    a: np.ndarray = np.array(x, dtype=np.float64 if x.dtype.kind == "f" else np.int64, copy=True)
    D = a.shape[-1]
    if D & (D - 1):
        raise ValueError(f"fwht needs a power-of-two length (got {D})")
    lead = a.shape[:-1]
    h = 1
    while h < D:
        v = a.reshape(*lead, D // (2 * h), 2, h)
        top = v[..., 0, :].copy()
        v[..., 0, :] += v[..., 1, :]
        v[..., 1, :] = top - v[..., 1, :]
        h *= 2
    return a


class TabulationHash:
    """``k`` independent simple-tabulation hashes of 64-bit keys into ``[0, m)``.

    Tables are drawn from :mod:`dpkit.noise` (``seed_source``) or given explicitly (a public
    configuration shared by clients and server). Exactly 3-wise independent per function.
    """

    def __init__(self, tables: np.ndarray, m: int) -> None:
        tables = np.asarray(tables, dtype=np.int64)
        if tables.ndim != 3 or tables.shape[1:] != (8, 256):
            raise ValueError(f"tables must have shape (k, 8, 256) (got {tables.shape})")
        if m < 2 or tables.min() < 0 or tables.max() >= m:
            raise ValueError(f"table entries must lie in [0, m) with m >= 2 (m = {m})")
        self.tables = tables
        self.m = int(m)

    @classmethod
    def draw(cls, k: int, m: int, *, source: Source | None = None) -> TabulationHash:
        """Draw ``k`` functions with uniform tables from ``source`` (the server does this once)."""
        return cls(noise.uniform_int(m, (k, 8, 256), source=source), m)

    @property
    def k(self) -> int:
        return int(self.tables.shape[0])

    def __call__(self, keys: np.ndarray, which: np.ndarray | int | None = None) -> np.ndarray:
        """Hash ``keys`` (int64/uint64). ``which=None``: all functions -> ``(k, n)``;
        an int or an array of function indices (one per key) -> ``(n,)``."""
        u = np.asarray(keys).astype(np.uint64, copy=False).ravel()
        byte = [((u >> np.uint64(8 * c)) & np.uint64(255)).astype(np.intp) for c in range(8)]
        if which is None:
            acc_all = np.zeros((self.k, u.size), dtype=np.int64)
            for c in range(8):
                acc_all += self.tables[:, c, :][:, byte[c]]
            return acc_all % self.m
        w = np.broadcast_to(np.asarray(which, dtype=np.intp), u.shape)
        acc = np.zeros(u.size, dtype=np.int64)
        for c in range(8):
            acc += self.tables[w, c, byte[c]]
        return acc % self.m


def tables_to_text(tables: np.ndarray) -> str:
    """A :class:`TabulationHash`'s tables as base64 of little-endian int32 (the public
    configuration a header of :mod:`dpkit.local.reports` carries to clients and servers)."""
    return base64.b64encode(np.asarray(tables, dtype="<i4").tobytes()).decode("ascii")


def tables_from_text(text: str, k: int) -> np.ndarray:
    """The ``(k, 8, 256)`` tables written by :func:`tables_to_text`."""
    return np.frombuffer(base64.b64decode(text), dtype="<i4").astype(np.int64).reshape(k, 8, 256)
