"""Systems to attack: query oracles that answer subset-sum questions about a population.

Each oracle answers :class:`~dpkit.attacks.reconstruction.SubsetQuery` objects ("sum of the
secrets of the people matching this predicate") and keeps count of what it answered, suppressed
and refused. ``NaN`` marks a question that got no number. From weakest to strongest:

* :class:`ExactOracle` -- exact answers. Falls to reconstruction (Dinur-Nissim) and to
  differencing (two large counts that differ by one person).
* :class:`NoisyOracle` -- *fresh* noise per question (uniform ``±E``, discrete Laplace or
  discrete Gaussian) but no limit on questions. Falls to **averaging**: ask the same question
  ``k`` times and the noise shrinks as ``1/sqrt(k)``.
* :class:`StickyNoiseOracle` -- noise seeded by the *text* of the question (a keyed hash), so
  repeating a question returns the same answer (Diffix's "sticky noise", simplified). Falls to
  averaging over *semantically equal, textually different* questions
  (:func:`dpkit.attacks.differencing.rewrites`).
* :class:`SuppressionOracle` -- exact (or sticky-noisy) answers, but counts below a threshold are
  suppressed (low-count filter). Falls to **differencing**: two large counts whose difference is
  one person are never suppressed.
* :class:`CuratorOracle` -- the dpkit curator: every answer is ε-DP, the budget is enforced, and
  questions beyond it are refused (``BudgetExceeded``) without spending anything. No attack here
  recovers more than a little over half of the secret bits.

``levels`` (from the population): 2 means secret bits and COUNT queries, more means small
integers and SUM queries.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.attacks.subsets import Population, SubsetQuery, subset_matrix
from dpkit.noise import Source

__all__ = [
    "ANSWERED",
    "REFUSED",
    "SUPPRESSED",
    "CuratorOracle",
    "ExactOracle",
    "NoisyOracle",
    "Oracle",
    "StickyNoiseOracle",
    "SuppressionOracle",
    "curator_for",
]

ANSWERED, SUPPRESSED, REFUSED, UNASKED = 0, 1, 2, 3
_NOISES = ("uniform", "laplace", "gaussian")


class Oracle(ABC):
    """A data system answering subset-sum questions (``NaN`` = no answer).

    Counters: ``asked`` (questions received), ``answered``, ``suppressed`` (low-count or similar
    filters), ``refused`` (budget), ``unasked`` (not forwarded after repeated refusals).
    """

    name: str = "oracle"
    levels: int = 2

    def __init__(self) -> None:
        self.asked = 0
        self.answered = 0
        self.suppressed = 0
        self.refused = 0
        self.unasked = 0

    def ask(self, queries: Sequence[SubsetQuery] | SubsetQuery) -> np.ndarray:
        """Answers (float64, ``NaN`` where none) to ``queries``, in order."""
        qs = [queries] if isinstance(queries, SubsetQuery) else list(queries)
        if not qs:
            return np.empty(0, dtype=np.float64)
        values, status = self._answer(qs)
        values = np.asarray(values, dtype=np.float64).copy()
        status = np.asarray(status)
        values[status != ANSWERED] = math.nan
        self.asked += len(qs)
        self.answered += int(np.sum(status == ANSWERED))
        self.suppressed += int(np.sum(status == SUPPRESSED))
        self.refused += int(np.sum(status == REFUSED))
        self.unasked += int(np.sum(status == UNASKED))
        return values

    @abstractmethod
    def _answer(self, queries: list[SubsetQuery]) -> tuple[np.ndarray, np.ndarray]:
        """(values, status per query)."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(asked={self.asked}, answered={self.answered}, "
            f"suppressed={self.suppressed}, refused={self.refused})"
        )


class _InMemory(Oracle):
    def __init__(self, population: Population) -> None:
        super().__init__()
        if not isinstance(population, Population):
            raise TypeError("population must be a dpkit.attacks.reconstruction.Population")
        self.population = population
        self.levels = population.levels

    def _check(self, queries: list[SubsetQuery]) -> np.ndarray:
        A = subset_matrix(queries)
        if A.shape[1] != self.population.n:
            raise ValueError(
                f"query masks cover {A.shape[1]} people but the population has "
                f"{self.population.n}"
            )
        return A

    def _exact(self, queries: list[SubsetQuery]) -> np.ndarray:
        return self._check(queries) @ self.population.secret.astype(np.float64)

    def _contributors(self, queries: list[SubsetQuery]) -> np.ndarray:
        """Rows that enter each answer (people with a non-zero secret in the subset)."""
        return self._check(queries) @ (self.population.secret != 0).astype(np.float64)


