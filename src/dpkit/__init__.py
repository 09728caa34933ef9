"""dpkit: deployable differential privacy.

Data → bounded aggregate → exact noise → charged release. See ``docs/`` for one page per part:

- ``dpkit.noise``: exact integer samplers, the only source of randomness (CSPRNG by default);
- ``dpkit.events``: privacy events as data;
- ``dpkit.accounting``: events → guarantees (pure, approximate, zCDP, RDP, PLD) and budgets;
- ``dpkit.mechanisms``: Laplace, Gaussian, exponential, noisy max, sparse vector, …;
- ``dpkit.Curator``: a SQL engine over DuckDB with a durable, enforced privacy budget.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = {
    "noise",
    "events",
    "accounting",
    "mechanisms",
    "engine",
    "release",
    "local",
    "attacks",
}
_EXPORTS = {
    "Release": ("dpkit.mechanisms.release", "Release"),
    "Budget": ("dpkit.accounting", "Budget"),
    "Curator": ("dpkit.engine", "Curator"),
    # the service's client: standard library only (no FastAPI)
    "Client": ("dpkit.server.client", "Client"),
}

__all__ = ["Budget", "Client", "Curator", "Release", "__version__", *sorted(_SUBMODULES)]


def __getattr__(name: str) -> Any:
    # Lazy so that `import dpkit` stays fast and the core never pulls in the engine's
    # dependencies (duckdb, sqlglot) until a Curator is actually used.
    if name in _SUBMODULES:
        return importlib.import_module(f"dpkit.{name}")
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'dpkit' has no attribute {name!r}")
