"""The object every mechanism returns: a private value, what it cost, and how wrong it may be."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from dpkit.events import Event

T = TypeVar("T")

__all__ = ["Release"]


@dataclass(frozen=True)
class Release(Generic[T]):
    """A private value, its privacy event, and its accuracy.

    ``ci`` is a (low, high) confidence interval at ``level`` computed from the exact noise
    distribution (for vector values: arrays of lows and highs, one per coordinate; for selection
    mechanisms, which have no interval, ``None``). ``insecure`` is True when the noise came from
    ``dpkit.noise.seeded``: such a value is reproducible and offers NO privacy.

    The event is charged by whoever owns the budget (the curator, or the caller with a
    ``dpkit.accounting.Budget``) before the value is shown to anyone.
    """

    value: T
    event: Event
    ci: Any = None
    level: float = 0.95
    insecure: bool = False
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def __repr__(self) -> str:
        flag = ", INSECURE (seeded noise: not private)" if self.insecure else ""
        ci = "" if self.ci is None else f", ci@{self.level:g}={self.ci!r}"
        return f"Release(value={self.value!r}{ci}, event={self.event!r}{flag})"
