"""Privacy events: what a release did, described as data.

An event records the mechanism that touched the data, never the data or the output. Accountants
(``dpkit.accounting``) only read events and turn them into guarantees; the curator's ledger stores
them as JSON so that any accountant can re-evaluate the whole history later.

Contract (as in dp_accounting's ``DpEvent``): events are frozen, compared by value, and never
changed once charged; new kinds are only ever added. Every event is stated for the
**add/remove-one** neighbouring relation on the unit of privacy the mechanism was given; an
accountant may be asked for the replace-one relation explicitly.

The first positional parameter of each event follows dp_accounting:

==========================  =======================================================================
``Laplace(m)``              continuous Laplace, ``m = scale / L1 sensitivity`` (pure ε = 1/m)
``Gaussian(m)``             continuous Gaussian, ``m = sigma / L2 sensitivity``
``DiscreteLaplace(s, Δ)``   integer Laplace, P(x) ∝ exp(-|x|/s), integer L1 sensitivity Δ
``DiscreteGaussian(σ², Δ)`` integer Gaussian, P(x) ∝ exp(-x²/(2σ²)), integer L2 sensitivity Δ
``Exponential(ε)``          exponential mechanism / noisy max with ε-bounded range
``RandomizedResponse(ε,k)`` k-ary randomized response at ε
``PureDP(ε)``               any ε-DP mechanism
``ApproxDP(ε, δ)``          any (ε, δ)-DP mechanism
``ZCDP(ρ)``                 any ρ-zCDP mechanism
``Composed([e…])``          adaptive composition of different events
``SelfComposed(e, n)``      n-fold adaptive composition of one event
``PoissonSampled(q, e)``    e run on a Poisson subsample with rate q
``SampledWithoutReplacement(N, n, e)``  e on a uniform subset of size n of N records
``NoOp()``                  touches no data (spends nothing)
==========================  =======================================================================

JSON form: one key naming the event, its value the fields, e.g.
``{"SelfComposed": {"event": {"Gaussian": {"noise_multiplier": 1.1}}, "count": 10}}``.

>>> e = SelfComposed(PoissonSampled(256 / 60000, Gaussian(1.1)), 14062)
>>> from_json(e.to_json()) == e
True
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "ZCDP",
    "ApproxDP",
    "Composed",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Event",
    "Exponential",
    "Gaussian",
    "Laplace",
    "NoOp",
    "PoissonSampled",
    "PureDP",
    "RandomizedResponse",
    "SampledWithoutReplacement",
    "SelfComposed",
    "from_dict",
    "from_json",
]

_REGISTRY: dict[str, type[Event]] = {}


def _positive_finite(name: str, value: float, event: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{event}: {name} must be a number (got {value!r})")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{event}: {name} must be a finite number > 0 (got {value!r})")


def _non_negative_finite(name: str, value: float, event: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{event}: {name} must be a number (got {value!r})")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{event}: {name} must be a finite number >= 0 (got {value!r})")


def _probability(name: str, value: float, event: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{event}: {name} must be a number (got {value!r})")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{event}: {name} must lie in [0, 1] (got {value!r})")


def _count(name: str, value: int, event: str, *, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{event}: {name} must be an int (got {value!r})")
    if value < minimum:
        raise ValueError(f"{event}: {name} must be >= {minimum} (got {value})")


@dataclass(frozen=True)
class Event:
    """Base of all privacy events. Subclasses are frozen dataclasses registered by name."""

    kind: ClassVar[str] = "Event"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = cls.__name__
        _REGISTRY[cls.__name__] = cls

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form: ``{"Kind": {field: value, ...}}`` with nested events as dicts."""
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            fields[f.name] = _encode(getattr(self, f.name))
        return {self.kind: fields}

    def to_json(self, **kwargs: Any) -> str:
        """Serialise losslessly (floats are written with repr precision)."""
        return json.dumps(self.to_dict(), **kwargs)

    def leaves(self) -> Iterable[Event]:
        """The mechanism events inside compositions and samplings (self for a leaf)."""
        yield self


def _encode(value: Any) -> Any:
    if isinstance(value, Event):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


@dataclass(frozen=True)
class NoOp(Event):
    """An event that touched no private data; every accountant charges it nothing."""


@dataclass(frozen=True)
class Laplace(Event):
    """Continuous Laplace noise with ``scale = noise_multiplier × L1 sensitivity`` (ε = 1/m)."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        _positive_finite("noise_multiplier", self.noise_multiplier, "Laplace")


@dataclass(frozen=True)
class Gaussian(Event):
    """Continuous Gaussian noise with ``sigma = noise_multiplier × L2 sensitivity``."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        _positive_finite("noise_multiplier", self.noise_multiplier, "Gaussian")


@dataclass(frozen=True)
class DiscreteLaplace(Event):
    """Integer noise P(x) ∝ exp(-|x|/scale) on a query with integer L1 ``sensitivity``.

    Pure ε = sensitivity/scale. The privacy-loss distribution differs from the continuous
    Laplace's, so both parameters are kept.
    """

    scale: float
    sensitivity: int = 1

    def __post_init__(self) -> None:
        _positive_finite("scale", self.scale, "DiscreteLaplace")
        _count("sensitivity", self.sensitivity, "DiscreteLaplace", minimum=1)


