"""Canaries and the corpus they hide in (no torch needed here).

A canary is a line ``prefix + secret`` whose secret fills the *pattern* of a
:class:`CanaryFormat`: each ``D`` of the pattern is a digit, every other character is literal
(``"DDD-DDD"`` gives ``"281-264"``). The candidate space ``R`` is every filling of the pattern,
``|R| = 10^(number of D)``; exposure is measured exactly over all of it, so a format is refused
(before anything is trained) when ``|R|`` exceeds :data:`MAX_CANDIDATES`, when it uses a
character outside :data:`ALPHABET`, or when a secret given by the caller does not fit it.

The corpus is generated offline from a small seeded grammar (:func:`grammar_corpus`): short
English-like lines about people, places, times and numbers, drawn with :mod:`dpkit.noise`.
Nothing is downloaded; the same seed gives the same corpus.

Each line has a *writer* (:func:`deal_writers`: the lines dealt at random to ``W`` writers,
public and seeded), and all copies of a canary belong to one writer (:func:`plant`): a secret
repeated 16 times by one person is that person's data. Record-level DP protects one line;
user-level DP (one writer = one privacy unit) protects all of a writer's lines at once.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpkit import noise

__all__ = [
    "ALPHABET", "CANARY_NAMES", "MAX_CANDIDATES", "MAX_LINE", "NAMES", "CanaryFormat",
    "deal_writers",
    "grammar_corpus", "insert_canaries", "plant",
]

# every character a line may hold: the model's vocabulary is these plus begin/end/pad tokens
ALPHABET = string.ascii_lowercase + string.digits + " .,:-'?"
MAX_LINE = 32
MAX_CANDIDATES = 10**7  # exact exposure enumerates |R|; 10^7 keeps it to seconds on a CPU
NAMES = ("ann", "bob", "eve", "kim", "tom", "sam", "joe", "liz", "max", "ida", "ray", "zoe")
# one per canary, so canaries never share a prefix; the first 12 also occur in the corpus
CANARY_NAMES = (*NAMES, "pat", "ned", "amy", "dan", "fay", "gus", "hal", "ivy")


@dataclass(frozen=True)
class CanaryFormat:
    """``prefix`` then a secret in ``pattern`` (``D`` = one digit, anything else literal).

    >>> f = CanaryFormat("my code is ", "DDD-DDD")
    >>> f.size, f.secret(281264), f.index("281-264"), f.line(7)
    (1000000, '281-264', 281264, 'my code is 000-007')
    """

    prefix: str = "my code is "
    pattern: str = "DDD-DDD"

    def __post_init__(self) -> None:
        digits = self.pattern.count("D")
        if digits == 0:
            raise ValueError(f"canary pattern {self.pattern!r} has no 'D' (digit) slot: write "
                             "e.g. 'DDD-DDD' for a 10^6 candidate space")
        if 10**digits > MAX_CANDIDATES:
            raise ValueError(
                f"canary pattern {self.pattern!r} has {digits} digit slots: a candidate space of "
                f"10^{digits} is more than exact exposure enumerates (at most "
                f"{MAX_CANDIDATES:.0e}); use at most {len(str(MAX_CANDIDATES)) - 1} 'D's")
        bad = sorted(set(self.prefix + self.pattern.replace("D", "")) - set(ALPHABET))
        if bad:
            raise ValueError(f"canary format {self.prefix!r} + {self.pattern!r} uses characters "
                             f"outside the model's alphabet {bad}; use only {ALPHABET!r}")
        if not self.prefix:
            raise ValueError("canary prefix is empty: the extraction attack needs a prefix to "
                             "start from (e.g. 'my code is ')")
        if len(self.prefix) + len(self.pattern) > MAX_LINE:
            raise ValueError(f"canary line is {len(self.prefix) + len(self.pattern)} characters; "
                             f"lines hold at most {MAX_LINE}")

    @property
    def digits(self) -> int:
        return self.pattern.count("D")

    @property
    def size(self) -> int:
        """``|R|``, the number of candidate secrets."""
        return int(10**self.digits)

    def secret(self, index: int) -> str:
        """The ``index``-th candidate (lexicographic order of its digits)."""
        if not 0 <= int(index) < self.size:
            raise ValueError(f"candidate index {index} is outside [0, {self.size})")
        ds = iter(str(int(index)).zfill(self.digits))
        return "".join(next(ds) if c == "D" else c for c in self.pattern)

    def index(self, secret: str) -> int:
        """The position of ``secret`` in the candidate space; ValueError when it does not fit."""
        ok = len(secret) == len(self.pattern) and all(
            (s.isdigit() and s.isascii()) if p == "D" else s == p
            for s, p in zip(secret, self.pattern, strict=True))
        if not ok:
            raise ValueError(f"canary secret {secret!r} does not fit the format {self.pattern!r} "
                             f"(candidate space 10^{self.digits}): give {self.digits} digits in "
                             "that layout")
        return int("".join(s for s, p in zip(secret, self.pattern, strict=True) if p == "D"))

    def line(self, index: int) -> str:
        return self.prefix + self.secret(index)

    def draw(self, count: int, *, source: noise.Source | None = None) -> np.ndarray:
        """``count`` candidate indices drawn uniformly (with replacement) from ``R``."""
        return noise.uniform_int(self.size, count, source=source)


_ADJ = ("red", "old", "new", "small", "quiet", "green", "long", "cold", "warm", "busy")
_NOUN = ("car", "house", "garden", "river", "train", "book", "table", "dog", "road", "city",
         "shop", "window", "letter", "song")
_VERB = ("sees", "likes", "paints", "finds", "sells", "keeps", "moves", "reads", "wants")
_PLACE = ("the market", "the station", "the park", "the school", "the bank", "the office")


def _pick(words: Sequence[str], src: noise.Source | None) -> str:
    return words[int(noise.uniform_int(len(words), 1, source=src)[0])]


def _digits(k: int, src: noise.Source | None) -> str:
    return "".join(str(d) for d in noise.uniform_int(10, k, source=src))


def _sentence(src: noise.Source | None) -> str:
    """One line of the grammar; numbers appear in several layouts so digits are ordinary text."""
    kind = int(noise.uniform_int(8, 1, source=src)[0])
    name, adj, nn = _pick(NAMES, src), _pick(_ADJ, src), _pick(_NOUN, src)
    if kind == 0:
        return f"{name} {_pick(_VERB, src)} the {adj} {nn}."
    if kind == 1:
        return f"the {nn} is near {_pick(_PLACE, src)}."
    if kind == 2:
        return f"{name} meets {_pick(NAMES, src)} at {_digits(1, src)}:{_digits(2, src)}."
    if kind == 3:
        return f"{name} lives at {_digits(2, src)} {_pick(_NOUN, src)} road."
    if kind == 4:
        return f"room {_digits(3, src)} is {adj}."
    if kind == 5:
        return f"call {_pick(_PLACE, src)} on {_digits(3, src)}-{_digits(4, src)}."
    if kind == 6:
        return f"{name}'s {nn} is {adj}."
    return f"is the {nn} in {_pick(_PLACE, src)}?"


def grammar_corpus(n: int, *, source: noise.Source | None = None) -> list[str]:
    """``n`` lines of the seeded grammar (each at most :data:`MAX_LINE` characters)."""
    if n < 1:
        raise ValueError(f"the corpus needs at least 1 line (got n={n})")
    return [_sentence(source)[:MAX_LINE] for _ in range(int(n))]


def deal_writers(n: int, writers: int, *, source: noise.Source | None = None) -> np.ndarray:
    """The writer (``0 .. writers-1``) of each of ``n`` lines: the lines in a random order dealt
    round-robin, so every writer has ``n // writers`` or one more lines. Public and seeded.

    >>> deal_writers(6, 3, source=noise.seeded(1)).tolist()
    [0, 2, 0, 1, 1, 2]
    """
    if isinstance(writers, bool) or int(writers) != writers or not 1 <= writers <= n:
        raise ValueError(f"writers must be an integer in [1, {n}] (the number of lines; got "
                         f"{writers!r})")
    out = np.empty(int(n), dtype=np.int64)
    out[noise.permutation(int(n), source=source)] = np.arange(int(n)) % int(writers)
    return out


def plant(corpus: Sequence[str], lines: Sequence[str], counts: Sequence[int], *,
          writers: np.ndarray | None = None,
          source: noise.Source | None = None) -> tuple[list[str], np.ndarray | None]:
    """The corpus with ``lines[i]`` inserted ``counts[i]`` times, all lines in a random order,
    and (with ``writers``, one writer id per corpus line) each line's writer.

    All copies of canary ``i`` are written by one writer, drawn without replacement among the
    corpus's writers (so canaries never share a writer): under user-level DP the ``counts[i]``
    copies are one unit's data; under record-level DP they are ``counts[i]`` records.
    """
    if len(lines) != len(counts):
        raise ValueError(f"{len(lines)} canary lines but {len(counts)} insertion counts")
    for c in counts:
        if isinstance(c, bool) or int(c) != c or c < 0:
            raise ValueError(f"insertion counts must be integers >= 0 (got {c!r})")
    out = list(corpus)
    for line, c in zip(lines, counts, strict=True):
        out.extend([line] * int(c))
    units: np.ndarray | None = None
    if writers is not None:
        w = np.asarray(writers, dtype=np.int64)
        if w.shape != (len(corpus),):
            raise ValueError(f"writers must give one id per corpus line ({len(corpus)}; got "
                             f"shape {w.shape})")
        ids = np.unique(w)
        if len(ids) < len(lines):
            raise ValueError(f"{len(lines)} canaries but only {len(ids)} writers: each canary "
                             "needs its own writer")
        own = ids[noise.permutation(len(ids), source=source)[:len(lines)]]
        units = np.concatenate([w, *[np.full(int(c), u) for u, c in zip(own, counts,
                                                                         strict=True)]])
    order = noise.permutation(len(out), source=source)
    return [out[int(i)] for i in order], None if units is None else units[order]


def insert_canaries(corpus: Sequence[str], lines: Sequence[str], counts: Sequence[int], *,
                    source: noise.Source | None = None) -> list[str]:
    """The corpus with ``lines[i]`` inserted ``counts[i]`` times, all lines in a random order.

    Each inserted copy is its own record: under record-level DP a canary inserted ``r`` times
    is protected only by the group guarantee for ``r`` records (:func:`plant` also returns
    each line's writer, for user-level DP).
    """
    return plant(corpus, lines, counts, source=source)[0]
