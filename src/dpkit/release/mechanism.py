"""The factorization mechanism: answer a workload from a noisy strategy, with exact accuracy.

``answer_workload(x, W, A, epsilon=… | rho=…)`` measures ``y = M x + z`` (``M`` the integer
strategy, ``z`` exact discrete Laplace / Gaussian noise calibrated to ``M``'s sensitivity),
reconstructs ``x̂ = argmin ‖M x − y‖₂`` and returns ``W x̂`` as a :class:`~dpkit.Release`.
Everything after the noise is post-processing, so the privacy guarantee is that of the noisy
measurement alone (see :mod:`dpkit.release.noise_plan`).

The expected error is exact (trace formula, Li et al. 2015), with the exact variance ``v`` of the
integer noise::

    E ‖W x̂ − W x‖² = v · tr(WᵀW (MᵀM)⁻¹),     Var((W x̂)_j) = v · (W (MᵀM)⁻¹ Wᵀ)_jj.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpkit.events import Event
from dpkit.mechanisms import validate as v
from dpkit.mechanisms.release import Release
from dpkit.noise import Source
from dpkit.release import bounds as _bounds
from dpkit.release import figures
from dpkit.release.noise_plan import NoisePlan, plan_noise
from dpkit.release.strategies import (
    MAX_COVARIANCE_DOMAIN,
    MatrixStrategy,
    Strategy,
    TreeStrategy,
    identity_strategy,
    sqrt_toeplitz,
)
from dpkit.release.workloads import Workload, from_matrix

__all__ = [
    "ErrorReport",
    "WorkloadPlan",
    "answer_workload",
    "expected_error",
    "plan_workload",
    "resolve_strategy",
]

def _as_workload(workload: Any) -> Workload:
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, np.ndarray | list | tuple):
        return from_matrix(np.asarray(workload))
    raise TypeError(
        "workload must be a dpkit.release Workload (e.g. dpkit.release.workloads.prefix(N)) or "
        f"a query matrix (got {type(workload).__name__})"
    )


def _noise_kind(epsilon: float | None, rho: float | None, delta: float | None) -> str:
    return "laplace" if rho is None and delta is None and epsilon is not None else "gaussian"


def _better_of(workload: Workload, candidates: list[Strategy], privacy: dict,
               cache_dir: Any = None) -> Strategy:
    """The candidate with the smaller exact expected error under ``privacy`` (a public,
    data-independent choice). Integer noise matters here: at large ε the identity's discrete
    Laplace noise has far less variance than ``2s²``, which the optimiser's loss ignores."""
    best, best_err = candidates[0], math.inf
    for cand in candidates:
        acc = figures.accuracy(workload, cand, cache_dir)
        if acc is None:
            return candidates[0]
        plan = plan_noise(cand.l1_sensitivity, cand.l2_sensitivity_sq, **privacy)
        err = plan.variance * acc.trace
        if err < best_err:
            best, best_err = cand, err
    return best


