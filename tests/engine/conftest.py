"""Shared fixtures for the curator tests: small deterministic tables and seeded projects."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.engine import Curator


def small_visits(n: int = 600, seed: int = 5) -> dict[str, np.ndarray]:
    """A small table: ~n/3 patients, wards A-D, ages 0-99, costs 0-1000 (deterministic)."""
    src = dp.noise.seeded(seed)
    pid = dp.noise.uniform_int(n // 3, n, source=src)
    ward = np.array(["A", "B", "C", "D"], dtype=object)[dp.noise.uniform_int(4, n, source=src)]
    age = dp.noise.uniform_int(100, n, source=src)
    cost = np.round(dp.noise.uniform_float01(n, source=src) * 1000.0, 2)
    return {"pid": pid.astype(np.int64), "ward": ward, "age": age.astype(np.int64),
            "cost": cost}


@pytest.fixture
def visits_data() -> Callable[..., dict[str, np.ndarray]]:
    """The :func:`small_visits` generator, as a fixture."""
    return small_visits


@pytest.fixture
def project(tmp_path: Path) -> Callable[..., Curator]:
    """Factory: a fresh project with a seeded (INSECURE) noise source."""
    counter = {"n": 0}

    def make(*, epsilon: float = 10.0, delta: float = 1e-6, accountant: str | None = None,
             seed: int = 1, **kw: Any) -> Curator:
        counter["n"] += 1
        return Curator.create(tmp_path / f"p{counter['n']}.dpkit", epsilon=epsilon, delta=delta,
                              accountant=accountant, source=dp.noise.seeded(seed), **kw)

    return make


def _add_visits(cur: Curator) -> Curator:
    cur.add_table("visits", small_visits(), privacy_unit="pid", max_rows_per_unit=2,
                  bounds={"age": (0, 100), "cost": (0, 1000)},
                  domains={"ward": ["A", "B", "C", "D", "E"]})
    return cur


@pytest.fixture
def visits_curator(project: Callable[..., Curator]) -> Curator:
    return _add_visits(project(epsilon=50.0))


@pytest.fixture(scope="module")
def module_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Curator]]:
    """:func:`project` for module-scoped fixtures: a project built once for the parametrized
    cases that are refused before any charge (each asserts itself that nothing was charged,
    so a wrong charge still fails) or that only plan and read exact aggregates with their own
    seed. One build instead of one per case (~0.3-0.5 s each). Never for a test whose
    assertions depend on the budget left or on the noise source's position."""
    made: list[Curator] = []

    def make(*, epsilon: float = 10.0, delta: float = 1e-6, accountant: str | None = None,
             seed: int = 1, **kw: Any) -> Curator:
        cur = Curator.create(tmp_path_factory.mktemp("shared") / "p1.dpkit", epsilon=epsilon,
                             delta=delta, accountant=accountant, source=dp.noise.seeded(seed),
                             **kw)
        made.append(cur)
        return cur

    yield make
    for cur in made:
        cur.close()


@pytest.fixture(scope="module")
def shared_visits_curator(module_project: Callable[..., Curator]) -> Curator:
    """:func:`visits_curator` once per module (see :func:`module_project`)."""
    return _add_visits(module_project(epsilon=50.0))
