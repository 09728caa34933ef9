"""The data and the questions of a reconstruction attack: people, subsets, the query matrix.

A :class:`Population` has one public identifier ``qid`` and one secret per person; a
:class:`SubsetQuery` asks for the sum of the secrets of the people matching a predicate on
``qid`` (:func:`random_subsets`, :func:`hashed_subsets`); :func:`subset_matrix` stacks their
masks into the matrix ``A`` of the linear system the attacks of
:mod:`dpkit.attacks.reconstruction` solve. The oracles of :mod:`dpkit.attacks.oracles` answer
them. (Shared by both, so it sits below both: no import cycle.)

All randomness comes from :mod:`dpkit.noise`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.noise import Source

__all__ = [
    "HASH_MODULUS",
    "Population",
    "SubsetQuery",
    "check_qid",
    "hashed_subsets",
    "make_population",
    "random_subsets",
    "subset_matrix",
]

#: The prime of the hash family ``h(q) = ((a q + b) mod p) mod 2`` (2^31 - 1, so ``a q`` fits in
#: a signed 64-bit integer for ``q < 2^32`` in numpy and in SQL engines).
HASH_MODULUS = 2**31 - 1
_QID_LOW = 1_000_000  # public identifiers look like 7-digit codes (zip + birth date)
_QID_HIGH = 10_000_000


# --------------------------------------------------------------------------- the data
@dataclass(frozen=True)
class Population:
    """People with a public identifier ``qid`` (unique, non-negative) and a secret each.

    ``secret[i]`` lies in ``[0, levels)`` (``levels=2``: one secret bit). The attacker knows
    ``qid`` and ``len(qid)``; the oracle alone knows ``secret``.
    """

    qid: np.ndarray
    secret: np.ndarray
    levels: int = 2

    def __post_init__(self) -> None:
        qid = np.asarray(self.qid, dtype=np.int64)
        secret = np.asarray(self.secret, dtype=np.int64)
        if qid.ndim != 1 or secret.shape != qid.shape:
            raise ValueError(
                f"qid and secret must be 1-d arrays of one length (got {qid.shape} and "
                f"{secret.shape})"
            )
        if qid.size == 0:
            raise ValueError("a population needs at least one person")
        if np.unique(qid).size != qid.size or (qid < 0).any() or (qid >= 2**32).any():
            raise ValueError("qid must be distinct integers in [0, 2**32)")
        if int(self.levels) < 2:
            raise ValueError(f"levels must be >= 2 (got {self.levels!r})")
        if (secret < 0).any() or (secret >= self.levels).any():
            raise ValueError(f"secret values must lie in [0, {self.levels}) (levels={self.levels})")
        object.__setattr__(self, "qid", qid)
        object.__setattr__(self, "secret", secret)
        object.__setattr__(self, "levels", int(self.levels))

    @property
    def n(self) -> int:
        return int(self.qid.size)

    def to_pandas(self) -> Any:
        """The table as a pandas DataFrame with columns ``qid`` and ``secret`` (needs pandas)."""
        import pandas as pd

        return pd.DataFrame({"qid": self.qid, "secret": self.secret})


def make_population(n: int, *, levels: int = 2, source: Source | None = None) -> Population:
    """``n`` people with distinct random 7-digit ``qid`` and uniform secrets in ``[0, levels)``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1 (got {n!r})")
    if n > (_QID_HIGH - _QID_LOW) // 4:
        raise ValueError(f"n must be <= {(_QID_HIGH - _QID_LOW) // 4} (got {n})")
    qid = np.empty(0, dtype=np.int64)
    while qid.size < n:  # rejection of duplicates keeps the draw uniform over distinct sets
        more = noise.uniform_int(_QID_HIGH - _QID_LOW, 2 * n, source=source) + _QID_LOW
        qid = np.concatenate([qid, more])
        _, first = np.unique(qid, return_index=True)
        qid = qid[np.sort(first)]
    qid = qid[:n]
    if levels == 2:
        secret = noise.bernoulli(0.5, n, source=source).astype(np.int64)
    else:
        secret = noise.uniform_int(int(levels), n, source=source)
    return Population(qid=qid, secret=secret, levels=levels)


