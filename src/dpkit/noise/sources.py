"""Sources of uniform random words: the only place in dpkit that touches randomness.

Two kinds exist:

* :func:`secure` / :func:`default_source` -- a cryptographically secure stream: a stream cipher
  (ChaCha20, from the optional ``cryptography`` package) or an extendable-output function
  (SHAKE-128, standard library) keyed with 256 bits from the operating system's CSPRNG
  (``os.urandom``, i.e. ``getrandom(2)`` on Linux), with fast key erasure every 1 MiB and a fresh
  OS key every 2^30 bytes and in every forked child. ``SecureSource("urandom")`` reads the OS
  directly instead (15-20x slower). ``docs/noise.md`` ("Sources") gives the security argument.
* :func:`seeded` -- numpy's PCG64 seeded with an integer. Reproducible, **not secure**, for tests
  and examples only; its ``repr`` says ``INSECURE`` and ``source.insecure`` is ``True`` so every
  release made with it can say so.

Every sampler in :mod:`dpkit.noise` consumes words only through :meth:`Source.uint32` and
:meth:`Source.uint64`; the words are assumed independent and uniform, and that assumption is the
only thing the exactness proofs in ``docs/noise.md`` need from a source.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

__all__ = ["CONSTRUCTIONS", "SecureSource", "SeededSource", "Source", "default_source", "secure",
           "seeded", "token_bytes", "token_hex"]


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


# Bytes per key of the stream (fast key erasure, docs/noise.md) and per buffer refill: large
# enough that the per-key cost (a cipher object, 32 bytes of next key) is invisible, small
# enough that a state captured from memory reveals at most this much not yet handed out.
_BLOCK = 1 << 20
# Bytes between fresh OS keys: recovers from a compromised state (e.g. a core dump) after at
# most 1 GiB, ~70 DP-SGD steps of a 1.8 M-parameter model, at the cost of one 32-byte
# getrandom per GiB. Not a limit of the ciphers: each key only ever produces 1 MiB + 32 bytes.
_RESEED = 1 << 30
_KEY = 32
_LIVE_SECURE: weakref.WeakSet[SecureSource] = weakref.WeakSet()


def _os_key() -> bytes:
    """256 fresh bits from the operating system's CSPRNG (a seam for the known-answer tests)."""
    return os.urandom(_KEY)


def _shake128(key: bytes, out: np.ndarray) -> bytes:
    """Fill ``out`` with SHAKE-128(key) after its first 32 bytes; return those (the next key)."""
    data = hashlib.shake_128(key).digest(_KEY + out.size)
    out[:] = np.frombuffer(data, dtype=np.uint8, count=out.size, offset=_KEY)
    return data[:_KEY]


_ZEROS = memoryview(bytes(_BLOCK))  # the plaintext: the keystream is the ciphertext of zeros


def _chacha20(key: bytes, out: np.ndarray) -> bytes:
    """Fill ``out`` with ChaCha20(key) after its first 32 bytes; return those (the next key)."""
    # cryptography is optional (not a core dependency): ChaCha20 is ~8x faster than SHAKE-128
    # here (OpenSSL's SIMD code) and is the kernel's own CSPRNG construction; without it the
    # stream is SHAKE-128 from the standard library (_default_construction)
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    # each key is used for exactly one call, so the all-zero nonce and counter never repeat
    enc = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    nxt = bytearray(_KEY)
    enc.update_into(_ZEROS[:_KEY], nxt)
    enc.update_into(_ZEROS[: out.size], out.data)  # into the caller's array: no copy
    return bytes(nxt)


# construction name -> (repr label, (key, out) -> next key); "urandom" reads the OS directly
_EXPAND: dict[str, tuple[str, Callable[[bytes, np.ndarray], bytes] | None]] = {
    "chacha20": ("ChaCha20", _chacha20),
    "shake128": ("SHAKE-128", _shake128),
    "urandom": ("os.urandom", None),
}
CONSTRUCTIONS = tuple(_EXPAND)


def _default_construction() -> str:
    """``DPKIT_SECURE_SOURCE`` if set, else ChaCha20 where ``cryptography`` is installed, else
    SHAKE-128."""
    name = os.environ.get("DPKIT_SECURE_SOURCE", "").strip().lower()
    if name:
        return name
    return "chacha20" if _have_cryptography() else "shake128"


def _have_cryptography() -> bool:
    # find_spec, not an import: importing cryptography costs ~0.3 s, paid on the first draw
    # instead of by every `import dpkit`
    return importlib.util.find_spec("cryptography") is not None


