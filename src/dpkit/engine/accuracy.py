"""Accuracy: the error each output will have, and the smallest epsilon that meets a target.

Both read the plan only (public things: the query, the declarations, the budget split), never a
row. :func:`expected_errors` gives, per output, the half-width of its interval when that does
not depend on the data (COUNT, SUM: an exact quantile of the noise law) and a note otherwise.
AVG and QUANTILE errors shrink with the group's size ``n``: given ``rows`` (a public
assumption: the fewest rows a group the analyst cares about has; never read from the data),
AVG gets the bound ``(h_s + half·h_n) / (rows - h_n)`` (``h_s``, ``h_n``: the half-widths of its
centred sum and count at the union-bound level, ``half`` the clamp's half-range: the widest
the interval can be for any mean of a group of at least ``rows`` rows, ignoring the clamp to
the bounds), and QUANTILE its interval's rank margin ``t`` over ``rows``: the quantile level
error (``0.01``: the interval ends sit about one percentile from the target).
:func:`epsilon_for_accuracy` finds the smallest epsilon whose half-widths meet a target with
:func:`dpkit.accounting.calibrate.smallest_passing`, the one such search in dpkit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from dpkit.accounting.calibrate import smallest_passing
from dpkit.engine import plan as dplan
from dpkit.engine import sql as dsql
from dpkit.engine.noisy import halfwidth
from dpkit.engine.results import Preview
from dpkit.engine.spec import DIAGNOSTICS_OFF, QueryError

__all__ = ["MIN_ACCURACY_EPSILON", "epsilon_for_accuracy", "expected_errors", "preview_of"]

MIN_ACCURACY_EPSILON = 1e-6  # the search starts here (the query minimum is lower still)


def epsilon_for_accuracy(errors_at: Callable[[float], list[dict[str, Any]]],
                         accuracy: float | Mapping[str, float], *,
                         upper: float = dplan.MAX_QUERY_EPSILON) -> float:
    """The smallest epsilon (to 0.01%) at which every targeted output's expected half-width
    (``errors_at(eps)``, as :func:`expected_errors` gives them) is within ``accuracy`` (one
    number for every output, or per output name). Refuses targets that cannot be met or whose
    error depends on the data."""
    targets = _targets(errors_at(upper), accuracy)

    def ok(eps: float) -> bool:
        outs = errors_at(eps)
        return all(o["halfwidth"] <= targets[o["name"]] for o in outs if o["name"] in targets)

    found = smallest_passing(ok, lower=MIN_ACCURACY_EPSILON, upper=upper, rtol=1e-4)
    if found is None:
        raise QueryError(
            f"accuracy {accuracy!r} cannot be reached even at epsilon {upper:g}; relax it")
    return found


def _targets(outs: list[dict[str, Any]], accuracy: float | Mapping[str, float],
             ) -> dict[str, float]:
    names = {o["name"] for o in outs}
    if isinstance(accuracy, Mapping):
        unknown = set(accuracy) - names
        if unknown:
            raise QueryError(f"accuracy= names unknown outputs: {sorted(unknown)}")
        targets = {str(k): float(v) for k, v in accuracy.items()}
    else:
        targets = dict.fromkeys(names, float(accuracy))
    for o in outs:
        t = targets.get(o["name"])
        if t is None:
            continue
        if o["halfwidth"] is None:
            raise QueryError(
                f"accuracy= cannot be met for {o['name']}: its error depends on the data "
                f"({o['note']}); give epsilon= instead (for AVG and quantiles, or give "
                f"accuracy_rows=: the fewest rows of a group you target)"
            )
        if not (t > 0 and math.isfinite(t)):
            raise QueryError(f"accuracy must be a positive number (got {t!r})")
    return targets


def expected_errors(plan: dplan.Plan, rows: float | None = None) -> list[dict[str, Any]]:
    """Per output: the CI half-width when it does not depend on the data (or, for AVG and
    QUANTILE, on the group size ``rows`` when given: module docstring), else a note."""
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, (int, float))
                             or not (math.isfinite(rows) and rows >= 1)):
        raise QueryError(f"accuracy_rows must be a number >= 1 (got {rows!r}): the fewest "
                         f"rows of a group whose AVG/quantile accuracy you target")
    out: list[dict[str, Any]] = []
    by_index = {i: ap for i, ap in enumerate(plan.aggs)}
    for o in plan.spec.outputs:
        if o.kind != "agg":
            continue
        ap = by_index[o.index]  # type: ignore[index]
        func = ap.call.func
        if func in (dsql.COUNT, dsql.COUNT_COL, dsql.COUNT_UNITS, dsql.COUNT_DISTINCT, dsql.SUM):
            mm = plan.measure(ap.measures.get("count") or ap.measures["sum"])
            out.append({"name": o.name, "halfwidth": halfwidth(mm, plan.level),
                        "note": "exact noise quantile"
                        + (" (selected groups only)" if mm.kind == "select" else "")})
        elif func == dsql.AVG:
            c = plan.measure(ap.measures["count"])
            s = plan.measure(ap.measures["csum"])
            lvl = 1.0 - (1.0 - plan.level) / 2  # the union bound of noisy_derive.derive
            hs, hn = halfwidth(s, lvl), halfwidth(c, lvl)
            half = max(ap.hi - ap.lo, 0.0) / 2.0
            hw = None
            if rows is not None:
                hw = (hs + half * hn) / (rows - hn) if rows > hn else math.inf
            out.append({"name": o.name, "halfwidth": hw,
                        "note": f"about (±{hs:.4g} + |avg - mid| × ±{hn:.4g}) / n for n rows "
                                f"in a group" + ("" if rows is None else
                                                 f" (at most {hw:.4g} for n >= {rows:g})")})
        elif func == dsql.QUANTILE:
            mm = plan.measure(ap.measures["quant"])
            assert mm.candidates is not None
            eps_point = mm.quant_epsilon * (1.0 - dplan.QUANTILE_CI_SHARE)
            eps_end = mm.quant_epsilon * dplan.QUANTILE_CI_SHARE / 2.0
            u = 2 * mm.quant_sensitivity / eps_point * (
                math.log(len(mm.candidates)) + math.log(1 / (1 - plan.level)))
            t = 2 * mm.quant_sensitivity / eps_end * (
                math.log(len(mm.candidates)) + math.log(2 / (1 - plan.level)))
            out.append({"name": o.name, "halfwidth": None if rows is None else t / rows,
                        "note": f"rank within ±{u:.3g} rows of the target (exponential "
                                f"mechanism); interval ends aimed ±{t:.3g} rows away"
                                + ("" if rows is None else
                                   f" (±{t / rows:.3g} in quantile level for n = {rows:g})")})
        else:
            out.append({"name": o.name, "halfwidth": None,
                        "note": "depends on the group sizes (shrinks like 1/n)"})
    return out


def preview_of(plan: dplan.Plan, query: str, *, cost: float, remaining: float,
               delta: float | None = None) -> Preview:
    """What ``plan`` would cost and how accurate it would be (read from the plan only):
    ``cost`` and ``delta`` are what the ledger would charge now (``delta`` None: the plan's
    own), ``remaining`` the caller's budget."""
    notes = list(plan.notes)
    topk = plan.top_k
    level = plan.level
    if topk is not None:
        n_keys = len(plan.keys) if plan.keys is not None else None
        u = dplan.top_k_utility(topk, n_keys or 1000, level)
        notes.append(
            f"{topk.label}: each group shown within {u:.4g} of the true "
            f"{dplan.ordinal(topk.k)} {'largest' if topk.desc else 'smallest'} "
            f"{topk.score_label} with probability {level:g} "
            + (f"({n_keys} candidate groups)" if n_keys else
               "(for 1000 candidate groups; grows like ln K)")
        )
    if plan.diag_measures:
        what = ", ".join(m.label.removeprefix("diagnostics: ") for m in plan.diag_measures)
        notes.append(
            f"{100 * dplan.DIAGNOSTICS_SHARE:g}% of the budget measures what bounding changes "
            f"({what}; the answer warns above 5%); {DIAGNOSTICS_OFF} gives it to the outputs")
    return Preview(query=query, epsilon=plan.epsilon, cost=cost, remaining=remaining,
                   delta=plan.delta if delta is None else delta, level=level,
                   split=plan.split(),
                   outputs=expected_errors(plan), event=plan.event, notes=notes,
                   weights=dict(plan.weights))
