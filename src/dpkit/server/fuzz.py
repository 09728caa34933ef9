"""The side-channel fuzzer through the service: the same D/D' pairs, asked over HTTP.

The curator's sealing promises that everything but the noisy values is a function of public
things only. The service adds its own surface on top: status codes, RFC 9457 problem bodies,
the answer's JSON layout, headers, the charge and budget it reports. :func:`served_project` is
a ``factory`` for :func:`dpkit.attacks.side_channels.fuzz` (:func:`fuzz_service` runs it with
the service's families): each project of a D/D' pair is served by its own in-process app
(FastAPI's TestClient, no sockets) and asked as an analyst with a token the service issued,
so every public part of an HTTP answer is compared between D and D':

* an SQL query's preview (asked first: status, headers, the whole body) or its refusal;
* an answer's columns, which of them are keys (``kinds``), the released keys and their order,
  the row count (where the curator's comparison keeps it), and the charge and budget;
* the answer's **HTTP face** (``Outcome.http``): status, the headers (all but ``date``,
  ``content-length`` and ``x-dpkit-warnings``), the body's key set at every depth, its
  non-noisy fields by value (``columns``, ``kinds``, ``level``, ``insecure``, ``notes``,
  ``ledger_seq``, ``charge``, ``budget``, which columns carry ``intervals``; a problem's
  ``type``, ``title``, ``status``, ``detail``), and what ``GET /v1/history`` added
  (its items without their time, a fit's noisy row count blanked);
* a fit (``POST /v1/fit``): the model's face as on the curator (:class:`_ServedFit`) and the
  HTTP face, its ``notes`` compared by number only (they carry the MLP's noisy row count);
* a refusal's status (409, 413, 422), its problem type, title and detail;
* anything else (a 5xx, a 504) is an ``internal_exception`` finding on its own.

What it drops as noisy, as the in-process comparison does: the values and intervals in
``rows`` / ``intervals``, a CSV's records, the ``warnings`` (texts made from noisy
diagnostic counts; the key itself is compared) and the header that carries them. A problem's
``instance`` (``urn:dpkit:log:ref-<8 hex>``, the log reference) is random by design: it is
compared as present or absent, and checked apart (:class:`References`): a reference that is
malformed or was seen before in the run (on either side, any request) is a one-sided finding
(``Outcome.flags``).

Needs the ``[server]`` extra and ``httpx`` (FastAPI's test client).
"""

from __future__ import annotations

import csv
import io
import json
import re
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpkit.attacks.side_channels.runner import Report, fuzz, make_project
from dpkit.engine.spec import QueryError
from dpkit.engine.tables import quote_ident

__all__ = ["FAMILIES", "References", "ServedCurator", "ServiceFailureError",
           "ServiceRefusalError", "fuzz_service", "served_project"]

#: the query families the service serves (``/v1/query``, ``/v1/release/{cdf, quantiles,
#: marginals, synthetic}``, ``/v1/fit``), the SQL ones weighed up
FAMILIES = ("sql", "sql", "filter", "dp_cdf", "cdf", "quantiles", "marginals", "synthetic",
            "fit")
_REFUSED = (409, 413, 422)  # the curator (or the schema) said no: nothing charged
_ANALYST = "fuzzer"
# what differs between two answers for reasons that are not the data: the clock, the length
# of the noisy numbers' digits, and the warnings (made from noisy diagnostic counts)
_DROPPED_HEADERS = frozenset({"date", "content-length", "x-dpkit-warnings", "x-request-id"})
_PUBLIC = ("columns", "kinds", "level", "insecure", "notes", "ledger_seq", "charge", "budget",
           "type", "title", "status", "detail")
_REFERENCE = re.compile(r"urn:dpkit:log:ref-[0-9a-f]{8}")
# a fit's history line names what it released besides the model: the MLP's noisy row count
_NOISY_COUNT = re.compile(r"(?<=noisy row count )[^,;)\s]+")
# a fit's notes carry that count too (and its interval): compared by number, not by value
_FIT_PUBLIC = tuple(k for k in _PUBLIC if k != "notes")