class SecureSource(Source):
    """Cryptographically secure words: a keystream keyed from ``os.urandom`` (the default).

    ``construction``: ``"chacha20"`` (needs ``cryptography``), ``"shake128"`` (standard
    library), ``"urandom"`` (the OS CSPRNG for every byte, no stream), or ``None`` for
    :func:`_default_construction`. Each key (256 bits) expands to ``32 + m`` bytes, ``m <=
    1 MiB``: the first 32 become the next key and the old one is dropped (fast key erasure,
    Bernstein 2017), the other ``m`` are handed out. A fresh OS key is XORed into the key every
    2^30 bytes; a forked child discards the parent's key and buffer and starts from a fresh
    OS key, so it never continues the parent's stream. Thread-safe: one lock guards the state.
    Words are buffered in 1 MiB blocks; requests larger than half a block bypass the buffer.
    """

    insecure = False

    def __init__(self, construction: str | None = None) -> None:
        name = _default_construction() if construction is None else construction
        if name not in _EXPAND:
            raise ValueError(f"construction must be one of {', '.join(CONSTRUCTIONS)} "
                             f"(got {name!r})")
        if name == "chacha20" and not _have_cryptography():  # fail here, not on a draw
            raise ImportError("SecureSource('chacha20') needs the cryptography package: "
                              "pip install cryptography (or use 'shake128')")
        self.construction = name
        self._label, self._expand = _EXPAND[name]
        self._lock = threading.Lock()
        self._drop()
        _LIVE_SECURE.add(self)

    def _drop(self) -> None:
        """Forget the buffer and the key (a fresh process: the next draw re-keys from the OS)."""
        self._buf = np.empty(0, dtype=np.uint8)
        self._pos = 0
        self._pid = os.getpid()
        self._key: bytes | None = None
        self._since_os = 0

    def _fill(self, out: np.ndarray) -> None:
        """Write fresh stream bytes into the uint8 array ``out`` (the lock is held)."""
        if self._expand is None:
            out[:] = np.frombuffer(os.urandom(out.size), dtype=np.uint8)
            return
        for lo in range(0, out.size, _BLOCK):
            m = min(_BLOCK, out.size - lo)
            if self._key is None:
                self._key, self._since_os = _os_key(), 0
            elif self._since_os >= _RESEED:  # XOR: the key stays secret if either part is
                fresh = int.from_bytes(_os_key(), "little")
                self._key = (int.from_bytes(self._key, "little") ^ fresh).to_bytes(_KEY, "little")
                self._since_os = 0
            self._key = self._expand(self._key, out[lo : lo + m])
            self._since_os += m

    def _bytes(self, nbytes: int) -> np.ndarray:
        """``nbytes`` fresh random bytes as a new writable uint8 array (never shared).

        A large request is written straight from the stream into the new array; a small one
        is served from the buffer, refilled in place once consumed. No byte is handed out
        twice; only the buffer's unread tail is dropped, after a fork.
        """
        out = np.empty(nbytes, dtype=np.uint8)
        with self._lock:
            if self._pid != os.getpid():  # belt and braces next to register_at_fork
                self._drop()
            if nbytes > _BLOCK // 2:
                self._fill(out)
                return out
            done = min(nbytes, self._buf.size - self._pos)
            out[:done] = self._buf[self._pos : self._pos + done]
            self._pos += done
            if done < nbytes:
                if self._buf.size != _BLOCK:
                    self._buf = np.empty(_BLOCK, dtype=np.uint8)
                self._fill(self._buf)  # every byte of it was copied out already
                out[done:] = self._buf[: nbytes - done]
                self._pos = nbytes - done
        return out

    def uint64(self, n: int) -> np.ndarray:
        n = _count(n)
        return self._bytes(8 * n).view(np.uint64)

    def uint32(self, n: int) -> np.ndarray:
        n = _count(n)
        return self._bytes(4 * n).view(np.uint32)

    def __repr__(self) -> str:
        if self._expand is None:
            return "SecureSource(os.urandom)"
        return (f"SecureSource({self._label} keystream keyed from os.urandom, fast key erasure "
                f"every 1 MiB, fresh OS key every 2^30 bytes and after fork)")


def _after_fork_in_child() -> None:
    for src in list(_LIVE_SECURE):
        # a new lock too: another thread of the parent may have held it at the fork, and no
        # thread of the child would ever release it
        src._lock = threading.Lock()
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


_DEFAULT: SecureSource | None = None
_DEFAULT_LOCK = threading.Lock()


def default_source() -> SecureSource:
    """The process-wide secure source used whenever a sampler gets ``source=None``.

    Made on first use, so that a bad ``DPKIT_SECURE_SOURCE`` fails the first draw with its
    message rather than ``import dpkit``.
    """
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = SecureSource()
    return _DEFAULT


def secure() -> SecureSource:
    """The secure source (the default): a keystream keyed from the OS CSPRNG. The shared
    instance; ``SecureSource("urandom")`` reads the OS directly."""
    return default_source()


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
