"""What a service instance needs to know, as one value that crosses process boundaries.

``dpkit serve --workers N`` starts N uvicorn processes; each builds its app from this
configuration, passed as JSON in an environment variable (:data:`CONFIG_ENV`), so that every
process enforces the same limits against the same project.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from dpkit.server.pacing import Pacing

__all__ = ["CONFIG_ENV", "STORES", "OidcConfig", "ServerConfig"]

#: where late answers are kept (``--answers-store``; :func:`~dpkit.server.answers_pg.open_answers`)
STORES = ("auto", "folder", "postgres")

CONFIG_ENV = "DPKIT_SERVE_CONFIG"


@dataclass(frozen=True)
class OidcConfig:
    """Bearer JWTs from an identity provider, validated with PyJWT.

    ``public_key``: a PEM file (RS256/ES256 ...) or ``jwks_url``: the provider's key set.
    ``claim``: the claim naming the analyst (an analyst of that name must exist and be active
    in the project: the owner still decides who may spend, the provider only says who is who).
    """

    public_key: str | None = None
    jwks_url: str | None = None
    audience: str | None = None
    issuer: str | None = None
    claim: str = "sub"
    algorithms: tuple[str, ...] = ("RS256", "ES256")

    def __post_init__(self) -> None:
        if (self.public_key is None) == (self.jwks_url is None):
            raise ValueError("OIDC needs exactly one of a public key file (--oidc-public-key) "
                             "or a JWKS URL (--oidc-jwks-url)")


@dataclass(frozen=True)
class ServerConfig:
    """The service's settings (``dpkit serve`` flags; docs/service.md).

    ``owner_token_sha256``: hashes of the owner tokens that reach the owner endpoints (the
    plain tokens are never kept). ``max_body``: request bytes (413 beyond). ``rate`` and
    ``burst``: per-caller (analyst or owner) token bucket, requests per second (429 beyond).
    ``timeout``: seconds a query may run before the service answers 504 (a charge made
    stays); ``fit_timeout``: the same for ``POST /v1/fit``. ``answers_kept`` and
    ``answers_max_age``: how many late answers are kept, and for how many seconds after their
    504 (:mod:`dpkit.server.answers`); ``answers_store``: where (``auto``: a table in
    PostgreSQL when the ledger is there or ``answers_dsn`` names a database, else the folder
    ``PROJECT/answers``; ``folder``; ``postgres``: :mod:`dpkit.server.answers_pg`).
    ``audit_log``: JSON lines file (default ``PROJECT/audit.jsonl``). ``data_root``: the folder
    ``POST /v1/tables`` may read sources from (default ``PROJECT/data``;
    :mod:`dpkit.server.paths`). ``api_docs``: serve ``/docs``, a Swagger UI page that loads its
    script from a CDN (off by default: ``/openapi.json`` is always served).
    ``answer_deadline_ms`` and ``answer_class_factor``: answers that touched rows leave at the
    smallest boundary ``deadline * factor**k`` (up to ``timeout``) at or above their time
    (0: off; :mod:`dpkit.server.pacing`).
    """

    project: str
    owner_token_sha256: tuple[str, ...] = ()
    max_body: int = 64 * 1024
    rate: float = 20.0
    burst: int = 60
    timeout: float = 30.0
    fit_timeout: float = 120.0
    answers_kept: int = 1000
    answers_max_age: float = 900.0
    answers_store: str = "auto"
    answers_dsn: str | None = None
    audit_log: str | None = None
    oidc: OidcConfig | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    data_root: str | None = None
    api_docs: bool = False
    answer_deadline_ms: float = 250.0
    answer_class_factor: float = 2.0

    def __post_init__(self) -> None:
        for name in ("rate", "timeout", "fit_timeout", "answers_max_age"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a number > 0 (got {v!r})")
        self.pacing()  # refuses a bad deadline or factor now, not at the first answer
        if self.max_body < 1024 or self.burst < 1 or self.answers_kept < 1:
            raise ValueError("max_body must be >= 1024 bytes, burst and answers_kept >= 1")
        if self.answers_store not in STORES:
            raise ValueError(f"answers_store is auto, folder or postgres (got "
                             f"{self.answers_store!r})")
        if self.answers_store == "postgres" and not self.answers_dsn:
            from dpkit.engine.project import PG_LEDGER_FILE

            if not (Path(self.project) / PG_LEDGER_FILE).exists():
                raise ValueError("--answers-store postgres needs --answers-dsn, or a project "
                                 "whose ledger is in PostgreSQL")

    def pacing(self) -> Pacing:
        """The answers' timing classes (:mod:`dpkit.server.pacing`)."""
        return Pacing(self.answer_deadline_ms / 1000, self.answer_class_factor, self.timeout)

    @property
    def data_root_path(self) -> Path:
        from dpkit.server.paths import default_data_root

        return Path(self.data_root) if self.data_root else default_data_root(self.project)

    @property
    def audit_path(self) -> Path:
        return Path(self.audit_log) if self.audit_log else Path(self.project) / "audit.jsonl"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        raw = json.loads(text)
        oidc = raw.pop("oidc", None)
        raw["owner_token_sha256"] = tuple(raw.get("owner_token_sha256", ()))
        if oidc is not None:
            oidc["algorithms"] = tuple(oidc.get("algorithms", ()))
            raw["oidc"] = OidcConfig(**oidc)
        return cls(**raw)

    @classmethod
    def from_env(cls) -> ServerConfig:
        text = os.environ.get(CONFIG_ENV)
        if not text:
            raise RuntimeError(f"{CONFIG_ENV} is not set: start the service with `dpkit serve`")
        return cls.from_json(text)

    def with_(self, **changes: Any) -> ServerConfig:
        return replace(self, **changes)
