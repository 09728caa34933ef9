"""Auditing with one run (Steinke, Nasr, Jagielski 2023): a lower bound on ε from a single
execution of the mechanism with many canaries.

The game: ``m`` canaries, each included in the input independently with probability 1/2
(``S_i = ±1``); run the mechanism **once**; the auditor looks at the output and guesses
``T_i in {-1, 0, +1}`` (0 = abstain) for each canary, making ``r`` guesses in all, ``v`` of them
correct. If the mechanism is ε-DP, each guess is at best as good as an ε-randomized response
of the coin, and (Theorem 3.1 of the paper, by a coupling) the number of correct guesses is
stochastically dominated by ``Binomial(r, e^ε / (1 + e^ε))``. So

    P[W >= v] <= beta(ε) = P[Binomial(r, q) >= v],     q = e^ε / (1 + e^ε),

and for (ε, δ)-DP (their Theorem 5.2) the p-value grows by ``2 m δ alpha(ε)`` with
``alpha = max_{1 <= i <= v} P[v - i <= Binomial(r, q) < v] / i``. The audit rejects "the
mechanism is (ε, δ)-DP" at level ``1 - confidence`` whenever the p-value is below it; the
returned lower bound is the largest ε rejected.

One run cannot certify much: even ``r = v = 1000`` perfect guesses give
``q^1000 >= 0.05  =>  ε <= ln(q / (1 - q)) = 5.809`` at 95% (pure DP). The bound grows only like
``log r``; the method's value is that it costs one training run instead of thousands.

>>> from dpkit.attacks.one_run import one_run_epsilon
>>> round(one_run_epsilon(canaries=1000, guesses=1000, correct=1000, confidence=0.95), 3)
5.809
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "OneRunResult",
    "one_run_audit",
    "one_run_epsilon",
    "one_run_p_value",
]


def _check_counts(canaries: int, guesses: int, correct: int) -> tuple[int, int, int]:
    for name, v in (("canaries", canaries), ("guesses", guesses), ("correct", correct)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be an int >= 0 (got {v!r})")
    m, r, v = int(canaries), int(guesses), int(correct)
    if not v <= r <= m:
        raise ValueError(f"need correct <= guesses <= canaries (got {v}, {r}, {m})")
    return m, r, v


def one_run_p_value(
    *, canaries: int, guesses: int, correct: int, epsilon: float, delta: float = 0.0
) -> float:
    """Probability of ``correct`` or more right guesses out of ``guesses`` if the mechanism is
    (ε, δ)-DP: ``min(1, beta + 2 m δ alpha)`` (Steinke-Nasr-Jagielski 2023, Thms. 3.1 / 5.2;
    see the module docstring)."""
    m, r, v = _check_counts(canaries, guesses, correct)
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0 (got {epsilon!r})")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [0, 1] (got {delta!r})")
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-epsilon))
    beta = float(stats.binom.sf(v - 1, r, q))
    if delta == 0.0:
        return min(1.0, beta)
    i = np.arange(1, v + 1)
    # P[v - i <= W < v] = P[W >= v - i] - P[W >= v]
    window = stats.binom.sf(v - i - 1, r, q) - beta
    alpha = float(np.max(window / i))
    return min(1.0, beta + 2.0 * m * delta * alpha)


def one_run_epsilon(
    *,
    canaries: int,
    guesses: int,
    correct: int,
    delta: float = 0.0,
    confidence: float = 0.95,
    tolerance: float = 1e-6,
) -> float:
    """The largest ε that ``correct`` right guesses out of ``guesses`` (``canaries`` in the
    game) refute at ``confidence``: ``sup{ε : p-value(ε) < 1 - confidence}`` (0 if none).

    The p-value increases with ε (a larger ε makes more correct guesses likely), so bisection
    finds the crossing; the answer is rounded *down* to within ``tolerance``.
    """
    _check_counts(canaries, guesses, correct)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1) (got {confidence!r})")
    alpha = 1.0 - confidence

    def rejected(eps: float) -> bool:
        return one_run_p_value(canaries=canaries, guesses=guesses, correct=correct,
                               epsilon=eps, delta=delta) < alpha

    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e4:  # pragma: no cover - needs astronomically many guesses
            return lo
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if rejected(mid):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class OneRunResult:
    """Guesses made, how many were right, and the ε lower bound they certify."""

    epsilon_lower: float
    canaries: int
    guesses: int
    correct: int
    confidence: float
    delta: float


def one_run_audit(
    scores: Any,
    included: Any,
    *,
    guess_in: int,
    guess_out: int = 0,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> OneRunResult:
    """Score-based guesses for the one-run game: the ``guess_in`` canaries with the highest
    scores are guessed included, the ``guess_out`` with the lowest excluded, the rest abstain.

    ``scores[i]``: the auditor's statistic for canary ``i`` from the single output (e.g. how
    well the model fits it); ``included[i]``: the true coin. ``guess_in`` and ``guess_out``
    must be fixed *before* looking at the scores (choosing them to maximise the bound
    afterwards invalidates the confidence; split into two runs or correct for the choice).
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    inc = np.asarray(included).ravel().astype(bool)
    if s.shape != inc.shape or s.size == 0:
        raise ValueError("scores and included must be non-empty and of one length")
    if guess_in < 0 or guess_out < 0 or guess_in + guess_out > s.size:
        raise ValueError(
            f"need 0 <= guess_in, guess_out and guess_in + guess_out <= {s.size} canaries"
        )
    order = np.argsort(-s, kind="stable")
    top = order[:guess_in]
    bottom = order[s.size - guess_out:] if guess_out else order[:0]
    correct = int(inc[top].sum() + (~inc[bottom]).sum())
    r = guess_in + guess_out
    eps = one_run_epsilon(canaries=s.size, guesses=r, correct=correct, delta=delta,
                          confidence=confidence)
    return OneRunResult(epsilon_lower=eps, canaries=int(s.size), guesses=r, correct=correct,
                        confidence=float(confidence), delta=float(delta))
