"""dpkit.release: correlated-noise query release.

Answering many related counting queries with independent noise wastes budget; measuring a
well-chosen *strategy* and reconstructing by least squares does not. This package provides:

* :mod:`~dpkit.release.workloads`: query sets as matrices (prefix/CDF, all ranges, ranges,
  marginals over product domains, arbitrary counting queries), implicit where ``m`` is large;
* :mod:`~dpkit.release.strategies`: identity, b-ary trees with O(N) least-squares consistency,
  the square-root (Toeplitz) factorization of prefix sums, any matrix;
* :mod:`~dpkit.release.optimize`: an HDMM-style optimiser (Gaussian: exact convex dual with a
  certificate; Laplace: p-Identity with L-BFGS), cached by workload hash;
* :func:`answer_workload`: the factorization mechanism on an integer histogram, returning a
  :class:`~dpkit.Release` with its event and per-query intervals; :func:`expected_error`: the
  exact expected error (trace formula) with the trace-norm / γ₂ bounds next to it;
* :func:`mwem`: private multiplicative weights (Hardt-Ligett-McSherry 2012), synthetic data out;
* :func:`cdf` and :func:`quantiles`: from the hierarchical tree.

The entry points for the curator are::

    plan = plan_workload(workload, strategy=None, *, epsilon=… | rho=… | epsilon=…, delta=…,
                         contributions=1)          # public: plan.event, plan.expected_rmse
    plan.answer(x, level=0.95, source=None) -> Release

(``answer_workload`` does both at once) with ``x`` the exact integer histogram computed over a
public domain; :mod:`dpkit.engine.families` uses them for range/CDF/marginal queries and
synthetic data. See docs/release.md.
"""

from __future__ import annotations

from dpkit.release import workloads
from dpkit.release.bounds import gamma2_bounds, trace_norm_bound
from dpkit.release.mechanism import (
    ErrorReport,
    WorkloadPlan,
    answer_workload,
    expected_error,
    plan_workload,
    resolve_strategy,
)
from dpkit.release.mwem import mwem, mwem_event, synthetic_records
from dpkit.release.optimize import optimize
from dpkit.release.quantiles import cdf, cdf_band, quantiles
from dpkit.release.strategies import (
    MatrixStrategy,
    Strategy,
    TreeStrategy,
    identity_strategy,
    sqrt_toeplitz,
    tree,
)
from dpkit.release.workloads import (
    Workload,
    all_ranges,
    counting,
    from_matrix,
    identity,
    marginals,
    prefix,
    ranges,
)

__all__ = [
    "ErrorReport",
    "MatrixStrategy",
    "Strategy",
    "TreeStrategy",
    "Workload",
    "WorkloadPlan",
    "all_ranges",
    "answer_workload",
    "cdf",
    "cdf_band",
    "counting",
    "expected_error",
    "from_matrix",
    "gamma2_bounds",
    "identity",
    "identity_strategy",
    "marginals",
    "mwem",
    "mwem_event",
    "optimize",
    "plan_workload",
    "prefix",
    "quantiles",
    "ranges",
    "resolve_strategy",
    "sqrt_toeplitz",
    "synthetic_records",
    "trace_norm_bound",
    "tree",
    "workloads",
]
