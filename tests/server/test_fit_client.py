"""``dpkit.Client.fit`` returns a ``RemoteModel`` whose ``predict`` (plain Python, through the
answer's public encoding) is the model the service trained: the same predictions as the dpkit
estimator given the released parameters and the engine's own encoding of the rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("fastapi")

from tests.server.test_fit_endpoint import BODIES, HAS_TORCH, SQL, Served, _frame

from dpkit import learn
from dpkit.engine.families.fit import Encoding, Feature
from dpkit.server.client import RemoteModel


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    s = Served(Path(tmp_path_factory.mktemp("fit-client")), _frame(300))
    yield s
    s.close()


def _rows() -> pd.DataFrame:
    """The table's rows and a few the encoding must clamp or zero (out of bounds, missing,
    a key outside the domain)."""
    odd = pd.DataFrame({"x": [-5.0, 80.0, None, 12.5], "g": ["a", "zz", None, "b"]})
    return pd.concat([_frame(300)[["x", "g"]], odd], ignore_index=True)


def _reference(answer: dict[str, Any], X: np.ndarray) -> list[Any]:
    """The dpkit estimator's own predict, given the released parameters."""
    p, model, classes = answer["parameters"], answer["model"], answer["classes"]
    if model == "mlp_classifier":  # the network's forward pass, in numpy
        h = X
        for i, (w, b) in enumerate(zip(p["coefs"], p["intercepts"], strict=True)):
            h = h @ np.asarray(w) + np.asarray(b)
            if i < len(p["coefs"]) - 1:
                h = np.tanh(h)
        return list(np.asarray(classes, dtype=object)[h.argmax(1)])
    est = getattr(learn, answer["estimator"])()
    for name, value in p.items():
        setattr(est, name + "_", np.asarray(value, dtype=np.float64))
    est.n_features_in_ = X.shape[1]
    if classes is not None:
        est.classes_ = np.asarray(classes, dtype=object)
    return list(est.predict(X))


@pytest.mark.parametrize("model", list(BODIES))
def test_remote_predictions_are_the_models(served: Any, model: str) -> None:
    if model == "mlp_classifier" and not HAS_TORCH:
        pytest.skip("the torch extra is not installed")
    r = served.post("/v1/fit", {"model": model, "sql": SQL, "epsilon": 2.0, **BODIES[model]})
    assert r.status_code == 200, r.text
    remote = RemoteModel(r.json())
    rows = _rows()
    enc = Encoding("t", tuple(Feature(f["name"], f["column"], f["key"], f["low"], f["high"])
                              for f in remote["features"]), remote["label"], None, None)
    X = enc.transform(rows)  # the engine's encoding (the one the model was trained on)
    assert np.allclose([remote.encode(row) for row in rows.to_dict("records")], X)
    got = remote.predict(rows.to_dict("records"))
    want = _reference(remote.answer, X)
    if model == "linear_regression":
        assert np.allclose(got, want)
    else:
        assert got == want
    assert remote.epsilon == r.json()["charge"]["epsilon"]
