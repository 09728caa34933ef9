"""The exponential mechanism (McSherry-Talwar 2007), sampled exactly.

Select candidate ``r`` with probability ``∝ exp(ε q_r / (2Δ))`` (or ``exp(ε q_r / Δ)`` when the
scores are monotonic), where ``Δ`` bounds how much any one score can change between neighbours.
Sampling is exact (no floating-point exponentials or Gumbel noise): rejection with uniform
proposals and exact Bernoulli(exp(-γ)) coins on rational ``γ_r = ε (q* - q_r) / (2Δ)``; see
:mod:`dpkit.mechanisms._sampling`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit.events import Exponential
from dpkit.mechanisms import validate as v
from dpkit.mechanisms._sampling import (
    ROW_LANES,
    RowWeights,
    Weights,
    exponential_rows_sample,
    exponential_sample,
)
from dpkit.mechanisms.release import Release
from dpkit.noise import Source

__all__ = ["exponential", "exponential_rows"]


def check_scores(scores: Any, n: int | None = None) -> np.ndarray:
    """A non-empty 1-d float64 array of finite scores (of length ``n`` if given)."""
    try:
        q = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError("scores must be a sequence of numbers, one per candidate") from None
    if q.ndim != 1:
        raise ValueError(f"scores must be a 1-d sequence of numbers (got shape {q.shape})")
    if q.size == 0:
        raise ValueError("scores is empty: pass one score per candidate (at least one)")
    if n is not None and q.size != n:
        raise ValueError(
            f"scores and candidates must have the same length (got {q.size} scores for "
            f"{n} candidates)"
        )
    if not np.all(np.isfinite(q)):
        bad = int(np.flatnonzero(~np.isfinite(q))[0])
        raise ValueError(
            f"scores must be finite (score {bad} is {q[bad]!r}): replace -inf by a finite "
            "lowest score"
        )
    return q


def selection_factor(epsilon: float, sensitivity: float, monotonic: bool) -> Fraction:
    """``ε / (2Δ)`` (or ``ε / Δ`` for monotonic scores) as an exact rational."""
    f = Fraction(epsilon) / Fraction(sensitivity)
    return f if monotonic else f / 2


def _plan_exponential(
    scores: np.ndarray, sensitivity: float, epsilon: float, monotonic: bool
) -> Weights:
    return Weights(scores, selection_factor(epsilon, sensitivity, monotonic))


def utility_bound(
    n: int, sensitivity: float, epsilon: float, monotonic: bool, level: float
) -> float:
    """``u`` with ``P[q(output) <= OPT - u] <= 1 - level``: ``(2Δ/ε)(ln n + ln(1/(1-level)))``
    (Dwork-Roth 2014, Thm. 3.11; ``Δ/ε`` for monotonic scores)."""
    t = -math.log1p(-level)
    return (1 if monotonic else 2) * sensitivity / epsilon * (math.log(n) + t)


def exponential(
    candidates: Sequence[Any],
    scores: Any,
    *,
    sensitivity: float,
    epsilon: float,
    monotonic: bool = False,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[Any]:
    """ε-DP exponential mechanism: pick a candidate, favouring high scores.

    **Guarantee**: ε-DP and ε-bounded range (Durfee-Rogers 2019), hence also ε²/8-zCDP
    (Cesar-Rogers 2021). Neighbouring relation: the one under which the caller's
    ``sensitivity`` holds (add/remove one unit by default): for neighbours ``D, D'`` every score
    satisfies ``|q_r(D) - q_r(D')| <= sensitivity``. With ``monotonic=True`` the caller also
    promises that all scores move in the same direction (e.g. counts under add/remove), and
    the factor ``ε/(2Δ)`` becomes ``ε/Δ``. The candidate list is public.

    **Law**: ``P(r) = exp(ε q_r / (2Δ)) / Σ_j exp(ε q_j / (2Δ))``, sampled exactly.
    Event: ``Exponential(ε)``.

    **Accuracy** (no interval: the output is a candidate): ``details["utility_bound"]`` is
    ``u = (2Δ/ε)(ln|R| + ln(1/(1-level)))`` with ``P[q(output) < max_r q_r - u] <= 1 - level``.

    >>> import dpkit as dp
    >>> r = dp.mechanisms.exponential(["a", "b", "c"], [10, 30, 11], sensitivity=1,
    ...                               epsilon=2.0, source=dp.noise.seeded(3))
    >>> r.value, r.event
    ('b', Exponential(epsilon=2.0))
    """
    cands = list(candidates)
    if len(cands) == 0:
        raise ValueError("candidates is empty: pass at least one candidate")
    q = check_scores(scores, len(cands))
    sens = v.check_sensitivity(sensitivity)
    eps = v.check_epsilon(epsilon)
    lvl = v.check_level(level)
    src = v.resolve_source(source)
    w = _plan_exponential(q, sens, eps, bool(monotonic))
    index = int(exponential_sample(w, 1, src)[0])
    return Release(
        value=cands[index],
        event=Exponential(eps),
        ci=None,
        level=lvl,
        insecure=src.insecure,
        details={
            "mechanism": "exponential mechanism (exact rejection sampling)",
            "neighbouring": "every score moves by at most the sensitivity (add/remove one unit "
            "by default)",
            "index": index,
            "utility_bound": utility_bound(len(cands), sens, eps, bool(monotonic), lvl),
            "monotonic": bool(monotonic),
        },
    )


def check_score_rows(scores: Any) -> np.ndarray:
    """A 2-d float64 array of finite scores with at least one row and one column."""
    try:
        q = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            "scores must be a 2-d array of numbers: one row per instance, one column per "
            "candidate"
        ) from None
    if q.ndim != 2:
        raise ValueError(
            f"scores must be 2-d (instances x candidates) (got shape {q.shape}); for a single "
            "instance use exponential() or pass scores[None, :]"
        )
    if q.shape[0] == 0 or q.shape[1] == 0:
        raise ValueError(
            f"scores is empty (shape {q.shape}): pass at least one instance (row) and one "
            "candidate (column)"
        )
    finite = np.isfinite(q)
    if not finite.all():
        i, j = (int(x) for x in np.argwhere(~finite)[0])
        raise ValueError(
            f"scores must be finite (score [{i}, {j}] is {q[i, j]!r}): replace -inf by a "
            "finite lowest score"
        )
    return q


def exponential_rows(
    scores: Any,
    *,
    sensitivity: float,
    epsilon: float,
    monotonic: bool = False,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[np.ndarray]:
    """Many independent exponential mechanisms at once: one selection per row of ``scores``.

    ``scores`` has shape ``(instances, candidates)``; row ``i`` holds the scores of instance
    ``i``'s candidates ``0..candidates-1``. The value is an int64 array: the chosen column of each
    row.

    **Law**: row ``i`` picks column ``j`` with probability
    ``exp(ε q_ij / (2Δ)) / Σ_l exp(ε q_il / (2Δ))`` (``ε/Δ`` when ``monotonic``), the law of
    :func:`exponential`, rows mutually independent. Sampled exactly, with no float exponential
    or Gumbel noise: rejection sampling whose proposals follow a stepped envelope (integer levels
    below each ``γ_ij``, dyadic weights) and whose acceptance is an exact uniform comparison and
    an exact Bernoulli(exp(-γ)) coin on rational ``γ``
    (:func:`dpkit.mechanisms._sampling.exponential_rows_sample`), so a draw needs O(1) trials
    even when the mass sits on a few of many candidates. Rows are processed in blocks of about
    2^20 scores, so memory stays bounded whatever the number of instances.

    **Guarantee, per instance**: each row is an ε-DP (ε-bounded-range) exponential mechanism on
    its own instance, under the relation for which ``sensitivity`` holds: for neighbours, every
    score of that row moves by at most ``sensitivity`` (and, with ``monotonic=True``, all of the
    row's scores move in the same direction). The event ``Exponential(ε)`` is that per-instance
    guarantee, *not* a bound for the whole matrix. It covers the whole call only when the caller
    knows that one privacy unit can change at most one row, e.g. rows computed from disjoint
    units' data (parallel composition, McSherry 2009) as the curator's per-group quantiles are;
    otherwise the caller must charge the composition over the rows a unit can touch (e.g.
    ``SelfComposed(Exponential(ε), l0)`` when a unit reaches at most ``l0`` rows).

    **Accuracy**: ``details["utility_bound"]`` is ``u = (2Δ/ε)(ln n + ln(1/(1-level)))`` with
    ``P[q_i(output_i) < max_j q_ij - u] <= 1 - level`` for each row (Dwork-Roth 2014, Thm 3.11).

    >>> import dpkit as dp
    >>> r = dp.mechanisms.exponential_rows([[10, 30, 11], [0, 0, 40]], sensitivity=1,
    ...                                    epsilon=2.0, source=dp.noise.seeded(3))
    >>> r.value.tolist(), r.event
    ([1, 2], Exponential(epsilon=2.0))
    """
    q = check_score_rows(scores)
    sens = v.check_sensitivity(sensitivity)
    eps = v.check_epsilon(epsilon)
    lvl = v.check_level(level)
    src = v.resolve_source(source)
    factor = selection_factor(eps, sens, bool(monotonic))
    m, n = q.shape
    out = np.empty(m, dtype=np.int64)
    per = max(1, ROW_LANES // n)  # rows per block: at most ~ROW_LANES scores in float work
    for start in range(0, m, per):
        w = RowWeights(q[start : start + per], factor)
        out[start : start + per] = exponential_rows_sample(w, src)
    return Release(
        value=out,
        event=Exponential(eps),
        ci=None,
        level=lvl,
        insecure=src.insecure,
        details={
            "mechanism": "exponential mechanism per row (exact rejection sampling)",
            "neighbouring": "per row: every score of the row moves by at most the sensitivity "
            "(add/remove one unit by default); the event is per instance (row)",
            "instances": m,
            "utility_bound": utility_bound(n, sens, eps, bool(monotonic), lvl),
            "monotonic": bool(monotonic),
        },
    )