def _check_noise(kind: str, scale: float) -> None:
    if kind not in _NOISES:
        raise ValueError(f"noise must be one of {_NOISES} (got {kind!r})")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0 (got {scale!r})")


def _draw(kind: str, scale: float, size: int, source: Source | None) -> np.ndarray:
    """Integer noise: uniform on ``{-floor(scale), …, floor(scale)}``, discrete Laplace with
    scale ``scale``, or discrete Gaussian with ``sigma = scale``."""
    if scale == 0:
        return np.zeros(size, dtype=np.int64)
    if kind == "uniform":
        e = math.floor(scale)
        return noise.uniform_int(2 * e + 1, size, source=source) - e
    if kind == "laplace":
        return noise.discrete_laplace(float(scale), size, source=source)
    return noise.discrete_gaussian(float(scale) ** 2, size, source=source)


class ExactOracle(_InMemory):
    """Answers every question exactly (a "statistics only" system with no noise)."""

    name = "exact"

    def _answer(self, queries: list[SubsetQuery]) -> tuple[np.ndarray, np.ndarray]:
        return self._exact(queries), np.zeros(len(queries), dtype=np.int64)


class NoisyOracle(_InMemory):
    """Adds *fresh*, independent integer noise to every answer; answers without limit.

    ``noise="uniform"``: uniform on ``{-E, …, E}`` with ``E = floor(scale)`` (the bounded noise
    of Dinur-Nissim); ``"laplace"``: discrete Laplace of scale ``scale``; ``"gaussian"``:
    discrete Gaussian with ``sigma = scale``. Each answer alone may look private; the lack of a
    budget is the flaw: ``k`` repeats average the noise down by ``sqrt(k)``.
    """

    name = "fresh-noise"

    def __init__(
        self,
        population: Population,
        *,
        scale: float,
        noise: str = "uniform",
        source: Source | None = None,
    ) -> None:
        super().__init__(population)
        _check_noise(noise, scale)
        self.scale = float(scale)
        self.noise = noise
        self._source = source

    def _answer(self, queries: list[SubsetQuery]) -> tuple[np.ndarray, np.ndarray]:
        z = _draw(self.noise, self.scale, len(queries), self._source)
        return self._exact(queries) + z, np.zeros(len(queries), dtype=np.int64)


class _Sticky:
    """Noise that is a fixed function of the query text: the first time a text is seen its
    noise is drawn (fresh, from ``source``) and remembered; the same text gets the same noise
    forever after. To the attacker this is indistinguishable from noise seeded by a keyed hash
    of the text (Diffix's construction), and it is exact and fast (one vectorised draw per
    batch of new texts)."""

    def __init__(self, kind: str, scale: float, source: Source | None):
        _check_noise(kind, scale)
        self.kind = kind
        self.scale = float(scale)
        self._source = source
        self._memo: dict[str, int] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if self.scale == 0:
            return np.zeros(len(texts), dtype=np.int64)
        new = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if new:
            draws = _draw(self.kind, self.scale, len(new), self._source)
            self._memo.update(zip(new, draws.tolist(), strict=True))
        return np.array([self._memo[t] for t in texts], dtype=np.int64)


class StickyNoiseOracle(_InMemory):
    """Noise seeded by the query text (a keyed hash of the SQL): the same text always gets the
    same answer, so plain repetition gains nothing (the idea of Diffix's sticky noise).

    The flaw: the seed depends on the *text*, the answer on the *meaning*. Semantically equal
    rewrites (``… AND qid <> -1``, ``… AND qid <> -2``, …) get independent noise, and their
    average converges to the exact answer (Gadotti et al. 2019; Cohen-Nissim 2018).
    """

    name = "sticky-noise"

    def __init__(
        self,
        population: Population,
        *,
        scale: float,
        noise: str = "laplace",
        table: str = "people",
        source: Source | None = None,
    ) -> None:
        super().__init__(population)
        self._noise = _Sticky(noise, scale, source)
        self.table = table

    def _answer(self, queries: list[SubsetQuery]) -> tuple[np.ndarray, np.ndarray]:
        z = self._noise([q.sql(self.table, levels=self.levels) for q in queries])
        return self._exact(queries) + z, np.zeros(len(queries), dtype=np.int64)