@dataclass(frozen=True)
class DiscreteGaussian(Event):
    """Integer noise P(x) ∝ exp(-x²/(2 sigma2)) on a query with integer L2 ``sensitivity``.

    ρ-zCDP with ρ = sensitivity²/(2 sigma2) (Canonne-Kamath-Steinke 2020, Thm 14).
    """

    sigma2: float
    sensitivity: float = 1

    def __post_init__(self) -> None:
        _positive_finite("sigma2", self.sigma2, "DiscreteGaussian")
        _positive_finite("sensitivity", self.sensitivity, "DiscreteGaussian")


@dataclass(frozen=True)
class Exponential(Event):
    """The exponential mechanism (or report-noisy-max with Gumbel/exponential noise).

    ε-DP and ε-bounded range, hence ε²/8-zCDP (Cesar-Rogers 2021).
    """

    epsilon: float

    def __post_init__(self) -> None:
        _positive_finite("epsilon", self.epsilon, "Exponential")


@dataclass(frozen=True)
class RandomizedResponse(Event):
    """k-ary randomized response: the true category with prob e^ε/(e^ε + k - 1)."""

    epsilon: float
    categories: int = 2

    def __post_init__(self) -> None:
        _positive_finite("epsilon", self.epsilon, "RandomizedResponse")
        _count("categories", self.categories, "RandomizedResponse", minimum=2)


@dataclass(frozen=True)
class PureDP(Event):
    """Any ε-DP mechanism."""

    epsilon: float

    def __post_init__(self) -> None:
        _non_negative_finite("epsilon", self.epsilon, "PureDP")


@dataclass(frozen=True)
class ApproxDP(Event):
    """Any (ε, δ)-DP mechanism."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        _non_negative_finite("epsilon", self.epsilon, "ApproxDP")
        _probability("delta", self.delta, "ApproxDP")


@dataclass(frozen=True)
class ZCDP(Event):
    """Any ρ-zero-concentrated-DP mechanism (Bun-Steinke 2016)."""

    rho: float

    def __post_init__(self) -> None:
        _non_negative_finite("rho", self.rho, "ZCDP")


@dataclass(frozen=True)
class Composed(Event):
    """Adaptive composition of the given events, in order."""

    events: tuple[Event, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for e in events:
            if not isinstance(e, Event):
                raise TypeError(f"Composed: every item must be an Event (got {e!r})")
        object.__setattr__(self, "events", events)

    def leaves(self) -> Iterable[Event]:
        for e in self.events:
            yield from e.leaves()


@dataclass(frozen=True)
class SelfComposed(Event):
    """``count``-fold adaptive composition of ``event``."""

    event: Event
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.event, Event):
            raise TypeError(f"SelfComposed: event must be an Event (got {self.event!r})")
        _count("count", self.count, "SelfComposed")

    def leaves(self) -> Iterable[Event]:
        yield from self.event.leaves()


@dataclass(frozen=True)
class PoissonSampled(Event):
    """``event`` run on a subsample that keeps each record independently with prob q."""

    sampling_probability: float
    event: Event

    def __post_init__(self) -> None:
        _probability("sampling_probability", self.sampling_probability, "PoissonSampled")
        if not isinstance(self.event, Event):
            raise TypeError(f"PoissonSampled: event must be an Event (got {self.event!r})")

    def leaves(self) -> Iterable[Event]:
        yield from self.event.leaves()


@dataclass(frozen=True)
class SampledWithoutReplacement(Event):
    """``event`` run on a uniformly random subset of ``sample_size`` of ``source_dataset_size``."""

    source_dataset_size: int
    sample_size: int
    event: Event

    def __post_init__(self) -> None:
        name = "SampledWithoutReplacement"
        _count("source_dataset_size", self.source_dataset_size, name, minimum=1)
        _count("sample_size", self.sample_size, name)
        if self.sample_size > self.source_dataset_size:
            raise ValueError(
                f"{name}: sample_size ({self.sample_size}) must not exceed "
                f"source_dataset_size ({self.source_dataset_size})"
            )
        if not isinstance(self.event, Event):
            raise TypeError(f"{name}: event must be an Event (got {self.event!r})")

    def leaves(self) -> Iterable[Event]:
        yield from self.event.leaves()


def from_dict(data: Mapping[str, Any]) -> Event:
    """Rebuild an event from its ``to_dict`` form; unknown kinds raise with the known list."""
    if not isinstance(data, Mapping) or len(data) != 1:
        raise ValueError(
            "an event is a JSON object with exactly one key naming its kind, e.g. "
            '{"Gaussian": {"noise_multiplier": 1.1}} (got ' + repr(data)[:200] + ")"
        )
    ((kind, fields),) = data.items()
    cls = _REGISTRY.get(kind)
    if cls is None or cls is Event:
        known = ", ".join(sorted(k for k in _REGISTRY if k != "Event"))
        raise ValueError(f"unknown event kind {kind!r}; known kinds: {known}")
    if fields is None:
        fields = {}
    if isinstance(fields, (list, tuple)):
        names = [f.name for f in dataclasses.fields(cls)]
        fields = dict(zip(names, fields, strict=False))
    if not isinstance(fields, Mapping):
        raise ValueError(f"{kind}: fields must be a JSON object (got {fields!r})")
    kwargs = {name: _decode(value) for name, value in fields.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        field_list = ", ".join(f.name for f in dataclasses.fields(cls))
        raise ValueError(f"{kind}: {exc}; its fields are: {field_list}") from None


def _decode(value: Any) -> Any:
    if isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in _REGISTRY:
        return from_dict(value)
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def from_json(text: str | bytes | Mapping[str, Any]) -> Event:
    """Parse an event from JSON text (or an already-decoded dict)."""
    if isinstance(text, Mapping):
        return from_dict(text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid event JSON: {exc}") from None
    return from_dict(data)
