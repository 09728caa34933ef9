"""Noise-free accuracy figures of a (workload, strategy) pair and the strategy choice, cached.

The figures are ``tr(G Σ)``, ``diag(W Σ Wᵀ)`` and ``max_k |(W R)_jk|`` with ``Σ = (MᵀM)⁻¹``
and ``R = Σ Mᵀ``: functions of the public workload and strategy alone, never of data. They
decide which strategy answers (:func:`dpkit.release.mechanism.resolve_strategy` compares the
optimised strategy with the identity) and give the intervals; at 1024 cells they cost a few
``N³`` products, most of a CLI query's planning (one process per query: the in-memory cache
is empty each time). So they are kept in memory (least recently used, :data:`SLOTS`) and,
with a cache folder (a project's ``strategies/``), on disk beside the optimised strategies,
keyed by the SHA-256 of the workload's and the strategy's keys (the strategy's: of its
integer matrix). The choice itself is kept in memory (:data:`CHOICE_SLOTS`), keyed by exactly
what it depends on: the workload, the noise kind, the privacy parameters, the contribution
bound and the cache folder.

**Privacy.** Nothing here reads data, and the noise is always calibrated to the exact
sensitivities of the strategy that answers (computed from its matrix when it is built), so
an edited cache file can mislead an interval or the choice between two valid strategies,
never the guarantee. A file whose stored keys do not match its name's is ignored.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.noise import token_hex
from dpkit.release.strategies import MAX_COVARIANCE_DOMAIN, Strategy
from dpkit.release.workloads import Workload

__all__ = ["CHOICE_SLOTS", "SLOTS", "Accuracy", "accuracy", "clear", "coef_max",
           "remember_choice", "remembered_choice"]

SLOTS = 16  # (workload, strategy) pairs kept in memory: each holds O(N + m) floats
CHOICE_SLOTS = 256  # strategy choices kept in memory: each a reference to a cached strategy
_VERSION = "1"

_MEMORY: OrderedDict[tuple[str, str], Accuracy] = OrderedDict()
_CHOICES: OrderedDict[tuple[Any, ...], Strategy] = OrderedDict()
_LOCK = threading.Lock()  # the service plans on several threads; computing is outside it


@dataclass
class Accuracy:
    """Noise-free accuracy facts of (workload, strategy), per unit noise variance per row."""

    trace: float  # tr(G Σ)
    sq_norms: np.ndarray  # diag(W Σ Wᵀ)
    coef_max: np.ndarray | None = None  # max_k |(W R)_jk| (Laplace intervals); None: too large
    coef_done: bool = False
    path: Path | None = None  # the file on disk, when there is a cache folder


def clear() -> None:
    """Forget the in-memory figures and choices (files on disk are left alone)."""
    with _LOCK:
        _MEMORY.clear()
        _CHOICES.clear()


def _file(folder: Any, workload: Workload, strategy: Strategy) -> Path | None:
    if folder is None:
        return None
    h = hashlib.sha256(f"{_VERSION}|{workload.key}|{strategy.key}".encode()).hexdigest()
    return Path(folder) / f"figures-{h[:32]}.npz"


def _load(path: Path, workload: Workload, strategy: Strategy) -> Accuracy | None:
    try:
        with np.load(path) as data:
            if (str(data["workload"]) != workload.key or str(data["strategy"]) != strategy.key
                    or data["sq_norms"].shape != (workload.num_queries,)):
                return None
            done = bool(data["coef_done"])
            coef = data["coef_max"] if done and data["coef_max"].size else None
            return Accuracy(float(data["trace"]), data["sq_norms"], coef, done, path)
    except (OSError, KeyError, ValueError):
        return None  # unreadable or from another version: computed again


def _save(acc: Accuracy, workload: Workload, strategy: Strategy) -> None:
    if acc.path is None:
        return
    try:
        acc.path.parent.mkdir(parents=True, exist_ok=True)
        # a name of its own: two processes may write the same figures at once
        tmp = acc.path.with_name(f"{acc.path.stem}.{token_hex(16)}.tmp.npz")
        np.savez(tmp, trace=acc.trace, sq_norms=acc.sq_norms,
                 coef_max=acc.coef_max if acc.coef_max is not None else np.zeros(0),
                 coef_done=acc.coef_done, workload=workload.key, strategy=strategy.key)
        os.replace(tmp, acc.path)
    except OSError:
        pass  # a read-only project: the figures are simply computed next time


def accuracy(workload: Workload, strategy: Strategy, folder: Any = None) -> Accuracy | None:
    """The figures of ``(workload, strategy)`` (``None`` above ``MAX_COVARIANCE_DOMAIN``
    cells): from memory, from ``folder``, or computed (and kept in both)."""
    if strategy.domain_size > MAX_COVARIANCE_DOMAIN:
        return None
    key = (workload.key, strategy.key)
    with _LOCK:
        hit = _MEMORY.get(key)
        if hit is not None:
            _MEMORY.move_to_end(key)
    if hit is not None:
        if hit.path is None and folder is not None:  # first seen without a folder
            hit.path = _file(folder, workload, strategy)
            _save(hit, workload, strategy)
        return hit
    path = _file(folder, workload, strategy)
    acc = _load(path, workload, strategy) if path is not None and path.exists() else None
    if acc is None:
        sigma = strategy.covariance()
        trace = float(np.sum(workload.gram() * sigma))
        sq = workload.query_variances(sigma)
        acc = Accuracy(trace=trace, sq_norms=np.maximum(sq, 0.0), path=path)
        _save(acc, workload, strategy)
    with _LOCK:
        _MEMORY[key] = acc
        while len(_MEMORY) > SLOTS:
            _MEMORY.popitem(last=False)
    return acc


def coef_max(acc: Accuracy, workload: Workload, strategy: Strategy) -> np.ndarray | None:
    """``max_k |(W R)_jk|`` (tightens the Laplace intervals); ``None`` when too large."""
    if not acc.coef_done:
        if workload.num_queries * strategy.rows <= 2e7:
            acc.coef_max = workload.query_coefficient_max(strategy.reconstruction_matrix())
        acc.coef_done = True
        _save(acc, workload, strategy)
    return acc.coef_max


def remembered_choice(key: tuple[Any, ...]) -> Strategy | None:
    """The strategy chosen before for ``key`` (see :func:`remember_choice`), or None."""
    with _LOCK:
        hit = _CHOICES.get(key)
        if hit is not None:
            _CHOICES.move_to_end(key)
        return hit


def remember_choice(key: tuple[Any, ...], strategy: Strategy) -> None:
    """Keep the choice for ``key``: public inputs only (workload key, noise kind, privacy
    parameters, contribution bound, cache folder)."""
    with _LOCK:
        _CHOICES[key] = strategy
        while len(_CHOICES) > CHOICE_SLOTS:
            _CHOICES.popitem(last=False)
