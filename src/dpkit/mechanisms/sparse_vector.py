"""The sparse vector technique: AboveThreshold and NumericSparse, with exact discrete noise.

Queries ``q_1, q_2, ...`` (their true answers on the data, each of sensitivity ``Δ`` under the
caller's neighbouring relation, add/remove one unit by default) are compared with a public
threshold ``T`` after noise; only the positions above the threshold cost privacy.

Algorithm (Lyu-Su-Li 2017, Alg. 1; Dwork-Roth 2014, Alg. 1 for c = 1), on a grid of width
``2**k`` with integer sensitivity ``S = floor(Δ/2**k) + 1`` per query:

* budget split (Lyu-Su-Li's standard allocation): ``ε1 = ε2 = ε_svt / 2``;
* noisy threshold ``ρ ~ DLap(S / ε1)``, drawn **once**;
* each query gets fresh ``ν_i ~ DLap(2 c S / ε2)`` (``c S / ε2`` for monotonic queries);
* report ⊤ at ``i`` if ``q_i + ν_i >= T + ρ`` (grid units), ⊥ otherwise; stop after ``c`` ⊤.

Proof for integer noise (the continuous proof of Lyu-Su-Li Thm. 2 with integer shifts): for an
output pattern, substitute ``ρ' = ρ + S`` in the sum over ``ρ``; every ⊥ event for ``D'`` at
``ρ'`` contains the ⊥ event for ``D`` at ``ρ``, every ⊤ threshold moves by at most ``2S``, and
the discrete Laplace laws give ``P(ρ) <= e^{ε1} P(ρ + S)`` and
``P(ν >= t + 2S) >= e^{-2S/b} P(ν >= t)``; over ``c`` ⊤ answers that is ``e^{ε1 + ε2}``.
The event is ``PureDP(ε)``.

NumericSparse (Dwork-Roth 2014, Alg. 3 with Lyu-Su-Li's single threshold draw) also releases
``q_i + DLap(c S / ε3)`` (grid) for each ⊤ query, with ``ε3 = answer_share · ε`` and the selection
using the other ``(1 - answer_share) · ε``; the total is ε by basic composition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from dpkit import noise
from dpkit.events import PureDP
from dpkit.mechanisms import validate as v
from dpkit.mechanisms._calibrate import dlap_scale_for, grid_l1, on_grid
from dpkit.mechanisms.accuracy import dlap_halfwidth, grid_interval
from dpkit.mechanisms.release import Release
from dpkit.noise import Source

__all__ = ["SparseAnswers", "above_threshold", "numeric_sparse"]


class SparseAnswers(NamedTuple):
    """Indices of the queries found above the threshold and their noisy answers."""

    indices: np.ndarray
    answers: np.ndarray


@dataclass(frozen=True)
class _Svt:
    k: int
    sensitivity: int  # per-query sensitivity in grid units
    threshold_scale: float
    query_scale: float
    max_answers: int

    def above(self, queries: np.ndarray, threshold: float, size: int, src: Source) -> np.ndarray:
        """Boolean matrix (size, m): position i is ⊤ (before the stop after ``c`` ⊤)."""
        qn = on_grid(queries, self.k, "queries")
        tn = int(on_grid(np.asarray(threshold, dtype=np.float64), self.k, "threshold"))
        rho = noise.discrete_laplace(self.threshold_scale, (size, 1), source=src)
        nu = noise.discrete_laplace(self.query_scale, (size, queries.size), source=src)
        top = (qn + nu) >= (tn + rho)
        # keep only the first c ⊤ (the algorithm halts after them)
        return top & (np.cumsum(top, axis=1) <= self.max_answers)

    def first_index(
        self, queries: np.ndarray, threshold: float, size: int, src: Source
    ) -> np.ndarray:
        """AboveThreshold outputs for ``size`` independent runs: first ⊤ index, or -1."""
        top = self.above(queries, threshold, size, src)
        hit = top.any(axis=1)
        return np.where(hit, np.argmax(top, axis=1), -1).astype(np.int64)


def _plan_svt(
    sensitivity: float, epsilon: float, max_answers: int, monotonic: bool
) -> _Svt:
    eps1 = epsilon / 2.0
    eps2 = epsilon - eps1
    factor = max_answers if monotonic else 2 * max_answers
    k, S = grid_l1(sensitivity, 1, max(1.0 / eps1, factor / eps2))
    return _Svt(
        k=k,
        sensitivity=S,
        threshold_scale=dlap_scale_for(S, eps1),
        query_scale=dlap_scale_for(factor * S, eps2),
        max_answers=max_answers,
    )


@dataclass(frozen=True)
class _NumericSparse:
    svt: _Svt
    answer_scale: float  # discrete Laplace scale of each released answer, grid units
    selection_epsilon: float
    answer_epsilon: float

    def sample(
        self, queries: np.ndarray, threshold: float, size: int, src: Source
    ) -> tuple[np.ndarray, np.ndarray]:
        """``size`` runs: ⊤ matrix (size, m) and noisy answers on the grid (int64 grid units,
        meaningful where ⊤) from fresh ``DLap(answer_scale)``."""
        top = self.svt.above(queries, threshold, size, src)
        qn = on_grid(queries, self.svt.k, "queries")
        noisy = qn + noise.discrete_laplace(self.answer_scale, top.shape, source=src)
        return top, noisy


def _plan_numeric_sparse(
    sensitivity: float, epsilon: float, max_answers: int, monotonic: bool, answer_share: float
) -> _NumericSparse:
    eps_a = answer_share * epsilon
    eps_s = epsilon - eps_a
    while Fraction(eps_a) + Fraction(eps_s) > Fraction(epsilon):  # float subtraction rounded up
        eps_s = math.nextafter(eps_s, 0.0)
    svt = _plan_svt(sensitivity, eps_s, max_answers, monotonic)
    # answers on the selection's grid: c answers of sensitivity S each, total eps_a
    return _NumericSparse(
        svt=svt,
        answer_scale=dlap_scale_for(max_answers * svt.sensitivity, eps_a),
        selection_epsilon=eps_s,
        answer_epsilon=eps_a,
    )


def _check_queries(queries: Any, threshold: Any) -> tuple[np.ndarray, float]:
    q = v.check_reals(queries, "queries")
    if q.ndim != 1:
        raise ValueError(f"queries must be a 1-d sequence of query answers (got shape {q.shape})")
    t = v.check_reals(threshold, "threshold")
    if t.ndim != 0:
        raise ValueError("threshold must be a single public number")
    return q, float(t)


def above_threshold(
    queries: Any,
    threshold: float,
    *,
    sensitivity: float,
    epsilon: float,
    monotonic: bool = False,
    source: Source | None = None,
) -> Release[int | None]:
    """ε-DP AboveThreshold: the index of the first query whose noisy answer reaches the noisy
    threshold, or ``None`` if none does.

    **Guarantee**: ε-DP (pure) whatever the number of queries, for the neighbouring relation
    under which every query has sensitivity ``sensitivity`` (add/remove one unit by default);
    ``threshold`` is public. With ``monotonic=True`` the caller promises all queries move in the
    same direction between neighbours (e.g. counts), which halves the query noise.

    **Calibration** (Lyu-Su-Li 2017, Alg. 1 with c = 1; allocation ε1 = ε2 = ε/2): threshold
    noise ``DLap(S/ε1)``, query noise ``DLap(2S/ε2)`` (``S/ε2`` if monotonic), on a grid with
    ``S = floor(Δ/2**k) + 1``. Event: ``PureDP(ε)``.

    >>> import dpkit as dp
    >>> r = dp.mechanisms.above_threshold([1, 2, 50, 3], 25, sensitivity=1, epsilon=1.0,
    ...                                   source=dp.noise.seeded(0))
    >>> r.value, r.event
    (2, PureDP(epsilon=1.0))
    """
    q, t = _check_queries(queries, threshold)
    sens = v.check_sensitivity(sensitivity)
    eps = v.check_epsilon(epsilon)
    src = v.resolve_source(source)
    plan = _plan_svt(sens, eps, 1, bool(monotonic))
    index = int(plan.first_index(q, t, 1, src)[0])
    return Release(
        value=None if index < 0 else index,
        event=PureDP(eps),
        ci=None,
        insecure=src.insecure,
        details={
            "mechanism": "AboveThreshold (Lyu-Su-Li 2017 Alg. 1, c = 1)",
            "neighbouring": "every query moves by at most the sensitivity (add/remove one unit "
            "by default)",
            "allocation": {"threshold": eps / 2.0, "queries": eps - eps / 2.0},
            "grid_exponent": plan.k,
            "threshold_scale": math.ldexp(plan.threshold_scale, plan.k),
            "query_scale": math.ldexp(plan.query_scale, plan.k),
        },
    )


def numeric_sparse(
    queries: Any,
    threshold: float,
    *,
    sensitivity: float,
    epsilon: float,
    max_answers: int,
    monotonic: bool = False,
    answer_share: float = 0.5,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[SparseAnswers]:
    """ε-DP NumericSparse: up to ``max_answers`` queries above the noisy threshold, with noisy
    answers.

    **Guarantee**: ε-DP (pure), neighbouring relation as for the per-query ``sensitivity``
    (add/remove one unit by default); ``threshold`` and ``max_answers`` are public.

    **Calibration**: selection with ``ε_s = (1 - answer_share) ε`` by Lyu-Su-Li Alg. 1 with
    ``c = max_answers`` (threshold ``DLap(S/(ε_s/2))`` drawn once, queries ``DLap(2cS/(ε_s/2))``,
    ``cS/(ε_s/2)`` if monotonic); each ⊤ query's answer released on the grid with fresh
    ``DLap(cS/ε_a)``, ``ε_a = answer_share · ε``. Event: ``PureDP(ε)``.

    **Value**: ``SparseAnswers(indices, answers)``; ``ci = (lows, highs)`` per answer, from the
    exact discrete Laplace tail (covers each unrounded true answer with probability >= level).

    >>> import dpkit as dp
    >>> r = dp.mechanisms.numeric_sparse([1, 90, 2, 80, 70], 40, sensitivity=1, epsilon=2.0,
    ...                                  max_answers=2, source=dp.noise.seeded(0))
    >>> r.value.indices.tolist()
    [1, 3]
    """
    q, t = _check_queries(queries, threshold)
    sens = v.check_sensitivity(sensitivity)
    eps = v.check_epsilon(epsilon)
    c = v.check_positive_int(max_answers, "max_answers")
    share = float(answer_share)
    if not 0.0 < share < 1.0:
        raise ValueError(f"answer_share must lie strictly between 0 and 1 (got {answer_share!r})")
    lvl = v.check_level(level)
    src = v.resolve_source(source)
    plan = _plan_numeric_sparse(sens, eps, c, bool(monotonic), share)
    top, noisy = plan.sample(q, t, 1, src)
    idx = np.flatnonzero(top[0])
    y = noisy[0, idx]
    answers = noise.grid.from_grid(y, plan.svt.k)
    m, coverage = dlap_halfwidth(plan.answer_scale, lvl)
    low, high = grid_interval(y, m, plan.svt.k)
    eps_s, eps_a = plan.selection_epsilon, plan.answer_epsilon
    return Release(
        value=SparseAnswers(indices=idx.astype(np.int64), answers=answers),
        event=PureDP(eps),
        ci=(low, high),
        level=lvl,
        insecure=src.insecure,
        details={
            "mechanism": "NumericSparse (Lyu-Su-Li 2017 Alg. 1 selection + Laplace answers)",
            "neighbouring": "every query moves by at most the sensitivity (add/remove one unit "
            "by default)",
            "allocation": {"threshold": eps_s / 2.0, "queries": eps_s - eps_s / 2.0,
                           "answers": eps_a},
            "grid_exponent": plan.svt.k,
            "answer_scale": math.ldexp(plan.answer_scale, plan.svt.k),
            "coverage": coverage,
        },
    )
