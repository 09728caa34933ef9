"""Statistical-query logistic regression, central and local."""

from __future__ import annotations

import numpy as np
import pytest

import dpkit as dp
from dpkit import events
from dpkit.learn import CentralSQOracle, SQLogisticRegression

from ._helpers import exploding


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    src = dp.noise.seeded(seed)
    X = dp.noise.uniform_float01((n, 3), source=src) * 2 - 1
    p = 1 / (1 + np.exp(-4 * (X @ np.array([2.0, -1.0, 1.0]))))
    return X, (dp.noise.uniform_float01(n, source=src) < p).astype(np.int64)


def _sq(model: str, **kw: object) -> SQLogisticRegression:
    params: dict = dict(epsilon=1.0, delta=1e-7, bounds=(-1, 1), classes=[0, 1], model=model,
                        max_iter=10, random_state=1)
    params.update(kw)
    return SQLogisticRegression(**params)


def test_central_and_local_learn_and_local_needs_more_rows() -> None:
    Xt, yt = _data(5000, 99)
    X, y = _data(3000, 1)
    central = _sq("central").fit(X, y).score(Xt, yt)
    local_small = _sq("local").fit(X, y).score(Xt, yt)
    Xb, yb = _data(200_000, 2)
    local_big = _sq("local").fit(Xb, yb).score(Xt, yt)
    # Bayes accuracy on this data is ~0.88; the local learner at n=3,000 has ~75 users per query
    assert central > 0.85 and local_big > 0.85
    assert local_small < central - 0.03


def test_events_and_epsilon() -> None:
    X, y = _data(3000, 1)
    c = _sq("central").fit(X, y)
    assert c.epsilon_ <= 1.0 + 1e-9 and isinstance(c.event_, events.Composed)
    lap = _sq("central", mechanism="laplace").fit(X, y)
    assert dp.accounting.epsilon(lap.event_, delta=0.0) <= 1.0 + 1e-9
    loc = _sq("local").fit(X, y)
    assert loc.event_ == events.PureDP(1.0) and loc.epsilon_ == 1.0


def test_refusals() -> None:
    X, y = _data(100, 1)
    with pytest.raises(ValueError, match="cannot answer"):
        _sq("local", max_iter=50, random_state=exploding()).fit(X, y)
    with pytest.raises(ValueError, match="bounds is required"):
        _sq("central", bounds=None).fit(X, y)
    with pytest.raises(ValueError, match="model must be"):
        _sq("federated").fit(X, y)
    o = CentralSQOracle(X, epsilon=1.0, mechanism="laplace", queries=1)
    o.query(lambda r: np.full((len(r), 1), 0.5))
    with pytest.raises(ValueError, match="declared queries"):
        o.query(lambda r: np.full((len(r), 1), 0.5))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        CentralSQOracle(X, epsilon=1.0, mechanism="laplace", queries=2).query(lambda r: r[:, :1])
