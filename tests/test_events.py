"""Events are data: frozen, compared by value, JSON round-trip, validated on construction."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from dpkit import events as ev

ALL_EVENTS = [
    ev.NoOp(),
    ev.Laplace(2.0),
    ev.Gaussian(1.1),
    ev.DiscreteLaplace(3.5, 2),
    ev.DiscreteGaussian(10.0, 1),
    ev.Exponential(0.5),
    ev.RandomizedResponse(1.0, 4),
    ev.PureDP(0.2),
    ev.ApproxDP(1.0, 1e-6),
    ev.ZCDP(0.125),
    ev.Composed([ev.PureDP(0.1), ev.Gaussian(2.0)]),
    ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 14062),
    ev.SampledWithoutReplacement(1000, 10, ev.Laplace(1.0)),
    ev.Composed([ev.SelfComposed(ev.Composed([ev.NoOp(), ev.ZCDP(0.01)]), 3)]),
]


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_json_round_trip_is_exact(event: ev.Event) -> None:
    text = event.to_json()
    assert json.loads(text)  # valid JSON
    back = ev.from_json(text)
    assert back == event
    assert hash(back) == hash(event)
    assert back.to_json() == text


def test_events_are_frozen() -> None:
    e = ev.Gaussian(1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.noise_multiplier = 2.0  # type: ignore[misc]


def test_composed_accepts_any_iterable_and_stores_a_tuple() -> None:
    e = ev.Composed(x for x in [ev.PureDP(1.0)])  # type: ignore[arg-type]
    assert e.events == (ev.PureDP(1.0),)
    assert ev.Composed([ev.PureDP(1.0)]) == e


def test_leaves_walk_compositions() -> None:
    e = ev.Composed([ev.SelfComposed(ev.Gaussian(1.0), 3), ev.PoissonSampled(0.1, ev.Laplace(1.0))])
    assert list(e.leaves()) == [ev.Gaussian(1.0), ev.Laplace(1.0)]


def test_positional_field_lists_are_accepted() -> None:
    assert ev.from_json('{"Gaussian": [1.1]}') == ev.Gaussian(1.1)
    assert ev.from_json('{"SelfComposed": [{"PureDP": [0.5]}, 3]}') == ev.SelfComposed(
        ev.PureDP(0.5), 3
    )


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: ev.Gaussian(0.0), "noise_multiplier must be a finite number > 0"),
        (lambda: ev.Laplace(math.nan), "finite number > 0"),
        (lambda: ev.PureDP(-1.0), ">= 0"),
        (lambda: ev.ApproxDP(1.0, 1.5), "delta must lie in [0, 1]"),
        (lambda: ev.PoissonSampled(1.2, ev.NoOp()), "sampling_probability must lie in [0, 1]"),
        (lambda: ev.SelfComposed(ev.NoOp(), -1), "count must be >= 0"),
        (lambda: ev.SelfComposed(ev.NoOp(), 2.5), "count must be an int"),
        (lambda: ev.RandomizedResponse(1.0, 1), "categories must be >= 2"),
        (lambda: ev.SampledWithoutReplacement(5, 6, ev.NoOp()), "must not exceed"),
        (lambda: ev.Composed([1.0]), "every item must be an Event"),
        (lambda: ev.Gaussian(True), "must be a number"),
    ],
)
def test_bad_parameters_are_refused_with_the_fix(make, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((ValueError, TypeError), match=None) as info:
        make()
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"Nope": {}}', "unknown event kind 'Nope'; known kinds:"),
        ('{"Gaussian": {"sigma": 1}}', "its fields are: noise_multiplier"),
        ("[1, 2]", "exactly one key"),
        ("{not json", "not valid event JSON"),
        ('{"Gaussian": {}, "Laplace": {}}', "exactly one key"),
    ],
)
def test_bad_json_is_refused_with_the_fix(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        ev.from_json(text)
    assert fragment in str(info.value)
