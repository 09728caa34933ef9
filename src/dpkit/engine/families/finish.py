"""From the noisy histogram to the answer: one finisher per family (post-processing only).

Each finisher receives the exact histogram ``x`` *after* the ledger charged the job's event,
answers the job's workload through its strategy (noise from the context's source, the only
randomness), and builds the :class:`~dpkit.engine.results.Result`. Nothing here reads a row
or spends budget: whatever it computes from the noisy values is post-processing.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from dpkit.engine.families.job import Context, Job
from dpkit.engine.ledger import Entry
from dpkit.engine.results import Result
from dpkit.mechanisms.release import Release
from dpkit.release.quantiles import band_level, cdf_band, quantiles_from_cdf

__all__ = ["finish_cdf", "finish_marginals", "finish_quantiles", "finish_ranges", "rmse_note",
           "split"]


def rmse_note(job: Job) -> str:
    wp = job.workload_plan()
    rmse = wp.expected_rmse
    s = wp.strategy.name
    return (f"strategy {s}; expected RMSE {rmse:.4g} per query" if rmse is not None
            else f"strategy {s}")


def split(job: Job, epsilon_cost: float | None = None) -> list[dict[str, Any]]:
    """The one measurement of a job, as ``Result.split`` and the preview list it."""
    p = job.privacy
    fam_eps = job.family_privacy()["epsilon"]
    entry: dict[str, Any] = {
        "measurement": f"{job.kind}: histogram over {job.cells} cells of "
                       f"{', '.join(a.column for a in job.axes)}",
        "epsilon": fam_eps if fam_eps is not None else (epsilon_cost or 0.0),
        "rho": job.plan.noise.rho if job.plan is not None and p.gaussian else p.rho,
        "delta": p.delta_share or 0.0,
        "contributions": job.contributions,
    }
    if job.plan is not None:
        s = job.plan.summary()
        entry.update({
            "mechanism": f"factorization mechanism: strategy {s['strategy']}, discrete "
                         f"{'Gaussian' if s['noise'] == 'gaussian' else 'Laplace'} noise",
            "sensitivity": job.contributions,
            "strategy_sensitivity": s["sensitivity"],
            "strategy": s["strategy"],
            "workload": s["workload"],
            "queries": s["queries"],
            "expected_rmse": s["expected_rmse"],
            "noise_parameter": s["noise_parameter"],
        })
    else:
        entry.update({"mechanism": "MWEM (exponential mechanism + "
                                   f"{'Gaussian' if p.gaussian else 'Laplace'} measurements)",
                      "sensitivity": job.contributions})
    return [entry, *[{
        "measurement": f"diagnostics: {c.what}", "epsilon": c.epsilon or 0.0, "rho": c.rho,
        "delta": 0.0, "contributions": job.contributions, "sensitivity": job.contributions,
        "mechanism": f"discrete {'Gaussian' if c.rho is not None else 'Laplace'} noise, "
                     f"{100 * c.share:.3g}% of the budget"} for c in job.diag]]


def _result(ctx: Context, job: Job, entry: Entry, remaining: float, columns: list[str],
            data: dict[str, Any], kinds: dict[str, str], notes: list[str]) -> Result:
    eps_cost = float(entry.view["epsilon_cost"])
    return Result(
        columns=columns, data={c: np.asarray(data[c]) for c in columns}, kinds=kinds,
        query=job.query, event=job.event, epsilon=eps_cost,
        delta=float(entry.view.get("delta_cost") or 0.0), level=job.level,
        split=split(job, eps_cost), insecure=ctx.insecure, ledger_seq=entry.seq, notes=notes,
        remaining=remaining)


def finish_ranges(ctx: Context, job: Job, x: np.ndarray, entry: Entry,
                  remaining: float) -> Result:
    wp = job.workload_plan()
    assert job.cell_map is not None
    keep = job.cell_map >= 0
    xr = np.bincount(job.cell_map[keep], weights=x[keep],
                     minlength=wp.workload.domain_size).astype(np.int64)
    rel = wp.answer(xr, level=job.level, source=ctx.source)
    assert rel.ci is not None
    low, high = rel.ci
    columns = ["low", "high", "count", "count_ci_low", "count_ci_high"]
    data: dict[str, Any] = {"low": np.array(job.details["low"]),
                            "high": np.array(job.details["high"]), "count": rel.value,
                            "count_ci_low": low, "count_ci_high": high}
    kinds = {"low": "group", "high": "group", "count": "value", "count_ci_low": "ci_low",
             "count_ci_high": "ci_high"}
    if "names" in job.details:
        columns.insert(0, "name")
        data["name"] = np.array(job.details["names"], dtype=object)
        kinds["name"] = "group"
    notes = [*job.notes, rmse_note(job)]
    return _result(ctx, job, entry, remaining, columns, data, kinds, notes)


def _cdf_release(ctx: Context, job: Job, x: np.ndarray) -> Release[np.ndarray]:
    raw = job.workload_plan().answer(x, level=band_level(job.level, x.size), source=ctx.source)
    return cdf_band(raw, job.level)


def finish_cdf(ctx: Context, job: Job, x: np.ndarray, entry: Entry,
               remaining: float) -> Result:
    c = _cdf_release(ctx, job, x)
    axis = job.axes[0]
    e = axis.edges()
    edge = (e[1:] - 1.0) if axis.kind == "int" else e[1:]
    F = c.value
    assert c.ci is not None
    lo, hi = c.ci
    tot_lo, tot_hi = max(lo[-1], 0.0), hi[-1]
    frac = F / F[-1] if F[-1] > 0 else np.zeros_like(F)
    f_lo = np.clip(lo / tot_hi, 0.0, 1.0) if tot_hi > 0 else np.zeros_like(F)
    f_hi = np.clip(hi / tot_lo, 0.0, 1.0) if tot_lo > 0 else np.ones_like(F)
    columns = ["edge", "count", "count_ci_low", "count_ci_high", "fraction",
               "fraction_ci_low", "fraction_ci_high"]
    data = {"edge": edge, "count": F, "count_ci_low": lo, "count_ci_high": hi,
            "fraction": frac, "fraction_ci_low": f_lo, "fraction_ci_high": f_hi}
    kinds = {"edge": "group", "count": "value", "count_ci_low": "ci_low",
             "count_ci_high": "ci_high", "fraction": "value", "fraction_ci_low": "ci_low",
             "fraction_ci_high": "ci_high"}
    sem = ("count of values <= edge" if axis.kind == "int"
           else "count of values < edge (the last edge included)")
    notes = [*job.notes, sem, rmse_note(job)]
    return _result(ctx, job, entry, remaining, columns, data, kinds, notes)


def finish_quantiles(ctx: Context, job: Job, x: np.ndarray, entry: Entry,
                     remaining: float) -> Result:
    c = _cdf_release(ctx, job, x)
    axis = job.axes[0]
    integer = axis.kind == "int"
    # an integer column's quantiles are its integers, its intervals inclusive: "5100 to
    # 100000", never the exclusive cell edge 100001 that no row can hold
    q = quantiles_from_cdf(c, job.details["probabilities"], edges=axis.edges(),
                           integer=integer)
    assert q.ci is not None
    columns = ["probability", "quantile", "quantile_ci_low", "quantile_ci_high"]
    data = {"probability": np.array(job.details["probabilities"]), "quantile": q.value,
            "quantile_ci_low": q.ci[0], "quantile_ci_high": q.ci[1]}
    kinds = {"probability": "group", "quantile": "value", "quantile_ci_low": "ci_low",
             "quantile_ci_high": "ci_high"}
    notes = [*job.notes, ("intervals: from the first to the last integer of the cells that may "
                          "hold the true quantile (both included)" if integer else
                          "intervals: cell edges holding the true quantile's cell")
             + ", jointly for all probabilities"]
    return _result(ctx, job, entry, remaining, columns, data, kinds, notes)


def _marginal_rows(job: Job, std: np.ndarray | None
                   ) -> tuple[list[str], dict[str, list[Any]], list[str]]:
    """Per released cell: its marginal's name and each column's label (None where the column
    is not in that marginal); and the expected RMSE note per marginal."""
    names = [a.column for a in job.axes]
    labels = [a.labels() for a in job.axes]
    rows_m: list[str] = []
    per_col: dict[str, list[Any]] = {n: [] for n in names}
    rmse_notes = []
    start = 0
    for s in job.workload_plan().workload.attribute_sets:  # type: ignore[attr-defined]
        size = math.prod(job.axes[i].size for i in s)
        for idx in itertools.product(*[range(job.axes[i].size) for i in s]):
            rows_m.append(" x ".join(names[i] for i in s) or "total")
            pos = dict(zip(s, idx, strict=True))
            for i, n in enumerate(names):
                per_col[n].append(labels[i][pos[i]] if i in pos else None)
        if std is not None:
            part = std[start:start + size]
            rmse_notes.append(f"{' x '.join(names[i] for i in s) or 'total'}: expected RMSE "
                              f"{math.sqrt(float(np.mean(part ** 2))):.4g}")
        start += size
    return rows_m, per_col, rmse_notes


def finish_marginals(ctx: Context, job: Job, x: np.ndarray, entry: Entry,
                     remaining: float) -> Result:
    rel = job.workload_plan().answer(x, level=job.level, source=ctx.source)
    assert rel.ci is not None
    rows_m, per_col, rmse_notes = _marginal_rows(job, rel.details.get("query_std"))
    names = [a.column for a in job.axes]
    out_names = {n: (n if n not in ("marginal", "count") else f"{n}_value") for n in names}
    columns = ["marginal", *[out_names[n] for n in names], "count", "count_ci_low",
               "count_ci_high"]
    data: dict[str, Any] = {"marginal": np.array(rows_m, dtype=object), "count": rel.value,
                            "count_ci_low": rel.ci[0], "count_ci_high": rel.ci[1]}
    kinds = {"marginal": "group", "count": "value", "count_ci_low": "ci_low",
             "count_ci_high": "ci_high"}
    for n in names:
        data[out_names[n]] = np.array(per_col[n], dtype=object)
        kinds[out_names[n]] = "group"
    notes = [*job.notes, *rmse_notes]
    return _result(ctx, job, entry, remaining, columns, data, kinds, notes)
