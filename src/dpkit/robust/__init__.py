"""Certified robustness by randomized smoothing: differential privacy's noise used as a tool.

:class:`Smoothed` turns any classifier ``f`` (a numpy callable or a torch module) into the smoothed
classifier ``g(x) = argmax_c P(f(x + N(0, sigma² I)) = c)`` and certifies it (Cohen, Rosenfeld &
Kolter 2019): with probability at least ``1 - alpha`` over the Monte Carlo sampling, ``g`` returns
the certified class at every point within L2 distance ``radius`` of ``x``.

:mod:`dpkit.robust.bounds` holds the statistics (one-sided Clopper-Pearson bound, Cohen's radius)
and PixelDP's radius (Lecuyer et al. 2019), the same guarantee read through the Gaussian
mechanism's (epsilon, delta), for comparison. :class:`Ensemble` combines several base
classifiers into one with less variance under noise (Horváth et al. 2022), optionally with
K-consensus early exit. See docs/beyond.md, "Certified robustness".
"""

from __future__ import annotations

from dpkit.robust.bounds import (
    binomial_pvalue,
    clopper_pearson_lower,
    cohen_radius,
    pixeldp_radius,
)
from dpkit.robust.ensemble import Ensemble
from dpkit.robust.smoothing import ABSTAIN, Certificate, Smoothed, as_batch_function

__all__ = [
    "ABSTAIN",
    "Certificate",
    "Ensemble",
    "Smoothed",
    "as_batch_function",
    "binomial_pvalue",
    "clopper_pearson_lower",
    "cohen_radius",
    "pixeldp_radius",
]
