"""Quantiles per group: a point estimate and an interval from three exponential mechanisms.

Runs after the charge, on the exact per-group histograms :mod:`dpkit.engine.read` returned;
every draw comes from :func:`dpkit.mechanisms.exponential_rows` and its event is checked
against the charged one (:func:`dpkit.engine.noisy_measures.check_event`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit import mechanisms
from dpkit.engine.noisy_measures import NoisyMeasure, check_event
from dpkit.engine.plan import QUANTILE_CI_SHARE, Measure
from dpkit.mechanisms.exponential import utility_bound as em_utility_bound
from dpkit.noise import Source

__all__ = ["quantiles"]


def quantiles(mm: Measure, hists: list[Any], level: float, source: Source | None,
               rows: np.ndarray) -> NoisyMeasure:
    """Per group: a point estimate and an interval ``[low, high]`` from three exponential
    mechanisms (the point gets ``(1 - QUANTILE_CI_SHARE)·ε``, each end ``QUANTILE_CI_SHARE·ε/2``
    of the group's ``ε = mm.quant_epsilon``; together ε-DP, within the charged event).

    **Interval** (coverage >= ``level`` per group). Bins ``j = 0..B-1`` (``[c_j, c_{j+1})`` on a
    continuous grid, the integer ``c_j`` on an integer grid) hold ``h_j`` rows; ``a_j = Σ_{i<j}
    h_i`` and ``b_j = a_j + h_j`` with ``a_0 = -∞``, ``b_{B-1} = +∞``, so the rank ranges
    ``[a_j, b_j]`` tile the line. An end aimed at rank ``τ`` scores bin ``j`` by
    ``-dist(τ, [a_j, b_j])`` (0 for the best bin: OPT = 0). Adding/removing one unit's ``m`` rows
    moves ``a_j``, ``b_j`` by ``[0, m]`` in the same direction and ``τ = q·n ± t`` by ``q·m``, so
    the sensitivity is ``m·max(q, 1−q)``, as for the point estimate. Let ``Q`` be any true
    q-quantile (``#{x <= Q} >= q·n`` and ``#{x >= Q} >= (1−q)·n``) and
    ``t = (2Δ/ε_end)(ln B + ln(2/(1−level)))`` (Dwork-Roth 2014, Thm 3.11:
    ``P[score <= OPT − t] <= (1−level)/2``). The low end aims at ``τ = q·n − t`` and outputs
    ``c_j``: if ``c_j > Q`` then every row ``<= Q`` lies in a bin below ``j``, so
    ``a_j >= q·n`` and the score is ``<= −t``: probability at most ``(1−level)/2``. The high end
    aims at ``q·n + t`` and outputs the bin's upper edge (``c_{j+1}``; ``c_j`` on an integer
    grid): if that is ``< Q`` then ``b_j <= q·n``, score ``<= −t``, same probability. A union
    bound over the two ends (the point estimate does not enter) gives
    ``P[low <= Q <= high] >= level``. Widening the interval to contain the point estimate is
    post-processing and keeps the coverage. ``n`` is the group's exact (bounded) row count: it
    only enters the scores, whose sensitivity already accounts for it.

    **Batching.** Each of the three mechanisms runs for a block of groups at once
    (:func:`dpkit.mechanisms.exponential_rows`: one independent exact exponential mechanism per
    group, the law above for each group). Its event ``Exponential(ε)`` is per row; a group's
    rows are its own units' data, so the per-group event, checked against ``mm.event`` once per
    block (every group runs the same three mechanisms), is what the plan charged (with the
    composition over the ``l0`` groups a unit may touch already inside ``mm.event``).
    """
    assert mm.candidates is not None and mm.q is not None
    if rows.size == 0:
        # no group in the data (or none selected): the same three mechanisms on one dummy lane,
        # thrown away, as noisy_integer does, so the work and the notes of an empty answer
        # are those of a non-empty one (FINDINGS.md K1)
        one = quantiles(mm, [None], level, source, np.zeros(1, dtype=np.int64))
        empty = np.full(len(hists), np.nan)
        return NoisyMeasure(empty, empty.copy(), empty.copy(), "float", one.details)
    cands = mm.candidates
    integer_bins = len(cands) > 1 and float(cands[1] - cands[0]) == 1.0 and \
        float(cands[0]).is_integer()
    nbins = len(cands) if integer_bins else len(cands) - 1
    eps_point = mm.quant_epsilon * (1.0 - QUANTILE_CI_SHARE)
    eps_end = mm.quant_epsilon * QUANTILE_CI_SHARE / 2.0
    sens = mm.quant_sensitivity
    end_level = 1.0 - (1.0 - level) / 2.0  # union bound over the two ends
    t = em_utility_bound(nbins, sens, eps_end, False, end_level)
    values = np.full(len(hists), np.nan)
    lows = np.full(len(hists), np.nan)
    highs = np.full(len(hists), np.nan)
    rows = np.asarray(rows, dtype=np.int64)
    bound = math.nan
    # groups in blocks (the score matrices are groups x bins); within a block, each of the three
    # mechanisms runs for all groups at once (exponential_rows: one independent exact
    # exponential mechanism per group, the same law as one call per group)
    per = max(1, _QUANT_BLOCK // (nbins + 1))
    for start in range(0, rows.size, per):
        blk = rows[start : start + per]
        cum = _cum_hist(hists, blk, nbins)  # (groups, nbins + 1): cum[:, j] = #{rows in bins < j}
        n = cum[:, -1].astype(np.float64)[:, None]
        rank = cum[:, : len(cands)].astype(np.float64)
        point_scores = rank - mm.q * n  # -|rank - q·n|, computed in place
        np.abs(point_scores, out=point_scores)
        np.negative(point_scores, out=point_scores)
        rel = mechanisms.exponential_rows(point_scores, sensitivity=sens,
                                          epsilon=eps_point, level=level, source=source)
        spent = rel.event.epsilon if isinstance(rel.event, ev.Exponential) else math.inf
        a = cum[:, :nbins].astype(np.float64)
        b = cum[:, 1 : nbins + 1].astype(np.float64)
        a[:, 0], b[:, -1] = -math.inf, math.inf
        ends: list[np.ndarray] = []
        for tau in (mm.q * n - t, mm.q * n + t):
            dist = a - tau  # -max(a - τ, τ - b, 0), computed in place
            np.maximum(dist, tau - b, out=dist)
            np.maximum(dist, 0.0, out=dist)
            np.negative(dist, out=dist)
            r = mechanisms.exponential_rows(dist, sensitivity=sens, epsilon=eps_end,
                                            level=end_level, source=source)
            spent += r.event.epsilon if isinstance(r.event, ev.Exponential) else math.inf
            ends.append(r.value)
        # the per-group event (every group in the block ran the same three mechanisms)
        check_event(mm.event, ev.Exponential(spent))
        point = cands[rel.value].astype(np.float64)
        lo_v = cands[ends[0]].astype(np.float64)
        hi_v = cands[ends[1] if integer_bins else ends[1] + 1].astype(np.float64)
        values[blk] = point
        lows[blk] = np.minimum(np.minimum(lo_v, hi_v), point)
        highs[blk] = np.maximum(np.maximum(lo_v, hi_v), point)
        bound = float(rel.details.get("utility_bound", math.nan))
    return NoisyMeasure(values, lows, highs, "float",
                        {"rank_error_bound": bound, "interval_rank_margin": t})


_QUANT_BLOCK = 1 << 20  # histogram cells per block of groups in quantiles


def _cum_hist(hists: list[Any], groups: np.ndarray, nbins: int) -> np.ndarray:
    """Cumulative bin counts of ``groups``: ``(len(groups), nbins + 1)`` int64 with
    ``out[i, j]`` the rows of group ``groups[i]`` in bins ``< j`` (bins outside ``[0, nbins)``
    and NULL keys ignored, as the per-group loop did)."""
    gi: list[int] = []
    ks: list[int] = []
    cs: list[int] = []
    for i, g in enumerate(groups.tolist()):
        h = hists[g]
        if h:
            for k, c in h.items():
                if k is not None:
                    gi.append(i)
                    ks.append(int(k))
                    cs.append(int(c))
    h2 = np.zeros((groups.size, nbins), dtype=np.int64)
    if gi:
        k_arr = np.asarray(ks, dtype=np.int64)
        ok = (k_arr >= 0) & (k_arr < nbins)
        np.add.at(h2, (np.asarray(gi, dtype=np.int64)[ok], k_arr[ok]),
                  np.asarray(cs, dtype=np.int64)[ok])
    out = np.zeros((groups.size, nbins + 1), dtype=np.int64)
    np.cumsum(h2, axis=1, out=out[:, 1:])
    return out
