"""``dpkit.Client(url, token)``: the curator's methods over HTTP (standard library only)::

    c = dp.Client("http://127.0.0.1:8000", token)
    res = c.sql("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward", epsilon=0.5)
    res.to_pandas()                          # ward, n, n_ci_low, n_ci_high (as the curator's)
    c.budget()["remaining_epsilon"]
    m = c.fit("logistic_regression", "SELECT age, ward FROM visits", label="sick", epsilon=1.0)
    m["parameters"]["coef"], m.predict([{"age": 70, "ward": "B"}])   # free: post-processing

The answers are the service's: differentially private for add/remove one privacy unit, each
charged to the token's analyst before it was computed (the client adds nothing and keeps
nothing). A refusal raises :class:`QueryRefusedError` (a ``ValueError``, as the curator's
refusals are) with the curator's text; a credential refused raises :class:`NotAuthenticatedError`
/ :class:`ForbiddenError` (``PermissionError``). One keep-alive connection per client: use one
client per thread. A charged request waits at least the service's own timeout for it (which
``GET /v1/health`` publishes) and :data:`SLACK` more, so that it sees the 504 naming where its
answer is kept, whatever ``timeout`` says.
"""

from __future__ import annotations

import http.client
import json
import math
import ssl
import time
import warnings
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

__all__ = ["Client", "ForbiddenError", "NotAuthenticatedError", "QueryRefusedError",
           "RateLimitedError", "RemoteModel", "RemoteResult", "ServiceError", "UnavailableError"]


class ServiceError(Exception):
    """An error answer (RFC 9457 problem details): ``status``, ``type``, ``detail``."""

    def __init__(self, status: int, detail: str, type_: str = "", body: Any = None) -> None:
        super().__init__(f"{detail} (HTTP {status})")
        self.status, self.detail, self.type, self.body = status, detail, type_, body


class QueryRefusedError(ServiceError, ValueError):
    """409/422: the query or its parameters were refused; nothing was charged."""


class NotAuthenticatedError(ServiceError, PermissionError):
    """401: no, malformed, unknown, expired or revoked credential."""


class ForbiddenError(ServiceError, PermissionError):
    """403: a valid credential without the right (an analyst at an owner endpoint)."""


class RateLimitedError(ServiceError):
    """429: too many requests; ``retry_after`` seconds."""

    retry_after: float = 1.0


class UnavailableError(ServiceError):
    """503/504: the ledger or the data is unavailable, or the query timed out. A 504's
    ``answer_id`` names where its answer will be kept (:meth:`Client.answer`)."""

    @property
    def answer_id(self) -> str | None:
        got = self.body.get("answer_id") if isinstance(self.body, dict) else None
        return str(got) if got else None


#: Seconds a client waits without a response (GET, owner's calls, a charged request to a
#: service that does not publish its limits).
DEFAULT_TIMEOUT = 60.0
#: Seconds a charged request waits beyond the service's own timeout: the authentication, the
#: queue before the work starts and the network, before the 504 arrives.
SLACK = 10.0

_ERRORS: dict[int, type[ServiceError]] = {401: NotAuthenticatedError, 403: ForbiddenError,
                                          409: QueryRefusedError, 413: QueryRefusedError,
                                          422: QueryRefusedError, 429: RateLimitedError,
                                          503: UnavailableError, 504: UnavailableError}


#: The service names the request field that turns the answer diagnostics off; a client's
#: user sets it as the keyword ``diagnostics=False``, which is what the client's texts say.
HTTP_DIAGNOSTICS_OFF = '"diagnostics": false'


def python_text(text: str) -> str:
    """A service text (a note, a refusal) as this client's user acts on it."""
    return text.replace(HTTP_DIAGNOSTICS_OFF, "diagnostics=False")


