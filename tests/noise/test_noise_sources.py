"""Sources: secure default, seeded reproducibility, flags, fork safety, and the randomness
invariant (nothing outside dpkit.noise draws random numbers)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from _noise_helpers import words_in_forked_child

import dpkit.noise as noise
from dpkit.noise.sources import SecureSource, SeededSource

SRC = Path(__file__).resolve().parents[2] / "src" / "dpkit"


def test_secure_is_default_and_flagged_secure() -> None:
    src = noise.secure()
    assert isinstance(src, SecureSource)
    assert src.insecure is False
    assert noise.default_source() is src
    assert "urandom" in repr(src)
    assert "INSECURE" not in repr(src)


def test_seeded_is_flagged_insecure() -> None:
    src = noise.seeded(42)
    assert isinstance(src, SeededSource)
    assert src.insecure is True
    assert "INSECURE" in repr(src)
    assert "42" in repr(src)


@pytest.mark.parametrize("bad", [1.5, "42", None, True])
def test_seeded_rejects_non_int_seed(bad: object) -> None:
    with pytest.raises(TypeError, match="seed must be an int"):
        noise.seeded(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("make", [noise.secure, lambda: noise.seeded(3)])
def test_word_dtypes_and_lengths(make) -> None:  # type: ignore[no-untyped-def]
    src = make()
    for n in (0, 1, 7, 1000, 300_000):
        a, b = src.uint64(n), src.uint32(n)
        assert a.dtype == np.uint64 and a.shape == (n,)
        assert b.dtype == np.uint32 and b.shape == (n,)
        a[:1] = 0  # writable, fresh arrays
        b[:1] = 0


def test_secure_words_do_not_repeat() -> None:
    # 2**17 64-bit words from small and large requests: a repeat has probability < 2**-30.
    # Small, buffer-straddling (60k words = 480 KiB of a 1 MiB buffer) and direct (> 512 KiB)
    # requests; any repeated 64-bit word among ~6e5 has probability < 2**-24 for a CSPRNG.
    src = noise.secure()
    parts = [src.uint64(1) for _ in range(1000)]
    parts += [src.uint64(60_000) for _ in range(5)] + [src.uint64(70_000), src.uint64(3)]
    parts += [src.uint32(2 * 60_001).view(np.uint64) for _ in range(3)]
    words = np.concatenate(parts)
    assert np.unique(words).size == words.size


def test_secure_words_look_uniform() -> None:
    # Each of the 64 bit positions is set with probability 1/2. With z = 6 per position
    # (normal approximation, P < 2e-9 each), the false-failure rate is < 1.3e-7 in total.
    n = 1 << 16
    w = noise.secure().uint64(n)
    bits = np.unpackbits(w.view(np.uint8)).reshape(n, 64).sum(axis=0)
    assert np.all(np.abs(bits - n / 2) < 6 * np.sqrt(n / 4))


def test_seeded_reproducible_and_seed_dependent() -> None:
    a = noise.discrete_laplace(3, 100, source=noise.seeded(7))
    b = noise.discrete_laplace(3, 100, source=noise.seeded(7))
    c = noise.discrete_laplace(3, 100, source=noise.seeded(8))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    g1 = noise.discrete_gaussian(10, 50, source=noise.seeded(1))
    g2 = noise.discrete_gaussian(10, 50, source=noise.seeded(1))
    assert np.array_equal(g1, g2)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_secure_source_is_fork_safe() -> None:
    src = noise.secure()
    src.uint64(1)  # make sure the buffer holds unread bytes
    child = words_in_forked_child(src, 4)
    parent = src.uint64(4)
    assert child.size == 4
    assert not np.array_equal(child, parent)


def test_samplers_reject_non_source() -> None:
    with pytest.raises(TypeError, match=r"source must be a dpkit\.noise Source"):
        noise.discrete_laplace(1, 3, source=np.random.default_rng(0))  # type: ignore[arg-type]


# The tree-wide check that nothing outside dpkit.noise draws randomness lives in
# tests/test_architecture.py.


def test_numpy_random_only_in_sources() -> None:
    """Inside dpkit.noise, np.random (PCG64 for seeded()) is confined to sources.py."""
    for path in sorted((SRC / "noise").rglob("*.py")):
        if path.name == "sources.py":
            continue
        assert "np.random" not in path.read_text(encoding="utf-8"), path.name


@pytest.mark.parametrize("module", ["__init__", "sources", "samplers", "grid", "exact"])
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    name = "dpkit.noise" if module == "__init__" else f"dpkit.noise.{module}"
    res = doctest.testmod(importlib.import_module(name), verbose=False)
    assert res.failed == 0
