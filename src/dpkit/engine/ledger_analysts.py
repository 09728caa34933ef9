"""The ledger's index of analysts: tokens (SHA-256 only), revocations and own caps.

Built from the ``analyst`` rows of the ledger in order, the latest row for a name winning; the
ledger (:mod:`dpkit.engine.ledger`) keeps it in step with its rows and holds the lock. An
analyst's own cap is an ε and, beside it, a δ: without a δ cap an analyst capped at a small ε
could still spend the project's whole δ (private group selections cost δ whatever their ε)
and leave every other analyst without any query that needs δ (FINDINGS.md F9).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Analysts"]


@dataclass
class Analysts:
    """What the ``analyst`` rows say, indexed; mutated only by :meth:`index`."""

    caps: dict[str, float] = field(default_factory=dict)  # name -> own ε cap
    delta_caps: dict[str, float] = field(default_factory=dict)  # only beside an ε cap
    tokens: dict[str, str] = field(default_factory=dict)  # sha256(token) hex -> name
    revoked: set[str] = field(default_factory=set)

    def index(self, payload: dict[str, Any]) -> None:
        """Apply one ``analyst`` row (an addition, a cap change or a revocation)."""
        name = str(payload["analyst"])
        if "token_sha256" in payload:
            self.tokens[str(payload["token_sha256"])] = name
        if payload.get("revoked"):
            self.revoked.add(name)
            self.tokens = {h: n for h, n in self.tokens.items() if n != name}
        if "epsilon" in payload:  # a revocation row leaves the caps (and the history) as is
            eps = payload["epsilon"]
            self.delta_caps.pop(name, None)  # rows written before δ caps: none
            if eps is None:
                self.caps.pop(name, None)
            else:
                self.caps[name] = float(eps)
                if payload.get("delta") is not None:
                    self.delta_caps[name] = float(payload["delta"])

    def for_digest(self, digest: str) -> str | None:
        """The active analyst whose token has this SHA-256 (None: unknown or revoked)."""
        found = None
        for h, name in self.tokens.items():  # compare every one: no early exit
            if hmac.compare_digest(h, digest):
                found = name
        return found

    def listing(self) -> dict[str, dict[str, Any]]:
        """``{name: {"active", "epsilon", "delta"}}`` for every analyst ever added."""
        names = set(self.tokens.values()) | self.revoked
        return {n: {"active": n not in self.revoked, "epsilon": self.caps.get(n),
                    "delta": self.delta_caps.get(n)} for n in sorted(names)}
