"""``dpkit serve PROJECT`` and ``dpkit owner-token PROJECT``: the analyst service.

``serve`` runs the HTTP service (the ``[server]`` extra: FastAPI + uvicorn) over a project;
``owner-token`` makes the owner's credential for the owner endpoints (only its SHA-256 is kept,
in ``PROJECT/owner-token.sha256``). docs/service.md.
"""

from __future__ import annotations

from pathlib import Path

import click

from dpkit.cli.options import console
from dpkit.server.config import STORES

__all__ = ["commands", "owner_token", "serve"]


@click.command("owner-token")
@click.argument("project", type=click.Path(exists=True, file_okay=False))
def owner_token(project: str) -> None:
    """Make a new owner token for the service (replaces the old one; printed once)."""
    from dpkit.server.auth import new_owner_token

    token = new_owner_token(project)
    console.print("owner token for the service, shown only now (it replaces any older one):")
    console.print(token, markup=False, highlight=False, soft_wrap=True)


@click.command("serve")
@click.argument("project", type=click.Path(exists=True, file_okay=False))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="interface to listen on (0.0.0.0: every interface; use TLS then)")
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--workers", default=1, show_default=True, type=int,
              help="server processes (they share the ledger: no overspending)")
@click.option("--owner-token-file", type=click.Path(exists=True, dir_okay=False),
              help="a file holding the owner token (also: $DPKIT_OWNER_TOKEN, and the hash "
                   "`dpkit owner-token` stores in the project)")
@click.option("--init-owner-token", is_flag=True,
              help="make a new owner token first and print it (as `dpkit owner-token`)")
@click.option("--ssl-keyfile", help="TLS private key (PEM), passed to uvicorn")
@click.option("--ssl-certfile", help="TLS certificate chain (PEM), passed to uvicorn")
@click.option("--max-body", default=64 * 1024, show_default=True, type=int,
              help="largest request body in bytes (413 beyond)")
@click.option("--rate", default=20.0, show_default=True, type=float,
              help="requests per second per analyst (or owner) and process (429 beyond)")
@click.option("--burst", default=60, show_default=True, type=int)
@click.option("--timeout", default=30.0, show_default=True, type=float,
              help="seconds a request may run before a 504 (a charge made stays)")
@click.option("--fit-timeout", default=120.0, show_default=True, type=float,
              help="the same for POST /v1/fit (fits take longer than queries)")
@click.option("--answers-kept", default=1000, show_default=True, type=int,
              help="late answers (504s) kept for GET /v1/answers/{id}, in PROJECT/answers")
@click.option("--answers-max-age", default=900.0, show_default=True, type=float,
              help="seconds a late answer is kept after its 504")
@click.option("--answers-store", type=click.Choice(list(STORES)),
              default="auto", show_default=True,
              help="where late answers are kept: auto = a PostgreSQL table when the ledger "
                   "is in PostgreSQL (or --answers-dsn is given: every host reads it), else "
                   "the folder PROJECT/answers (one host's processes)")
@click.option("--answers-dsn", help="a PostgreSQL database for the late answers (a DSN; "
                                    "default: the ledger's, when it is in PostgreSQL)")
@click.option("--answer-deadline-ms", default=250.0, show_default=True, type=float,
              help="answers that read rows leave at the first timing class at or above "
                   "their time: this many ms, then x factor up to --timeout (0: off; "
                   "docs/service.md, Answer timing)")
@click.option("--answer-class-factor", default=2.0, show_default=True, type=float,
              help="each timing class is this many times the one before (>= 1.1)")
@click.option("--audit-log", type=click.Path(dir_okay=False),
              help="JSON-lines audit file [default: PROJECT/audit.jsonl]")
@click.option("--oidc-public-key", type=click.Path(exists=True, dir_okay=False),
              help="accept JWTs signed by this PEM public key (OIDC)")
@click.option("--oidc-jwks-url", help="accept JWTs signed by a key of this JWKS (OIDC)")
@click.option("--oidc-audience", help="the JWTs' required audience")
@click.option("--oidc-issuer", help="the JWTs' required issuer")
@click.option("--oidc-claim", default="sub", show_default=True,
              help="the claim naming the analyst")
