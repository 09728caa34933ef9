"""Mechanisms: each takes a query answer, adds exact noise, and returns a :class:`Release`.

Every mechanism states its privacy guarantee, its neighbouring relation (add/remove one privacy
unit unless said otherwise; the caller's ``sensitivity`` is with respect to that relation), the
event it charges, and, for numeric outputs, a confidence interval from the exact noise law.
Privacy parameters are keyword-only; ``source=None`` means the secure default source.
See ``docs/mechanisms.md``.
"""

from __future__ import annotations

from dpkit.mechanisms.exponential import exponential, exponential_rows
from dpkit.mechanisms.gaussian import discrete_gaussian, gaussian
from dpkit.mechanisms.histogram import histogram
from dpkit.mechanisms.laplace import geometric, laplace
from dpkit.mechanisms.noisy_max import report_noisy_max
from dpkit.mechanisms.randomized_response import RREstimate, randomized_response, rr_estimate
from dpkit.mechanisms.release import Release
from dpkit.mechanisms.sparse_vector import SparseAnswers, above_threshold, numeric_sparse

__all__ = [
    "RREstimate",
    "Release",
    "SparseAnswers",
    "above_threshold",
    "discrete_gaussian",
    "exponential",
    "exponential_rows",
    "gaussian",
    "geometric",
    "histogram",
    "laplace",
    "numeric_sparse",
    "randomized_response",
    "report_noisy_max",
    "rr_estimate",
]
