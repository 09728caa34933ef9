"""The analyst's endpoints (``/v1``): who am I, tables, preview, query, releases, budget,
history. Each acts through the caller's own curator (:class:`~dpkit.server.pool.Pool`), so
each answer carries the curator's guarantee (ε-DP, or (ε, δ) with Gaussian noise / private
group selection, for add/remove one privacy unit) and was charged before it was computed."""

from __future__ import annotations

import csv
import io
import json
import logging
import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from dpkit.engine.curator import Curator
from dpkit.server import schemas as s
from dpkit.server.answers import Kept
from dpkit.server.problems import Problem
from dpkit.server.service import AnalystCall, Caller
from dpkit.server.views import (
    budget_json,
    charged_budget,
    clean,
    history_json,
    preview_json,
    result_json,
    table_json,
)

__all__ = ["router"]

log = logging.getLogger("dpkit.server")
router = APIRouter(prefix="/v1")
PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {"application/problem+json": {}}}
    for code, text in [(401, "no, malformed, unknown or revoked credential"),
                       (403, "a valid credential without the right"),
                       (404, "no such analyst (owner routes)"),
                       (409, "refused by the curator (SQL, budget, value); nothing charged"),
                       (413, "body too large"), (422, "invalid request"),
                       (429, "rate limited"), (503, "ledger or data unavailable"),
                       (504, "timed out: the body's answer_id names where the answer will "
                             "be kept (GET /v1/answers/{answer_id})")]}


def _query_kwargs(body: s.PreviewIn) -> dict[str, Any]:
    # diagnostics changes the budget's split: a preview must price the query as it will run
    kw: dict[str, Any] = {"epsilon": body.epsilon, "delta": body.delta, "level": body.level,
                          "weights": body.weights, "diagnostics": body.diagnostics}
    if body.accuracy_rows is not None:
        kw["accuracy_rows"] = body.accuracy_rows
    if body.noise is not None:
        kw["noise"] = body.noise
    return kw


@router.get("/me", response_model=s.MeOut, responses=PROBLEMS)
def me(c: AnalystCall) -> Any:
    return {"name": c.who.name, "role": c.who.role}


@router.get("/tables", response_model=s.TablesOut, responses=PROBLEMS)
def tables(c: AnalystCall) -> Any:
    """Public metadata only: schema, declared bounds and domains, privacy unit."""
    metas = c.run(lambda cur: cur.tables())
    return {"tables": [table_json(m) for _, m in sorted(metas.items())]}


@router.post("/preview", response_model=s.PreviewOut, responses=PROBLEMS)
def preview(body: s.PreviewIn, c: AnalystCall) -> Any:
    """Cost and expected error; reads no data, charges nothing."""
    return c.run(lambda cur: preview_json(
        cur.preview(body.sql, accuracy=body.accuracy, **_query_kwargs(body))))


@router.post("/query", response_model=s.ResultOut, responses=PROBLEMS)
def query(body: s.QueryIn, c: AnalystCall) -> Any:
    """Run an aggregate query: noisy values with intervals, charged to the caller."""
    def call(cur: Curator) -> Any:
        with charged_budget(cur) as box:
            res = cur.sql(body.sql, accuracy=body.accuracy, **_query_kwargs(body))
        c.charged(float(res.epsilon), float(res.delta))
        return result_json(res, cur, box.get("budget"))

    return c.run(call, reads_rows=True)


def _release(c: Caller, method: str, *args: Any, **kw: Any) -> Any:
    def call(cur: Curator) -> Any:
        with charged_budget(cur) as box:
            res = getattr(cur, method)(*args, **kw)
        c.charged(float(res.epsilon), float(res.delta))
        return result_json(res, cur, box.get("budget"))

    return c.run(call, reads_rows=True)


def _target(body: Any) -> dict[str, Any]:
    return {"epsilon": body.epsilon, "accuracy": body.accuracy, "level": body.level,
            "where": body.where, "bins": body.bins, "diagnostics": body.diagnostics}


@router.post("/release/cdf", response_model=s.ResultOut, responses=PROBLEMS)
def release_cdf(body: s.CdfIn, c: AnalystCall) -> Any:
    """The CDF of a column with a simultaneous band (one charge)."""
    return _release(c, "cdf", body.table, body.column, grid=body.grid, **_target(body))


@router.post("/release/quantiles", response_model=s.ResultOut, responses=PROBLEMS)
def release_quantiles(body: s.QuantilesIn, c: AnalystCall) -> Any:
    """Quantiles from one private CDF (one charge), intervals holding jointly."""
    return _release(c, "quantiles", body.table, body.column, body.probabilities,
                    grid=body.grid, **_target(body))


