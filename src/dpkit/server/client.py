"""``dpkit.Client(url, token)``: the curator's methods over HTTP (standard library only)::

    c = dp.Client("http://127.0.0.1:8000", token)
    res = c.sql("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward", epsilon=0.5)
    res.to_pandas()                          # ward, n, n_ci_low, n_ci_high (as the curator's)
    c.budget()["remaining_epsilon"]

The answers are the service's: differentially private for add/remove one privacy unit, each
charged to the token's analyst before it was computed (the client adds nothing and keeps
nothing). A refusal raises :class:`QueryRefusedError` (a ``ValueError``, as the curator's
refusals are) with the curator's text; a credential refused raises :class:`NotAuthenticatedError`
/ :class:`ForbiddenError` (``PermissionError``). One keep-alive connection per client: use one
client per thread.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

__all__ = ["Client", "ForbiddenError", "NotAuthenticatedError", "QueryRefusedError",
           "RateLimitedError", "RemoteResult", "ServiceError", "UnavailableError"]


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
    """503/504: the ledger or the data is unavailable, or the query timed out."""


_ERRORS: dict[int, type[ServiceError]] = {401: NotAuthenticatedError, 403: ForbiddenError,
                                          409: QueryRefusedError, 413: QueryRefusedError,
                                          422: QueryRefusedError, 429: RateLimitedError,
                                          503: UnavailableError, 504: UnavailableError}


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
                   notes=d.get("notes", []), budget=d.get("budget", {}),
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
        import pandas as pd

        return pd.DataFrame(self.to_dicts())


class Client:
    """An analyst's (or the owner's) handle on a dpkit service; methods as the curator's."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0,
                 cafile: str | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http(s)://host[:port] (got {url!r})")
        self.url, self._token, self.timeout = url.rstrip("/"), token, timeout
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
            detail, type_ = str(body.get("detail", raw[:200])), str(body.get("type", ""))
        except ValueError:
            body, detail, type_ = None, raw[:200].decode("utf-8", "replace"), ""
        err = _ERRORS.get(status, ServiceError)(status, detail, type_, body)
        if isinstance(err, RateLimitedError) and retry:
            err.retry_after = float(retry)
        raise err

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        _, _, raw = self.request(method, path, body)
        return json.loads(raw) if raw else None

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
            accuracy_rows: float | None = None) -> RemoteResult:
        """Answer an aggregate query, charged to this token's analyst (as ``Curator.sql``)."""
        body = _clean({"sql": query, "epsilon": epsilon, "accuracy": accuracy, "noise": noise,
                       "delta": delta, "level": level, "weights": weights,
                       "diagnostics": diagnostics, "accuracy_rows": accuracy_rows})
        return RemoteResult.from_json(self._json("POST", "/v1/query", body))

    def preview(self, query: str, *, epsilon: float | None = None,
                accuracy: float | None = None, noise: str | None = None,
                delta: float | None = None, level: float = 0.95,
                weights: dict[str, float] | None = None,
                accuracy_rows: float | None = None) -> dict[str, Any]:
        """Cost and expected error; nothing is charged."""
        body = _clean({"sql": query, "epsilon": epsilon, "accuracy": accuracy, "noise": noise,
                       "delta": delta, "level": level, "weights": weights,
                       "accuracy_rows": accuracy_rows})
        return dict(self._json("POST", "/v1/preview", body))

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
                  **kw: Any) -> str:
        """Synthetic records as CSV text (write it to a file, or read it with pandas)."""
        body = _clean({"table": table, "columns": list(columns), "epsilon": epsilon, **kw})
        return self.request("POST", "/v1/release/synthetic", body)[2].decode("utf-8")

    def _release(self, kind: str, **body: Any) -> RemoteResult:
        return RemoteResult.from_json(self._json("POST", f"/v1/release/{kind}", _clean(body)))

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
