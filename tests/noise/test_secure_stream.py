"""The secure keystream source: known answers against hashlib / the cipher directly, fast key
erasure, re-keying from the OS, fork safety, thread safety, and uniformity."""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
import pytest
from _noise_helpers import words_in_forked_child
from scipy import stats

import dpkit.noise as noise
from dpkit.noise import sources
from dpkit.noise.sources import SecureSource

BLOCK = sources._BLOCK
KEY0 = bytes(range(32))


def _have_chacha() -> bool:
    return sources._have_cryptography()


CONSTRUCTIONS = ["shake128", "urandom"] + (["chacha20"] if _have_chacha() else [])
STREAMS = [c for c in CONSTRUCTIONS if c != "urandom"]


def _keystream(construction: str, key: bytes, nbytes: int) -> bytes:
    """The construction computed from its definition, with nothing of dpkit in the way."""
    if construction == "shake128":
        return hashlib.shake_128(key).digest(nbytes)
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    enc = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    return enc.update(bytes(nbytes))


def _reference(construction: str, key: bytes, batches: list[int]) -> bytes:
    """Fast key erasure: each key expands to 32 + m bytes, the first 32 become the next key."""
    out = b""
    for m in batches:
        data = _keystream(construction, key, 32 + m)
        key, out = data[:32], out + data[32:]
    return out