@router.post("/release/marginals", response_model=s.ResultOut, responses=PROBLEMS)
def release_marginals(body: s.MarginalsIn, c: AnalystCall) -> Any:
    """Mutually consistent marginal tables over declared domains (one charge)."""
    return _release(c, "marginals", body.table, body.columns, k=body.k, **_target(body))


@router.post("/release/synthetic", responses={
    **PROBLEMS, 200: {"content": {"text/csv": {}}, "description": "synthetic records (CSV)"}})
def release_synthetic(body: s.SyntheticIn, c: AnalystCall) -> Response:
    """Synthetic records (post-processing of one charged release), as a CSV download."""
    def call(cur: Curator) -> Any:
        syn = cur.synthetic(body.table, body.columns, epsilon=body.epsilon, rows=body.rows,
                            method=body.method, where=body.where,
                            diagnostics=body.diagnostics)
        c.charged(float(syn.epsilon), float(syn.delta))
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(syn.columns)
        cols = [list(clean(list(syn.data[n]))) for n in syn.columns]
        w.writerows(zip(*cols, strict=True))
        return out.getvalue(), syn

    return _synthetic_csv(body.table, c.run(call, render=lambda r: _synthetic_csv(body.table, r),
                                              reads_rows=True))


def _synthetic_csv(table: str, answer: tuple[str, Any]) -> Response:
    text, syn = answer
    return Response(text, media_type="text/csv", headers={
        "Content-Disposition": f'attachment; filename="{table}-synthetic.csv"',
        "X-Dpkit-Epsilon": repr(float(syn.epsilon)), "X-Dpkit-Delta": repr(float(syn.delta)),
        # the answer's warnings (rows dropped / outside the bounds), ASCII-safe JSON
        "X-Dpkit-Warnings": json.dumps(list(getattr(syn, "warnings", [])))})


@router.get("/budget", response_model=s.BudgetOut, responses=PROBLEMS)
def budget(c: AnalystCall) -> Any:
    """The caller's own budget (the owner: the project's)."""
    return c.run(budget_json)


@router.get("/history", response_model=s.HistoryOut, responses=PROBLEMS)
def history(c: AnalystCall) -> Any:
    """The caller's own charges, oldest first (the owner: every charge)."""
    return c.run(history_json)


@router.get("/answers/{answer_id}", responses={
    **PROBLEMS, 202: {"description": "still running (poll again after Retry-After)"},
    404: {"description": "unknown, expired or another analyst's answer",
          "content": {"application/problem+json": {}}}})
def answer(answer_id: str, c: AnalystCall) -> Any:
    """The answer of a request that was answered 504: 202 while it runs, then the very answer
    the request would have given (its charge was recorded once, when it ran; reading it again
    is post-processing and costs nothing). Kept for the analyst who asked (and the owner), by
    whichever of the service's processes answered the 504 (:mod:`dpkit.server.answers`).
    Under pacing the answer turns from 202 to 200 only at its late timing class
    (:meth:`~dpkit.server.pacing.Pacing.late_ready`), not when its work ended."""
    pool = c.service.pool
    key = c.who.name if not c.who.owner else pool.owner.analyst
    try:
        kept = pool.answers.get(answer_id, key, owner=c.who.owner)
    except OSError as exc:  # the answers' database is down: the answer may well be there
        log.warning("late answers unreadable: %s", exc)
        raise Problem(503, "unavailable", "the late answers cannot be read now; poll again "
                      "(the answer, if kept, is not lost)", {"Retry-After": "1"}) from None
    if kept is None:
        raise Problem(404, "no-answer", f"no answer of yours has this id: it is unknown, or "
                      f"expired (answers are kept {pool.answers.max_age:g} s after their 504)")
    if kept.lost:  # only its own analyst learns this: the id and the name were checked
        raise Problem(404, "no-answer", "this answer will not come: the service process that "
                      "ran it stopped before it ended (a restart or a crash). A charge it "
                      "made is in your history (GET /v1/history)")
    if kept.answer is None or not _ready(c, kept):
        return JSONResponse({"answer_id": answer_id, "status": "running"}, status_code=202,
                            headers={"Retry-After": "1"})
    return kept.answer.response()


def _ready(c: Caller, kept: Kept) -> bool:
    """Whether a late answer whose work ended may be given now: under pacing, once its class
    boundary passed (the 202 looks the same meanwhile: ``Retry-After: 1`` either way)."""
    pacing = c.service.pacing
    if kept.finished is None:
        return False
    if not pacing.on:
        return True
    keep = c.service.pool.answers.max_age
    # the store's stamps are wall-clock (time.time), read alike by every worker process;
    # the top class is the timeout the request ran under (a fit's own)
    return time.time() >= pacing.late_ready(kept.made, kept.finished, keep, kept.limit)
