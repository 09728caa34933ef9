"""The analyst service: dpkit's curator behind HTTP (``dpkit serve PROJECT``), and its client.

Analysts never touch the data: the data owner runs the service over a project, each analyst
holds a token (``dpkit analyst add``) and a budget, and answers cross the network, never rows.
Every request acts as the analyst its credential names, through a
:class:`~dpkit.engine.Curator` opened as that analyst: the privacy guarantee of each answer is
the curator's (add/remove one privacy unit, docs/curator.md) and the project's ledger bounds
the total over all analysts, processes and hosts (its check-and-charge is one transaction).

- :mod:`dpkit.server.app`: :func:`create_app` (FastAPI; the ``[server]`` extra);
- :mod:`dpkit.server.client`: :class:`Client`, a thin HTTP client (standard library only);
- :mod:`dpkit.server.run`: :func:`serve` (uvicorn).

Importing this package needs neither FastAPI nor uvicorn; :func:`create_app` and
:func:`serve` do (``pip install 'dpkit[server]'``).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Client", "ServerConfig", "create_app", "serve"]

_EXPORTS = {
    "Client": ("dpkit.server.client", "Client"),
    "ServerConfig": ("dpkit.server.config", "ServerConfig"),
    "create_app": ("dpkit.server.app", "create_app"),
    "serve": ("dpkit.server.run", "serve"),
}


def __getattr__(name: str) -> Any:
    # lazy: the client and the configuration must not pull in FastAPI
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'dpkit.server' has no attribute {name!r}")


def require_extra() -> None:
    """Raise a clear ImportError when the ``[server]`` extra is missing."""
    try:
        importlib.import_module("fastapi")
        importlib.import_module("uvicorn")
    except ImportError as exc:
        raise ImportError(
            f"the dpkit service needs FastAPI and uvicorn ({exc.name} is missing): "
            f"pip install 'dpkit[server]'"
        ) from None
