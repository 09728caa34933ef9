"""Report-noisy-max: the index of the largest score after noise, with three noise laws.

``noise="exponential"`` (default)
    Exponential noise of scale ``2Δ/ε`` — identical in law to **permute-and-flip**
    (McKenna-Sheldon 2020; Ding-Kifer et al. 2021), which is sampled exactly: visit the candidates
    in a random order, stop at the first whose coin ``Bernoulli(exp(ε (q_r - q*) / (2Δ)))`` is
    heads. ε-DP, and never worse in expected score than the exponential mechanism.
    Event: ``PureDP(ε)``. Permute-and-flip is **not** ε-bounded-range: for scores (0, 1) against
    (1, 0) (Δ = 1) its two outputs have privacy losses ±0.83ε, a range of 1.66ε > ε, so the
    ``Exponential(ε)`` event (whose ε²/8-zCDP credit relies on bounded range) would overstate
    its privacy.
``noise="gumbel"``
    Gumbel noise of scale ``2Δ/ε``, whose argmax has exactly the exponential mechanism's law; it
    is sampled as the exponential mechanism (exact rejection), never with float Gumbel noise.
    ε-DP and ε-bounded range. Event: ``Exponential(ε)``.
``noise="laplace"``
    Discrete Laplace noise of scale ``2S/ε`` grid units added to the scores rounded to a grid
    (``S = floor(Δ/2**k) + 1``), ties broken towards the lowest index. ε-DP: for a fixed tie
    rule, index ``i`` wins iff its noise is at least an integer threshold that moves by at most
    ``2S`` between neighbours (``S`` for monotonic scores), and the discrete Laplace tail ratio
    ``P(Z >= t + 2S) / P(Z >= t) >= exp(-2S/scale)`` (Dwork-Roth 2014, Claim 3.9). Event:
    ``PureDP(ε)``.

With ``monotonic=True`` (all scores move in the same direction between neighbours, e.g. counts)
every scale is halved (``Δ/ε``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit import noise as _noise
from dpkit.events import Event, Exponential, PureDP
from dpkit.mechanisms import validate as v
from dpkit.mechanisms._calibrate import dlap_scale_for, grid_l1, on_grid
from dpkit.mechanisms._sampling import Weights, exponential_sample, permute_and_flip_sample
from dpkit.mechanisms.exponential import check_scores, selection_factor, utility_bound
from dpkit.mechanisms.release import Release
from dpkit.noise import Source

__all__ = ["report_noisy_max"]

NOISES = ("exponential", "gumbel", "laplace")


@dataclass(frozen=True)
class _LaplaceMax:
    k: int
    sensitivity: int  # per-score sensitivity in grid units
    scale: float  # discrete Laplace scale in grid units

    def sample(self, scores: np.ndarray, size: int, src: Source) -> np.ndarray:
        n = on_grid(scores, self.k, "scores")
        z = _noise.discrete_laplace(self.scale, (size, scores.size), source=src)
        return np.argmax(n + z, axis=1).astype(np.int64)  # first maximum: lowest index


@dataclass(frozen=True)
class _NoisyMax:
    noise: str
    event: Event
    weights: Weights | None = None
    laplace: _LaplaceMax | None = None

    def sample(self, scores: np.ndarray, size: int, src: Source) -> np.ndarray:
        if self.noise == "laplace":
            assert self.laplace is not None
            return self.laplace.sample(scores, size, src)
        assert self.weights is not None
        if self.noise == "gumbel":
            return exponential_sample(self.weights, size, src)
        return permute_and_flip_sample(self.weights, size, src)


def _plan_noisy_max(
    scores: np.ndarray, sensitivity: float, epsilon: float, noise: str, monotonic: bool
) -> _NoisyMax:
    if noise == "laplace":
        factor = 1 if monotonic else 2
        # per-score sensitivity: each score is rounded on its own, so S = floor(D) + 1
        k, S = grid_l1(sensitivity, 1, factor / epsilon)
        lap = _LaplaceMax(k=k, sensitivity=S, scale=dlap_scale_for(factor * S, epsilon))
        return _NoisyMax(noise, PureDP(epsilon), laplace=lap)
    w = Weights(scores, selection_factor(epsilon, sensitivity, monotonic))
    event: Event = Exponential(epsilon) if noise == "gumbel" else PureDP(epsilon)
    return _NoisyMax(noise, event, weights=w)


def report_noisy_max(
    scores: Any,
    *,
    sensitivity: float,
    epsilon: float,
    noise: str = "exponential",
    monotonic: bool = False,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[int]:
    """ε-DP report-noisy-max: the index of the (noisily) largest score.

    **Guarantee**: ε-DP for the neighbouring relation under which the caller's ``sensitivity``
    holds (add/remove one unit by default): every score moves by at most ``sensitivity``
    between neighbours (and all in the same direction if ``monotonic=True``). Only the index is
    released, not the noisy score.

    ``noise``: ``"exponential"`` (= permute-and-flip, event ``PureDP(ε)``), ``"gumbel"``
    (= exponential mechanism, event ``Exponential(ε)``), ``"laplace"`` (discrete Laplace on a
    grid, event ``PureDP(ε)``); see the module docstring for calibration and proofs.

    **Accuracy**: ``details["utility_bound"]`` is ``u`` with ``P[q(output) < max q - u] <=
    1 - level``: ``(2Δ/ε)(ln n + ln(1/(1-level)))`` for exponential/gumbel noise (a union bound
    over the coins / Dwork-Roth Thm. 3.11), ``2 s (ln 2n + ln(1/(1-level))) + 2**k`` for
    Laplace noise of real scale ``s ≈ 2Δ/ε`` (factors halved if monotonic).

    >>> import dpkit as dp
    >>> r = dp.mechanisms.report_noisy_max([3, 40, 5], sensitivity=1, epsilon=1.0,
    ...                                    source=dp.noise.seeded(0))
    >>> r.value, r.event
    (1, PureDP(epsilon=1.0))
    """
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES} (got {noise!r})")
    q = check_scores(scores)
    sens = v.check_sensitivity(sensitivity)
    eps = v.check_epsilon(epsilon)
    lvl = v.check_level(level)
    src = v.resolve_source(source)
    plan = _plan_noisy_max(q, sens, eps, noise, bool(monotonic))
    index = int(plan.sample(q, 1, src)[0])
    if noise == "laplace":
        assert plan.laplace is not None
        # P(a candidate worse by g wins) <= P(Z_j >= g/2) + P(-Z_* >= g/2) <= 2 exp(-g/(2s));
        # union over the n candidates; grid rounding moves each gap by at most 2**k.
        t = -math.log1p(-lvl)
        s_real = math.ldexp(plan.laplace.scale, plan.laplace.k)
        bound = 2 * s_real * (math.log(2 * q.size) + t) + math.ldexp(1.0, plan.laplace.k)
    else:
        bound = utility_bound(q.size, sens, eps, bool(monotonic), lvl)
    details: dict[str, Any] = {
        "mechanism": f"report noisy max ({noise} noise)",
        "neighbouring": "every score moves by at most the sensitivity (add/remove one unit by "
        "default)",
        "utility_bound": bound,
        "monotonic": bool(monotonic),
    }
    if plan.laplace is not None:
        details.update(grid_exponent=plan.laplace.k, grid_scale=plan.laplace.scale)
    return Release(
        value=index, event=plan.event, ci=None, level=lvl, insecure=src.insecure, details=details
    )
