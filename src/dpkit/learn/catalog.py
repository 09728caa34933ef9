"""The models a caller may name as text: an allow-list for fits asked over the network.

The service's ``POST /v1/fit`` (docs/service.md) trains a model that an analyst names in a
JSON body. Nothing in that body may run code on the server: no pickle, no import path, no
callable, no ``features=`` transform (it would be called on the private rows). So a model is
one of :data:`CATALOG`'s names, built here from JSON values (numbers, booleans, strings from a
fixed list, lists of numbers) for the options listed with it, each checked for its JSON type
and for the limits that keep one request's *work* bounded (iterations, epochs, steps, layer
widths: a fit's time grows with them, and an analyst's request holds one of the service's
threads). Everything else about a value is checked where it always is: the estimator's
``privacy_event``, which the curator calls before it charges anything (FINDINGS.md G5).

What is not an option: ``epsilon`` and ``delta`` (the request's own fields, as for a query),
``classes`` and ``label_bounds`` where the curator takes them from the declarations,
``random_state`` (refused through the curator: the project's source draws every fit's noise),
``features`` and ``max_examples_per_unit`` (the curator's bounding sets the unit's rows).

:func:`released` is the other half of the allow-list: the fitted attributes a model gives
back (its public, noisy parameters), by name; nothing else of the fitted object leaves.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CATALOG", "ModelSpec", "ModelUnavailable", "Option", "OptionError", "build",
           "released", "torch_available"]


class OptionError(ValueError):
    """A model name or option the catalog does not allow (or a value of the wrong kind)."""


class ModelUnavailable(ValueError):  # noqa: N818 - a refusal, named as the others
    """An allowed model this installation cannot train (DP-SGD without PyTorch)."""


@dataclass(frozen=True)
class Option:
    """One option a caller may set: its JSON kind and the limits on its value.

    ``kind``: ``float``, ``int``, ``bool``, ``choice`` (one of ``choices``), ``sizes`` (a list
    of ints, at most ``length`` of them), ``pair`` (``[low, high]``), ``bounds`` (one pair, or
    one pair per feature), ``batch`` (an int or ``"auto"``). ``low`` / ``high``: inclusive
    limits on a number (on each int of ``sizes``); None: none here (the estimator checks).
    """

    kind: str
    doc: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    length: int = 0

    def describe(self) -> dict[str, Any]:
        """JSON for the service's list of models (``GET /v1/fit/models``)."""
        out: dict[str, Any] = {"kind": self.kind, "doc": self.doc}
        for key in ("low", "high"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.choices:
            out["choices"] = list(self.choices)
        if self.length:
            out["max_length"] = self.length
        return out


@dataclass(frozen=True)
class ModelSpec:
    """An allowed model: its estimator in :mod:`dpkit.learn`, its options, what it releases."""

    name: str
    estimator: str
    task: str  # "classification", "regression" or "clustering"
    guarantee: str
    options: dict[str, Option]
    released: tuple[str, ...]
    torch: bool = False

    def describe(self) -> dict[str, Any]:
        import inspect

        cls = getattr(importlib.import_module("dpkit.learn"), self.estimator)
        return {"name": self.name, "estimator": self.estimator, "task": self.task,
                "guarantee": self.guarantee, "needs_torch": self.torch,
                # a pure-DP model takes no delta (the request's delta is refused, as cur.fit's)
                "takes_delta": "delta" in inspect.signature(cls).parameters,
                "available": not self.torch or torch_available(),
                "options": {k: o.describe() for k, o in self.options.items()},
                "released": list(self.released)}


_NORM = Option("float", "clip each encoded row to this L2 norm (default sqrt(features))")
_ALPHA = Option("float", "L2 regularisation", low=0.0)
_INTERCEPT = Option("bool", "fit an intercept")
_BOUNDS = Option("bounds", "per-feature clamps in the encoded space (default [-1, 1])",
                 length=100_000)
_MAX_STEPS = 100_000  # DP-SGD steps of one fit: epochs x round(1 / sample_rate)

CATALOG: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("logistic_regression", "LogisticRegression", "classification",
              "(epsilon, delta)-DP via rho-zCDP: noisy full-batch gradient descent",
              {"alpha": _ALPHA, "feature_norm": _NORM, "fit_intercept": _INTERCEPT,
               "learning_rate": Option("float", "step size, in units of 1/L"),
               "max_iter": Option("int", "gradient steps", low=1, high=10_000)},
              ("coef_", "intercept_")),
    ModelSpec("linear_regression", "LinearRegression", "regression",
              "(epsilon, delta)-DP via rho-zCDP: noisy sufficient statistics, ridge solve",
              {"alpha": _ALPHA, "feature_norm": _NORM, "fit_intercept": _INTERCEPT,
               "label_bounds": Option("pair", "clamp the label to [low, high] (default: its "
                                               "declared bounds)")},
              ("coef_", "intercept_")),
    ModelSpec("gaussian_nb", "GaussianNB", "classification",
              "epsilon-DP: per-class noisy counts, sums and sums of squares",
              {"bounds": _BOUNDS, "var_floor": Option("float", "smallest variance")},
              ("theta_", "var_", "class_prior_")),
    ModelSpec("kmeans", "KMeans", "clustering",
              "epsilon-DP: noisy Lloyd steps from data-independent centres (the label is "
              "read and ignored)",
              {"bounds": _BOUNDS, "n_clusters": Option("int", "clusters", low=1, high=1000),
               "max_iter": Option("int", "Lloyd steps", low=1, high=100)},
              ("cluster_centers_",)),
    ModelSpec("mlp_classifier", "MLPClassifier", "classification",
              "(epsilon, delta)-DP: DP-SGD, PLD accounting (each unit's summed gradient "
              "clipped)",
              {"hidden_layer_sizes": Option("sizes", "hidden layer widths", low=1, high=512,
                                            length=4),
               "epochs": Option("int", "passes", low=1, high=1000),
               "sample_rate": Option("float", "Poisson rate of a step (required); epochs x "
                                              f"round(1/sample_rate) <= {_MAX_STEPS:,} steps",
                                     low=0.0, high=1.0),
               "batch_size": Option("batch", "the divisor: 'auto' (a noisy row count) or a "
                                             "fixed int", low=1, high=10_000_000),
               "max_grad_norm": Option("float", "clip"),
               "learning_rate": Option("float", "step size", low=0.0),
               "momentum": Option("float", "SGD momentum", low=0.0),
               "activation": Option("choice", "between layers", choices=("tanh", "relu")),
               "averaging": Option("float", "average the last share of steps", low=0.0,
                                   high=1.0),
               "schedule": Option("choice", "learning rate", choices=("constant", "cosine")),
               "count_fraction": Option("float", "share of epsilon for the noisy row count "
                                                 "of batch_size='auto'", low=0.0, high=1.0)},
              ("coefs_", "intercepts_"), torch=True),
)}


