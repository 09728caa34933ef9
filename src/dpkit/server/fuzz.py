"""The side-channel fuzzer through the service: the same D/D' pairs, asked over HTTP.

The curator's sealing promises that everything but the noisy values is a function of public
things only. The service adds its own surface on top: status codes, RFC 9457 problem bodies,
the answer's JSON layout, the charge and budget it reports. :func:`served_project` is a
``factory`` for :func:`dpkit.attacks.side_channels.fuzz`: each project of a D/D' pair is
served by its own in-process app (FastAPI's TestClient, no sockets) and asked as an analyst
with a token, so every public part of an HTTP answer is compared between D and D':

* an SQL query's preview (asked first: cost, expected errors, notes) or its refusal;
* an answer's columns, which of them are keys (``kinds``), the released keys and their order,
  the row count, and the charge and budget the service reports;
* a refusal's status (409, 413, 422), its problem type, title and detail;
* anything else (a 5xx, a 504) is an ``internal_exception`` finding on its own.

What it does not compare: timings, the noisy values, the warnings (they come from noisy
diagnostics), and headers that carry them (``X-Dpkit-Warnings``, ``Content-Length``).

Needs the ``[server]`` extra and ``httpx`` (FastAPI's test client).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpkit.attacks.side_channels.runner import make_project
from dpkit.engine.spec import QueryError

__all__ = ["ServedCurator", "ServiceFailureError", "ServiceRefusalError", "served_project"]

_REFUSED = (409, 413, 422)  # the curator (or the schema) said no: nothing charged
_ANALYST = "fuzzer"


class ServiceRefusalError(QueryError):
    """A 409 / 413 / 422 problem answer (its text: status, type, title and detail)."""


class ServiceFailureError(Exception):
    """Any other non-2xx answer (a 5xx or a timeout): a finding whatever the neighbour."""


@dataclass(frozen=True)
class _Spend:
    spent: float
    delta_spent: float
    charges: int


class _Ledger:
    """What the fuzzer reads of a ledger, as the analyst sees it through the service."""

    def __init__(self, client: Any, headers: dict[str, str]) -> None:
        self._client, self._headers = client, headers

    def spend(self) -> _Spend:
        budget = self._client.get("/v1/budget", headers=self._headers).json()
        items = self._client.get("/v1/history", headers=self._headers).json()["items"]
        return _Spend(float(budget["spent_epsilon"]), float(budget["spent_delta"]), len(items))


@dataclass(frozen=True)
class _Answer:
    """A JSON answer in the shape :func:`~dpkit.attacks.side_channels.outcome.observe` reads."""

    columns: tuple[str, ...]
    data: dict[str, list[Any]]
    kinds: dict[str, str]
    delta: float


@dataclass(frozen=True)
class _Records:
    """Synthetic records (CSV): no ``kinds``, so the row count is treated as noisy."""

    columns: tuple[str, ...]
    data: dict[str, list[Any]]


class ServedCurator:
    """One project behind its own app, with the curator's query methods over HTTP."""

    def __init__(self, path: Path, client: Any, token: str) -> None:
        self.path = path
        self._client = client
        self._headers = {"Authorization": f"Bearer {token}"}
        self.ledger = _Ledger(client, self._headers)

    def _post(self, route: str, body: dict[str, Any]) -> Any:
        # json.dumps writes inf as Infinity, which the service's parser reads (the estimator's
        # options may be infinite: the catalog must refuse them); httpx's json= would refuse
        text = json.dumps({k: v for k, v in body.items() if v is not None})
        r = self._client.post(route, content=text,
                              headers={**self._headers, "Content-Type": "application/json"})
        if r.status_code >= 300:
            try:
                p = r.json()
                text = f"{r.status_code} {p.get('type')} {p.get('title')}: {p.get('detail')}"
            except ValueError:
                text = f"{r.status_code}: {r.text}"
            raise (ServiceRefusalError if r.status_code in _REFUSED else ServiceFailureError)(text)
        return r

    @staticmethod
    def _answer(body: dict[str, Any]) -> _Answer:
        cols = tuple(body["columns"])
        data = {c: [row[i] for row in body["rows"]] for i, c in enumerate(cols)}
        return _Answer(cols, data, dict(body.get("kinds", {})), float(body["charge"]["delta"]))

    def sql(self, text: str, *, epsilon: float, delta: float | None = None,
            noise: str | None = None, weights: dict[str, float] | None = None) -> _Answer:
        return self._answer(self._post("/v1/query", {
            "sql": text, "epsilon": epsilon, "delta": delta, "noise": noise,
            "weights": weights}).json())

    def preview(self, text: str, *, epsilon: float, delta: float | None = None,
                noise: str | None = None, weights: dict[str, float] | None = None) -> str:
        """The preview's JSON, canonical (it reads no data: all of it must be public)."""
        body = self._post("/v1/preview", {"sql": text, "epsilon": epsilon, "delta": delta,
                                          "noise": noise, "weights": weights}).json()
        return json.dumps(body, sort_keys=True)

    def cdf(self, table: str, column: str, *, where: str | None = None, epsilon: float,
            delta: float | None = None, bins: int | None = None) -> _Answer:
        if delta is not None:  # the endpoint takes no delta: say so as the curator would
            raise ServiceRefusalError("the cdf endpoint takes no delta")
        return self._answer(self._post("/v1/release/cdf", {
            "table": table, "column": column, "where": where, "epsilon": epsilon,
            "bins": bins}).json())

    def synthetic(self, table: str, columns: list[str], *, where: str | None = None,
                  epsilon: float, method: str | None = None,
                  delta: float | None = None) -> _Records:
        if delta is not None:
            raise ServiceRefusalError("the synthetic endpoint takes no delta")
        r = self._post("/v1/release/synthetic", {
            "table": table, "columns": columns, "where": where, "epsilon": epsilon,
            "method": method})
        rows = list(csv.reader(io.StringIO(r.text)))
        cols = tuple(rows[0]) if rows else ()
        return _Records(cols, {c: [row[i] for row in rows[1:]] for i, c in enumerate(cols)})

    def fit(self, model: Any, text: str, *, label: str, epsilon: float,
            delta: float | None = None) -> _ServedFit:
        """``POST /v1/fit`` with the catalog model of ``model``'s class and its options (the
        fuzzer's estimators, :data:`~dpkit.attacks.side_channels.query.MODELS`)."""
        from dpkit.learn import catalog

        names = [n for n, s in catalog.CATALOG.items() if s.estimator == type(model).__name__]
        if not names:
            raise ServiceRefusalError(f"{type(model).__name__} has no fit endpoint model")
        spec = catalog.CATALOG[names[0]]
        options = {k: list(v) if isinstance(v, tuple) else v
                   for k, v in model.get_params().items() if k in spec.options and v is not None}
        body = self._post("/v1/fit", {"model": spec.name, "options": options, "sql": text,
                                      "label": label, "epsilon": epsilon, "delta": delta})
        return _ServedFit.of(body.json())

    def close(self) -> None:
        self._client.__exit__(None, None, None)


