"""Answers that say when they mislead: rows dropped by the per-unit cap, values clamped.

Contribution bounding makes the sensitivities true, but it changes the answer: rows beyond
``max_rows_per_unit`` are dropped and values outside the declared bounds are clamped, and a
confidence interval covers the aggregate of the *bounded* data only. So every answer measures,
with :data:`~dpkit.engine.plan.model.DIAGNOSTICS_SHARE` of its budget (equal parts), how much
bounding changed (:func:`dpkit.engine.plan.measures.diagnostics`):

* ``rows_read``: rows read after bounding (``K``);
* ``rows_dropped``: rows dropped by the per-unit caps (``D``; each unit's dropped rows count at
  most ``m``, so ``D`` is a lower bound of what was dropped);
* ``clamped:<column>``: rows whose value lay outside the bounds (``C``).

Each is a whole-query count of sensitivity ``m`` (add/remove one unit), released with the
query's noise (discrete Laplace, or discrete Gaussian) and charged inside the query's one event.
Everything here is post-processing of those noisy counts.

**Warnings.** The dropped share ``D / (D + K)`` and each clamped share ``C / K`` are reported
with a lower confidence bound: ``D_low / (D_low + K_high)`` and ``C_low / K_high``, from each
count's two-sided interval at :data:`WARN_LEVEL` (one-sided 97.5% each, so by a union bound
the lower bound holds with probability >= 95%). A warning is issued when that lower bound
exceeds :data:`WARN_SHARE` (5%): a warning is wrong (the true share is at most 5%) with
probability at most 5%, and a share well above 5% is missed only when the noise is as large as
the share (small tables, small epsilon): the estimates and their intervals are in
``Result.diagnostics`` either way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpkit.engine.plan import GAUSSIAN, Measure
from dpkit.mechanisms.plan import discrete_gaussian_halfwidth, discrete_laplace_halfwidth

__all__ = ["WARN_LEVEL", "WARN_SHARE", "exact_total", "share_text", "summarise"]

WARN_SHARE = 0.05
WARN_LEVEL = 0.95


def exact_total(values: Any, *, scalar: bool) -> int:
    """The whole-query total of a diagnostic column: the sum over every group read (the groups
    partition the bounded rows; the portable dropped-rows count's per-group parts too), or,
    for the dropped-rows total repeated on every output row (``scalar``: DuckDB's scalar
    subquery, the portable window), its value. NULL (a declared key with no row) counts 0."""
    vals = values.tolist() if isinstance(values, np.ndarray) else list(values)
    ints = [int(v) for v in vals if v is not None]
    if scalar:
        return max(ints, default=0)
    return sum(ints)


def _halfwidth(mm: Measure) -> float:
    if mm.noise == GAUSSIAN:
        return float(discrete_gaussian_halfwidth(mm.sigma2, WARN_LEVEL)[0])
    return float(discrete_laplace_halfwidth(mm.scale, WARN_LEVEL)[0])


def _entry(mm: Measure, value: int, low: int, high: int) -> dict[str, Any]:
    return {"estimate": int(value), "ci_low": int(low), "ci_high": int(high),
            "share_of_budget": mm.share, "epsilon": mm.epsilon if mm.noise != GAUSSIAN else None,
            "rho": mm.rho if mm.noise == GAUSSIAN else None, "what": mm.label}


def summarise(released: list[tuple[Measure, int, int, int]], *, m: int,
              ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``(diagnostics, warnings)`` from the noisy diagnostic counts ``(measure, value, low,
    high)`` (post-processing only; see the module docstring for the warning rule)."""
    out: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    kept = next((r for r in released if r[0].kind == "dkept"), None)
    if kept is None:
        return out, warnings
    k_mm, k_val = kept[0], kept[1]
    k_high = max(k_val + _halfwidth(k_mm), 1.0)
    out["rows_read"] = _entry(*kept)
    for mm, val, low, high in released:
        if mm.kind == "dkept":
            continue
        e = _entry(mm, val, low, high)
        v_low = max(val - _halfwidth(mm), 0.0)
        if mm.kind == "ddrop":
            share = max(val, 0) / max(max(val, 0) + max(k_val, 0), 1)
            share_low = v_low / (v_low + k_high)
            name, what = "rows_dropped", (f"rows were dropped by the per-unit cap "
                                          f"(max_rows_per_unit={m}; each unit's drops "
                                          f"counted up to {m}, so this is a floor)")
            fix = ("the data owner can raise the table's max_rows_per_unit (or filter the rows "
                   "first)")
        else:
            col = (mm.column or ".?").split(".", 1)[1]
            share = min(max(val, 0) / max(k_val, 1), 1.0)
            share_low = min(v_low / k_high, 1.0)
            name, what = f"clamped:{col}", f"values of {col} lay outside [{mm.lo:g}, {mm.hi:g}]"
            fix = (f"the data owner can widen the declared bounds of {col} (`dpkit suggest-bounds` "
                   f"estimates them)")
        e["share"], e["share_low"] = share, share_low
        out[name] = e
        if share_low > WARN_SHARE:
            warnings.append(
                f"about {100 * share:.0f}% of {what} (at least {100 * share_low:.1f}% with "
                f"95% confidence; warned above {100 * WARN_SHARE:g}%): the answer describes "
                f"the bounded data and may be biased; {fix}")
    return out, warnings


def share_text(d: dict[str, Any]) -> str:
    """One line per diagnostic for displays: ``rows_dropped 3.1% (>= 2.0%)``."""
    parts = []
    for name, e in d.items():
        if "share" in e and math.isfinite(e["share"]):
            parts.append(f"{name} {100 * e['share']:.1f}% (>= {100 * e['share_low']:.1f}%)")
    return ", ".join(parts)