def torch_available() -> bool:
    """Whether PyTorch imports here (DP-SGD models need it)."""
    try:
        importlib.import_module("torch")
    except ImportError:
        return False
    return True


def _number(name: str, value: Any, opt: Option, integer: bool) -> float | int:
    ok = (isinstance(value, int) if integer else isinstance(value, (int, float)))
    if not ok or isinstance(value, bool) or not math.isfinite(value):
        raise OptionError(f"option {name!r} must be {'an integer' if integer else 'a number'}"
                          f" (got {value!r})")
    if (opt.low is not None and value < opt.low) or (opt.high is not None and value > opt.high):
        lo = "-inf" if opt.low is None else f"{opt.low:g}"
        hi = "inf" if opt.high is None else f"{opt.high:g}"
        raise OptionError(f"option {name!r} must lie in [{lo}, {hi}] (got {value!r})")
    return value


def _pair(name: str, value: Any) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise OptionError(f"option {name!r} must be a pair [low, high] (got {value!r})")
    lo, hi = (_number(name, v, Option("float", ""), False) for v in value)
    return float(lo), float(hi)


def _value(name: str, value: Any, opt: Option) -> Any:
    """``value`` as the estimator takes it, or :class:`OptionError` naming the option."""
    if opt.kind in ("float", "int"):
        return _number(name, value, opt, opt.kind == "int")
    if opt.kind == "bool":
        if not isinstance(value, bool):
            raise OptionError(f"option {name!r} must be true or false (got {value!r})")
        return value
    if opt.kind == "choice":
        if value not in opt.choices:
            raise OptionError(f"option {name!r} must be one of {list(opt.choices)} "
                              f"(got {value!r})")
        return value
    if opt.kind == "batch":
        return "auto" if value == "auto" else _number(name, value, opt, True)
    if opt.kind == "pair":
        return _pair(name, value)
    if opt.kind == "sizes":
        if not isinstance(value, list) or not 1 <= len(value) <= opt.length:
            raise OptionError(f"option {name!r} must be a list of 1 to {opt.length} integers "
                              f"(got {value!r})")
        return tuple(int(_number(name, v, opt, True)) for v in value)
    assert opt.kind == "bounds", opt.kind
    if isinstance(value, list) and value and isinstance(value[0], list):
        if len(value) > opt.length:
            raise OptionError(f"option {name!r} has more than {opt.length:,} pairs")
        return [_pair(name, v) for v in value]
    return _pair(name, value)


