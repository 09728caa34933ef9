"""The curator's answers as the contract's JSON: noisy values and their intervals, costs and
budgets, public declarations. Nothing here reads data: every value comes from a
:class:`~dpkit.engine.results.Result` (already charged and noised), a preview, or the ledger's
public rows, and an analyst's budget and history are its own (``visible_budget``)."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from dpkit.engine.charge import after_charge
from dpkit.engine.curator import Curator
from dpkit.engine.results import Preview, Result
from dpkit.engine.tables import TableMeta
from dpkit.server.problems import http_text

__all__ = ["budget_json", "charged_budget", "clean", "history_json", "preview_json",
           "result_json", "table_json"]

_CI = ("ci_low", "ci_high")


def clean(v: Any) -> Any:
    """A JSON value: numpy scalars unwrapped, non-finite floats as None, dates as ISO text."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, (_dt.date, _dt.datetime, _dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)


def budget_json(cur: Curator) -> dict[str, Any]:
    """``GET /v1/budget``: the caller's own (an analyst), or the project's (the owner).

    From the ledger's running totals (what ``Curator.budget`` reports, without the history
    it also builds: every answer carries this, so it must not grow with the ledger)."""
    led = cur.ledger
    project = led.spend()
    total: float | None = float(led.config.epsilon)
    own, cap = project, total
    if not cur.is_owner:
        own, cap = led.spend(cur.analyst), led.analyst_budgets().get(cur.analyst)
    return clean({"analyst": cur.analyst, "spent_epsilon": float(own.spent),
                  "spent_delta": float(own.delta_spent), "cap_epsilon": cap,
                  "remaining_epsilon": float(min(own.remaining, project.remaining)),
                  "project_remaining_epsilon": float(project.remaining),
                  "project_epsilon": total, "accountant": project.accountant,
                  # constant work's timing term, part of each release's delta (the setting
                  # is the project's, public: the genesis row records it)
                  "timing_delta": (None if led.config.constant_work is None
                                   else float(led.config.constant_work[0]))})


def _kind(query: str) -> str:
    head = (query.split(None, 1) or ["charge"])[0].upper()
    if head in ("SELECT", "WITH"):
        for fam in ("DP_CDF", "DP_QUANTILES", "DP_RANGES", "DP_MARGINALS"):
            if fam in query.upper():
                return fam[3:].lower()
        return "query"
    return head.lower()


@contextmanager
def charged_budget(cur: Curator) -> Iterator[dict[str, Any]]:
    """Within this block, the caller's budget is read right after each charge, before its
    rows are read (``box["budget"]``): the budget an answer carries. Read when the answer is
    made, it counted every charge other processes made during the scan, which an analyst
    charging at known moments on another worker reads as the scan's end (FINDINGS.md L6)."""
    box: dict[str, Any] = {}

    def read(entry: Any) -> None:
        try:
            box["budget"] = budget_json(cur)
        except Exception:  # never the budget after the scan instead (the answer's fallback)
            box["budget"] = {"unavailable": "the budget could not be read at this answer's "
                                            "charge: see GET /v1/budget"}

    with after_charge(read):
        yield box


def history_json(cur: Curator) -> dict[str, Any]:
    """``GET /v1/history``: the caller's own charges (the owner: the project's). A fit is kind
    ``fit`` (its statement reads rows: not a query to put back in the editor) and its
    ``description`` names the model, the label and what it released besides the model (N̂)."""
    items = [{"time": h.time, "sql": h.query or None,
              "kind": "fit" if (h.details or {}).get("kind") == "fit" else _kind(h.query or ""),
              "description": h.describe() or None,
              "epsilon": h.epsilon, "delta": h.delta} for h in cur.budget().history]
    return {"items": clean(items)}


def table_json(meta: TableMeta) -> dict[str, Any]:
    cols = [{"name": c.name, "type": c.type,
             "bounds": list(meta.bounds[c.name]) if c.name in meta.bounds else None,
             "domain": list(meta.domains[c.name]) if c.name in meta.domains else None}
            for c in meta.columns]
    return clean({"name": meta.name, "privacy_unit": meta.privacy_unit,
                  "max_rows_per_unit": None if meta.public else meta.max_rows_per_unit,
                  "not_null": list(meta.not_null),
                  "rows_public": False, "public": meta.public,
                  "description": meta.description,
                  "max_text_length": meta.max_text_length, "columns": cols})


def preview_json(p: Preview) -> dict[str, Any]:
    """``POST /v1/preview``: its notes name the request's own fields (:func:`http_text`)."""
    return clean({"epsilon": p.epsilon, "cost": p.cost, "delta": p.delta,
                  "remaining": p.remaining, "affordable": p.affordable,
                  "expected_error": {str(o["name"]): o.get("halfwidth") for o in p.outputs},
                  "notes": [http_text(n) for n in p.notes], "text": http_text(repr(p))})


def _key_cell(v: Any) -> Any:
    """A group key: a non-finite float keeps its name, as JSON has no such number and
    :func:`clean` makes it null, which is SQL's NULL: groups NaN, +inf, -inf and NULL were
    four rows keyed ``null`` that no analyst could tell apart (FINDINGS.md, service fuzz)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def result_json(res: Result, cur: Curator,
                budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """A query's or a release's answer: the value columns as rows, each interval beside;
    ``budget``: the caller's, as of the answer's own charge (:func:`charged_budget`)."""
    kinds = res.kinds
    cols = [c for c in res.columns if kinds.get(c) not in _CI]
    n = len(res)
    data = {c: np.asarray(res.data[c]).tolist() for c in res.columns}
    # which columns are group keys (public: from the query) and which are noisy values
    col_kinds = {c: str(kinds.get(c) or "value") for c in cols}
    rows = [[_key_cell(data[c][i]) if col_kinds[c] == "group" else data[c][i] for c in cols]
            for i in range(n)]
    intervals = {c: [[data[f"{c}_ci_low"][i], data[f"{c}_ci_high"][i]] for i in range(n)]
                 for c in cols if f"{c}_ci_low" in data and f"{c}_ci_high" in data}
    return clean({"columns": cols, "kinds": col_kinds, "rows": rows, "intervals": intervals,
                  "level": res.level,
                  "warnings": list(res.warnings), "notes": [http_text(n) for n in res.notes],
                  "insecure": bool(res.insecure), "ledger_seq": res.ledger_seq,
                  "charge": {"epsilon": float(res.epsilon), "delta": float(res.delta)},
                  "budget": budget if budget is not None else budget_json(cur)})
