"""The Adult targets of issue 15 (slow; skipped without ../shared/data)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from dpkit.learn import LogisticRegression
from dpkit.learn.adult import FEATURE_NORM, data_dir, load_adult

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(data_dir() is None, reason="Adult not found: set DPKIT_DATA to the folder "
                       "holding adult.data.gz / adult.test.gz (../shared/data)"),
]


@pytest.mark.parametrize(("epsilon", "target"), [(1.0, 0.81), (3.0, 0.83)])
def test_logistic_regression_on_adult(epsilon: float, target: float) -> None:
    Xtr, ytr, Xte, yte = load_adult()
    assert Xtr.shape[0] == 30162 and Xte.shape[0] == 15060
    accs, times = [], []
    for seed in range(10):
        t = time.perf_counter()
        m = LogisticRegression(epsilon=epsilon, delta=1e-5, feature_norm=FEATURE_NORM,
                               classes=[0, 1], random_state=seed).fit(Xtr, ytr)
        times.append(time.perf_counter() - t)
        accs.append(m.score(Xte, yte))
        assert m.epsilon_ <= epsilon + 1e-9
    assert np.mean(accs) >= target
    assert max(times) < 10.0
