"""Private model training for analysts over HTTP: ``POST /v1/fit``, ``POST /v1/fit/preview``,
``GET /v1/fit/models``.

**Guarantee.** The answer is what ``Curator.fit`` releases (docs/learn.md): the fitted model's
parameters, post-processing of one run of the estimator's mechanism on the table's rows after
the curator's contribution bounding, (ε, δ)-DP (ε-DP for the pure models) for add/remove of one
**privacy unit** of the table (one row at record level). It is charged to the caller's own
budget through the same path as a query (``charge.charged_read``: check and charge in one
ledger transaction, before any row is read), and nothing is charged for a refusal.

**What a request may name.** A model from the allow-list of :mod:`dpkit.learn.catalog` and its
options as JSON values: no pickle, no import path, no callable, and no ``features=`` transform
(the MLP's front end is code called on the private rows: over the network that would be code
an analyst runs on the server; in Python the analyst's own process is already trusted with it,
docs/curator.md). Options with the wrong JSON kind, unknown names, and values over the
catalog's work limits are refused (409 ``refused``) before anything else; values the estimator
refuses are refused by its ``privacy_event`` (409 ``refused-query``), as in ``cur.fit``
(FINDINGS.md G5); nothing is charged for either.

**What the answer holds.** The model's public parameters (:func:`dpkit.learn.catalog.released`),
the public encoding that maps a table's columns to the model's inputs, the declared classes or
label bounds, the privacy event, the charge, the caller's budget, the notes (what the fit
released besides the model, with its interval: the MLP's noisy row count) and warnings that are
functions of the released values only (non-finite parameters). Never the fitted object, its
training data or an exact count (FINDINGS.md G1). These schemas are new classes here, not in
:mod:`dpkit.server.schemas`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from dpkit.engine.curator import Curator
from dpkit.engine.families.fit import FitPreview, TableModel
from dpkit.learn import catalog
from dpkit.server.problems import Problem
from dpkit.server.schemas import MAX_SQL, BudgetOut, ChargeOut
from dpkit.server.service import AnalystCall
from dpkit.server.views import budget_json, charged_budget, clean

__all__ = ["FitIn", "FitOut", "FitPreviewOut", "ModelsOut", "router"]

router = APIRouter(prefix="/v1", tags=["fit"])

ModelName = Literal["logistic_regression", "linear_regression", "gaussian_nb", "kmeans",
                    "mlp_classifier"]  # == catalog.CATALOG's names (a test holds them equal)
Number = StrictInt | StrictFloat
OptionValue = StrictBool | Number | str | list[Number] | list[list[Number]]
FIT_PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"description": text, "content": {"application/problem+json": {}}}
    for code, text in [(401, "no, malformed, unknown or revoked credential"),
                       (409, "refused by the catalog (an unknown option, a value of the "
                             "wrong kind or over a work limit, a missing extra) or by the "
                             "curator and the model (SQL, option value, budget); nothing "
                             "charged"),
                       (413, "body too large"), (422, "invalid request (the schema)"),
                       (429, "rate limited"), (503, "ledger or data unavailable"),
                       (504, "timed out (a charge made stays: see /v1/history)")]}


class FitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ModelName = Field(description="a model of GET /v1/fit/models")
    options: dict[str, OptionValue | None] = Field(
        default_factory=dict, max_length=32,
        description="the model's options by name (GET /v1/fit/models lists them); null: the "
                    "model's default")
    sql: str = Field(min_length=1, max_length=MAX_SQL,
                     description="SELECT a, b, label FROM t [WHERE ...]: plain declared columns")
    label: str = Field(min_length=1, max_length=128,
                       description="the column to predict (declared classes or bounds)")
    epsilon: float = Field(gt=0, le=1e6, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False,
                                description="default: a tenth of the caller's delta")


class FeatureOut(BaseModel):
    name: str
    column: str
    key: Any = None  # a domain key's indicator; None: a numeric column clamped to [low, high]
    low: float
    high: float


class TrainingOut(BaseModel):
    noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int
    neighbours: str
    insecure: bool
    expected_batch_size: float | None = None


class FitOut(BaseModel):
    model: str
    estimator: str
    task: str
    table: str
    label: str
    classes: list[Any] | None
    label_bounds: list[float] | None
    features: list[FeatureOut]
    parameters: dict[str, Any]
    options: dict[str, Any]
    guarantee: str
    event: dict[str, Any]
    model_epsilon: float | None = None  # the estimator's own accounting of its event
    notes: list[str] = []
    warnings: list[str] = []
    training: TrainingOut | None = None
    insecure: bool = False
    ledger_seq: int
    charge: ChargeOut
    budget: BudgetOut


class FitPreviewOut(BaseModel):
    model: str
    estimator: str
    table: str
    label: str
    features: list[str]
    classes: list[Any] | None
    epsilon: float
    cost: float
    delta: float
    remaining: float
    affordable: bool
    event: dict[str, Any]
    text: str


class ModelsOut(BaseModel):
    models: list[dict[str, Any]]


def _estimator(body: FitIn) -> Any:
    """The allowed model with its options, or 409 before anything is read or charged (a body
    that matches the schema but that the catalog refuses: the service's rule for 409, not 422)."""
    try:
        return catalog.build(body.model, dict(body.options))
    except (catalog.OptionError, catalog.ModelUnavailable) as exc:
        raise Problem(409, "refused", f"{exc}; nothing was charged") from None


def _guarantee(spec: catalog.ModelSpec, cur: Curator, table: str) -> str:
    meta = cur.tables()[table]
    who = ("one row (record level)" if meta.record_level else
           f"one privacy unit ({meta.privacy_unit}, at most {meta.max_rows_per_unit} rows)")
    return f"{spec.guarantee}; for add/remove of {who}"


def _options(model: Any, spec: catalog.ModelSpec) -> dict[str, Any]:
    """The model's parameters after the curator configured it: public, JSON values only."""
    params = model.get_params()
    keep = set(spec.options) | {"epsilon", "delta"}
    return {k: clean(v) for k, v in params.items() if k in keep}


def fit_json(tm: TableModel, body: FitIn, cur: Curator,
             budget: dict[str, Any] | None = None) -> dict[str, Any]:
    """The answer of ``POST /v1/fit`` (module docstring): public and noisy things only;
    ``budget``: the caller's as of the fit's charge (:func:`~dpkit.server.views.charged_budget`)."""
    spec, m, enc = catalog.CATALOG[body.model], tm.model, tm.encoding
    params = catalog.released(body.model, m)
    finite = all(math.isfinite(x) for x in _flat(params))
    summary = getattr(m, "training_", None)
    training = None if summary is None else {
        k: getattr(summary, k) for k in TrainingOut.model_fields}
    return clean({
        "model": body.model, "estimator": spec.estimator, "task": spec.task,
        "table": enc.table, "label": enc.label,
        "classes": None if enc.classes is None or spec.task == "clustering" else
                   list(enc.classes),
        "label_bounds": None if enc.label_bounds is None else list(enc.label_bounds),
        "features": [{"name": f.name, "column": f.column, "key": f.key, "low": f.low,
                      "high": f.high} for f in enc.features],
        "parameters": params, "options": _options(m, spec),
        "guarantee": _guarantee(spec, cur, enc.table), "event": tm.event.to_dict(),
        "model_epsilon": getattr(m, "epsilon_", None), "notes": list(tm.notes),
        # a function of the released values only (FINDINGS.md G2); the Python API warns alike
        "warnings": [] if finite else [
            f"{spec.estimator} diverged: some parameters are not finite (null here); lower "
            f"learning_rate"],
        "training": training, "insecure": cur.insecure, "ledger_seq": tm.ledger_seq,
        "charge": {"epsilon": tm.epsilon, "delta": tm.delta},
        "budget": budget if budget is not None else budget_json(cur)})


def _flat(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat(v)]
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [float(value)]


def preview_json(p: FitPreview, body: FitIn) -> dict[str, Any]:
    return clean({"model": body.model, "estimator": p.model, "table": p.table,
                  "label": p.label, "features": p.features, "classes": p.classes,
                  "epsilon": p.epsilon, "cost": p.cost, "delta": p.delta,
                  "remaining": p.remaining, "affordable": p.affordable,
                  "event": p.event.to_dict(), "text": repr(p)})


@router.get("/fit/models", response_model=ModelsOut, responses=FIT_PROBLEMS)
def fit_models(c: AnalystCall) -> Any:
    """The models a fit may name, their options (kind, limits) and what each releases."""
    return {"models": [spec.describe() for spec in catalog.CATALOG.values()]}


@router.post("/fit/preview", response_model=FitPreviewOut, responses=FIT_PROBLEMS)
def fit_preview(body: FitIn, c: AnalystCall) -> Any:
    """What the fit would charge now, after every check the fit makes; nothing charged."""
    model = _estimator(body)
    return c.run(lambda cur: preview_json(
        cur.preview_fit(model, body.sql, label=body.label, epsilon=body.epsilon,
                        delta=body.delta), body))


@router.post("/fit", response_model=FitOut, responses=FIT_PROBLEMS)
def fit(body: FitIn, c: AnalystCall) -> Any:
    """Train an allowed model on a private table, charged to the caller (as ``cur.fit``)."""
    model = _estimator(body)

    def call(cur: Curator) -> Any:
        with charged_budget(cur) as box:
            tm = cur.fit(model, body.sql, label=body.label, epsilon=body.epsilon,
                         delta=body.delta)
        c.charged(float(tm.epsilon), float(tm.delta))
        return fit_json(tm, body, cur, box.get("budget"))

    # a fit takes longer than a query: its own limit (``dpkit serve --fit-timeout``), which
    # is also its answer's top timing class
    return c.run(call, timeout=c.service.config.fit_timeout, reads_rows=True)
