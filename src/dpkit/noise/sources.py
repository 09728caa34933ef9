"""Sources of uniform random words: the only place in dpkit that touches randomness.

Two kinds exist:

* :func:`secure` / :func:`default_source` -- the operating system's CSPRNG (``os.urandom``,
  i.e. ``getrandom(2)`` on Linux), read in 1 MiB blocks and handed out as ``uint64``/``uint32``
  words. Fork-safe: a child process drops the parent's buffered bytes.
* :func:`seeded` -- numpy's PCG64 seeded with an integer. Reproducible, **not secure**, for tests
  and examples only; its ``repr`` says ``INSECURE`` and ``source.insecure`` is ``True`` so every
  release made with it can say so.

Every sampler in :mod:`dpkit.noise` consumes words only through :meth:`Source.uint32` and
:meth:`Source.uint64`; the words are assumed independent and uniform, and that assumption is the
only thing the exactness proofs in ``docs/noise.md`` need from a source.
"""

from __future__ import annotations

import os
import threading
import weakref
from abc import ABC, abstractmethod

import numpy as np

__all__ = ["SecureSource", "SeededSource", "Source", "default_source", "secure", "seeded",
           "token_bytes", "token_hex"]


class Source(ABC):
    """A stream of independent uniform random words.

    Subclasses implement :meth:`uint64`; :meth:`uint32` defaults to halves of 64-bit words.
    """

    insecure: bool = True

    @abstractmethod
    def uint64(self, n: int) -> np.ndarray:
        """Return ``n`` independent uniform ``uint64`` words (a fresh, writable array)."""

    def uint32(self, n: int) -> np.ndarray:
        """Return ``n`` independent uniform ``uint32`` words (a fresh, writable array)."""
        n = _count(n)
        words = self.uint64((n + 1) // 2)
        return words.view(np.uint32)[:n].copy()


def _count(n: int) -> int:
    n = int(n)
    if n < 0:
        raise ValueError(f"number of words must be >= 0 (got {n})")
    return n


_BLOCK = 1 << 20  # bytes per os.urandom refill
_LIVE_SECURE: weakref.WeakSet[SecureSource] = weakref.WeakSet()


class SecureSource(Source):
    """Words from the operating system CSPRNG (``os.urandom``), buffered in 1 MiB blocks.

    Thread-safe (a lock guards the buffer) and fork-safe (buffered bytes are discarded in a
    child, so parent and child never hand out the same words). Requests larger than half a
    block bypass the buffer.
    """

    insecure = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buf = np.empty(0, dtype=np.uint8)
        self._pos = 0
        self._pid = os.getpid()
        _LIVE_SECURE.add(self)

    def _drop(self) -> None:
        self._buf = np.empty(0, dtype=np.uint8)
        self._pos = 0
        self._pid = os.getpid()

    def _bytes(self, nbytes: int) -> np.ndarray:
        """``nbytes`` fresh random bytes as a new writable uint8 array (never shared).

        Served from the buffer first, then from a refill; no byte is handed out twice and none
        is skipped except the buffer's tail after a fork.
        """
        out = np.empty(nbytes, dtype=np.uint8)
        with self._lock:
            if self._pid != os.getpid():  # belt and braces next to register_at_fork
                self._drop()
            done = min(nbytes, self._buf.size - self._pos)
            out[:done] = self._buf[self._pos : self._pos + done]
            self._pos += done
            rest = nbytes - done
            if rest > _BLOCK // 2:  # large request: read it directly
                out[done:] = np.frombuffer(os.urandom(rest), dtype=np.uint8)
            elif rest:
                self._buf = np.frombuffer(os.urandom(_BLOCK), dtype=np.uint8)
                out[done:] = self._buf[:rest]
                self._pos = rest
        return out

    def uint64(self, n: int) -> np.ndarray:
        n = _count(n)
        return self._bytes(8 * n).view(np.uint64)

    def uint32(self, n: int) -> np.ndarray:
        n = _count(n)
        return self._bytes(4 * n).view(np.uint32)

    def __repr__(self) -> str:
        return "SecureSource(os.urandom)"


def _after_fork_in_child() -> None:
    for src in list(_LIVE_SECURE):
        src._drop()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class SeededSource(Source):
    """Reproducible words from numpy's PCG64 seeded with ``seed``. **INSECURE**: tests only."""

    insecure = True

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise TypeError(f"seed must be an int (got {type(seed).__name__})")
        self.seed = int(seed)
        self._bitgen = np.random.PCG64(self.seed)

    def uint64(self, n: int) -> np.ndarray:
        n = _count(n)
        return np.asarray(self._bitgen.random_raw(n), dtype=np.uint64)

    def __repr__(self) -> str:
        return f"SeededSource(seed={self.seed}, INSECURE: reproducible, for tests only)"


_DEFAULT = SecureSource()


def default_source() -> SecureSource:
    """The process-wide secure source used whenever a sampler gets ``source=None``."""
    return _DEFAULT


def secure() -> SecureSource:
    """The operating-system CSPRNG source (the default). Returns the shared instance."""
    return _DEFAULT


def seeded(seed: int) -> SeededSource:
    """A reproducible, **insecure** source for tests and examples.

    >>> src = seeded(42)
    >>> src.insecure
    True
    """
    return SeededSource(seed)


def token_bytes(n: int = 32) -> bytes:
    """``n`` bytes straight from the operating system's CSPRNG, for secrets (keys, tokens).

    Never from a seeded source: a credential must not be reproducible even in a test project.
    ``n`` must be at least 16 (128 bits); the default 32 gives 256 bits.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 16:
        raise ValueError(f"a secret needs at least 16 random bytes (got {n!r})")
    return os.urandom(n)


def token_hex(n: int = 32) -> str:
    """:func:`token_bytes` as ``2 n`` lowercase hex digits."""
    return token_bytes(n).hex()
