"""The reusable-holdout experiment of Dwork et al. (Science 2015, Fig. 2), runnable.

``n`` training rows, ``n`` holdout rows and ``n`` fresh rows of ``d`` features with labels that
carry no signal (or a given data set). The analyst (1) computes each feature's correlation with
the label on the training set, (2) keeps the features whose correlation is at least
``1/sqrt(n)`` in size and has the same sign on the holdout, (3) builds the classifier
``sign(sum_j s_j x_j)`` over the ``k`` strongest of them (``s_j``: the training sign), and (4)
reads its accuracy on the holdout. With the standard holdout (exact answers) the selection
overfits the holdout: its accuracy climbs while fresh data stay at chance. With
:class:`~dpkit.adaptive.Thresholdout` answering steps (2) and (4), it does not.

Features are ±1 (Rademacher) so that each query ``(x_j y + 1) / 2`` lies in ``[0, 1]`` exactly;
the data are drawn from :mod:`dpkit.noise` (a seeded source: an experiment, not a release).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpkit import noise as _noise
from dpkit.adaptive.thresholdout import Thresholdout

__all__ = ["HoldoutRun", "noise_data", "run_selection"]


@dataclass
class HoldoutRun:
    """Accuracies of the selected classifier for each ``k`` (number of features kept)."""

    ks: list[int]
    train: list[float] = field(default_factory=list)
    holdout: list[float] = field(default_factory=list)  # as the analyst reads it
    fresh: list[float] = field(default_factory=list)
    epsilon: float | None = None  # the holdout's epsilon (Thresholdout only)
    over_threshold: int = 0


def noise_data(n: int, d: int, source: _noise.Source) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of ``d`` ±1 features (int8) and ±1 labels, independent: no signal."""
    bits = _noise.fair_bits((n, d + 1), source=source)
    rows = (2 * bits.astype(np.int8) - 1).astype(np.int8)
    return rows[:, :d], rows[:, d]


def _correlations(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (y.astype(np.float32) @ x.astype(np.float32)) / len(y)


def _accuracy(x: np.ndarray, y: np.ndarray, cols: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """Per-row correctness (0/1) of ``sign(x[:, cols] @ signs)`` (ties count as +1)."""
    if len(cols) == 0:
        return (y > 0).astype(np.float64)
    score = x[:, cols].astype(np.float32) @ signs.astype(np.float32)
    return ((score >= 0) == (y > 0)).astype(np.float64)


def run_selection(train: tuple[np.ndarray, np.ndarray], holdout: tuple[np.ndarray, np.ndarray],
                  fresh: tuple[np.ndarray, np.ndarray], ks: list[int], *,
                  reusable: Thresholdout | None = None) -> HoldoutRun:
    """One run of the analyst's procedure; ``reusable``: answer the holdout's questions through
    this Thresholdout (built over the same train/holdout rows, with rows laid out as
    ``[x..., y]``), else exactly."""
    (xt, yt), (xh, yh), (xf, yf) = train, holdout, fresh
    n = len(yt)
    ct = _correlations(xt, yt)
    cand = np.flatnonzero(np.abs(ct) >= 1.0 / np.sqrt(n))
    keep: list[int] = []
    if reusable is None:
        ch = _correlations(xh, yh)
        keep = [int(j) for j in cand if np.sign(ch[j]) == np.sign(ct[j])
                and abs(ch[j]) >= 1.0 / np.sqrt(n)]
    else:
        for j in cand.tolist():
            a = reusable.query(_feature_query(j)) * 2.0 - 1.0  # back to a correlation
            if np.sign(a) == np.sign(ct[j]) and abs(a) >= 1.0 / np.sqrt(n):
                keep.append(j)
    order = sorted(keep, key=lambda j: -abs(float(ct[j])))
    run = HoldoutRun(ks=list(ks))
    for k in ks:
        cols = np.asarray(order[:k], dtype=np.int64)
        signs = np.sign(ct[cols]).astype(np.int8) if len(cols) else np.zeros(0, np.int8)
        run.train.append(float(_accuracy(xt, yt, cols, signs).mean()))
        run.fresh.append(float(_accuracy(xf, yf, cols, signs).mean()))
        if reusable is None:
            run.holdout.append(float(_accuracy(xh, yh, cols, signs).mean()))
        else:
            run.holdout.append(reusable.query(_classifier_query(cols, signs)))
    if reusable is not None:
        run.epsilon, run.over_threshold = reusable.epsilon, reusable.answered
    return run


def _feature_query(j: int) -> Any:
    def f(rows: np.ndarray) -> np.ndarray:
        return (rows[:, j].astype(np.float64) * rows[:, -1] + 1.0) / 2.0
    return f


def _classifier_query(cols: np.ndarray, signs: np.ndarray) -> Any:
    def f(rows: np.ndarray) -> np.ndarray:
        return _accuracy(rows[:, :-1], rows[:, -1], cols, signs)
    return f