@click.option("--data-root", type=click.Path(exists=True, file_okay=False),
              help="the only folder POST /v1/tables reads sources from [default: PROJECT/data]")
@click.option("--api-docs", is_flag=True,
              help="serve /docs, a Swagger UI page whose script and style load from a CDN "
                   "(cdn.jsdelivr.net); /openapi.json is always served")
def serve(project: str, host: str, port: int, workers: int, owner_token_file: str | None,
          init_owner_token: bool, ssl_keyfile: str | None, ssl_certfile: str | None,
          max_body: int, rate: float, burst: int, timeout: float, fit_timeout: float,
          answers_kept: int, answers_max_age: float, answers_store: str,
          answers_dsn: str | None, answer_deadline_ms: float,
          answer_class_factor: float, audit_log: str | None,
          oidc_public_key: str | None, oidc_jwks_url: str | None, oidc_audience: str | None,
          oidc_issuer: str | None, oidc_claim: str, data_root: str | None,
          api_docs: bool) -> None:
    """Serve PROJECT over HTTP: analysts query with their tokens (docs/service.md)."""
    from dpkit.server import require_extra

    require_extra()
    from dpkit.server.auth import new_owner_token, owner_hashes
    from dpkit.server.config import OidcConfig, ServerConfig
    from dpkit.server.run import check_options
    from dpkit.server.run import serve as run_service

    # before a new owner token replaces the old one
    check_options(workers=workers, ssl_keyfile=ssl_keyfile, ssl_certfile=ssl_certfile)
    _check_port(host, port)
    oidc = None
    if oidc_public_key or oidc_jwks_url:
        oidc = OidcConfig(public_key=oidc_public_key, jwks_url=oidc_jwks_url,
                          audience=oidc_audience, issuer=oidc_issuer, claim=oidc_claim)
    config = ServerConfig(project=str(Path(project).resolve()),
                          max_body=max_body, rate=rate, burst=burst, timeout=timeout,
                          fit_timeout=fit_timeout, answers_kept=answers_kept,
                          answers_max_age=answers_max_age, answers_store=answers_store,
                          answers_dsn=answers_dsn,
                          answer_deadline_ms=answer_deadline_ms,
                          answer_class_factor=answer_class_factor,
                          audit_log=audit_log, oidc=oidc, api_docs=api_docs,
                          data_root=str(Path(data_root).resolve()) if data_root else None)
    if init_owner_token:  # after every setting was checked: a refusal changes nothing
        console.print("owner token (shown only now):")
        console.print(new_owner_token(project), markup=False, highlight=False,
                      soft_wrap=True)
    config = config.with_(
        owner_token_sha256=owner_hashes(project, token_file=owner_token_file))
    scheme = "https" if ssl_certfile else "http"
    docs = "/docs (loads Swagger UI from a CDN)" if api_docs else "/openapi.json"
    console.print(f"dpkit service for {project}: {scheme}://{host}:{port}/ "
                  f"(API: {docs}; tables from {config.data_root_path}); Ctrl-C stops it",
                  markup=False, highlight=False)
    classes = config.pacing().classes()
    console.print(f"answers that read rows leave at {len(classes)} timing classes: "
                  f"{', '.join(f'{b * 1000:g}' for b in classes)} ms" if classes else
                  "answers leave as they come (--answer-deadline-ms 0: no timing classes)",
                  markup=False, highlight=False)
    run_service(config, host=host, port=port, workers=workers, ssl_keyfile=ssl_keyfile,
                ssl_certfile=ssl_certfile)


def _check_port(host: str, port: int) -> None:
    """Refuse, with what to do, an address this process cannot listen on (uvicorn said it
    only after startup, with exit code 3, and after --init-owner-token had replaced the
    owner's token)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind((host, port))
        except OSError as exc:
            raise click.UsageError(
                f"cannot listen on {host}:{port} ({exc.strerror}): another service (another "
                f"dpkit serve?) holds the port, or {host} is not an address of this machine; "
                f"choose a free port with --port (or stop the other service). Nothing was "
                f"changed") from None


commands = (serve, owner_token)