class _ServedFit:
    """A ``POST /v1/fit`` answer in the shape the fuzzer's model face reads
    (:func:`~dpkit.attacks.side_channels.outcome.observe`): ``.model``, an object named after
    the estimator whose attributes are the released parameters (arrays: their shapes are
    compared, not their noisy values), ``classes_`` and the training summary without its noisy
    divisor; ``.encoding.features``, the features' names followed by every other public part
    of the answer (its keys, options, guarantee, event, warnings, the number of notes)."""

    def __init__(self, model: Any, features: list[str]) -> None:
        self.model = model
        self.encoding = type("Encoding", (), {"features": features})()

    @classmethod
    def of(cls, body: dict[str, Any]) -> _ServedFit:
        import numpy as np

        model = type(str(body["estimator"]), (), {})()
        for name, value in body["parameters"].items():
            arrays = ([np.asarray(v, dtype=float) for v in value]
                      if body["model"] == "mlp_classifier" else np.asarray(value, dtype=float))
            setattr(model, name + "_", arrays)
        model.classes_ = None if body["classes"] is None else np.asarray(body["classes"])
        if body.get("training") is not None:
            model.training_ = "TrainingSummary(" + ", ".join(
                f"{k}={v!r}" for k, v in body["training"].items()) + ")"
        public = {k: body[k] for k in ("label", "label_bounds", "options", "guarantee", "event",
                                       "model_epsilon", "warnings", "insecure")}
        face = [f["name"] for f in body["features"]]
        face += [f"keys={sorted(body)}", f"notes={len(body['notes'])}",
                 json.dumps(public, sort_keys=True)]
        return cls(model, face)


def served_project(path: Path, data_file: Path, table: Any, public: Any, *, accountant: str,
                   seed: int, app_factory: Any = None) -> ServedCurator:
    """A fuzzer project (as :func:`~dpkit.attacks.side_channels.runner.make_project`) served
    by its own app; queries come from an analyst without a cap of its own.

    ``app_factory(project_path) -> ASGI app`` replaces :func:`~dpkit.server.app.create_app`
    (tests plant a leak with it)."""
    from fastapi.testclient import TestClient

    from dpkit.server.app import create_app

    with make_project(path, data_file, table, public, accountant=accountant, seed=seed) as cur:
        token = cur.add_analyst(_ANALYST)
    # limits out of the way: the fuzzer's requests must reach the curator, not the rate limit
    app = (app_factory(path) if app_factory is not None
           else create_app(path, rate=1e6, burst=10**6, timeout=120.0))
    client = TestClient(app, raise_server_exceptions=False)
    client.__enter__()
    return ServedCurator(path, client, token)