def build(name: str, options: dict[str, Any] | None = None) -> Any:
    """A fresh dpkit estimator for catalog model ``name`` with ``options`` (JSON values),
    or :class:`OptionError` (an unknown name or option, a value of the wrong kind or over a
    work limit). Values the estimator refuses are refused by its ``privacy_event``."""
    spec = CATALOG.get(name) if isinstance(name, str) else None
    if spec is None:
        raise OptionError(f"model must be one of {sorted(CATALOG)} (got {name!r})")
    if spec.torch and not torch_available():
        raise ModelUnavailable(f"{name} trains with DP-SGD and needs PyTorch, which this "
                               f"server does not have: its owner can install the extra (pip "
                               f"install 'dpkit[torch]'); the other models need nothing more")
    kwargs: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if key not in spec.options:
            raise OptionError(f"{name} has no option {key!r} here; its options: "
                              f"{sorted(spec.options)} (epsilon and delta are the request's "
                              f"own fields; classes, label bounds and the row bound come from "
                              f"the table's declarations)")
        if value is not None:
            kwargs[key] = _value(key, value, spec.options[key])
    if spec.torch:
        rate = kwargs.get("sample_rate")
        if rate is not None and rate > 0:  # None / 0: privacy_event says what to give
            # 1/rate overflows for a subnormal rate: such a rate is over the limit anyway
            per_epoch = 1.0 / rate if rate > 1.0 / _MAX_STEPS / 2 else float(_MAX_STEPS + 1)
            steps = int(kwargs.get("epochs", 30)) * max(1, round(per_epoch))
            if steps > _MAX_STEPS:
                raise OptionError(f"epochs x round(1/sample_rate) = {steps:,} steps; at most "
                                  f"{_MAX_STEPS:,} per fit here: raise sample_rate or lower "
                                  f"epochs")
    cls = getattr(importlib.import_module("dpkit.learn"), spec.estimator)
    return cls(**kwargs)


def released(name: str, model: Any) -> dict[str, Any]:
    """The fitted parameters catalog model ``name`` gives back, as JSON-ready lists (a
    network's layers as a list of matrices): noisy, post-processing of the charged release."""
    out: dict[str, Any] = {}
    for attr in CATALOG[name].released:
        value = getattr(model, attr)
        if isinstance(value, list):
            out[attr.rstrip("_")] = [np.asarray(v, dtype=np.float64).tolist() for v in value]
        else:
            out[attr.rstrip("_")] = np.asarray(value, dtype=np.float64).tolist()
    return out
