"""Lower bounds on the error of any factorization mechanism, and the factorization norm γ₂.

For a strategy ``A`` with unit column norms the Gaussian mechanism's total squared error per
unit noise variance is ``tr(G (AᵀA)⁻¹)``, ``G = WᵀW``. Lagrange duality for
``min tr(G X⁻¹) s.t. diag(X) <= 1`` (see :mod:`dpkit.release.optimize`) gives, for every
probability vector ``λ``,

    Δ₂(A)² · tr(G (AᵀA)⁻¹)  >=  ‖W diag(λ)^{1/2}‖_*²,

and with ``λ`` uniform the **trace-norm bound** ``‖W‖_*² / N``. Since ``Δ₁(A) >= Δ₂(A)`` the
same bound, times 2 (``Var Lap(b) = 2b²``), holds for Laplace noise with ``b = Δ₁/ε``.

**γ₂.** ``γ₂(W) = min_{W = RA} ‖R‖_{2→∞} ‖A‖_{1→2}`` governs the worst query's error of the
Gaussian factorization mechanism. Bounds: ``‖W‖_* / √(mN) <= γ₂(W)`` (the trace-norm bound,
e.g. Edmonds-Nikolov-Ullman 2020), and any factorization gives an upper bound: ``W = W·I``,
``W = I·W`` and ``W = (W A⁺) A`` for the strategy in hand. For the prefix matrix the upper bound
from the square-root factorization is ``Σ_{k<N} c_k²`` ≈ ``1 + ln(N)/π``; reference values are
``0.701 + ln(N)/π <= γ₂ <= 0.846 + ln(N)/π`` (REFERENCES.md).

All bounds here are for noise of variance ``σ²`` (Gaussian) or ``2b²`` (Laplace); the exact
integer laws have slightly smaller variances (relative deficit below ``e^{-2π²σ²}`` and
``1/(12 b²)``), which only matters for tiny noise.
"""

from __future__ import annotations

import math

import numpy as np

from dpkit.release.noise_plan import NoisePlan
from dpkit.release.workloads import Workload

__all__ = ["gamma2_bounds", "rmse_lower_bound", "trace_norm_bound"]


def trace_norm_bound(workload: Workload) -> float:
    """``‖W‖_*² / N``: lower bound on ``Δ₂(A)² tr(WᵀW (AᵀA)⁻¹)`` over all strategies ``A``."""
    nuc = workload.nuclear_norm()
    return nuc * nuc / workload.domain_size


def rmse_lower_bound(workload: Workload, plan: NoisePlan, *, contributions: int = 1) -> float:
    """A per-query RMSE that no factorization mechanism with this privacy target beats."""
    base = trace_norm_bound(workload) * contributions**2
    if plan.kind == "gaussian":
        assert plan.rho is not None
        total = base / (2.0 * plan.rho)
    else:
        assert plan.epsilon is not None
        total = 2.0 * base / plan.epsilon**2
    return math.sqrt(total / workload.num_queries)


def gamma2_bounds(
    workload: Workload,
    sq_norms: np.ndarray | None = None,
    l2_sensitivity_sq: float | None = None,
) -> tuple[float, float]:
    """``(lower, upper)`` for γ₂(W); ``sq_norms = diag(W (MᵀM)⁻¹ Wᵀ)`` and ``Δ₂(M)²`` of a
    strategy ``M`` tighten the upper bound (``‖W M⁺‖_{2→∞} ‖M‖_{1→2}``, scale-free)."""
    m, n = workload.shape
    lower = workload.nuclear_norm() / math.sqrt(m * n)
    upper = min(workload.max_row_norm(), workload.max_column_norm())
    if sq_norms is not None and l2_sensitivity_sq is not None:
        upper = min(upper, math.sqrt(float(np.max(sq_norms)) * float(l2_sensitivity_sq)))
    return lower, upper