@pytest.fixture
def known_key(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every OS key the sources ask for is KEY0, KEY0+1, ... (recorded in the returned list)."""
    given: list[bytes] = []

    def fake() -> bytes:
        k = bytes((b + len(given)) % 256 for b in KEY0)
        given.append(k)
        return k

    monkeypatch.setattr(sources, "_os_key", fake)
    return given


def test_chacha20_is_rfc8439() -> None:
    # RFC 8439, 2.3.2: the block function for key 00..1f, nonce 000000090000004a00000000, block
    # counter 1 (OpenSSL's 16-byte IV: 32-bit little-endian counter, then the nonce)
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    iv = (1).to_bytes(4, "little") + bytes.fromhex("000000090000004a00000000")
    block = Cipher(algorithms.ChaCha20(KEY0, iv), mode=None).encryptor().update(bytes(64))
    assert block.hex() == (
        "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
        "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e")


@pytest.mark.parametrize("construction", STREAMS)
def test_known_answer_small_then_large(construction: str, known_key: list[bytes]) -> None:
    src = SecureSource(construction)
    small = src.uint64(5).tobytes() + src.uint32(3).tobytes()  # from one 1 MiB buffer refill
    assert small == _reference(construction, KEY0, [BLOCK])[:52]
    # a large request bypasses the buffer and continues the key chain: the key after the
    # refill's batch, then 1 MiB batches and the remainder
    n = 2 * BLOCK + 40
    large = src.uint64(n // 8).tobytes()
    key1 = _keystream(construction, KEY0, 32)
    assert large == _reference(construction, key1, [BLOCK, BLOCK, 40])
    # the buffer goes on where it stopped
    assert src.uint64(2).tobytes() == _reference(construction, KEY0, [BLOCK])[52:68]
    assert known_key == [KEY0]  # one OS key so far


def test_shake_known_answer_pinned(known_key: list[bytes]) -> None:
    """The first words for key 00..1f, written out: a change of construction fails here."""
    src = SecureSource("shake128")
    expected = hashlib.shake_128(KEY0).digest(48)[32:]
    assert src.uint64(2).tobytes() == expected
    assert expected.hex() == "ba9d4e33d16a3a44cc39b1bdd205b41b"  # SHAKE128(00..1f)[32:48]


@pytest.mark.parametrize("construction", STREAMS)
def test_rekeys_from_the_os_every_reseed_bytes(construction: str, known_key: list[bytes],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "_RESEED", 2 * BLOCK)
    src = SecureSource(construction)
    got = src.uint64((3 * BLOCK) // 8).tobytes()
    assert len(known_key) == 2  # the first key, then a fresh one after 2 MiB
    chain = _keystream(construction, _keystream(construction, KEY0, 32)[:32], 32)
    mixed = bytes(a ^ b for a, b in zip(chain, known_key[1], strict=True))
    assert got == (_reference(construction, KEY0, [BLOCK, BLOCK])
                   + _reference(construction, mixed, [BLOCK]))


def test_repr_names_the_construction_and_flags() -> None:
    for c in CONSTRUCTIONS:
        src = SecureSource(c)
        assert src.insecure is False
        assert "INSECURE" not in repr(src) and "urandom" in repr(src)
        assert src.construction == c
    assert "SHAKE-128 keystream" in repr(SecureSource("shake128"))
    if _have_chacha():
        assert "ChaCha20 keystream" in repr(SecureSource("chacha20"))


def test_default_is_chacha20_where_cryptography_is_installed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPKIT_SECURE_SOURCE", raising=False)
    expected = "chacha20" if _have_chacha() else "shake128"
    assert SecureSource().construction == expected
    monkeypatch.setattr(sources, "_have_cryptography", lambda: False)
    assert SecureSource().construction == "shake128"
    with pytest.raises(ImportError, match="pip install cryptography"):
        SecureSource("chacha20")
    monkeypatch.setenv("DPKIT_SECURE_SOURCE", "urandom")
    assert SecureSource().construction == "urandom"


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ValueError, match="construction must be one of chacha20, shake128"):
        SecureSource("aes")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("construction", CONSTRUCTIONS)
def test_forked_child_never_continues_the_parent_stream(construction: str) -> None:
    # The child's first 4 words vs the parent's next 2^17 words (its whole buffer and beyond):
    # for independent streams a shared 64-bit word has probability < 2^17 · 4 / 2^64 = 2^-45.
    src = SecureSource(construction)
    src.uint64(1)  # a key and a buffer with unread bytes exist before the fork
    child = words_in_forked_child(src, 4)
    parent = np.concatenate([src.uint64(1 << 16), src.uint64(1 << 16)])  # buffer, then direct
    assert child.size == 4
    assert not np.isin(child, parent).any()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_another_thread_holds_the_lock() -> None:
    """A child forked while a parent thread draws must not inherit a locked lock."""
    src = SecureSource("shake128")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with src._lock:
            holding.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    holding.wait(10)
    pid = os.fork()
    if pid == 0:
        try:
            src.uint64(4)  # would block forever on the parent's lock
        finally:
            os._exit(0)
    release.set()
    t.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("construction", CONSTRUCTIONS)
def test_threads_never_get_the_same_words(construction: str) -> None:
    # 4 threads x 50 requests of small sizes and one large; any repeated 64-bit word among
    # ~6e5 has probability < 2^-25 for independent uniform words.
    src = SecureSource(construction)
    got: list[np.ndarray] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        parts = [src.uint64(1 + (j * 37 + i) % 3000) for j in range(50)] + [src.uint64(70_000)]
        with lock:
            got.extend(parts)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    words = np.concatenate(got)
    assert np.unique(words).size == words.size


@pytest.mark.parametrize("construction", CONSTRUCTIONS)
def test_bytes_are_uniform(construction: str) -> None:
    # 2^22 bytes (a large request and buffered small ones): chi-square over the 256 byte values
    # with 255 degrees of freedom, and per-bit-position counts of 2^19 64-bit words at z = 6.
    # False-failure probability < 1e-9 (chi-square) + 64 · 2e-9 (bits) < 2e-7 per construction.
    src = SecureSource(construction)
    b = np.concatenate([src.uint64(1 << 19).view(np.uint8)]
                       + [src.uint32(1000).view(np.uint8) for _ in range(100)])
    counts = np.bincount(b, minlength=256)
    expected = b.size / 256
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < stats.chi2.isf(1e-9, 255), chi2
    w = src.uint64(1 << 19)
    bits = np.unpackbits(w.view(np.uint8)).reshape(-1, 64).sum(axis=0)
    n = w.size
    assert np.all(np.abs(bits - n / 2) < 6 * np.sqrt(n / 4))


def test_default_source_is_the_stream_and_shared() -> None:
    assert noise.secure() is noise.default_source()
    assert isinstance(noise.secure(), SecureSource)
    assert noise.secure().construction in CONSTRUCTIONS
