"""Who is calling: the owner (an owner token), an analyst (its dpkit token or an OIDC JWT).

Credentials are compared in constant time: the presented token is hashed (SHA-256) and the
hash compared with :func:`hmac.compare_digest` against every stored hash, without an early
exit. Only hashes are stored: analysts' in the ledger (:mod:`dpkit.engine.roles`), the
owner's in ``PROJECT/owner-token.sha256`` (mode 0600), written by ``dpkit owner-token``.
A missing, malformed, unknown, expired or revoked credential is a 401; the caller's name comes
from the credential alone, never from the request.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpkit import noise as _noise
from dpkit.engine.ledger import Ledger
from dpkit.engine.ledger_rows import replace_durably
from dpkit.engine.roles import OWNER, identify, token_expiry
from dpkit.server.config import OidcConfig
from dpkit.server.problems import Problem

__all__ = ["OWNER_HASH_FILE", "OWNER_TOKEN_ENV", "Authenticator", "Identity",
           "new_owner_token", "owner_hashes", "sha256_hex"]

OWNER_HASH_FILE = "owner-token.sha256"
OWNER_TOKEN_ENV = "DPKIT_OWNER_TOKEN"
OWNER_PREFIX = "dpkit_owner_"
_OWNER_TOKEN = re.compile(r"dpkit_owner_[0-9a-f]{64}")
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="dpkit"'}


@dataclass(frozen=True)
class Identity:
    """The caller: ``name`` (an analyst's, or ``"owner"``), ``role``, and ``key``, the hash
    of the credential (rate limits and audit lines name it, never the credential)."""

    name: str
    role: str
    key: str

    @property
    def owner(self) -> bool:
        return self.role == "owner"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_owner_token(project: str | Path) -> str:
    """A fresh owner token (256 bits from the OS CSPRNG); its hash replaces the project's
    stored owner hash (the old owner token stops working). Returned once, never stored."""
    path = Path(project)
    if not (path / "ledger.key").exists():  # the owner key: beside any ledger store
        raise FileNotFoundError(f"{path} is not a dpkit project (no ledger.key); the owner "
                                f"runs this in the project folder they created")
    token = OWNER_PREFIX + _noise.token_hex(32)
    target = path / OWNER_HASH_FILE
    # durably, like the ledger's head: a power cut must not leave an empty hash file
    replace_durably(target, target.with_suffix(".tmp"), (sha256_hex(token) + "\n").encode(),
                    mode=0o600)
    return token


def owner_hashes(project: str | Path, *, token_file: str | Path | None = None) -> tuple[str, ...]:
    """The owner-token hashes the service accepts: the project's stored one, a token read
    from ``token_file`` (a file holding the plain token, e.g. a mounted secret) and
    ``$DPKIT_OWNER_TOKEN``."""
    out: list[str] = []
    stored = Path(project) / OWNER_HASH_FILE
    if stored.exists():
        out += [ln.strip() for ln in stored.read_text().splitlines() if ln.strip()]
    plain = [os.environ.get(OWNER_TOKEN_ENV, "")]
    if token_file is not None:
        plain.append(Path(token_file).read_text().strip())
    for tok in plain:
        if not tok:
            continue
        if not _OWNER_TOKEN.fullmatch(tok):
            raise ValueError(f"an owner token is {OWNER_PREFIX!r} + 64 hex digits (make one "
                             f"with `dpkit owner-token PROJECT`)")
        out.append(sha256_hex(tok))
    return tuple(dict.fromkeys(out))


class Authenticator:
    """Turns an ``Authorization`` header into an :class:`Identity`, or a 401 problem."""

    def __init__(self, ledger: Ledger, owner_sha256: tuple[str, ...],
                 oidc: OidcConfig | None = None) -> None:
        self._ledger = ledger
        self._owner = owner_sha256
        self._oidc = oidc
        self._jwks: Any = None

    def __call__(self, token: str | None) -> Identity:
        if not token:
            raise Problem(401, "unauthenticated",
                          "no credential: send 'Authorization: Bearer <token>' with the token "
                          "`dpkit analyst add` printed (or the owner token)", dict(_CHALLENGE))
        token = token.strip()
        digest = sha256_hex(token)
        if token.startswith(OWNER_PREFIX):
            found = False
            for h in self._owner:  # every one compared: no early exit
                found |= hmac.compare_digest(h, digest)
            if not found:
                raise Problem(401, "unauthenticated",
                              "this owner token is not the project's (a new one replaces the "
                              "old: `dpkit owner-token`)", dict(_CHALLENGE))
            return Identity(OWNER, "owner", digest)
        if self._oidc is not None and token.count(".") == 2:
            return Identity(self._jwt_analyst(token), "analyst", digest)
        try:
            name = identify(self._ledger, token)
        except (ValueError, PermissionError) as exc:
            raise Problem(401, "unauthenticated", str(exc), dict(_CHALLENGE)) from None
        return Identity(name, "analyst", digest)

    def _jwt_analyst(self, token: str) -> str:
        """The analyst a valid JWT names (signature, expiry, audience and issuer checked)."""
        import jwt

        cfg = self._oidc
        assert cfg is not None
        try:
            if cfg.jwks_url is not None:
                if self._jwks is None:
                    self._jwks = jwt.PyJWKClient(cfg.jwks_url)
                key: Any = self._jwks.get_signing_key_from_jwt(token).key
            else:
                assert cfg.public_key is not None
                key = Path(cfg.public_key).read_text()
            claims = jwt.decode(token, key, algorithms=list(cfg.algorithms),
                                audience=cfg.audience, issuer=cfg.issuer,
                                options={"require": ["exp"]})
        except jwt.PyJWTError as exc:
            raise Problem(401, "unauthenticated", f"the bearer JWT is not valid: {exc}",
                          dict(_CHALLENGE)) from None
        name = claims.get(cfg.claim)
        info = self._ledger.analysts().get(name) if isinstance(name, str) else None
        if info is None or not info["active"]:
            raise Problem(401, "unauthenticated",
                          f"the JWT's {cfg.claim!r} claim names no active analyst of this "
                          f"project; the owner adds one with that name (`dpkit analyst add`)",
                          dict(_CHALLENGE))
        ends = token_expiry(self._ledger, str(name))  # the analyst's end, whichever credential
        if ends is not None and _dt.datetime.now(_dt.UTC) >= ends:
            raise Problem(401, "unauthenticated",
                          f"analyst {name!r} expired at {ends.isoformat(timespec='seconds')}: "
                          f"ask the project's owner to add you again", dict(_CHALLENGE))
        return str(name)
