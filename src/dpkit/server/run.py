"""``dpkit serve``: uvicorn over :func:`dpkit.server.app.create_app`.

One process (``workers=1``) builds the app directly; with several, uvicorn starts that many
processes, each building its own app from the configuration passed in ``$DPKIT_SERVE_CONFIG``
(:meth:`ServerConfig.from_env`). They share the project's ledger, whose check-and-charge is one
SQLite ``BEGIN IMMEDIATE`` transaction: no interleaving of processes can overspend. TLS:
``ssl_keyfile`` / ``ssl_certfile`` go to uvicorn as they are (or terminate TLS at a reverse
proxy; docs/service.md).
"""

from __future__ import annotations

import os
from typing import Any

from dpkit.server import require_extra
from dpkit.server.config import CONFIG_ENV, ServerConfig

__all__ = ["check_options", "serve"]


def check_options(*, workers: int = 1, ssl_keyfile: str | None = None,
                  ssl_certfile: str | None = None) -> None:
    """Refuse options :func:`serve` cannot start with (``dpkit serve`` asks before it makes
    anything, such as a new owner token)."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1 (got {workers})")
    if (ssl_keyfile is None) != (ssl_certfile is None):
        raise ValueError("TLS needs both --ssl-keyfile and --ssl-certfile")


def serve(config: ServerConfig, *, host: str = "127.0.0.1", port: int = 8000,
          workers: int = 1, ssl_keyfile: str | None = None, ssl_certfile: str | None = None,
          log_level: str = "info", **uvicorn_options: Any) -> None:
    """Run the service until interrupted."""
    require_extra()
    import uvicorn

    from dpkit.server.app import create_app

    check_options(workers=workers, ssl_keyfile=ssl_keyfile, ssl_certfile=ssl_certfile)
    opts: dict[str, Any] = {"host": host, "port": port, "log_level": log_level,
                            "ssl_keyfile": ssl_keyfile, "ssl_certfile": ssl_certfile,
                            "timeout_graceful_shutdown": 5,
                            # clients keep connections open between queries (uvicorn's 5 s
                            # closes them under an analyst's pace, and a POST cut mid-send is
                            # retried by dpkit.Client, one cut mid-answer is not)
                            "timeout_keep_alive": 30, **uvicorn_options}
    if workers == 1:
        uvicorn.run(create_app(config), **opts)
        return
    create_app(config).state.service.close()  # fail here, once, on a bad project or config
    os.environ[CONFIG_ENV] = config.to_json()
    uvicorn.run("dpkit.server.app:app_from_env", factory=True, workers=workers, **opts)
