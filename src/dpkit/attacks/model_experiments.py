"""The experiments of ``docs/attacks.md`` on models: one function per figure, shared by the CLI
(``dpkit attack inversion`` / ``membership-model``) and ``benchmarks/model_attacks_bench.py``.

Each trains a non-private model and dpkit's private estimator of the same shape at several ε on
the same rows, attacks them all, and returns the numbers (and what the pictures need). The
defaults are the documented configuration; the tests run them on small slices.

- :func:`inversion_study`: MNIST-5k, :class:`~dpkit.attacks.model_targets.PlainMLP` vs
  :class:`dpkit.learn.MLPClassifier` (DP-SGD), white- and black-box inversion of every digit.
- :func:`lira_study`: LiRA on MNIST-5k (MLP) or Adult (logistic regression), online, offline
  and threshold, with the one-run audit and the DP bound of each model kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.attacks import inversion as inv
from dpkit.attacks.lira import LiraReport, lira_report, train_shadows
from dpkit.attacks.model_targets import PlainLogistic, PlainMLP, load_mnist_5k

__all__ = ["ADULT_DELTA", "MNIST_DELTA", "InversionStudy", "adult_estimator", "inversion_study",
           "lira_study", "mnist_estimator"]

#: δ of the private MNIST models (below 1 / training rows).
MNIST_DELTA = 1e-5
#: δ of the private Adult models.
ADULT_DELTA = 1e-6


def _check_epsilons(epsilons: Sequence[float]) -> tuple[float, ...]:
    eps = tuple(float(e) for e in epsilons)
    if any(not (math.isfinite(e) and e > 0) for e in eps):
        raise ValueError(f"epsilons must be finite numbers > 0 (got {epsilons!r})")
    return eps


def mnist_estimator(epsilon: float | None, *, hidden: int = 64, dp_epochs: int = 15,
                    batch_size: int = 50) -> Any:
    """The MNIST target: :class:`PlainMLP` (``epsilon=None``, 60 epochs: fits its training set)
    or :class:`dpkit.learn.MLPClassifier` at (ε, 1e-5) with the same hidden layer (15 epochs,
    learning rate 0.02, momentum 0.9: the best of a few settings tried at ε = 1 and 3 on
    1,000 rows; larger steps let the noise dominate)."""
    from dpkit.learn import MLPClassifier

    classes = list(range(10))
    if epsilon is None:
        return PlainMLP((hidden,), epochs=60, batch_size=batch_size, classes=classes)
    return MLPClassifier((hidden,), epsilon=float(epsilon), delta=MNIST_DELTA, epochs=dp_epochs,
                         batch_size=batch_size, learning_rate=0.02, classes=classes)


def adult_estimator(epsilon: float | None) -> Any:
    """The Adult target: :class:`PlainLogistic` (l2 = 1e-4) or
    :class:`dpkit.learn.LogisticRegression` at (ε, 1e-6), rows clipped to the public
    ``FEATURE_NORM``."""
    from dpkit.learn import LogisticRegression
    from dpkit.learn.adult import FEATURE_NORM

    if epsilon is None:
        return PlainLogistic(l2=1e-4)
    return LogisticRegression(epsilon=float(epsilon), delta=ADULT_DELTA,
                              feature_norm=FEATURE_NORM, classes=[0, 1])


# --------------------------------------------------------------------------- inversion
@dataclass
class InversionStudy:
    """Rows of the summary table, and the reconstructions per (model, method) for the grid."""

    rows: list[dict[str, Any]]
    images: dict[str, np.ndarray] = field(default_factory=dict)
    class_means: np.ndarray | None = None
    nearest: dict[str, np.ndarray] = field(default_factory=dict)


def inversion_study(
    *,
    epsilons: Sequence[float] = (1.0, 3.0, 8.0),
    methods: Sequence[str] = ("white-box", "black-box"),
    train_rows: int = 4000,
    white_steps: int = 300,
    black_steps: int = 300,
    samples: int = 20,
    tv: float = 0.02,
    seed: int | None = None,
    data: tuple[np.ndarray, ...] | None = None,
    log: Callable[[str], None] | None = None,
) -> InversionStudy:
    """Invert every digit of a non-private MLP and of DP-SGD MLPs at ``epsilons``, all trained
    on the first ``train_rows`` rows of MNIST-5k's training split; compare with those rows
    and with the 1,000 held-out rows (a reconstruction closer to training rows than to
    held-out rows of its digit shows memorisation). Few ``train_rows`` (e.g. 100: ten per
    digit) is the regime of Fredrikson et al.'s faces, where a class is a handful of examples.

    ``data``: ``(X_train, y_train, X_test, y_test)`` instead of reading MNIST-5k.
    ``seed``: reproducible INSECURE noise (training and the black-box perturbations).
    """
    eps = _check_epsilons(epsilons)
    for m in methods:
        if m not in ("white-box", "black-box"):
            raise ValueError(f"methods must be 'white-box' and/or 'black-box' (got {m!r})")
    Xtr, ytr, Xte, yte = data if data is not None else load_mnist_5k()
    X, y = Xtr[:train_rows], ytr[:train_rows]
    src = None if seed is None else noise.seeded(int(seed) + 7)
    study = InversionStudy(rows=[], class_means=np.stack([X[y == c].mean(0) for c in range(10)]))
    for e in (None, *eps):
        name = "non-private" if e is None else f"DP-SGD ε={e:g}"
        est = mnist_estimator(e, batch_size=100)
        if seed is not None:
            est.set_params(random_state=int(seed))
        model = est.fit(X, y)
        acc = model.score(Xte, yte)
        for method in methods:
            if method == "white-box":
                r = inv.invert_white_box(model, np.arange(10), steps=white_steps, tv=tv)
            else:
                r = inv.invert_black_box(model, np.arange(10), steps=black_steps,
                                         samples=samples, tv=tv, source=src)
            s = inv.similarity(r, X, y, X_holdout=Xte, y_holdout=yte)
            key = f"{name} / {method}"
            study.images[key] = r.images
            study.nearest[key] = X[s.nearest_index]
            study.rows.append({"model": name, "method": method, "epsilon": e or math.inf,
                               "test_accuracy": acc, "confidence": float(r.confidence.mean()),
                               "queries": r.queries, **s.summary()})
            if log is not None:
                log(f"{key}: accuracy {acc:.3f}, {s.summary()}")
    return study


# --------------------------------------------------------------------------- LiRA
def _lira_data(dataset: str, population: int) -> tuple[np.ndarray, ...]:
    if dataset == "mnist":
        Xtr, ytr, Xte, yte = load_mnist_5k()
    elif dataset == "adult":
        from dpkit.learn.adult import load_adult

        Xtr, ytr, Xte, yte = load_adult()
    else:
        raise ValueError(f"dataset must be 'mnist' or 'adult' (got {dataset!r})")
    if not 8 <= population <= len(Xtr):
        raise ValueError(f"population must lie in 8..{len(Xtr)} for {dataset} "
                         f"(got {population})")
    return Xtr[:population], ytr[:population], Xte[:1000], yte[:1000]


def lira_study(
    dataset: str = "mnist",
    *,
    epsilons: Sequence[float] = (1.0, 3.0, 8.0),
    population: int | None = None,
    shadow_models: int | None = None,
    seed: int | None = None,
    data: tuple[np.ndarray, ...] | None = None,
    estimator: Callable[[float | None], Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> list[LiraReport]:
    """LiRA against the non-private model and dpkit's private estimator at each ε: MNIST-5k
    (MLP on DP-SGD) or Adult (logistic regression), ``population`` rows of the training split,
    ``shadow_models`` models per kind (defaults: MNIST 2,000 rows and 16 models, Adult 1,000
    and 64: the full figure in under 10 minutes on 2 shared cores). ``data`` / ``estimator``
    replace the defaults (tests)."""
    eps = _check_epsilons(epsilons)
    if dataset not in ("mnist", "adult"):
        raise ValueError(f"dataset must be 'mnist' or 'adult' (got {dataset!r})")
    mnist = dataset == "mnist"
    population = population or (2000 if mnist else 1000)
    shadow_models = shadow_models or (16 if mnist else 64)
    X, y, Xte, yte = data if data is not None else _lira_data(dataset, population)
    make = estimator or (mnist_estimator if dataset == "mnist" else adult_estimator)
    classes = list(range(10)) if dataset == "mnist" else [0, 1]
    reports = []
    for i, e in enumerate((None, *eps)):
        label = "non-private" if e is None else f"ε={e:g}"
        src = None if seed is None else noise.seeded(int(seed) + i)
        run = train_shadows(make(e), X, y, shadow_models=shadow_models, classes=classes,
                            X_test=Xte, y_test=yte, source=src, label=label,
                            seed=None if seed is None else int(seed) + 1000 * i)
        rep = lira_report(run)
        reports.append(rep)
        if log is not None:
            # a progress line a person reads (the whole summary dict is the table's)
            log(f"{dataset} {label}: {shadow_models} models trained, test accuracy "
                f"{rep.run.test_accuracy:.3f}, online LiRA AUC {rep.rocs['online'].auc:.3f}")
    return reports
