"""dpkit.learn.catalog: the allow-list of models a caller may name as text (the service's fit)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from dpkit import learn
from dpkit.learn import catalog


@pytest.mark.parametrize("name", list(catalog.CATALOG))
def test_every_option_is_a_parameter_and_nothing_runs_code(name: str) -> None:
    spec = catalog.CATALOG[name]
    params = set(inspect.signature(getattr(learn, spec.estimator)).parameters)
    assert set(spec.options) <= params
    # never from a request: code (features), the noise's seed, what the request or the
    # declarations set (epsilon, delta, classes, label bounds where declared, the unit bound)
    assert not set(spec.options) & {"features", "random_state", "epsilon", "delta", "classes",
                                    "max_examples_per_unit", "source"}
    assert spec.released and all(a.endswith("_") for a in spec.released)


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("pickle", {}, "model must be one of"),
    ("logistic_regression", {"features": "os.system"}, "no option 'features'"),
    ("logistic_regression", {"max_iter": 10_001}, r"\[1, 10000\]"),
    ("logistic_regression", {"max_iter": 2.0}, "an integer"),
    ("logistic_regression", {"max_iter": True}, "an integer"),
    ("logistic_regression", {"alpha": float("inf")}, "a number"),
    ("logistic_regression", {"alpha": -1.0}, r"\[0, inf\]"),
    ("logistic_regression", {"fit_intercept": "yes"}, "true or false"),
    ("linear_regression", {"label_bounds": [0, 1, 2]}, "a pair"),
    ("kmeans", {"bounds": [[0, 1]] * 100_001}, "more than"),
    ("mlp_classifier", {"activation": "sigmoid"}, "one of"),
    ("mlp_classifier", {"hidden_layer_sizes": [8] * 5}, "1 to 4"),
    ("mlp_classifier", {"hidden_layer_sizes": [513]}, r"\[1, 512\]"),
    ("mlp_classifier", {"sample_rate": 1e-4, "epochs": 11}, "steps"),
]


@pytest.mark.parametrize("name,options,match", BAD)
def test_refused_options_name_the_fix(name: str, options: dict[str, Any], match: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "torch_available", lambda: True)  # the checks, not torch
    with pytest.raises(catalog.OptionError, match=match):
        catalog.build(name, options)


def test_build_gives_the_estimator_with_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    m = catalog.build("logistic_regression", {"max_iter": 50, "fit_intercept": False})
    assert isinstance(m, learn.LogisticRegression) and m.max_iter == 50
    assert catalog.build("kmeans", {"bounds": [[-1, 1], [0, 1]]}).bounds == [(-1.0, 1.0),
                                                                              (0.0, 1.0)]
    monkeypatch.setattr(catalog, "torch_available", lambda: False)
    with pytest.raises(catalog.ModelUnavailable, match=r"dpkit\[torch\]"):
        catalog.build("mlp_classifier", {"sample_rate": 0.1})
    monkeypatch.setattr(catalog, "torch_available", lambda: True)
    mlp = catalog.build("mlp_classifier", {"hidden_layer_sizes": [8, 4], "batch_size": "auto"})
    assert mlp.hidden_layer_sizes == (8, 4) and mlp.batch_size == "auto"


def test_released_lists_the_fitted_parameters() -> None:
    import numpy as np

    X = np.r_[np.full((50, 2), -0.5), np.full((50, 2), 0.5)]
    y = np.r_[[0] * 50, [1] * 50]
    m = learn.GaussianNB(epsilon=1.0, bounds=(-1, 1), classes=[0, 1], random_state=0).fit(X, y)
    out = catalog.released("gaussian_nb", m)
    assert set(out) == {"theta", "var", "class_prior"} and np.shape(out["theta"]) == (2, 2)
    assert all(isinstance(v, list) for v in out.values())
