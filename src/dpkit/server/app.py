"""The FastAPI application: :func:`create_app` (one per process).

Routes: ``/v1`` (:mod:`dpkit.server.routes`, :mod:`dpkit.server.owner`), ``/v1/health``,
``/openapi.json``, the console at ``/`` and ``/static``; ``/docs`` only with ``api_docs`` (a
Swagger UI page whose script loads from a CDN: no package we depend on ships it, and the
service serves no third-party script unless its owner asks; no ``/redoc`` either). Every error
is an RFC 9457 problem (``application/problem+json``), FastAPI's own 404/405/422 included;
the body-size limit and the audit log wrap everything (:class:`dpkit.server.limits.Guard`).
"""

from __future__ import annotations

import base64
import hashlib
import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from dpkit.server import fit, owner, routes
from dpkit.server.config import ServerConfig
from dpkit.server.limits import Guard
from dpkit.server.problems import MEDIA_TYPE, Problem, problem_body
from dpkit.server.service import Service

__all__ = ["app_from_env", "create_app"]

STATIC = Path(__file__).parent / "static"
log = logging.getLogger("dpkit.server")
# the console has no inline code (tests/server/test_console_static.py), so it runs under the
# strictest policy; frame-ancestors: no other site may frame the owner's buttons (clickjacking)
CONSOLE_HEADERS = {"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
                   "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
_SLUGS = {404: "not-found", 405: "method-not-allowed", 413: "too-large", 400: "bad-request"}


def _problem_response(status: int, slug: str, detail: str,
                      headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(problem_body(status, slug, detail), status_code=status,
                        headers=headers, media_type=MEDIA_TYPE)


def _validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        if err.get("type") == "json_invalid":
            return ("the request body is not valid JSON: "
                    f"{err.get('ctx', {}).get('error', 'decode error')}")
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "the request body is not valid JSON for this endpoint"


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def on_problem(request: Request, exc: Problem) -> JSONResponse:
        # the matched route's template: its title names what the endpoint does (a prefix
        # the service is mounted under does not change it)
        route = getattr(request.scope.get("route"), "path", request.url.path)
        return JSONResponse(exc.body(route), status_code=exc.status,
                            headers=exc.headers, media_type=MEDIA_TYPE)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _problem_response(422, "invalid", _validation_detail(exc))

    @app.exception_handler(HTTPException)
    async def on_http(request: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        status, headers = exc.status_code, dict(exc.headers or {})
        if status == 404:
            detail = f"no such endpoint {request.url.path!r}; see /openapi.json"
        elif status == 400:  # FastAPI's own: a body it could not decode (not UTF-8 JSON)
            status, detail = 422, (f"the request body could not be read as JSON ({detail}); "
                                   f"send UTF-8 JSON with Content-Type: application/json")
        elif status == 405:  # every method of every route on this path, not the first's
            allowed = _allowed(request.app.routes, request.url.path)
            headers["Allow"] = ", ".join(allowed)
            detail = f"{request.method} is not allowed here; allowed: {', '.join(allowed)}"
        return _problem_response(status, _SLUGS.get(status, "invalid"), detail, headers)


def _allowed(routes: Any, path: str) -> list[str]:
    out: set[str] = set()
    for r in routes:
        inner = getattr(r, "original_router", None)  # routers included by FastAPI
        if inner is not None:
            out.update(_allowed(inner.routes, path))
        elif getattr(r, "methods", None) and r.path_regex.match(path):
            out.update(r.methods)
    return sorted(out)


def create_app(config: ServerConfig | str | Path, **settings: Any) -> FastAPI:
    """The service over a project (``config``: a :class:`ServerConfig`, or the project's
    path with ``settings`` as its fields). Opens the project now: a missing project, an
    unverifiable ledger or a missing extra fails here, not at the first request."""
    if not isinstance(config, ServerConfig):
        config = ServerConfig(project=str(config), **settings)
    # no lifespan hook closes the service: a test client (or an ASGI fuzzer) runs startup
    # and shutdown around every session of the same app; the process's exit closes it
    service = Service(config)
    app = FastAPI(title="dpkit", version="1", docs_url=None, redoc_url=None,
                  description="Differentially private answers from a dpkit project: "
                              "aggregates with intervals, charged to the caller's budget.")
    app.state.service = service
    _install_handlers(app)
    app.include_router(routes.router)
    app.include_router(owner.router)
    app.include_router(fit.router)  # POST /v1/fit: private learning (dpkit.server.fit)

    limits = {"timeout": config.timeout, "fit_timeout": config.fit_timeout,
              "answers_max_age": config.answers_max_age,
              "answer_classes_ms": [b * 1000 for b in config.pacing().classes()]}

    @app.get("/v1/health", tags=["service"])
    def health() -> dict[str, Any]:
        """Liveness (no credential needed), and the settings a client sizes its waits by:
        seconds a query (``timeout``) or a fit (``fit_timeout``) runs before its 504, how
        long a late answer is kept, the timing classes (settings, not data: public)."""
        return {"status": "ok", "limits": limits}

    @app.get("/", include_in_schema=False)
    def console() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers=CONSOLE_HEADERS)

    if config.api_docs:
        app.add_api_route("/docs", _api_docs, include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # outermost: refuses oversized bodies before anything parses them, audits every answer
    app.add_middleware(Guard, max_body=config.max_body, audit=service.audit,
                       pacing=lambda: service.pacing)
    return app


CDN = "https://cdn.jsdelivr.net"
_CDN_NOTE = ("This page loads Swagger UI's script and style from cdn.jsdelivr.net, a third "
             "party (dpkit serve --api-docs). The API's schema is /openapi.json.")


def _api_docs() -> HTMLResponse:
    """Swagger UI from the CDN, marked as such in its title and a banner, under a policy that
    lets in that host and the page's one inline script (by its hash) only."""
    from fastapi.openapi.docs import get_swagger_ui_html

    page = get_swagger_ui_html(openapi_url="/openapi.json", swagger_favicon_url="data:,",
                               title="dpkit API (Swagger UI loaded from cdn.jsdelivr.net)")
    html = bytes(page.body).decode().replace(
        "<body>", f'<body><p role="note" style="background:#fff3cd;padding:.5em;margin:0">'
                  f"{_CDN_NOTE}</p>", 1)
    inline = html.rsplit("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
    csp = (f"default-src 'self'; script-src {CDN} 'sha256-{digest}'; style-src {CDN} "
           f"'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
    return HTMLResponse(html, headers={**CONSOLE_HEADERS, "Content-Security-Policy": csp})


def app_from_env() -> FastAPI:
    """The app of one ``dpkit serve --workers N`` process (configuration from the env)."""
    return create_app(ServerConfig.from_env())