def resolve_strategy(
    strategy: Any,
    workload: Workload,
    kind: str,
    privacy: dict | None = None,
    *,
    cache_dir: Any = None,
) -> Strategy:
    """A :class:`Strategy` from an object or a name: ``"identity"``, ``"tree"`` (16-ary for
    Laplace, binary for Gaussian), ``"tree:b"``, ``"sqrt_toeplitz"``, ``"optimized"`` (the
    optimiser's strategy for this workload and noise, cached), ``"auto"`` / ``None`` (the better
    of the optimised strategy and the identity under the privacy parameters ``privacy``; the
    tree when ``N`` exceeds the dense limit). ``cache_dir``: where optimised strategies are
    also kept on disk (see :func:`dpkit.release.optimize`)."""
    n = workload.domain_size
    if isinstance(strategy, Strategy):
        out = strategy
    elif isinstance(strategy, np.ndarray | list | tuple):
        out = MatrixStrategy(np.asarray(strategy))
    elif strategy in (None, "auto") and n > MAX_COVARIANCE_DOMAIN:
        # too large for a dense strategy: the O(N) tree (16-ary for Laplace, binary for Gaussian)
        out = TreeStrategy(n, 16 if kind == "laplace" else 2)
    elif strategy is None or strategy in ("auto", "optimized", "optimised"):
        from dpkit.release.optimize import optimize

        choose = strategy not in ("optimized", "optimised") and privacy is not None
        # the choice depends on these public inputs only (module figures): kept, bounded
        key = (workload.key, kind, *sorted((privacy or {}).items()), str(cache_dir))
        chosen = figures.remembered_choice(key) if choose else None
        if chosen is not None:
            out = chosen
        else:
            out = optimize(workload, noise=kind, cache_dir=cache_dir)
            if choose:
                assert privacy is not None
                out = _better_of(workload, [out, identity_strategy(n)], privacy, cache_dir)
                figures.remember_choice(key, out)
    elif strategy == "identity":
        out = identity_strategy(n)
    elif strategy == "tree":
        out = TreeStrategy(n, 16 if kind == "laplace" else 2)
    elif isinstance(strategy, str) and strategy.startswith("tree:"):
        try:
            b = int(strategy.split(":", 1)[1])
        except ValueError:
            raise ValueError(
                f"tree strategy needs an integer branching, e.g. 'tree:16' (got {strategy!r})"
            ) from None
        out = TreeStrategy(n, b)
    elif strategy in ("sqrt_toeplitz", "toeplitz"):
        out = sqrt_toeplitz(n)
    else:
        raise ValueError(
            "strategy must be a Strategy, a matrix, or one of 'identity', 'tree', 'tree:b', "
            f"'sqrt_toeplitz', 'optimized' (got {strategy!r})"
        )
    if out.domain_size != n:
        raise ValueError(
            f"strategy covers {out.domain_size} cells but the workload has {n}: build the "
            "strategy for the workload's domain"
        )
    return out


@dataclass(frozen=True)
class ErrorReport:
    """Exact expected error of a strategy for a workload under calibrated integer noise.

    ``rmse`` is the root of the mean (over queries) expected squared error; ``query_std`` the
    per-query standard deviations; ``lower_bound_rmse`` a bound no factorization mechanism
    with this noise can beat (trace-norm bound; with continuous noise of the same variance);
    ``gamma2`` an interval for the factorization norm γ₂(W) (lower: ``‖W‖_*/√(mN)``; upper: the
    best of ``W = W·I``, ``W = I·W`` and this strategy's ``‖W A⁺‖_{2→∞} ‖A‖_{1→2}``).
    """

    workload: str
    strategy: str
    noise: NoisePlan
    total_squared_error: float
    rmse: float
    query_std: np.ndarray = field(repr=False)
    lower_bound_rmse: float = math.nan
    gamma2: tuple[float, float] = (math.nan, math.nan)

    @property
    def max_std(self) -> float:
        return float(np.max(self.query_std))


def expected_error(
    workload: Any,
    strategy: Any = None,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    contributions: int = 1,
) -> ErrorReport:
    """The exact expected error of answering ``workload`` through ``strategy``.

    >>> from dpkit.release import workloads
    >>> r = expected_error(workloads.prefix(1024), "identity", rho=0.5)
    >>> round(r.rmse, 2)
    22.64
    """
    wp = plan_workload(
        workload, strategy, epsilon=epsilon, rho=rho, delta=delta, contributions=contributions
    )
    W, S, plan = wp.workload, wp.strategy, wp.noise
    acc = figures.accuracy(W, S)
    if acc is None:
        raise ValueError(
            f"exact error needs N <= {MAX_COVARIANCE_DOMAIN} (got N = {W.domain_size})"
        )
    total = plan.variance * acc.trace
    lb = _bounds.rmse_lower_bound(W, plan, contributions=contributions)
    g2 = _bounds.gamma2_bounds(W, acc.sq_norms, S.l2_sensitivity_sq)
    return ErrorReport(
        workload=W.name,
        strategy=S.name,
        noise=plan,
        total_squared_error=total,
        rmse=math.sqrt(total / W.num_queries),
        query_std=np.sqrt(plan.variance * acc.sq_norms),
        lower_bound_rmse=lb,
        gamma2=g2,
    )



def _check_histogram(x: Any, W: Workload) -> np.ndarray:
    """``x`` as an integer array, refused unless it is a histogram over W's cells."""
    xs = v.check_integers(x, "x")
    if xs.shape != (W.domain_size,):
        raise ValueError(
            f"x must be the histogram over the workload's {W.domain_size} cells (got shape "
            f"{xs.shape}); count rows per cell first"
        )
    return xs


