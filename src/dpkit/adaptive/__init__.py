"""Adaptive data analysis: answers that generalise even when the questions depend on the answers.

:class:`Thresholdout` (Dwork et al. 2015), the reusable holdout: a statistical query is answered
from the training set while it agrees with the holdout, and from the holdout with noise when it
does not; differential privacy of the holdout's answers is what makes them transfer to the
population however adaptively the queries were chosen.
"""

from __future__ import annotations

from dpkit.adaptive.thresholdout import BudgetSpent, Thresholdout

__all__ = ["BudgetSpent", "Thresholdout"]