class ServiceRefusalError(QueryError):
    """A 409 / 413 / 422 problem answer (its text: status, type, title and detail)."""

    http: str = ""
    flags: tuple[str, ...] = ()


class ServiceFailureError(Exception):
    """Any other non-2xx answer (a 5xx or a timeout): a finding whatever the neighbour."""

    http: str = ""
    flags: tuple[str, ...] = ()


class References:
    """The problem references (``instance``) seen in a run, on every project of it.

    A reference names a log line: it must be new at every request, whatever the data, so
    that it says nothing about the request or the dataset. With the D and D' projects
    sharing one :class:`References`, a reference drawn from the projects' seeded source (the
    same on both) shows as ``reference_reused`` on D'. A reference holds 32 random bits: a
    false ``reference_reused`` among n references has probability below n²/2³³ (2e-5 for the
    ~400 problems of a 2,000-comparison run)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def check(self, ref: Any) -> tuple[str, ...]:
        """The flags of one reference: ``reference_malformed``, ``reference_reused``."""
        if not isinstance(ref, str) or not _REFERENCE.fullmatch(ref):
            return ("reference_malformed",)
        with self._lock:
            if ref in self._seen:
                return ("reference_reused",)
            self._seen.add(ref)
        return ()


@dataclass(frozen=True)
class _Spend:
    spent: float
    delta_spent: float
    charges: int


class _Ledger:
    """What the fuzzer reads of a ledger, as the analyst sees it through the service."""

    def __init__(self, served: ServedCurator) -> None:
        self._served = served

    def spend(self) -> _Spend:
        s = self._served
        budget = s.get("/v1/budget").json()
        items = s.get("/v1/history").json()["items"]
        s.history_seen = len(items)
        return _Spend(float(budget["spent_epsilon"]), float(budget["spent_delta"]), len(items))


@dataclass(frozen=True)
class _Answer:
    """A JSON answer in the shape :func:`~dpkit.attacks.side_channels.outcome.observe` reads,
    with its HTTP face and flags."""

    columns: tuple[str, ...]
    data: dict[str, list[Any]]
    kinds: dict[str, str]
    delta: float
    http: str = ""
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Records:
    """Synthetic records (CSV): no ``kinds``, so the row count is treated as noisy."""

    columns: tuple[str, ...]
    data: dict[str, list[Any]]
    http: str = ""
    flags: tuple[str, ...] = ()


def key_paths(body: Any, at: str = "") -> set[str]:
    """Every key of a JSON value at every depth, as paths (``budget.spent_epsilon``); a
    list's elements share one path (``items[]``), so that a noisy length adds none.

    >>> sorted(key_paths({"a": {"b": 1}, "c": [{"d": 2}, {"e": 3}]}))
    ['a', 'a.b', 'c', 'c[].d', 'c[].e']
    """
    out: set[str] = set()
    if isinstance(body, dict):
        for k, v in body.items():
            path = f"{at}.{k}" if at else str(k)
            out |= {path} | key_paths(v, path)
    elif isinstance(body, list):
        for v in body:
            out |= key_paths(v, f"{at}[]")
    return out


class ServedCurator:
    """One project behind its own app, with the curator's query methods over HTTP."""

    def __init__(self, path: Path, client: Any, token: str,
                 references: References | None = None) -> None:
        self.path = path
        self._client = client
        self._headers = {"Authorization": f"Bearer {token}"}
        self.references = references if references is not None else References()
        self.history_seen = 0  # GET /v1/history's length at the last spend()
        self._pending: list[str] = []  # flags of the preview, told with the query's outcome
        self.ledger = _Ledger(self)

    def get(self, route: str) -> Any:
        return self._client.get(route, headers=self._headers)

    def face(self, r: Any, body: Any,
             public_keys: Sequence[str] = _PUBLIC) -> tuple[str, tuple[str, ...]]:
        """The public face of one answer (canonical JSON) and its flags (see the module's
        docstring); ``public_keys``: the body's fields compared by value."""
        flags = [*self._pending]
        self._pending.clear()
        public: dict[str, Any] = {}
        if isinstance(body, dict):
            public = {k: body[k] for k in public_keys if k in body}
            if isinstance(body.get("intervals"), dict):
                public["intervals"] = sorted(body["intervals"])
            if "instance" in body:
                flags += self.references.check(body["instance"])
        items = self.get("/v1/history").json().get("items", [])
        added = [{k: _NOISY_COUNT.sub("<noisy>", v) if isinstance(v, str) else v
                  for k, v in i.items() if k != "time"} for i in items[self.history_seen:]]
        headers = sorted([k.lower(), v] for k, v in r.headers.items()
                         if k.lower() not in _DROPPED_HEADERS)
        face = {"status": r.status_code, "headers": headers,
                "keys": sorted(key_paths(body)), "public": public, "history": added}
        return json.dumps(face, sort_keys=True, default=str), tuple(flags)

    def send(self, route: str, body: dict[str, Any]) -> Any:
        """POST ``body`` (its None fields left out) as JSON."""
        # json.dumps writes inf as Infinity, which the service's parser reads (the estimator's
        # options may be infinite: the catalog must refuse them); httpx's json= would refuse
        text = json.dumps({k: v for k, v in body.items() if v is not None})
        return self._client.post(route, content=text,
                                 headers={**self._headers, "Content-Type": "application/json"})

    def _post(self, route: str, body: dict[str, Any], *,
              public: Sequence[str] = _PUBLIC) -> tuple[Any, str, tuple[str, ...]]:
        r = self.send(route, body)
        try:
            parsed: Any = r.json()
        except ValueError:
            parsed = None
        face, flags = self.face(r, parsed, public)
        if r.status_code >= 300:
            p = parsed if isinstance(parsed, dict) else {}
            text = (f"{r.status_code} {p.get('type')} {p.get('title')}: {p.get('detail')}"
                    if p else f"{r.status_code}: {r.text}")
            exc = (ServiceRefusalError if r.status_code in _REFUSED else ServiceFailureError)(text)
            exc.http, exc.flags = face, flags
            raise exc
        return r, face, flags

    def _answer(self, route: str, body: dict[str, Any]) -> _Answer:
        r, face, flags = self._post(route, body)
        out = r.json()
        cols = tuple(out["columns"])
        data = {c: [row[i] for row in out["rows"]] for i, c in enumerate(cols)}
        return _Answer(cols, data, dict(out.get("kinds", {})), float(out["charge"]["delta"]),
                       face, flags)

    def sql(self, text: str, *, delta: float | None = None, noise: str | None = None,
            weights: dict[str, float] | None = None, **options: Any) -> _Answer:
        return self._answer("/v1/query", {"sql": text, "delta": delta, "noise": noise,
                                          "weights": weights, **options})

    def preview(self, text: str, *, delta: float | None = None, noise: str | None = None,
                weights: dict[str, float] | None = None, **options: Any) -> str:
        """The preview's whole answer, canonical: status, headers, body (it reads no data: all
        of it must be public), or its refusal's face; its flags go with the query's."""
        return self._whole(self.send("/v1/preview", {
            "sql": text, "delta": delta, "noise": noise, "weights": weights, **options}))

    def _whole(self, r: Any) -> str:
        """A preview's status, headers and body as canonical JSON (its reference checked and
        blanked, the flags told with the query's outcome)."""
        body = r.json()
        if isinstance(body, dict) and "instance" in body:
            self._pending += self.references.check(body.pop("instance"))
            body["instance"] = "<reference>"
        headers = sorted([k.lower(), v] for k, v in r.headers.items()
                         if k.lower() not in _DROPPED_HEADERS)
        return json.dumps({"status": r.status_code, "headers": headers, "body": body},
                          sort_keys=True)

    def _no_delta(self, family: str, delta: float | None) -> None:
        if delta is not None:  # the endpoint takes no delta: say so as the curator would
            raise ServiceRefusalError(f"the {family} endpoint takes no delta")

    # the release endpoints take epsilon or accuracy, level, bins, diagnostics (``options``)
    def cdf(self, table: str, column: str, *, where: str | None = None,
            delta: float | None = None, **options: Any) -> _Answer:
        self._no_delta("cdf", delta)
        return self._answer("/v1/release/cdf", {"table": table, "column": column,
                                                "where": where, **options})

    def quantiles(self, table: str, column: str, probabilities: Sequence[float], *,
                  where: str | None = None, delta: float | None = None,
                  **options: Any) -> _Answer:
        self._no_delta("quantiles", delta)
        return self._answer("/v1/release/quantiles", {
            "table": table, "column": column, "probabilities": list(probabilities),
            "where": where, **options})

    def ranges(self, table: str, column: str, ranges: Sequence[Sequence[float]], *,
               where: str | None = None, bins: int | None = None, **options: Any) -> _Answer:
        """The service has no ranges route: the release's SQL form, ``DP_RANGES`` through
        ``/v1/query`` (on the declared bounds' grid: ``bins`` has no SQL spelling)."""
        pairs = ", ".join(f"({a!r}, {b!r})" for a, b in ranges)
        text = f"SELECT DP_RANGES({quote_ident(column)}, {pairs}) FROM {quote_ident(table)}"
        return self.sql(text + (f" WHERE {where}" if where else ""), **options)

    def marginals(self, table: str, columns: Sequence[str], *, where: str | None = None,
                  delta: float | None = None, **options: Any) -> _Answer:
        self._no_delta("marginals", delta)
        return self._answer("/v1/release/marginals", {
            "table": table, "columns": list(columns), "where": where, **options})

    def synthetic(self, table: str, columns: list[str], *, where: str | None = None,
                  delta: float | None = None, **options: Any) -> _Records:
        self._no_delta("synthetic", delta)
        r, face, flags = self._post("/v1/release/synthetic", {
            "table": table, "columns": columns, "where": where, **options})
        rows = list(csv.reader(io.StringIO(r.text)))
        cols = tuple(rows[0]) if rows else ()
        return _Records(cols, {c: [row[i] for row in rows[1:]] for i, c in enumerate(cols)},
                        face, flags)

    @staticmethod
    def _fit_body(model: Any, text: str, label: str, epsilon: float,
                  delta: float | None) -> dict[str, Any]:
        """The catalog model of ``model``'s class and its options (the fuzzer's estimators,
        :data:`~dpkit.attacks.side_channels.query.MODELS`), as ``POST /v1/fit`` takes them."""
        from dpkit.learn import catalog

        names = [n for n, s in catalog.CATALOG.items() if s.estimator == type(model).__name__]
        if not names:
            raise ServiceRefusalError(f"{type(model).__name__} has no fit endpoint model")
        spec = catalog.CATALOG[names[0]]
        options = {k: list(v) if isinstance(v, tuple) else v
                   for k, v in model.get_params().items() if k in spec.options and v is not None}
        return {"model": spec.name, "options": options, "sql": text, "label": label,
                "epsilon": epsilon, "delta": delta}

    def fit(self, model: Any, text: str, *, label: str, epsilon: float,
            delta: float | None = None) -> _ServedFit:
        """``POST /v1/fit`` (:meth:`_fit_body`)."""
        r, face, flags = self._post("/v1/fit", self._fit_body(model, text, label, epsilon, delta),
                                    public=_FIT_PUBLIC)
        fitted = _ServedFit.of(r.json())
        fitted.http, fitted.flags = face, flags
        return fitted

    def preview_fit(self, model: Any, text: str, *, label: str, epsilon: float,
                    delta: float | None = None) -> str:
        """``POST /v1/fit/preview``'s whole answer, canonical (as :meth:`preview`)."""
        return self._whole(self.send("/v1/fit/preview",
                                     self._fit_body(model, text, label, epsilon, delta)))

    def close(self) -> None:
        self._client.__exit__(None, None, None)


