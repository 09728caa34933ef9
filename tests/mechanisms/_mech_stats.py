"""Statistical helpers for the mechanism tests.

Every statistical test fails with probability at most ``P_FAIL = 1e-6`` when the mechanism is
correct (over the randomness; the seeds are fixed so runs are reproducible).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

#: p-value below which a goodness-of-fit / binomial test fails (false-failure rate 1e-6)
P_FAIL = 1e-6


def chi_square_p(
    observed: np.ndarray, probabilities: np.ndarray, min_expected: float = 20.0
) -> float:
    """p-value of Pearson's chi-square goodness-of-fit test of counts against exact
    probabilities; cells with expected count below ``min_expected`` are pooled into one."""
    observed = np.asarray(observed, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    assert abs(p.sum() - 1.0) < 1e-9, p.sum()
    n = observed.sum()
    expected = n * p
    big = expected >= min_expected
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp).pvalue)


def binomial_p(successes: int, n: int, p: float) -> float:
    """Two-sided exact binomial test p-value."""
    return float(stats.binomtest(int(successes), int(n), p).pvalue)
