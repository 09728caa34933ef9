"""The release step: exact measurements in, noisy values with intervals out.

Runs only after the ledger has committed the plan's event. Every noisy value comes from
:mod:`dpkit.mechanisms` (geometric / discrete Gaussian / exponential); nothing here draws
randomness. The release's event is checked against the event that was charged: a mechanism that
would spend more than was charged stops the query (the charge stays; nothing is shown).

Everything after the mechanisms is post-processing of their outputs: averages and variances from
noisy sums and counts, intervals propagated from the parts' intervals (a union bound over the
parts, so the level holds), HAVING / ORDER BY / LIMIT evaluated on the noisy table.

The topics live beside it: one measurement's noise and the event check
(:mod:`dpkit.engine.noisy_measures`), quantiles (:mod:`dpkit.engine.noisy_quantiles`), derived
aggregates and output intervals (:mod:`dpkit.engine.noisy_derive`); this file runs them in order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit import mechanisms, noise
from dpkit.engine import sql as dsql
from dpkit.engine.diagnose import exact_total, summarise
from dpkit.engine.noisy_derive import derive, expression_intervals
from dpkit.engine.noisy_measures import (
    NoisyMeasure,
    as_int,
    centred_sums,
    check_event,
    halfwidth,
    noisy_integer,
)
from dpkit.engine.noisy_quantiles import quantiles
from dpkit.engine.plan import (
    DIAG_KINDS,
    GAUSSIAN_THRESHOLD,
    Measure,
    Plan,
    ordinal,
    top_k_utility,
)
from dpkit.engine.postprocess import Scratch, project
from dpkit.engine.read import Exact
from dpkit.engine.results import Result
from dpkit.mechanisms.plan import selected_count_lower
from dpkit.noise import Source

__all__ = ["Exact", "NoisyMeasure", "halfwidth", "release"]


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
            counts = as_int(exact.column(mm.sql_col))
            nm = noisy_integer(mm, counts, level, source)
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
            noisy[mm.key] = quantiles(mm, exact.column(mm.sql_col), level, source, keep)
        else:
            if mm.kind == "csum":  # Σ(v - center) = Σv - n·center, exactly in integers
                vals = centred_sums(exact.column(mm.sql_col), exact.column(mm.count_col),
                                     mm.center)
            else:
                vals = as_int(exact.column(mm.sql_col))
            noisy[mm.key] = noisy_integer(mm, vals, level, source)

    # 2. aggregates from measurements
    agg_cols: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for ap in plan.aggs:
        agg_cols.append(derive(plan, ap, noisy, level))

    # 3. the noisy table (selected groups only)
    idx = keep if plan.spec.group_by else np.array([0])
    table: dict[str, np.ndarray] = {}
    for gi in range(len(plan.spec.group_by)):
        table[f"__g{gi}"] = exact.key_column(gi)[keep]
    for ai, (v, lo, hi) in enumerate(agg_cols):
        table[f"__a{ai}"] = v[idx]
        table[f"__a{ai}_lo"] = lo[idx]
        table[f"__a{ai}_hi"] = hi[idx]

    expression_intervals(plan, noisy, agg_cols, idx, table, level)
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
        nm = noisy_integer(mm, as_int([total]), level, source)
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
    raw = as_int(exact.column(score_mm.sql_col))
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
                check_event(mm.event, rel.event)
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
