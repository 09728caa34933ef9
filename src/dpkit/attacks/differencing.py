"""Differencing and averaging attacks: learn one person's secret from aggregate answers.

* **Differencing** (Denning-Schlörer 1980, "tracker" attacks): ask for the total over everyone,
  then over everyone *except the target*; the difference is the target's secret. Both counts are
  large, so a low-count filter (:class:`~dpkit.attacks.oracles.SuppressionOracle`) lets both
  through. Exact answers lose every targeted secret.
* **Averaging**: noise that is fresh per answer and a system without a budget
  (:class:`~dpkit.attacks.oracles.NoisyOracle`) lose to repetition: the mean of ``k`` answers
  has ``1/sqrt(k)`` of the noise. "Sticky" noise seeded by the query text
  (:class:`~dpkit.attacks.oracles.StickyNoiseOracle`) returns the same answer to the same text,
  but not to a *rewritten* text with the same meaning (:func:`rewrites`): averaging over
  rewrites wins again (Gadotti et al. 2019, Cohen-Nissim 2018 on Diffix).
* Against ε-DP answers under a budget, the noise on each answer grows with the number of
  questions (composition) and the budget caps them, so neither trick helps: the difference of
  two ε-DP answers has noise of scale ``>= 1/ε``, and ``k`` repeats cost ``k ε``.

What these attacks prove: suppressing small counts, refusing "obviously identifying" queries
and seeding noise by query text are not privacy guarantees; only a bound on what *any* set of
answers reveals (a privacy budget with calibrated noise) is.

>>> import dpkit as dp
>>> from dpkit.attacks import differencing, oracles, reconstruction as rc
>>> people = rc.make_population(100, source=dp.noise.seeded(1))
>>> system = oracles.SuppressionOracle(people, threshold=10)
>>> r = differencing.differencing_attack(system, people.qid, target=7)
>>> bool(r.guess == people.secret[7])
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit.attacks.oracles import Oracle
from dpkit.attacks.subsets import SubsetQuery

__all__ = [
    "AveragingResult",
    "DifferencingResult",
    "averaging_attack",
    "differencing_attack",
    "differencing_success",
    "rewrites",
]


def rewrites(query: SubsetQuery, k: int, *, column: str = "qid") -> list[SubsetQuery]:
    """``k`` textually different queries with the same meaning as ``query``.

    Variant ``j`` is ``(<predicate>) AND qid <> -j``: the public identifiers are non-negative
    (a fact the attacker knows), so the extra condition is always true and the mask is unchanged.
    Syntactic rewrites of this kind (also ``qid + j <> j - 1``, ``NOT (qid = -j)``, …) are
    endless, so no filter on query text can catch them all.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1 (got {k!r})")
    text = query.predicate
    return [SubsetQuery(f"({text}) AND {column} <> -{j}", query.mask) for j in range(1, k + 1)]


@dataclass(frozen=True)
class AveragingResult:
    """The mean of the answers to ``repeats`` copies of a question (NaN if none answered)."""

    estimate: float
    answers: np.ndarray
    distinct_texts: int


def averaging_attack(
    oracle: Oracle, query: SubsetQuery, *, repeats: int, rewrite: bool = False
) -> AveragingResult:
    """Ask ``query`` ``repeats`` times (``rewrite=True``: as ``repeats`` semantically equal
    rewrites, see :func:`rewrites`) and average the answers that came back."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1 (got {repeats!r})")
    qs = rewrites(query, repeats) if rewrite else [query] * repeats
    answers = oracle.ask(qs)
    ok = answers[np.isfinite(answers)]
    est = float(ok.mean()) if ok.size else float("nan")
    distinct = len({q.predicate for q in qs})
    return AveragingResult(estimate=est, answers=answers, distinct_texts=distinct)


@dataclass(frozen=True)
class DifferencingResult:
    """The estimated secret of ``target`` (``total - without``) and its rounded guess."""

    target: int
    estimate: float
    guess: int
    total: float
    without: float


def differencing_attack(
    oracle: Oracle,
    qid: Any,
    *,
    target: int,
    repeats: int = 1,
    rewrite: bool = False,
    levels: int | None = None,
) -> DifferencingResult:
    """Estimate the secret of person ``target`` (an index into the public ``qid`` list).

    Asks "everyone" (``qid >= 0``) and "everyone but the target" (``qid <> <target's qid>``),
    each ``repeats`` times (rewritten if ``rewrite``) and averaged: the difference estimates the
    target's secret, rounded and clipped to ``[0, levels)`` for the guess. Works against any
    oracle without a budget; against noise it needs ``repeats`` large enough that the averaged
    noise is below 1/2.
    """
    q = np.asarray(qid, dtype=np.int64)
    if not 0 <= int(target) < q.size:
        raise ValueError(f"target must be an index in [0, {q.size}) (got {target!r})")
    levels = int(levels if levels is not None else oracle.levels)
    everyone = SubsetQuery("qid >= 0", np.ones(q.size, dtype=bool))
    mask = np.ones(q.size, dtype=bool)
    mask[int(target)] = False
    others = SubsetQuery(f"qid <> {int(q[int(target)])}", mask)
    total = averaging_attack(oracle, everyone, repeats=repeats, rewrite=rewrite).estimate
    without = averaging_attack(oracle, others, repeats=repeats, rewrite=rewrite).estimate
    est = total - without
    guess = int(np.clip(np.rint(est), 0, levels - 1)) if np.isfinite(est) else 0
    return DifferencingResult(
        target=int(target), estimate=float(est), guess=guess, total=total, without=without
    )


def differencing_success(
    oracle: Oracle,
    qid: Any,
    secret: Any,
    targets: Sequence[int],
    *,
    repeats: int = 1,
    rewrite: bool = False,
) -> float:
    """Fraction of ``targets`` whose secret :func:`differencing_attack` recovers (evaluation:
    needs the true ``secret``)."""
    s = np.asarray(secret)
    if len(targets) == 0:
        raise ValueError("give at least one target")
    hits = [
        differencing_attack(oracle, qid, target=t, repeats=repeats, rewrite=rewrite).guess == s[t]
        for t in targets
    ]
    return float(np.mean(hits))