class _ServedFit:
    """A ``POST /v1/fit`` answer in the shape the fuzzer's model face reads
    (:func:`~dpkit.attacks.side_channels.outcome.observe`): ``.model``, an object named after
    the estimator whose attributes are the released parameters (arrays: their shapes are
    compared, not their noisy values), ``classes_`` and the training summary without its noisy
    divisor; ``.encoding.features``, the features' names followed by every other public part
    of the answer (its keys, options, guarantee, event, warnings, the number of notes)."""

    http: str = ""  # the answer's HTTP face (ServedCurator.face)
    flags: tuple[str, ...] = ()

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
        # not the warnings: they say which released parameters are not finite, a function of
        # the noisy model (post-processing), which may differ on D and D' (a diverging MLP:
        # 3 findings in 150 fits, seed 8); their key is compared with the others
        public = {k: body[k] for k in ("label", "label_bounds", "options", "guarantee", "event",
                                       "model_epsilon", "insecure")}
        face = [f["name"] for f in body["features"]]
        face += [f"keys={sorted(body)}", f"notes={len(body['notes'])}",
                 json.dumps(public, sort_keys=True)]
        return cls(model, face)


def served_project(path: Path, data_file: Path, table: Any, public: Any, *, accountant: str,
                   seed: int, app_factory: Any = None,
                   references: References | None = None) -> ServedCurator:
    """A fuzzer project (as :func:`~dpkit.attacks.side_channels.runner.make_project`) served
    by its own app; queries come from an analyst without a cap of its own, with the token
    the project issued it (``Curator.add_analyst``, as ``dpkit analyst add`` does).

    ``app_factory(project_path) -> ASGI app`` replaces :func:`~dpkit.server.app.create_app`
    (tests plant a leak with it); ``references``: shared by the projects of one run
    (:func:`fuzz_service` gives one; default: this project's own)."""
    with warnings.catch_warnings():  # starlette's note on its httpx client, not the user's
        warnings.filterwarnings("ignore", message=".*httpx.*deprecated")
        from fastapi.testclient import TestClient

    from dpkit.server.app import create_app

    with make_project(path, data_file, table, public, accountant=accountant, seed=seed) as cur:
        token = cur.add_analyst(_ANALYST)
    # limits out of the way: the fuzzer's requests must reach the curator, not the rate limit;
    # no timing classes: it compares answers' faces, not their time (which
    # benchmarks/service_timing.py measures), and each would wait for its class
    app = (app_factory(path) if app_factory is not None
           else create_app(path, rate=1e6, burst=10**6, timeout=120.0, answer_deadline_ms=0))
    client = TestClient(app, raise_server_exceptions=False)
    client.__enter__()
    return ServedCurator(path, client, token, references)


def fuzz_service(target: Any, *, families: Sequence[str] | None = None,
                 app_factory: Any = None, **kw: Any) -> Report:
    """:func:`~dpkit.attacks.side_channels.fuzz` through the service: every project of the
    run served by its own app (:func:`served_project`), one :class:`References` for all of
    them; ``families`` defaults to the service's (:data:`FAMILIES`), request options
    (``accuracy``, ``level``, ``diagnostics``) are drawn unless ``options=False``; ``kw`` as
    ``fuzz``'s."""
    refs = References()
    kw.setdefault("options", True)

    def factory(path: Path, data_file: Path, table: Any, public: Any, *, accountant: str,
                seed: int) -> ServedCurator:
        return served_project(path, data_file, table, public, accountant=accountant,
                              seed=seed, app_factory=app_factory, references=refs)

    return fuzz(target, families=tuple(families or FAMILIES), factory=factory, **kw)
