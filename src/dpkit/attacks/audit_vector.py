"""Auditing beyond scalar outputs: vector-valued and black-box mechanisms.

:func:`dpkit.attacks.audit.empirical_epsilon` certifies a lower bound on ε from threshold or
set tests on a *scalar* (or categorical) output. A vector output has too many candidate sets to
try them all, but any fixed function of the output is post-processing: if ``M`` is (ε, δ)-DP so
is ``g(M)`` for every ``g``, hence a lower bound certified on ``g(M(D))`` is a lower bound for
``M``. :func:`empirical_epsilon_vector` therefore

1. splits the samples (first ``selection_fraction`` of each, in draw order) into a selection
   part and a certification part;
2. on the selection part, scores candidate projections ``g``: every coordinate (the best
   coordinate test), the difference of means ``mu1 - mu0``, the Fisher/LDA direction
   ``Sigma^-1 (mu1 - mu0)``, the coordinate of the maximum (for selection-like outputs) and any
   user-given projections; the score is the (certified) bound each one reaches on the
   selection data;
3. certifies the best ``g`` on the held-out part with ``empirical_epsilon``. The projection was
   chosen on independent data, so the Clopper-Pearson guarantee holds unchanged.

:func:`audit_black_box` runs any callable (``mechanism(dataset) -> output``, e.g. a function that
returns a :class:`~dpkit.mechanisms.release.Release`) on two neighbouring inputs, one output per
call, and dispatches to the scalar, categorical or vector audit.

>>> import numpy as np
>>> import dpkit as dp
>>> from dpkit.attacks.audit_vector import empirical_epsilon_vector
>>> src = dp.noise.seeded(11)
>>> z0 = dp.noise.discrete_laplace(1.0, (20000, 3), source=src)   # M(D0) = 0 + noise
>>> z1 = dp.noise.discrete_laplace(1.0, (20000, 3), source=src)
>>> z1[:, 1] += 1                                                  # D1 moves coordinate 1
>>> r = empirical_epsilon_vector(z0, z1, confidence=0.95)
>>> r.details["projection"], 0.5 < r.epsilon_lower <= 1.0
('coordinate 1', True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dpkit.attacks.audit import AuditResult, empirical_epsilon

__all__ = ["audit_black_box", "empirical_epsilon_vector", "unwrap_output"]

Projection = Callable[[np.ndarray], np.ndarray]


def _coordinate(j: int) -> Projection:
    def g(x: np.ndarray) -> np.ndarray:
        return x[:, j]

    return g


def _direction(v: np.ndarray) -> Projection:
    w = np.array(v, dtype=np.float64)

    def g(x: np.ndarray) -> np.ndarray:
        return x @ w

    return g


def _argmax(x: np.ndarray) -> np.ndarray:
    return np.argmax(x, axis=1).astype(np.float64)


def _matrix(sample: Any, name: str) -> np.ndarray:
    a = np.asarray(sample, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] < 20:
        raise ValueError(f"{name} must be (trials, dimension) with trials >= 20 (got {a.shape})")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinity")
    return a


def _candidates(
    s0: np.ndarray, s1: np.ndarray, max_coordinates: int, extra: Sequence[Any]
) -> list[tuple[str, Projection]]:
    d = s0.shape[1]
    mu0, mu1 = s0.mean(axis=0), s1.mean(axis=0)
    diff = mu1 - mu0
    pooled = np.concatenate([s0 - mu0, s1 - mu1])
    sd = pooled.std(axis=0) + 1e-12
    out: list[tuple[str, Projection]] = []
    coords = np.argsort(-np.abs(diff) / sd, kind="stable")[:max_coordinates]
    for j in coords.tolist():
        out.append((f"coordinate {j}", _coordinate(j)))
    if d > 1:
        if np.any(diff != 0):
            out.append(("mean difference", _direction(diff)))
        cov = np.cov(pooled, rowvar=False) + 1e-9 * np.eye(d)
        lda = np.linalg.solve(cov, diff)
        if np.all(np.isfinite(lda)) and np.any(lda != 0):
            out.append(("LDA direction", _direction(lda)))
        out.append(("argmax coordinate", _argmax))
    for i, g in enumerate(extra):
        if callable(g):
            out.append((getattr(g, "__name__", f"projection {i}"), g))
        else:
            v = np.asarray(g, dtype=np.float64).ravel()
            if v.shape != (d,):
                raise ValueError(f"projection {i} must have {d} entries (got {v.shape})")
            out.append((f"projection {i}", _direction(v)))
    return out


def empirical_epsilon_vector(
    sample0: Any,
    sample1: Any,
    *,
    delta: float = 0.0,
    confidence: float = 0.95,
    selection_fraction: float = 0.2,
    projections: Sequence[Any] = (),
    max_coordinates: int = 32,
    **options: Any,
) -> AuditResult:
    """Certified lower bound on ε for a mechanism with vector outputs (one row per run).

    ``sample0``, ``sample1``: ``(trials, d)`` arrays of outputs on neighbouring ``D0``, ``D1``
    in draw order. ``projections``: extra candidate functions ``g(X) -> (trials,)`` or weight
    vectors. ``options`` go to :func:`~dpkit.attacks.audit.empirical_epsilon` for the final
    certification. Same guarantee as ``empirical_epsilon``: with probability at least
    ``confidence`` the mechanism is not (ε', δ)-DP for any ``ε' < epsilon_lower``.
    ``details["projection"]`` names the test used.
    """
    a = _matrix(sample0, "sample0")
    b = _matrix(sample1, "sample1")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"outputs differ in dimension ({a.shape[1]} vs {b.shape[1]})")
    if not 0.0 < selection_fraction < 1.0:
        raise ValueError(f"selection_fraction must lie in (0, 1) (got {selection_fraction!r})")
    k0 = max(10, int(a.shape[0] * selection_fraction))
    k1 = max(10, int(b.shape[0] * selection_fraction))
    if a.shape[0] - k0 < 10 or b.shape[0] - k1 < 10:
        raise ValueError("too few trials to split into selection and certification parts")
    sel0, sel1, cert0, cert1 = a[:k0], b[:k1], a[k0:], b[k1:]
    cands = _candidates(sel0, sel1, max(1, int(max_coordinates)), projections)
    best_name, best_g, best_score = cands[0][0], cands[0][1], -math.inf
    for name, g in cands:
        x0, x1 = np.asarray(g(sel0), dtype=np.float64), np.asarray(g(sel1), dtype=np.float64)
        if np.ptp(np.concatenate([x0, x1])) == 0:
            continue
        r = empirical_epsilon(x0, x1, delta=delta, confidence=confidence,
                              selection_fraction=0.5)
        score = r.epsilon_lower if r.epsilon_lower > 0 else -1.0 / (1.0 + abs(r.epsilon_estimate))
        if score > best_score:
            best_name, best_g, best_score = name, g, score
    res = empirical_epsilon(
        np.asarray(best_g(cert0), dtype=np.float64),
        np.asarray(best_g(cert1), dtype=np.float64),
        delta=delta,
        confidence=confidence,
        **options,
    )
    details = dict(res.details)
    details.update(projection=best_name, candidates_projections=len(cands),
                   projection_selection_sizes=(k0, k1))
    return dataclasses.replace(res, best_test=f"{best_name}: {res.best_test}", details=details)


def unwrap_output(out: Any) -> Any:
    """The released value of a mechanism's output (a ``Release``'s ``.value``, else itself)."""
    return out.value if hasattr(out, "value") and hasattr(out, "event") else out


def audit_black_box(
    mechanism: Callable[[Any], Any],
    d0: Any,
    d1: Any,
    *,
    trials: int,
    delta: float = 0.0,
    confidence: float = 0.95,
    **options: Any,
) -> AuditResult:
    """Certified lower bound on ε of an opaque ``mechanism(dataset) -> output``.

    Calls ``mechanism(d0)`` and ``mechanism(d1)`` ``trials`` times each (fresh randomness per
    call is the mechanism's business). Outputs may be ``Release`` objects (their ``.value`` is
    audited), numbers, ``None``/labels (categorical audit; ``None`` becomes a category) or
    fixed-length numeric vectors (:func:`empirical_epsilon_vector`). ``d0, d1`` should be the
    neighbouring pair the mechanism is worst on: the bound is only as strong as the pair.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 20:
        raise ValueError(f"trials must be an int >= 20 (got {trials!r})")
    outs = []
    for d in (d0, d1):
        outs.append([unwrap_output(mechanism(d)) for _ in range(trials)])
    first = outs[0][0]
    if isinstance(first, (list, tuple, np.ndarray)) and np.ndim(first) >= 1:
        try:
            x0 = np.asarray(outs[0], dtype=np.float64)
            x1 = np.asarray(outs[1], dtype=np.float64)
            vectors = x0.ndim == 2 and x0.shape[1:] == x1.shape[1:]
        except (TypeError, ValueError):  # ragged or non-numeric: audit as labels below
            vectors = False
        if vectors:
            if x0.shape[1] == 1:
                return empirical_epsilon(x0[:, 0], x1[:, 0], delta=delta,
                                         confidence=confidence, **options)
            return empirical_epsilon_vector(x0, x1, delta=delta, confidence=confidence,
                                            **options)
    numeric = all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
        for v in outs[0] + outs[1]
    )
    if numeric:
        return empirical_epsilon(np.asarray(outs[0], dtype=np.float64),
                                 np.asarray(outs[1], dtype=np.float64),
                                 delta=delta, confidence=confidence, **options)
    labels = []
    for side in outs:
        arr = np.empty(len(side), dtype=object)
        arr[:] = [repr(v) if not isinstance(v, (str, int, bool)) else v for v in side]
        labels.append(arr)
    return empirical_epsilon(labels[0], labels[1], delta=delta, confidence=confidence, **options)
