"""A directly fitted ``MLPClassifier`` keeps a public ``TrainingSummary`` as ``training_``, as
one fitted through the curator does (FINDINGS.md G1): never the training object, whose loader
holds every row and the unit codes, and which a pickle of the model carried along."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from dpkit.learn import MLPClassifier
from dpkit.learn.torch import TrainingSummary


def _data(n: int = 300) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # deterministic, distinctive rows (their float32 bytes are searched for in the pickle)
    x = np.linspace(-0.987654, 0.912345, n)
    X = np.c_[x, np.sin(7.0 * x)]
    return X, (x > 0).astype(np.int64), np.arange(n) // 3


@pytest.mark.parametrize("kw", [
    {"batch_size": 100},                                     # record level, fixed divisor
    {"batch_size": "auto", "sample_rate": 0.2},              # noisy row count
    {"batch_size": 60, "max_examples_per_unit": 3},          # user level (units=)
], ids=["fixed", "auto", "units"])
def test_direct_fit_keeps_a_summary_and_no_row(kw: dict[str, Any]) -> None:
    X, y, units = _data()
    clf = MLPClassifier((4,), epsilon=2.0, delta=1e-4, epochs=2, random_state=0, **kw)
    clf.fit(X, y, units=units if "max_examples_per_unit" in kw else None)
    tr = clf.training_
    assert isinstance(tr, TrainingSummary)
    assert not hasattr(tr, "data_loader") and not hasattr(tr, "units")
    assert tr.insecure and tr.steps > 0
    assert tr.neighbours == ("add/remove one unit" if "max_examples_per_unit" in kw
                             else "add/remove one example")
    if kw["batch_size"] != "auto":  # no count composed in: the summary's event is the fit's
        assert tr.event() == clf.event_ and tr.epsilon(1e-4) == pytest.approx(clf.epsilon_)
    blob = pickle.dumps(clf)
    rows = X.astype(np.float32)
    for i in (0, 137, 299):  # no training row travels with the model
        assert rows[i].tobytes() not in blob
    again = pickle.loads(blob)
    assert again.training_ == tr
    assert np.array_equal(again.predict(X), clf.predict(X))