@dataclass(frozen=True)
class WorkloadPlan:
    """Everything about a factorization-mechanism release that is fixed before data are read.

    Built by :func:`plan_workload` from public information only (the workload, the strategy,
    the privacy target and the contribution bound): ``event`` is what a ledger must charge,
    ``expected_rmse`` / ``query_std`` the exact accuracy, and :meth:`answer` measures a
    histogram with exactly this event. A curator checks the budget against ``event``, reads
    the data, charges, and only then calls :meth:`answer`.
    """

    workload: Workload
    strategy: Strategy
    noise: NoisePlan
    contributions: int
    #: where the accuracy figures are kept on disk (:mod:`dpkit.release.figures`); None: memory
    cache_dir: Any = field(default=None, compare=False)

    @property
    def event(self) -> Event:
        return self.noise.event

    @property
    def expected_rmse(self) -> float | None:
        """Root mean (over queries) expected squared error; ``None`` when ``N > 8192``."""
        acc = figures.accuracy(self.workload, self.strategy, self.cache_dir)
        if acc is None:
            return None
        return math.sqrt(self.noise.variance * acc.trace / self.workload.num_queries)

    @property
    def query_std(self) -> np.ndarray | None:
        """Exact standard deviation of every answer; ``None`` when ``N > 8192``."""
        acc = figures.accuracy(self.workload, self.strategy, self.cache_dir)
        if acc is None:
            return None
        return np.sqrt(self.noise.variance * acc.sq_norms)

    def halfwidths(self, level: float = 0.95) -> np.ndarray | None:
        """Per-answer CI half-widths at ``level`` (data-independent); ``None`` for N > 8192."""
        lvl = v.check_level(level)
        acc = figures.accuracy(self.workload, self.strategy, self.cache_dir)
        if acc is None:
            return None
        coef = (figures.coef_max(acc, self.workload, self.strategy)
                if self.noise.kind == "laplace" else None)
        return self.noise.halfwidths(acc.sq_norms, coef, lvl)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description (what a ledger entry records next to the event)."""
        rmse = self.expected_rmse
        return {
            "workload": self.workload.name,
            "queries": self.workload.num_queries,
            "cells": self.workload.domain_size,
            "strategy": self.strategy.name,
            "strategy_rows": self.strategy.rows,
            "noise": self.noise.kind,
            "noise_parameter": self.noise.parameter,
            "sensitivity": self.noise.sensitivity,
            "contributions": self.contributions,
            "expected_rmse": rmse,
        }

    def answer(
        self, x: Any, *, level: float = 0.95, source: Source | None = None
    ) -> Release[np.ndarray]:
        """Measure the integer histogram ``x`` and answer the workload (see
        :func:`answer_workload` for the guarantee and the output)."""
        W, S, plan = self.workload, self.strategy, self.noise
        xs = _check_histogram(x, W)
        lvl = v.check_level(level)
        src = v.resolve_source(v.check_source(source))
        exact = S.measure(xs)
        y = exact + plan.sample(S.rows, src)
        del exact
        x_hat = S.reconstruct(y.astype(np.float64))
        answers = np.asarray(W.matvec(x_hat), dtype=np.float64)
        details: dict[str, Any] = {
            "mechanism": f"factorization mechanism ({plan.kind} noise on strategy {S.name})",
            "neighbouring": f"add/remove one unit; x moves by <= {self.contributions} in L1",
            "strategy": S.name,
            "workload": W.name,
            "noise": plan.kind,
            "noise_parameter": plan.parameter,
            "sensitivity": plan.sensitivity,
            "x_hat": x_hat,
            "measurements": y,
        }
        ci = None
        acc = figures.accuracy(W, S, self.cache_dir)
        if acc is not None:
            std = np.sqrt(plan.variance * acc.sq_norms)
            coef = figures.coef_max(acc, W, S) if plan.kind == "laplace" else None
            half = plan.halfwidths(acc.sq_norms, coef, lvl)
            ci = (answers - half, answers + half)
            details["query_std"] = std
            details["expected_rmse"] = math.sqrt(plan.variance * acc.trace / W.num_queries)
            details["ci_method"] = (
                "sub-Gaussian bound (discrete Gaussian is sigma2-subgaussian)"
                if plan.kind == "gaussian"
                else "Chernoff bound on the discrete Laplace MGF"
            )
        else:
            details["ci_method"] = f"not computed: N > {MAX_COVARIANCE_DOMAIN}"
        return Release(
            value=answers,
            event=plan.event,
            ci=ci,
            level=lvl,
            insecure=src.insecure,
            details=details,
        )


def plan_workload(
    workload: Any,
    strategy: Any = None,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    contributions: int = 1,
    cache_dir: Any = None,
) -> WorkloadPlan:
    """Plan a factorization-mechanism release without touching data: resolve the strategy
    (:func:`resolve_strategy`; ``None``: the better of the optimised strategy and the
    identity), calibrate the noise, and fix the event.

    Privacy target: ``epsilon=`` (ε-DP, discrete Laplace), ``rho=`` (ρ-zCDP, discrete
    Gaussian) or ``epsilon=`` with ``delta=`` (discrete Gaussian at the largest ρ meeting
    (ε, δ)). Neighbouring relation: add/remove one unit moving the histogram by at most
    ``contributions`` in L1. ``cache_dir``: also keep optimised strategies on disk there.

    >>> from dpkit.release import workloads
    >>> p = plan_workload(workloads.prefix(4), "tree:2", epsilon=1.0)
    >>> p.event
    DiscreteLaplace(scale=3.0, sensitivity=3)
    """
    W = _as_workload(workload)
    kind = _noise_kind(epsilon, rho, delta)
    privacy = {"epsilon": epsilon, "rho": rho, "delta": delta, "contributions": contributions}
    c = v.check_positive_int(contributions, "contributions")
    # calibrate once on a unit-sensitivity query first: bad privacy parameters fail before the
    # (possibly slow) strategy optimisation
    plan_noise(1, 1, epsilon=epsilon, rho=rho, delta=delta, contributions=c)
    S = resolve_strategy(strategy, W, kind, privacy, cache_dir=cache_dir)
    plan = plan_noise(
        S.l1_sensitivity,
        S.l2_sensitivity_sq,
        epsilon=epsilon,
        rho=rho,
        delta=delta,
        contributions=c,
    )
    return WorkloadPlan(workload=W, strategy=S, noise=plan, contributions=c, cache_dir=cache_dir)


def answer_workload(
    x: Any,
    workload: Any,
    strategy: Any = None,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    contributions: int = 1,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[np.ndarray]:
    """Answer every query of ``workload`` on the histogram ``x`` with correlated noise.

    **Guarantee.** Neighbouring relation: add/remove one privacy unit, which changes the
    integer histogram ``x`` by at most ``contributions`` in L1 norm (1 for record-level
    privacy; the curator's contribution bounds make it true for user-level privacy). With
    ``epsilon=``: ε-DP (discrete Laplace on ``M x``, event ``DiscreteLaplace(s, c Δ₁(M))``).
    With ``rho=``: ρ-zCDP (discrete Gaussian, event ``ZCDP(ρ)``); with ``epsilon=, delta=``:
    the same at the largest ρ meeting (ε, δ). The strategy is public and data-independent.

    **Output.** ``value``: the ``m`` answers ``W x̂`` (float64); ``ci``: per-query intervals
    ``(low, high)`` at ``level``, each valid on its own (not simultaneously), from
    sub-Gaussian / Chernoff bounds on the exact integer noise; ``details``: ``x_hat`` (the
    least-squares histogram, usable for any further query at no privacy cost),
    ``measurements`` (the noisy integers ``y``), ``expected_rmse`` (exact), ``query_std``,
    ``strategy``, noise parameters.

    ``strategy``: a :class:`Strategy`, a matrix, or a name (see :func:`resolve_strategy`);
    default: the optimised strategy for this workload (cached). Equivalent to
    ``plan_workload(workload, strategy, ...).answer(x, level=level, source=source)``.

    >>> import dpkit as dp
    >>> from dpkit.release import workloads
    >>> r = answer_workload([3, 1, 4, 1], workloads.prefix(4), "tree:2", epsilon=1.0,
    ...                     source=dp.noise.seeded(0))
    >>> r.value.shape, r.event
    ((4,), DiscreteLaplace(scale=3.0, sensitivity=3))
    """
    W = _as_workload(workload)
    xs = _check_histogram(x, W)
    lvl = v.check_level(level)
    src = v.resolve_source(v.check_source(source))
    plan = plan_workload(
        W, strategy, epsilon=epsilon, rho=rho, delta=delta, contributions=contributions
    )
    return plan.answer(xs, level=lvl, source=src)
