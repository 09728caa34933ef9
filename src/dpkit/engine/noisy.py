"""The release step: exact measurements in, noisy values with intervals out.

Runs only after the ledger has committed the plan's event. Every noisy value comes from
:mod:`dpkit.mechanisms` (geometric / discrete Gaussian / exponential); nothing here draws
randomness. The release's event is checked against the event that was charged: a mechanism that
would spend more than was charged stops the query (the charge stays; nothing is shown).

Everything after the mechanisms is post-processing of their outputs: averages and variances from
noisy sums and counts, intervals propagated from the parts' intervals (a union bound over the
parts, so the level holds), HAVING / ORDER BY / LIMIT evaluated on the noisy table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlglot import exp

from dpkit import events as ev
from dpkit import mechanisms, noise
from dpkit.engine import sql as dsql
from dpkit.engine.diagnose import exact_total, summarise
from dpkit.engine.plan import (
    DIAG_KINDS,
    GAUSSIAN,
    GAUSSIAN_THRESHOLD,
    LAPLACE,
    QUANTILE_CI_SHARE,
    Measure,
    Plan,
    ordinal,
    top_k_utility,
)
from dpkit.engine.plan.intervals import output_interval
from dpkit.engine.postprocess import Scratch, project
from dpkit.engine.read import Exact
from dpkit.engine.results import Result
from dpkit.mechanisms.exponential import utility_bound as em_utility_bound
from dpkit.mechanisms.plan import discrete_gaussian_halfwidth as dgauss_halfwidth
from dpkit.mechanisms.plan import discrete_laplace_halfwidth as dlap_halfwidth
from dpkit.mechanisms.plan import selected_count_lower
from dpkit.noise import Source

__all__ = ["Exact", "NoisyMeasure", "halfwidth", "release"]


@dataclass
class NoisyMeasure:
    value: np.ndarray  # native units (float) or integers for counts
    low: np.ndarray
    high: np.ndarray
    scale_kind: str
    details: dict[str, Any]


class MechanismMismatchError(RuntimeError):
    """A mechanism reported a different event than the one charged (an internal error)."""


def halfwidth(mm: Measure, level: float) -> float:
    """CI half-width in native units of a Laplace/Gaussian measurement at ``level``."""
    if mm.noise in (LAPLACE, "threshold"):
        m, _ = dlap_halfwidth(mm.scale, level)
    elif mm.noise in (GAUSSIAN, GAUSSIAN_THRESHOLD):
        m, _ = dgauss_halfwidth(mm.sigma2, level)
    else:
        return math.nan
    return math.ldexp(float(m), -mm.f)


def _check_event(charged: ev.Event, got: ev.Event) -> None:
    if charged == got:
        return
    if (isinstance(charged, ev.Composed) and len(charged.events) == 2
            and isinstance(charged.events[1], ev.ApproxDP) and charged.events[1].epsilon == 0):
        # Gaussian partition selection: the noise part is checked; the threshold's delta is
        # a property of the threshold the plan computed
        _check_event(charged.events[0], got)
        return
    ok = (
        (isinstance(charged, ev.DiscreteLaplace) and isinstance(got, ev.DiscreteLaplace)
         and got.sensitivity == charged.sensitivity and got.scale >= charged.scale)
        or (isinstance(charged, ev.DiscreteGaussian) and isinstance(got, ev.DiscreteGaussian)
            and got.sigma2 >= charged.sigma2 and got.sensitivity <= charged.sensitivity)
        or (isinstance(charged, ev.ZCDP) and isinstance(got, ev.ZCDP)
            and got.rho <= charged.rho)
        or (isinstance(charged, ev.ZCDP) and isinstance(got, ev.DiscreteGaussian)
            and got.sensitivity**2 / (2 * got.sigma2) <= charged.rho * (1 + 1e-12))
        or (isinstance(charged, ev.ApproxDP) and isinstance(got, ev.DiscreteLaplace)
            and got.sensitivity / got.scale <= charged.epsilon * (1 + 1e-12))
        or (isinstance(charged, ev.Exponential) and isinstance(got, ev.Exponential)
            and got.epsilon <= charged.epsilon)
        or (isinstance(charged, ev.SelfComposed) and isinstance(got, ev.Exponential)
            and isinstance(charged.event, ev.Exponential)
            and got.epsilon <= charged.event.epsilon)
    )
    if ok:
        return
    raise MechanismMismatchError(
        f"internal error: a mechanism released under {got!r} but {charged!r} was charged; the "
        f"answer is withheld (the charge stands). Please report this."
    )


_INT_LIMIT = 2**62


def _as_int(values: Any) -> np.ndarray:
    """Exact integers as int64, NULL (None) as 0, clipped to ``±2^62``.

    Clipping the exact total is 1-Lipschitz: it can only lower the sensitivity.
    """
    lim = _INT_LIMIT
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        return np.clip(values, -lim, lim)
    vals = [0 if v is None else v for v in values]
    if all(type(v) is int for v in vals):
        try:
            return np.clip(np.array(vals, dtype=np.int64).reshape(len(vals)), -lim, lim)
        except OverflowError:  # a total beyond int64: clip in Python integers
            pass
    out = np.empty(len(vals), dtype=np.int64)
    for i, v in enumerate(vals):
        out[i] = min(max(int(v), -lim), lim)
    return out


def _centred_sums(sums: Any, counts: Any, center: int) -> np.ndarray:
    """``Σ(v - center) = Σv - n·center`` per group, exactly in integers, then :func:`_as_int`."""
    if (isinstance(sums, np.ndarray) and isinstance(counts, np.ndarray)
            and sums.dtype == np.int64 and counts.dtype == np.int64):
        big = (abs(int(sums.min(initial=0))) + abs(int(sums.max(initial=0)))
               + max(abs(int(counts.min(initial=0))), abs(int(counts.max(initial=0))))
               * abs(int(center)))
        if big < 2**63 - 1:  # every term and result fits in int64: same integers
            return _as_int(sums - counts * np.int64(center))
    s_list = sums.tolist() if isinstance(sums, np.ndarray) else sums
    n_list = counts.tolist() if isinstance(counts, np.ndarray) else counts
    return _as_int([(s or 0) - (n or 0) * center for s, n in zip(s_list, n_list, strict=True)])


def _noisy_integer(mm: Measure, exact: np.ndarray, level: float,
                   source: Source | None) -> NoisyMeasure:
    if exact.size == 0:
        # no group in the data (or none selected): the same mechanism on one dummy lane,
        # sliced away, so an empty answer is built exactly as a non-empty one
        one = _noisy_integer(mm, np.zeros(1, dtype=np.int64), level, source)
        return NoisyMeasure(one.value[:0], one.low[:0], one.high[:0], one.scale_kind,
                            one.details)
    if mm.noise in (LAPLACE, "threshold"):
        rel = mechanisms.geometric(exact, sensitivity=mm.l1, epsilon=mm.epsilon, level=level,
                                   source=source)
    else:
        rel = mechanisms.discrete_gaussian(exact, sensitivity=mm.l2, sigma2=mm.sigma2,
                                           level=level, source=source)
    _check_event(mm.event, rel.event)
    value = np.asarray(rel.value, dtype=np.int64)
    low, high = (np.asarray(x, dtype=np.int64) for x in rel.ci)
    if mm.f == 0:
        return NoisyMeasure(value, low, high, "int", dict(rel.details))
    unit = math.ldexp(1.0, -mm.f)
    return NoisyMeasure(value.astype(np.float64) * unit, low.astype(np.float64) * unit,
                        high.astype(np.float64) * unit, "float",
                        {**rel.details, "insecure": rel.insecure})


def _quantiles(mm: Measure, hists: list[Any], level: float, source: Source | None,
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
        # thrown away, as _noisy_integer does, so the work and the notes of an empty answer
        # are those of a non-empty one (FINDINGS.md K1)
        one = _quantiles(mm, [None], level, source, np.zeros(1, dtype=np.int64))
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
        _check_event(mm.event, ev.Exponential(spent))
        point = cands[rel.value].astype(np.float64)
        lo_v = cands[ends[0]].astype(np.float64)
        hi_v = cands[ends[1] if integer_bins else ends[1] + 1].astype(np.float64)
        values[blk] = point
        lows[blk] = np.minimum(np.minimum(lo_v, hi_v), point)
        highs[blk] = np.maximum(np.maximum(lo_v, hi_v), point)
        bound = float(rel.details.get("utility_bound", math.nan))
    return NoisyMeasure(values, lows, highs, "float",
                        {"rank_error_bound": bound, "interval_rank_margin": t})


_QUANT_BLOCK = 1 << 20  # histogram cells per block of groups in _quantiles


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


def release(plan: Plan, exact: Exact, *, source: Source | None, insecure: bool, epsilon_cost: float,
            ledger_seq: int | None, remaining: float | None,
            scratch: Scratch | None = None, delta_cost: float | None = None) -> Result:
    """Add noise to every measurement, derive the aggregates, post-process; build the Result.

    ``epsilon_cost`` / ``delta_cost`` are what the ledger charged (``delta_cost`` None: the
    plan's own δ): the Result states the charge, which on a constant-work project includes its
    timing δ, and under ``approx`` a Gaussian query's booked δ."""
    level = plan.level
    n_groups = exact.n_groups if plan.spec.group_by else 1
    keep = np.arange(n_groups)
    noisy: dict[str, NoisyMeasure] = {}

    # 1. partition selection first: only selected groups get (and show) other values
    for mm in plan.measures:
        if mm.kind == "select":
            counts = _as_int(exact.column(mm.sql_col))
            nm = _noisy_integer(mm, counts, level, source)
            noisy[mm.key] = nm
            keep = np.flatnonzero(nm.value >= mm.threshold)
            # COUNT(*) / COUNT(DISTINCT unit) reuse this noisy count, which also decided that
            # the group is shown: its lower end must hold given Y >= T (Y - m misses the small
            # groups that got through); the upper end Y + m stays valid (post-processing)
            if keep.size:
                gauss = mm.noise == GAUSSIAN_THRESHOLD
                nm.low[keep] = np.minimum(nm.low[keep], selected_count_lower(
                    nm.value[keep], mm.threshold, level,
                    scale=None if gauss else float(nm.details["scale"]),
                    sigma2=float(mm.sigma2) if gauss else None))
    # 2. top-k groups by noisy max, among the (selected) candidates
    selection: dict[str, Any] | None = None
    topk = plan.top_k
    if topk is not None and plan.spec.group_by:
        score_mm = plan.measure(topk.score_key)
        chosen, selection = _top_k(topk, score_mm, exact, keep, level, source)
        keep = np.sort(chosen)
    for mm in plan.measures:
        if mm.key in noisy or mm.kind == "topk" or mm.kind in DIAG_KINDS:
            continue
        if mm.kind == "quant":
            noisy[mm.key] = _quantiles(mm, exact.column(mm.sql_col), level, source, keep)
        else:
            if mm.kind == "csum":  # Σ(v - center) = Σv - n·center, exactly in integers
                vals = _centred_sums(exact.column(mm.sql_col), exact.column(mm.count_col),
                                     mm.center)
            else:
                vals = _as_int(exact.column(mm.sql_col))
            noisy[mm.key] = _noisy_integer(mm, vals, level, source)

    # 2. aggregates from measurements
    agg_cols: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for ap in plan.aggs:
        agg_cols.append(_derive(plan, ap, noisy, level))

    # 3. the noisy table (selected groups only)
    idx = keep if plan.spec.group_by else np.array([0])
    table: dict[str, np.ndarray] = {}
    for gi in range(len(plan.spec.group_by)):
        table[f"__g{gi}"] = exact.key_column(gi)[keep]
    for ai, (v, lo, hi) in enumerate(agg_cols):
        table[f"__a{ai}"] = v[idx]
        table[f"__a{ai}_lo"] = lo[idx]
        table[f"__a{ai}_hi"] = hi[idx]

    _expression_intervals(plan, noisy, agg_cols, idx, table, level)
    columns, data, kinds = project(plan, table, scratch=scratch)
    notes = list(plan.notes)
    if selection is not None:
        notes.append(selection["note"])
    for ap in plan.aggs:
        if ap.call.func == dsql.QUANTILE:
            d = noisy[ap.measures["quant"]].details
            notes.append(f"{ap.call.label}: point estimate's rank within "
                         f"±{d['rank_error_bound']:.3g} rows of the target with probability "
                         f"{level:g} per group; its interval (two more exponential mechanisms "
                         f"aimed ±{d.get('interval_rank_margin', math.nan):.3g} rows away) "
                         f"covers the true quantile with probability >= {level:g} per group")
    diagnostics, warnings = _diagnostics(plan, exact, level, source)
    return Result(
        diagnostics=diagnostics,
        warnings=warnings,
        columns=columns,
        data=data,
        kinds=kinds,
        query=plan.spec.text,
        event=plan.event,
        epsilon=epsilon_cost,
        delta=plan.delta if delta_cost is None else delta_cost,
        level=level,
        split=plan.split(),
        insecure=insecure,
        ledger_seq=ledger_seq,
        notes=notes,
        remaining=remaining,
        selection=selection,
    )


def _diagnostics(plan: Plan, exact: Exact, level: float, source: Source | None,
                 ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The diagnostic counts (whole-query totals of their exact columns), noised with their
    charged mechanisms, then read as shares and warnings (:mod:`dpkit.engine.diagnose`)."""
    released: list[tuple[Measure, int, int, int]] = []
    for mm in plan.diag_measures:
        total = exact_total(exact.column(mm.sql_col),
                            scalar=mm.kind == "ddrop" and not mm.per_group)
        nm = _noisy_integer(mm, _as_int([total]), level, source)
        released.append((mm, int(nm.value[0]), int(nm.low[0]), int(nm.high[0])))
    return summarise(released, m=plan.m)


def _top_k(mm: Measure, score_mm: Measure, exact: Exact, candidates: np.ndarray, level: float,
           source: Source | None) -> tuple[np.ndarray, dict[str, Any]]:
    """The indices of the top ``k`` groups among ``candidates`` by peeling exponential
    mechanism (proof: :func:`dpkit.engine.plan.calibrate.calibrate_topk`), and metadata.

    The scores are the exact per-group values of the ordering measurement (never released);
    each round is one exact exponential mechanism over the remaining candidates
    (:func:`dpkit.mechanisms.exponential_rows` with one row: the law of
    :func:`dpkit.mechanisms.exponential`), whose event is checked against the charged
    ``SelfComposed(Exponential, k)``. The remaining candidates are a boolean mask over the
    candidate array (candidate order kept), so a round is O(n) numpy work.
    """
    if score_mm.kind == "csum":  # pragma: no cover - SUM orders by its own sum measurement
        raise AssertionError("top-k scores come from a COUNT or SUM measurement")
    raw = _as_int(exact.column(score_mm.sql_col))
    lim = 1 << 52
    # arithmetic shift (floor), as Python's >> on the integers; exact: |score| <= 2^52
    scores_all = np.clip(raw >> mm.score_shift, -lim, lim).astype(np.float64)
    if not mm.desc:
        scores_all = -scores_all
    cand = np.asarray(candidates, dtype=np.int64)
    n_cand = int(cand.size)
    alive = np.ones(n_cand, dtype=bool)  # candidates not chosen yet, in candidate order
    chosen: list[int] = []
    rounds = min(mm.k, n_cand)
    assert isinstance(mm.event, (ev.Exponential, ev.SelfComposed))
    # one request for the whole peeling (one charged event), its candidates a size: under
    # partition selection they are the groups selected, a DP output, and the rounds run (at
    # most k, none for the last candidate) follow them (FINDINGS.md K1)
    with noise.trace.request("top_k_peeling", mm.k, mm.round_epsilon, mm.score_sensitivity,
                             mm.monotonic, noise.trace.SizeOf(n_cand)):
        for rnd in range(rounds):
            left = np.flatnonzero(alive)  # the remaining candidates' positions: O(n) per round
            if n_cand - rnd == 1:  # the last candidate: selecting it reveals nothing
                pick = int(left[0])
            else:
                rel = mechanisms.exponential_rows(scores_all[cand[left]][None, :],
                                                  sensitivity=mm.score_sensitivity,
                                                  epsilon=mm.round_epsilon,
                                                  monotonic=mm.monotonic, level=level,
                                                  source=source)
                _check_event(mm.event, rel.event)
                pick = int(left[int(rel.value[0])])
            alive[pick] = False
            chosen.append(int(cand[pick]))
    u = top_k_utility(mm, max(n_cand, 1), level)
    what = mm.score_label or score_mm.label or "the ordering aggregate"
    note = (f"top-{mm.k} by {what}: with probability >= {level:g}, every group shown has a "
            f"true {what} within {u:.4g} of the true {ordinal(mm.k)} "
            f"{'largest' if mm.desc else 'smallest'} among {n_cand} candidate groups "
            f"(exponential mechanism utility bound, union over the rounds)")
    meta = {"k": mm.k, "candidates": n_cand, "rounds": rounds,
            "round_epsilon": mm.round_epsilon, "monotonic": mm.monotonic,
            "sensitivity": math.ldexp(mm.score_sensitivity * 2 ** mm.score_shift, -mm.f),
            "utility_bound": u, "level": level, "descending": mm.desc, "note": note}
    return np.asarray(chosen, dtype=np.int64), meta


def _derive(plan: Plan, ap: Any, noisy: dict[str, NoisyMeasure],
            level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    func = ap.call.func
    r = ap.measures
    if func in (dsql.COUNT, dsql.COUNT_COL, dsql.COUNT_UNITS, dsql.COUNT_DISTINCT):
        nm = noisy[r["count"]]
        return nm.value, nm.low, nm.high
    if func == dsql.SUM:
        nm = noisy[r["sum"]]
        return nm.value, nm.low, nm.high
    if func == dsql.QUANTILE:
        nm = noisy[r["quant"]]
        return nm.value, nm.low, nm.high
    lo, hi = ap.lo, ap.hi
    cm = plan.measure(r["count"])
    sm = plan.measure(r["csum"])
    mid = math.ldexp(float(sm.center), -sm.f)  # the centre actually subtracted (on the grid)
    half = max(mid - lo, hi - mid)
    n = noisy[r["count"]].value.astype(np.float64)
    s = noisy[r["csum"]].value.astype(np.float64)
    parts = 2 if func == dsql.AVG else 3
    lvl = 1.0 - (1.0 - level) / parts  # union bound over the parts
    hn, hs = halfwidth(cm, lvl), halfwidth(sm, lvl)
    n_lo, n_hi = n - hn, n + hn
    s_lo, s_hi = s - hs, s + hs
    safe_n = np.where(n > 0, n, 1.0)
    c_lo, c_hi = lo - mid, hi - mid
    mean_c = np.where(n > 0, np.clip(s / safe_n, c_lo, c_hi), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        pos = n_lo > 0
        d_lo = np.where(pos, n_lo, 1.0)
        cands = np.stack([s_lo / d_lo, s_lo / n_hi, s_hi / d_lo, s_hi / n_hi])
        mc_lo = np.where(pos, np.clip(cands.min(axis=0), c_lo, c_hi), c_lo)
        mc_hi = np.where(pos, np.clip(cands.max(axis=0), c_lo, c_hi), c_hi)
    if func == dsql.AVG:
        return mid + mean_c, mid + mc_lo, mid + mc_hi
    qm = plan.measure(r["csq"])
    qv = noisy[r["csq"]].value.astype(np.float64)
    hq = halfwidth(qm, lvl)
    var_max = half * half
    raw = np.where(n > 0, qv / safe_n - mean_c**2, 0.0)
    var = np.clip(raw, 0.0, var_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        q_lo_c = np.stack([(qv - hq) / d_lo, (qv - hq) / n_hi])
        q_hi_c = np.stack([(qv + hq) / d_lo, (qv + hq) / n_hi])
        sq_lo = np.where((mc_lo <= 0) & (mc_hi >= 0), 0.0,
                         np.minimum(mc_lo**2, mc_hi**2))
        sq_hi = np.maximum(mc_lo**2, mc_hi**2)
        v_lo = np.where(pos, np.clip(q_lo_c.min(axis=0) - sq_hi, 0.0, var_max), 0.0)
        v_hi = np.where(pos, np.clip(q_hi_c.max(axis=0) - sq_lo, 0.0, var_max), var_max)
    if func in (dsql.VAR, dsql.STDDEV):
        # sample variance: times n/(n-1), decreasing in n
        with np.errstate(divide="ignore", invalid="ignore"):
            f_hat = np.where(n > 1, n / np.maximum(n - 1, 1e-300), 1.0)
            f_max = np.where(n_lo > 1, n_lo / np.maximum(n_lo - 1, 1e-300), np.inf)
            f_min = np.where(n_hi > 1, n_hi / np.maximum(n_hi - 1, 1e-300), 1.0)
        var = np.minimum(var * f_hat, var_max * 2)
        v_lo = v_lo * f_min
        v_hi = np.where(np.isfinite(f_max), np.minimum(v_hi * f_max, var_max * 2), var_max * 2)
    if func in (dsql.STDDEV, dsql.STDDEV_POP):
        return np.sqrt(var), np.sqrt(v_lo), np.sqrt(v_hi)
    return var, v_lo, v_hi


def _expression_intervals(plan: Plan, noisy: dict[str, NoisyMeasure],
                          agg_cols: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                          idx: np.ndarray, table: dict[str, np.ndarray], level: float) -> None:
    """An interval for each output computed from aggregates (``SUM(a) / SUM(b)``,
    ``POWER(AVG(x), 2)``), as ``__o{i}_lo`` / ``__o{i}_hi`` columns of the noisy table.

    Coverage ``>= level``: an output over ``k`` aggregates takes each one's interval at level
    ``1 - (1 - level)/k`` (re-derived from the same noisy values: a half-width of the exact
    noise law, or AVG/VAR's own union bound at that level); with probability ``>= level`` all
    ``k`` cover their true values at once (union bound), and then the interval arithmetic of
    :func:`dpkit.engine.plan.intervals.output_interval` contains the output of the true
    values. Post-processing of released values only. No interval (the column is left out)
    when a part has no interval rule, or for ``k >= 2`` aggregates one of which is a quantile
    (its interval comes from its own mechanisms at the query's level and cannot be redrawn)."""
    for oi, o in enumerate(plan.spec.outputs):
        if o.kind != "expr" or o.expr is None:
            continue
        refs = sorted({int(n.name[3:]) for n in o.expr.find_all(exp.Column)
                       if n.name.startswith("__a") and n.name[3:].isdigit()})
        if not refs:
            continue
        lvl = 1.0 - (1.0 - level) / len(refs)
        boxes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for ai in refs:
            got = agg_cols[ai] if len(refs) == 1 else _derive_at(plan, plan.aggs[ai], noisy, lvl)
            if got is None:
                break
            boxes[f"__a{ai}"] = (np.asarray(got[1], dtype=np.float64)[idx],
                                 np.asarray(got[2], dtype=np.float64)[idx])
        else:
            for gi in range(len(plan.spec.group_by)):
                key = np.asarray(table[f"__g{gi}"])
                if key.dtype.kind in "iuf":  # a numeric key is exact (public)
                    boxes[f"__g{gi}"] = (key.astype(np.float64), key.astype(np.float64))
            box = output_interval(o.expr, boxes)
            if box is not None:
                n = len(idx)
                table[f"__o{oi}_lo"] = np.broadcast_to(box[0], (n,)).astype(np.float64)
                table[f"__o{oi}_hi"] = np.broadcast_to(box[1], (n,)).astype(np.float64)


def _derive_at(plan: Plan, ap: Any, noisy: dict[str, NoisyMeasure], level: float,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The aggregate's value and interval at another ``level``, from the same noisy values
    (None for quantiles, whose intervals are mechanisms of their own)."""
    func = ap.call.func
    if func == dsql.QUANTILE:
        return None
    if func not in (dsql.COUNT, dsql.COUNT_COL, dsql.COUNT_UNITS, dsql.COUNT_DISTINCT,
                    dsql.SUM):
        return _derive(plan, ap, noisy, level)
    key = ap.measures.get("count") or ap.measures["sum"]
    mm, nm = plan.measure(key), noisy[key]
    h = halfwidth(mm, level)
    if not math.isfinite(h):
        return None
    value = nm.value.astype(np.float64)
    low, high = value - h, value + h
    if mm.kind == "select":  # the count also chose the group: its lower end given Y >= T
        shown = value >= mm.threshold
        if shown.any():
            gauss = mm.noise == GAUSSIAN_THRESHOLD
            low[shown] = np.minimum(low[shown], selected_count_lower(
                value[shown], mm.threshold, level,
                scale=None if gauss else float(mm.scale), sigma2=float(mm.sigma2) if gauss
                else None))
    return nm.value, low, high
