"""``cur.fit`` draws from the project's noise source: two projects seeded alike train
bit-identical models, the secure source does not repeat, and a model's own ``random_state`` is
refused before the charge (a seed of the caller's would let them replay the noise and subtract
it). The MLP's DP-SGD path (sampling, priorities, noisy count) is in tests/learn_torch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine.spec import QueryError
from dpkit.learn import GaussianNB, KMeans, LinearRegression, LogisticRegression

from ._helpers import patients

DECL = {"bounds": {"age": (0, 100), "cost": (0, 300)},
        "domains": {"ward": ["A", "B"], "sick": ["no", "yes"]}}


def _frame(n: int = 200) -> pd.DataFrame:
    return patients(n)


def _project(path: Path, source: dp.noise.Source | None) -> Curator:
    cur = Curator.create(path, epsilon=20.0, delta=1e-6, source=source)
    cur.add_table("u", _frame(), privacy_unit="uid", max_rows_per_unit=2, **DECL)
    return cur


#: every estimator cur.fit accepts without torch, and the arrays it learns
FITS: dict[str, tuple[Callable[[], Any], str, str, tuple[str, ...]]] = {
    "logistic": (LogisticRegression, "SELECT age, ward FROM u", "sick", ("coef_", "intercept_")),
    "linear": (LinearRegression, "SELECT age, ward FROM u", "cost", ("coef_", "intercept_")),
    "naive_bayes": (GaussianNB, "SELECT age, ward FROM u", "sick", ("theta_", "var_")),
    "kmeans": (lambda: KMeans(n_clusters=2), "SELECT age, cost FROM u", "sick",
               ("cluster_centers_",)),
}


def _learned(cur: Curator, name: str) -> list[np.ndarray]:
    make, query, label, attrs = FITS[name]
    model = make()
    cur.fit(model, query, label=label, epsilon=1.0)
    assert model.random_state is None  # the project's source was passed, not stored
    return [np.asarray(getattr(model, a)) for a in attrs]


@pytest.mark.parametrize("name", list(FITS))
def test_seeded_projects_fit_bit_identical_models(tmp_path: Path, name: str) -> None:
    """Same seed, same history: the same parameters to the bit. The secure source gives other
    ones: every learned array is continuous noise on a fine grid (a repeat of all of them has
    probability far below 1e-9, the false-failure probability of this test)."""
    a = _learned(_project(tmp_path / "a.dpkit", dp.noise.seeded(7)), name)
    b = _learned(_project(tmp_path / "b.dpkit", dp.noise.seeded(7)), name)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))
    c = _learned(_project(tmp_path / "c.dpkit", None), name)
    assert not all(np.array_equal(x, z) for x, z in zip(a, c, strict=True))
    d = _learned(_project(tmp_path / "d.dpkit", dp.noise.seeded(8)), name)
    assert not all(np.array_equal(x, z) for x, z in zip(a, d, strict=True))


def test_a_fit_continues_the_projects_stream(tmp_path: Path) -> None:
    """Two fits in one seeded project draw different noise (the stream moves on), and a
    reopened project goes on reproducibly, as every other release of a seeded project."""
    cur = _project(tmp_path / "a.dpkit", dp.noise.seeded(7))
    first, second = _learned(cur, "logistic"), _learned(cur, "logistic")
    assert not np.array_equal(first[0], second[0])
    cur.close()
    third = _learned(Curator.open(tmp_path / "a.dpkit"), "logistic")
    other = _project(tmp_path / "b.dpkit", dp.noise.seeded(7))
    for _ in range(2):
        _learned(other, "logistic")
    other.close()
    again = _learned(Curator.open(tmp_path / "b.dpkit"), "logistic")
    assert third[0].tobytes() == again[0].tobytes()


@pytest.mark.parametrize("source", [None, dp.noise.seeded(1)], ids=["secure", "seeded"])
@pytest.mark.parametrize("seed", [0, dp.noise.seeded(0)], ids=["int", "source"])
def test_random_state_is_refused_before_the_charge(tmp_path: Path, source: Any,
                                                   seed: Any) -> None:
    cur = _project(tmp_path / "p.dpkit", source)
    model = LogisticRegression(random_state=seed)
    with pytest.raises(QueryError, match="leave random_state unset"):
        cur.fit(model, "SELECT age FROM u", label="sick", epsilon=1.0)
    assert cur.budget().spent == 0.0 and not cur.budget().history
    assert model.get_params()["random_state"] is seed and model.epsilon == 1.0  # untouched
    assert not hasattr(model, "coef_")


def test_outside_the_curator_source_overrides_random_state() -> None:
    X = _frame()[["age"]].to_numpy() / 50.0 - 1.0
    y = (_frame()["sick"] == "yes").to_numpy().astype(int)

    def coef(m: LogisticRegression, **kw: Any) -> bytes:
        return bytes(np.asarray(m.fit(X, y, **kw).coef_).tobytes())

    def make(seed: Any = None) -> LogisticRegression:
        return LogisticRegression(epsilon=1.0, delta=1e-4, classes=[0, 1], feature_norm=1.0,
                                  random_state=seed)

    assert coef(make(3), source=dp.noise.seeded(9)) == coef(make(), source=dp.noise.seeded(9))
    assert coef(make(3)) == coef(make(3)) != coef(make(), source=dp.noise.seeded(9))
    with pytest.raises(TypeError, match=r"dpkit\.noise source"):
        make().fit(X, y, source=9)  # type: ignore[arg-type]
