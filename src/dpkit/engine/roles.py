"""Who is acting: the owner, or the analyst a token names.

The owner opens a project without a token (they hold its files and the key that authenticates
the ledger); an analyst presents a token, ``dpkit_`` + 64 hex digits (256 bits from the OS
CSPRNG, through :func:`dpkit.noise.token_hex`), of which the ledger keeps only the SHA-256. The
name a charge goes to comes from the token alone (:func:`charged_analyst`). Also here: the noise
source a project is created with, and the seeded source an insecure project gets on reopening.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from dpkit import noise as _noise
from dpkit.engine.ledger import Ledger

__all__ = ["OWNER", "TOKEN_ENV", "charged_analyst", "check_analyst_name", "identify",
           "new_token", "project_source", "reopen_seed"]

OWNER = "owner"  # the name the owner's own charges are recorded under
TOKEN_ENV = "DPKIT_TOKEN"
_TOKEN = re.compile(r"dpkit_[0-9a-f]{64}")
_ANALYST_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def new_token() -> tuple[str, str]:
    """A fresh analyst token and its SHA-256 (hex), the only form the ledger keeps."""
    token = "dpkit_" + _noise.token_hex(32)
    return token, hashlib.sha256(token.encode("ascii")).hexdigest()


def check_analyst_name(name: object) -> str:
    if not isinstance(name, str) or not _ANALYST_NAME.fullmatch(name) or name == OWNER:
        raise ValueError(
            f"analyst name {name!r}: use 1-64 letters, digits or _.@- (and not {OWNER!r})")
    return name


def charged_analyst(own: str, given: object) -> str:
    """The analyst a query is charged to: always the one the curator was opened as (by its
    token, or the owner). A caller-chosen name (the removed ``analyst=``) is refused: it would
    let anyone spend another analyst's budget, or escape their own cap."""
    if given is not None:
        raise TypeError(
            f"analyst= was removed: charges go to the analyst whose token opened the project "
            f"(now {own!r}). Open it as that analyst: dp.Curator.open(path, token=...), or set "
            f"DPKIT_TOKEN (the owner makes tokens with cur.add_analyst / `dpkit analyst add`)"
        )
    return own


def reopen_seed(seed: int, rows: int) -> int:
    """The seed of an insecure project's source after reopening: a function of the recorded
    seed and the ledger's length (reproducible, never the secure source in disguise)."""
    digest = hashlib.sha256(f"dpkit-reopen:{seed}:{rows}".encode("ascii")).hexdigest()
    return int(digest[:15], 16)


def project_source(source: Any) -> tuple[_noise.Source | None, int | None]:
    """(source to use now, seed to record) for ``Curator.create(source=...)``."""
    if source is None or isinstance(source, _noise.SecureSource):
        return None, None
    if isinstance(source, _noise.SeededSource):
        return source, source.seed
    raise TypeError(
        f"source= takes dp.noise.secure() (the default) or dp.noise.seeded(seed) for an "
        f"INSECURE test project (got {source!r})"
    )


def identify(ledger: Ledger, token: str) -> str:
    """The analyst a token names, or a refusal that says why (malformed, unknown, revoked)."""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token.strip()):
        raise ValueError(
            "malformed analyst token: expected 'dpkit_' and 64 hex digits, as printed once by "
            "`dpkit analyst add` / cur.add_analyst(...); check DPKIT_TOKEN or --token"
        )
    name = ledger.analyst_for_token(token.strip())
    if name is None:
        raise PermissionError(
            "this analyst token is unknown to the project, or was revoked: ask the project's "
            "owner for a (new) token (`dpkit analyst add`)"
        )
    return name
