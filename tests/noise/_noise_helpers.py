"""Shared helpers for the dpkit.noise tests.

Statistical tests use fixed seeds and thresholds derived from the stated distribution; each has a
false-failure probability of at most 1e-6 for a correct sampler (stated next to the test).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

from dpkit.noise.sources import Source

#: two-sided normal quantile for a 1e-6 false-failure rate (P(|Z| > 4.892) = 1e-6)
Z_1E6 = 4.892
#: p-value below which a goodness-of-fit test fails (false-failure rate 1e-6)
P_FAIL = 1e-6


def wilson(successes: int, n: int, z: float = Z_1E6) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion at normal quantile ``z``."""
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return centre - half, centre + half


class ScriptedSource(Source):
    """A source that returns pre-set words (for driving the exact fallback deterministically).

    ``u32`` and ``u64`` are consumed in order; when a queue runs out, words come from a seeded
    PCG64 stream so a test only scripts the words it cares about.
    """

    insecure = True

    def __init__(self, u32: Iterable[int] = (), u64: Iterable[int] = (), seed: int = 0) -> None:
        self.q32 = list(u32)
        self.q64 = list(u64)
        self._bg = np.random.PCG64(seed)
        self.calls64 = 0

    def uint64(self, n: int) -> np.ndarray:
        self.calls64 += 1
        head, self.q64 = self.q64[:n], self.q64[n:]
        rest = self._bg.random_raw(n - len(head))
        return np.concatenate([np.array(head, dtype=np.uint64), rest.astype(np.uint64)])

    def uint32(self, n: int) -> np.ndarray:
        head, self.q32 = self.q32[:n], self.q32[n:]
        rest = self._bg.random_raw(n - len(head)).astype(np.uint32)
        return np.concatenate([np.array(head, dtype=np.uint32), rest])


def words_in_forked_child(src: Source, n: int) -> np.ndarray:
    """The next ``n`` uint64 words ``src`` gives in a forked child (which leaves at once,
    without running pytest's teardown)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(w, src.uint64(n).tobytes())
        finally:
            os._exit(0)
    os.close(w)
    child = np.frombuffer(os.read(r, 8 * n), dtype=np.uint64)
    os.close(r)
    os.waitpid(pid, 0)
    return child


class Fixed(Source):
    """Every word the same: plants a chosen path through the samplers deterministically (with
    the constant-work samplers, (1, 1) gives noise 177 at scale 4, a probability e^-44 event;
    (2^63, 0) gives 0; tests/noise/test_constant_work.py)."""

    def __init__(self, w64: int, w32: int) -> None:
        self.w64, self.w32 = np.uint64(w64), np.uint32(w32)

    def uint64(self, n: int) -> np.ndarray:
        return np.full(n, self.w64, dtype=np.uint64)

    def uint32(self, n: int) -> np.ndarray:
        return np.full(n, self.w32, dtype=np.uint32)
