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

__all__ = ["HoldoutRun", "noise_data", "noise_rows", "run_selection"]


@dataclass
class HoldoutRun:
    """Accuracies of the selected classifier for each ``k`` (number of features kept)."""

    ks: list[int]
    train: list[float] = field(default_factory=list)
    holdout: list[float] = field(default_factory=list)  # as the analyst reads it
    fresh: list[float] = field(default_factory=list)
    epsilon: float | None = None  # the holdout's epsilon (Thresholdout only)
    over_threshold: int = 0


def noise_rows(n: int, d: int, source: _noise.Source) -> np.ndarray:
    """``n`` rows of ``d`` ±1 features and a ±1 label last (int8, column-major: a feature is
    one contiguous column), independent: no signal."""
    bits = _noise.fair_bits((d + 1, n), source=source).view(np.int8)
    return (bits * np.int8(2) - np.int8(1)).T


def noise_data(n: int, d: int, source: _noise.Source) -> tuple[np.ndarray, np.ndarray]:
    """:func:`noise_rows` split into features and labels (views)."""
    rows = noise_rows(n, d, source)
    return rows[:, :d], rows[:, d]


def _correlations(x: np.ndarray, y: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Each feature's mean of ``x_j y``, a block of columns at a time (one float copy of the
    whole matrix would be 4 bytes per cell)."""
    yf = y.astype(np.float32)
    out = np.empty(x.shape[1], dtype=np.float32)
    for j in range(0, x.shape[1], chunk):
        out[j:j + chunk] = yf @ x[:, j:j + chunk].astype(np.float32)
    return out / len(y)


def _accuracy(x: np.ndarray, y: np.ndarray, cols: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """Per-row correctness (0/1) of ``sign(x[:, cols] @ signs)`` (ties count as +1)."""
    if len(cols) == 0:
        return (y > 0).astype(np.float64)
    score = x[:, cols].astype(np.float32) @ signs.astype(np.float32)
    return ((score >= 0) == (y > 0)).astype(np.float64)


def _accuracies(x: np.ndarray, y: np.ndarray, top: np.ndarray, signs: np.ndarray,
                ks: list[int]) -> list[float]:
    """Accuracy of the classifier over the first ``k`` of ``top`` for every ``k`` at once (the
    running sum of the signed features gives every classifier's score)."""
    if len(top) == 0:
        return [float((y > 0).mean()) for _ in ks]
    running = np.cumsum(x[:, top] * signs, axis=1, dtype=np.int16)
    out = []
    for k in ks:  # fewer features kept than k: the classifier over all of them
        kk = min(k, running.shape[1])
        score = running[:, kk - 1] if kk > 0 else np.zeros(len(y), np.int16)
        out.append(float(((score >= 0) == (y > 0)).mean()))
    return out


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
    top = np.asarray(order[:max(ks, default=0)], dtype=np.int64)
    signs = np.sign(ct[top]).astype(np.int8)
    run.train = _accuracies(xt, yt, top, signs, ks)
    run.fresh = _accuracies(xf, yf, top, signs, ks)
    if reusable is None:
        run.holdout = _accuracies(xh, yh, top, signs, ks)
    else:
        run.holdout = [reusable.query(_classifier_query(top[:k], signs[:k])) for k in ks]
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
