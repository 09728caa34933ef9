"""Statistical bands used by the local-model tests (false-failure rates stated per test)."""

from __future__ import annotations

from scipy.stats import chi2, norm

#: Total false-failure probability allowed per test.
ALPHA = 1e-6


def chi2_band(reps: int, alpha: float) -> tuple[float, float]:
    """Two-sided band for MSE / Var from ``reps`` independent, mean-zero, (near-)normal errors.

    Σ e_r² / σ² ~ χ²_reps, so MSE/σ² lies in [χ²_{α/2}, χ²_{1-α/2}] / reps w.p. 1 - α. The
    errors are sums of thousands of independent bounded per-user terms: their excess kurtosis
    is O(1/n) and the χ² law is accurate to that order.
    """
    return chi2.ppf(alpha / 2, reps) / reps, chi2.ppf(1 - alpha / 2, reps) / reps


def z_two_sided(alpha: float) -> float:
    return float(norm.isf(alpha / 2))
