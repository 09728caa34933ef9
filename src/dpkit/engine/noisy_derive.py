"""Aggregates derived from noisy measurements, and the intervals of computed outputs.

AVG / VAR / STDDEV from noisy sums and counts, and an interval for each output computed from
aggregates (``SUM(a) / SUM(b)``): post-processing of released values only (no exact value
enters), the intervals by a union bound over the parts so the stated level holds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sqlglot import exp

from dpkit.engine import sql as dsql
from dpkit.engine.noisy_measures import NoisyMeasure, halfwidth
from dpkit.engine.plan import GAUSSIAN_THRESHOLD, Plan
from dpkit.engine.plan.intervals import output_interval
from dpkit.mechanisms.plan import selected_count_lower

__all__ = ["derive", "expression_intervals"]


def derive(plan: Plan, ap: Any, noisy: dict[str, NoisyMeasure],
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


def expression_intervals(plan: Plan, noisy: dict[str, NoisyMeasure],
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
        return derive(plan, ap, noisy, level)
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
