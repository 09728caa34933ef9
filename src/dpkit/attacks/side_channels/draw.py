"""The fuzzer's choices, drawn from :mod:`dpkit.noise` (the only randomness in dpkit).

A run is reproducible from its seed: every choice is a :func:`dpkit.noise.uniform_int` draw
from one ``dp.noise.seeded(seed)`` stream, consumed in a fixed order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from dpkit import noise

T = TypeVar("T")

_BATCH = 4096
_WORD = 2**31


class Draw:
    """Uniform choices from a seeded :mod:`dpkit.noise` stream (reproducible, insecure).

    Draws are taken in batches of 31-bit words; ``below(n)`` maps a word to ``[0, n)`` by
    modulo. The bias (at most n / 2**31 for the n < 100 used here) does not matter for a
    fuzzer, whose choices need to be reproducible and varied, not exactly uniform.

    >>> d = Draw(7)
    >>> d.below(10) == Draw(7).below(10)
    True
    """

    def __init__(self, seed: int) -> None:
        self._source = noise.seeded(seed)
        self._words: np.ndarray = np.empty(0, dtype=np.int64)
        self._i = 0

    def below(self, n: int) -> int:
        """A choice in ``[0, n)``."""
        if n < 1:
            raise ValueError(f"nothing to choose from (n = {n})")
        if self._i >= len(self._words):
            self._words = noise.uniform_int(_WORD, _BATCH, source=self._source)
            self._i = 0
        w = int(self._words[self._i])
        self._i += 1
        return w % n

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options``."""
        return options[self.below(len(options))]

    def chance(self, numerator: int, denominator: int) -> bool:
        """True with probability ``numerator / denominator``."""
        return self.below(denominator) < numerator

    def seed(self) -> int:
        """A fresh seed for a derived stream (the D/D' projects' noise, a sub-generator)."""
        return self.below(_WORD)