# --------------------------------------------------------------------------- queries
@dataclass(frozen=True)
class SubsetQuery:
    """"Sum of the secrets of the people matching ``predicate``".

    ``predicate`` is SQL over the public column ``qid``; ``mask[i]`` says whether person ``i``
    (in the order of the public ``qid`` list the attacker was given) matches it. The mask is
    what the predicate *means*; the text is what a SQL system sees. Oracles that work on
    meaning use the mask; text-sensitive ones (sticky noise) and SQL engines use the text.
    """

    predicate: str
    mask: np.ndarray = field(repr=False)

    def sql(self, table: str = "people", *, levels: int = 2) -> str:
        """The SQL a system receives: a COUNT for secret bits, a SUM for small integers."""
        if levels == 2:
            return f"SELECT COUNT(*) FROM {table} WHERE secret = 1 AND ({self.predicate})"
        return f"SELECT SUM(secret) FROM {table} WHERE {self.predicate}"


def check_qid(qid: Any) -> np.ndarray:
    q = np.asarray(qid, dtype=np.int64)
    if q.ndim != 1 or q.size == 0:
        raise ValueError("qid must be a non-empty 1-d array of public identifiers")
    return q


def _check_m(m: int) -> int:
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"the number of queries must be an int >= 1 (got {m!r})")
    return m


def random_subsets(qid: Any, m: int, *, source: Source | None = None) -> list[SubsetQuery]:
    """``m`` subsets, each person in each independently with probability 1/2 (``qid IN (…)``)."""
    q = check_qid(qid)
    m = _check_m(m)
    masks = noise.bernoulli(0.5, (m, q.size), source=source)
    names = np.array([str(v) for v in q.tolist()], dtype=object)  # format each qid once
    return [
        SubsetQuery(f"qid IN ({', '.join(names[row].tolist()) or 'NULL'})", row)
        for row in masks
    ]


def hashed_subsets(
    qid: Any, m: int, *, source: Source | None = None, modulus: int = HASH_MODULUS
) -> list[SubsetQuery]:
    """``m`` Diffix-style hash subsets ``{i : ((a qid_i + b) mod p) mod 2 = 0}``, ``p = modulus``.

    The salts ``a in [1, p)``, ``b in [0, p)`` are drawn afresh per query. For distinct
    identifiers the family is pairwise independent over ``Z_p``, so each subset behaves like a
    random half of the people; yet the predicate is short arithmetic on one public column, which
    a SQL filter allowlist accepts (Cohen-Nissim 2018 used such predicates against Diffix).
    """
    q = check_qid(qid)
    m = _check_m(m)
    if not 2 < modulus < 2**31 or (q >= 2**32).any():
        raise ValueError("modulus must lie in (2, 2**31) and qid below 2**32 (int64 products)")
    a = noise.uniform_int(modulus - 1, m, source=source) + 1
    b = noise.uniform_int(modulus, m, source=source)
    out = []
    for aj, bj in zip(a.tolist(), b.tolist(), strict=True):
        mask = ((q * aj + bj) % modulus) % 2 == 0
        out.append(SubsetQuery(f"((qid * {aj} + {bj}) % {modulus}) % 2 = 0", mask))
    return out


def subset_matrix(queries: Sequence[SubsetQuery]) -> np.ndarray:
    """The ``(m, n)`` 0/1 matrix ``A`` (float64) of the subsets: answers are ``A @ secret``."""
    if len(queries) == 0:
        raise ValueError("no queries given")
    return np.vstack([np.asarray(qr.mask, dtype=np.float64) for qr in queries])