@dataclass
class RemoteResult:
    """A query's answer: ``columns`` (group and value columns), ``rows``, ``intervals``
    (value column -> ``[low, high]`` per row, at ``level``), the ``epsilon``/``delta``
    charged, ``warnings``, and the caller's ``budget`` after it."""

    columns: list[str]
    rows: list[list[Any]]
    intervals: dict[str, list[list[float | None]]]
    epsilon: float
    delta: float
    level: float = 0.95
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    budget: dict[str, Any] = field(default_factory=dict)
    insecure: bool = False
    ledger_seq: int | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RemoteResult:
        return cls(columns=d["columns"], rows=d["rows"], intervals=d.get("intervals", {}),
                   epsilon=d["charge"]["epsilon"], delta=d["charge"]["delta"],
                   level=d.get("level", 0.95), warnings=d.get("warnings", []),
                   notes=[python_text(n) for n in d.get("notes", [])],
                   budget=d.get("budget", {}),
                   insecure=d.get("insecure", False), ledger_seq=d.get("ledger_seq"))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, column: str) -> list[Any]:
        i = self.columns.index(column)
        return [r[i] for r in self.rows]

    def ci(self, column: str) -> tuple[list[Any], list[Any]]:
        pairs = self.intervals[column]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def value(self, column: str | None = None) -> Any:
        """The single value of a one-row answer (of ``column``, default the last)."""
        if len(self.rows) != 1:
            raise ValueError(f"value() needs a one-row answer (this one has {len(self.rows)})")
        return self[column or self.columns[-1]][0]

    def to_dicts(self) -> list[dict[str, Any]]:
        """One dict per row: the columns, then ``<col>_ci_low`` / ``<col>_ci_high`` beside
        each value column (the curator's ``Result`` layout)."""
        out = []
        for i, row in enumerate(self.rows):
            d: dict[str, Any] = {}
            for c, v in zip(self.columns, row, strict=True):
                d[c] = v
                if c in self.intervals:
                    d[f"{c}_ci_low"], d[f"{c}_ci_high"] = self.intervals[c][i]
            out.append(d)
        return out

    def to_pandas(self) -> Any:
        """A pandas DataFrame of :meth:`to_dicts` (needs pandas, which dpkit itself does
        not: a fresh install raised a bare ModuleNotFoundError here)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("to_pandas() needs pandas: pip install pandas (or "
                              "'dpkit[dataframes]'); to_dicts() needs nothing") from exc
        return pd.DataFrame(self.to_dicts())


@dataclass
class RemoteModel:
    """A model trained by ``POST /v1/fit`` (:meth:`Client.fit`): the service's answer
    (``model["parameters"]``, ``model["charge"]``, ...: every key of the JSON), and
    :meth:`predict` on new rows in plain Python, through the answer's public encoding.
    Post-processing of the charged release: predicting costs nothing more."""

    answer: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.answer[key]

    @property
    def epsilon(self) -> float:
        return float(self.answer["charge"]["epsilon"])

    def encode(self, row: Any) -> list[float]:
        """One row (a mapping of column -> value) as the model's inputs: a numeric column
        clamped to its declared bounds and scaled to [-1, 1] (missing or not a number: 0), a
        domain key's indicator (1.0 or 0.0); the map the service trained on."""
        out = []
        for f in self.answer["features"]:
            value = row.get(f["column"]) if hasattr(row, "get") else row[f["column"]]
            if f["key"] is not None:
                out.append(1.0 if value == f["key"] else 0.0)
                continue
            try:
                x = float(value)
            except (TypeError, ValueError):
                x = math.nan
            mid, half = (f["low"] + f["high"]) / 2.0, (f["high"] - f["low"]) / 2.0
            scaled = (x - mid) / (half if half > 0 else 1.0)
            out.append(0.0 if math.isnan(scaled) else min(1.0, max(-1.0, scaled)))
        return out

    def predict(self, rows: Any) -> list[Any]:
        """A label (classifiers), a value (regression) or a cluster index per row."""
        return [self._one(self.encode(r)) for r in rows]

    def _one(self, x: list[float]) -> Any:
        p, kind = self.answer["parameters"], self.answer["model"]
        classes = self.answer["classes"]
        if kind == "linear_regression":
            return _dot(p["coef"], x) + p["intercept"]
        if kind == "logistic_regression":
            m = [_dot(w, x) + b for w, b in zip(p["coef"], p["intercept"], strict=True)]
            return classes[int(m[0] > 0)] if len(m) == 1 else classes[_argmax(m)]
        if kind == "gaussian_nb":
            jll = [math.log(prior) - 0.5 * sum(math.log(2 * math.pi * v) + (xi - t) ** 2 / v
                                               for xi, t, v in zip(x, th, var, strict=True))
                   for th, var, prior in zip(p["theta"], p["var"], p["class_prior"],
                                             strict=True)]
            return classes[_argmax(jll)]
        if kind == "kmeans":
            return _argmax([-sum((xi - c) ** 2 for xi, c in zip(x, centre, strict=True))
                            for centre in p["cluster_centers"]])
        act = math.tanh if self.answer["options"].get("activation", "tanh") == "tanh" else \
            (lambda v: max(v, 0.0))
        h = x
        for i, (w, b) in enumerate(zip(p["coefs"], p["intercepts"], strict=True)):
            h = [_dot([row[j] for row in w], h) + b[j] for j in range(len(b))]
            if i < len(p["coefs"]) - 1:
                h = [act(v) for v in h]
        return classes[_argmax(h)]