class SuppressionOracle(_InMemory):
    """Answers only when at least ``threshold`` people contribute to the answer (people in the
    subset with a non-zero secret); smaller counts are suppressed (``NaN``), as in low-count
    filters of statistical disclosure control and Diffix. Optional sticky noise of ``scale``.

    The flaw: suppression protects small cells, not small *differences*. "Everyone" minus
    "everyone except the target" are two large counts whose difference is the target's secret
    (:func:`dpkit.attacks.differencing.differencing_attack`).
    """

    name = "low-count-suppression"

    def __init__(
        self,
        population: Population,
        *,
        threshold: int = 5,
        scale: float = 0.0,
        noise: str = "laplace",
        table: str = "people",
        source: Source | None = None,
    ) -> None:
        super().__init__(population)
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise ValueError(f"threshold must be an int >= 1 (got {threshold!r})")
        self.threshold = threshold
        self._noise = _Sticky(noise, scale, source)
        self.table = table

    def _answer(self, queries: list[SubsetQuery]) -> tuple[np.ndarray, np.ndarray]:
        exact = self._exact(queries) + self._noise(
            [q.sql(self.table, levels=self.levels) for q in queries]
        )
        status = np.where(self._contributors(queries) < self.threshold, SUPPRESSED, ANSWERED)
        return exact, status


class CuratorOracle(Oracle):
    """The dpkit curator (:class:`dpkit.Curator`): ``cur.sql(q.sql(table), epsilon=epsilon)``.

    Each answer is ``epsilon``-DP (add/remove one person; discrete Laplace of scale
    ``1/epsilon`` for a COUNT). When the budget runs out the curator raises
    ``BudgetExceeded`` and spends nothing; that question counts as *refused*. After
    ``max_refusals`` refusals in a row the remaining questions are not sent (``unasked``).
    """

    name = "dpkit-curator"

    def __init__(
        self,
        curator: Any,
        *,
        epsilon: float,
        table: str = "people",
        levels: int = 2,
        max_refusals: int | None = 3,
    ) -> None:
        super().__init__()
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be a finite number > 0 (got {epsilon!r})")
        self.curator = curator
        self.epsilon = float(epsilon)
        self.table = table
        self.levels = int(levels)
        self.max_refusals = max_refusals
        self._in_a_row = 0

    def _answer(self, queries: list[SubsetQuery]) -> tuple[np.ndarray, np.ndarray]:
        from dpkit.accounting import BudgetExceeded

        values = np.full(len(queries), math.nan)
        status = np.full(len(queries), ANSWERED, dtype=np.int64)
        for i, q in enumerate(queries):
            if self.max_refusals is not None and self._in_a_row >= self.max_refusals:
                status[i] = UNASKED
                continue
            try:
                res = self.curator.sql(q.sql(self.table, levels=self.levels), epsilon=self.epsilon)
            except BudgetExceeded:
                status[i] = REFUSED
                self._in_a_row += 1
                continue
            self._in_a_row = 0
            values[i] = float(res.value())
        return values, status


def curator_for(
    population: Population,
    path: str | Path,
    *,
    epsilon: float,
    table: str = "people",
    source: Source | None = None,
) -> Any:
    """A new :class:`dpkit.Curator` at ``path`` holding ``population`` as table ``table``
    (privacy unit ``qid``, one row per person, ``secret`` bounded to ``[0, levels-1]``) with a
    total pure-DP budget ``epsilon``. ``source`` (tests only) seeds the curator's noise."""
    from dpkit.accounting import Budget
    from dpkit.engine import Curator

    cur = Curator.create(path, budget=Budget(epsilon=epsilon), source=source)
    cur.add_table(
        table,
        population.to_pandas(),
        privacy_unit="qid",
        max_rows_per_unit=1,
        bounds={"secret": (0, population.levels - 1)},
    )
    return cur