def _dot(w: list[float], x: list[float]) -> float:
    return math.fsum(a * b for a, b in zip(w, x, strict=True))


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=lambda i: values[i])


class Client:
    """An analyst's (or the owner's) handle on a dpkit service; methods as the curator's."""

    def __init__(self, url: str, token: str, *, timeout: float | None = None,
                 cafile: str | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http(s)://host[:port] (got {url!r})")
        self.url, self._token = url.rstrip("/"), token
        # seconds to wait for an answer; a charged request waits at least the service's own
        # limit and SLACK more, whatever this says (:meth:`_read_timeout`)
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self._chosen = timeout is not None
        self._limits: dict[str, Any] | None = None  # the service's, from GET /v1/health
        self._wait_for: float | None = None  # this request's read timeout, when sized
        self._base = parts.path.rstrip("/")
        self._host, self._scheme = parts.hostname, parts.scheme
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context(cafile=cafile) if parts.scheme == "https" else None
        self._conn: http.client.HTTPConnection | None = None

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._ssl is not None:
                self._conn = http.client.HTTPSConnection(self._host, self._port,
                                                         timeout=self.timeout,
                                                         context=self._ssl)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port,
                                                        timeout=self.timeout)
        return self._conn

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, str, bytes]:
        """(status, content type, body) of one request; raises :class:`ServiceError`."""
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):  # a keep-alive connection the server closed: reconnect once
            conn, sent = self._connection(), False
            conn.timeout = self._wait_for or self.timeout
            if conn.sock is not None:  # a kept-alive connection: its socket's own timeout
                conn.sock.settimeout(conn.timeout)
            try:
                conn.request(method, self._base + path, body=data, headers=headers)
                sent = True
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError) as exc:
                self.close()
                # retried once: a request that could not be sent (the server had closed an
                # idle connection: it never saw it), or a GET. A POST sent whose answer was
                # lost is not: it may have been charged, and a retry would charge again
                if attempt or (sent and method != "GET"):
                    raise ConnectionError(
                        f"the connection to {self.url} failed during {method} {path} "
                        f"({type(exc).__name__}: {exc}); a query sent may have been charged: "
                        f"see history()") from exc
        ctype = resp.getheader("Content-Type", "")
        if resp.status >= 400:
            self._raise(resp.status, ctype, raw, resp.getheader("Retry-After"))
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        return resp.status, ctype, raw

    def _raise(self, status: int, ctype: str, raw: bytes, retry: str | None) -> None:
        self.close()
        try:
            body = json.loads(raw)
            detail = python_text(str(body.get("detail", raw[:200])))
            type_ = str(body.get("type", ""))
        except ValueError:
            body, detail, type_ = None, raw[:200].decode("utf-8", "replace"), ""
        err = _ERRORS.get(status, ServiceError)(status, detail, type_, body)
        if isinstance(err, RateLimitedError) and retry:
            err.retry_after = float(retry)
        raise err

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        _, _, raw = self.request(method, path, body)
        return json.loads(raw) if raw else None

    def _charged(self, path: str, body: Any, wait: bool | float) -> bytes:
        """POST a charged request, waiting at least the service's limit for it (the 504 that
        names where its answer is kept must be seen: :meth:`_read_timeout`); on a 504 with
        ``wait``, poll its kept answer (the charge is made once, by the request: polling
        costs nothing) until it comes, the service answers 404 (expired, or the process
        running it stopped), or ``wait`` seconds have passed (True: as long as the service
        keeps answers, its ``answers_max_age``, 15 minutes by default; a finite wait, since
        polls that get no answer at all are retried)."""
        self._wait_for = self._read_timeout(path)
        try:
            return self.request("POST", path, body)[2]
        except UnavailableError as err:
            if not wait or err.status != 504 or err.answer_id is None:
                raise
            kept = float((self._limits or {}).get("answers_max_age", 900.0))
            return self._poll(err, kept if wait is True else float(wait))
        finally:
            self._wait_for = None

    def _poll(self, err: UnavailableError, wait: float) -> bytes:
        """The kept answer of ``err``'s 504, polled for up to ``wait`` seconds."""
        assert err.answer_id is not None
        self._wait_for = None
        deadline = time.monotonic() + wait
        while True:
            pause = 1.0
            try:
                got = self.answer(err.answer_id)
            # a poll refused for a while (the caller's own rate, the ledger busy, a lost
            # connection) must not end the wait: raised here, it would lose the answer id
            # of a request already charged, and the natural retry would charge again
            # (FINDINGS.md J1); past the deadline the 504 naming the id is raised
            except RateLimitedError as busy:
                got, pause = None, busy.retry_after
            except (UnavailableError, ConnectionError):
                got = None
            if got is not None:
                return got
            if time.monotonic() >= deadline:
                raise err from None
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))

    def limits(self) -> dict[str, Any]:
        """The service's published settings (``GET /v1/health``, no credential): ``timeout``
        and ``fit_timeout`` (seconds before a 504), ``answers_max_age``, ``answer_classes_ms``;
        empty for a service that does not publish them. Read once per client."""
        if self._limits is None:
            got = self._json("GET", "/v1/health")
            self._limits = dict(got.get("limits") or {}) if isinstance(got, dict) else {}
        return self._limits

    def _read_timeout(self, path: str) -> float:
        """How long a charged POST to ``path`` waits: never less than the service's limit for
        it and :data:`SLACK` (a shorter wait gives up before the 504 that names where the
        charged answer is kept, and the answer is lost to its analyst); a ``timeout`` chosen
        below that is raised, with a warning. Unknown limits (an older service, or the health
        check failed): this client's ``timeout``."""
        try:
            limits = self.limits()
        except (ServiceError, ValueError):  # answered, but not with limits: not asked again
            limits = self._limits = {}
        except ConnectionError:  # asked again next time; the POST will say what failed
            limits = {}
        key = "fit_timeout" if path.rstrip("/").endswith("/fit") else "timeout"
        limit = limits.get(key)
        if not isinstance(limit, (int, float)) or not math.isfinite(limit):
            return self.timeout
        needed = float(limit) + SLACK
        if self.timeout >= needed:
            return self.timeout
        if self._chosen:
            warnings.warn(
                f"Client(timeout={self.timeout:g}) is shorter than the service's {key} of "
                f"{limit:g} s: this charged request waits up to {needed:g} s instead, so "
                f"that it sees the 504 naming where its answer is kept (giving up sooner "
                f"would lose an answer already charged). Choose timeout >= {needed:g}",
                RuntimeWarning, stacklevel=4)
        return needed

    def answer(self, answer_id: str) -> bytes | None:
        """The kept answer of a request answered 504 (its raw body), or None while it still
        runs; 404 (:class:`ServiceError`) when unknown, expired or another analyst's."""
        status, _, raw = self.request("GET", f"/v1/answers/{quote(answer_id, safe='')}")
        return None if status == 202 else raw

    # ------------------------------------------------------------ the analyst's methods

    def me(self) -> dict[str, str]:
        return dict(self._json("GET", "/v1/me"))

    def tables(self) -> dict[str, dict[str, Any]]:
        """The tables' public declarations, by name."""
        return {t["name"]: t for t in self._json("GET", "/v1/tables")["tables"]}

    def sql(self, query: str, *, epsilon: float | None = None,
            accuracy: float | None = None, noise: str | None = None,
            delta: float | None = None, level: float = 0.95,
            weights: dict[str, float] | None = None, diagnostics: bool = True,
            accuracy_rows: float | None = None,
            wait: bool | float = False) -> RemoteResult:
        """Answer an aggregate query, charged to this token's analyst (as ``Curator.sql``).
        ``wait``: past the service's timeout, poll for the answer (True, or seconds)."""
        body = _clean({"sql": query, "epsilon": epsilon, "accuracy": accuracy, "noise": noise,
                       "delta": delta, "level": level, "weights": weights,
                       "diagnostics": diagnostics, "accuracy_rows": accuracy_rows})
        return RemoteResult.from_json(json.loads(self._charged("/v1/query", body, wait)))

    query = sql

    def preview(self, query: str, *, epsilon: float | None = None,
                accuracy: float | None = None, noise: str | None = None,
                delta: float | None = None, level: float = 0.95,
                weights: dict[str, float] | None = None,
                diagnostics: bool = True,
                accuracy_rows: float | None = None) -> dict[str, Any]:
        """Cost and expected error of :meth:`sql` with the same arguments; nothing is charged."""
        body = _clean({"sql": query, "epsilon": epsilon, "accuracy": accuracy, "noise": noise,
                       "delta": delta, "level": level, "weights": weights,
                       "diagnostics": diagnostics, "accuracy_rows": accuracy_rows})
        out = dict(self._json("POST", "/v1/preview", body))
        out["notes"] = [python_text(n) for n in out.get("notes", [])]
        out["text"] = python_text(str(out.get("text", "")))
        return out

    def budget(self) -> dict[str, Any]:
        return dict(self._json("GET", "/v1/budget"))

    def history(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/history")["items"])

    def cdf(self, table: str, column: str, **kw: Any) -> RemoteResult:
        return self._release("cdf", table=table, column=column, **kw)

    def quantiles(self, table: str, column: str, probabilities: list[float],
                  **kw: Any) -> RemoteResult:
        return self._release("quantiles", table=table, column=column,
                             probabilities=list(probabilities), **kw)

    def marginals(self, table: str, columns: list[Any], **kw: Any) -> RemoteResult:
        return self._release("marginals", table=table, columns=list(columns), **kw)

    def synthetic(self, table: str, columns: list[str], *, epsilon: float,
                  wait: bool | float = False, **kw: Any) -> str:
        """Synthetic records as CSV text (write it to a file, or read it with pandas)."""
        body = _clean({"table": table, "columns": list(columns), "epsilon": epsilon, **kw})
        return self._charged("/v1/release/synthetic", body, wait).decode("utf-8")

    def fit(self, model: str, sql: str, *, label: str, epsilon: float,
            delta: float | None = None, wait: bool | float = False,
            **options: Any) -> RemoteModel:
        """Train an allowed model (``fit_models()``: ``"logistic_regression"``, ...) on the rows
        ``sql`` selects, charged to this token's analyst (as ``Curator.fit``); ``options``: the
        model's (``max_iter=200``). The answer (a :class:`RemoteModel`): the model's public
        parameters, the encoding of its features, the event, the charge and the budget
        (docs/service.md), and ``predict(rows)``."""
        body = _clean({"model": model, "options": options, "sql": sql, "label": label,
                       "epsilon": epsilon, "delta": delta})
        return RemoteModel(dict(json.loads(self._charged("/v1/fit", body, wait))))

    def preview_fit(self, model: str, sql: str, *, label: str, epsilon: float,
                    delta: float | None = None, **options: Any) -> dict[str, Any]:
        """What :meth:`fit` would charge now (``cost``, ``affordable``); nothing is charged."""
        body = _clean({"model": model, "options": options, "sql": sql, "label": label,
                       "epsilon": epsilon, "delta": delta})
        return dict(self._json("POST", "/v1/fit/preview", body))

    def fit_models(self) -> dict[str, dict[str, Any]]:
        """The models :meth:`fit` may name, with their options and limits, by name."""
        return {m["name"]: m for m in self._json("GET", "/v1/fit/models")["models"]}

    def _release(self, kind: str, wait: bool | float = False, **body: Any) -> RemoteResult:
        raw = self._charged(f"/v1/release/{kind}", _clean(body), wait)
        return RemoteResult.from_json(json.loads(raw))

    # ------------------------------------------------------------ the owner's methods

    def analysts(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v1/analysts")["analysts"])

    def add_analyst(self, name: str, *, epsilon: float | None = None,
                    delta: float | None = None, expires_days: float | None = None) -> str:
        """Add an analyst; returns its token (shown once)."""
        body = _clean({"name": name, "epsilon": epsilon, "delta": delta,
                       "expires_days": expires_days})
        return str(self._json("POST", "/v1/analysts", body)["token"])

    def revoke_analyst(self, name: str) -> None:
        self.request("DELETE", f"/v1/analysts/{quote(name, safe='')}")

    def set_analyst_budget(self, name: str, epsilon: float | None,
                           delta: float | None = None) -> None:
        self._json("PUT", f"/v1/analysts/{quote(name, safe='')}/budget",
                   {"epsilon": epsilon, **_clean({"delta": delta})})


def _clean(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}
