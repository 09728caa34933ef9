"""The statistics of randomized smoothing: confidence bounds and certified radii (pure functions).

Cohen, Rosenfeld & Kolter 2019 (Theorem 1): if the base classifier ``f`` under Gaussian noise
returns class ``A`` with probability ``pA >= pA_lower > 1/2``, the smoothed classifier ``g``
returns ``A`` at every ``x'`` with ``||x' - x||_2 < sigma * Phi^-1(pA_lower)``. The bound is tight
for linear classifiers (a half-space ``f`` has exactly that radius).

Lecuyer et al. 2019 (PixelDP) reach a (looser) radius from differential privacy: the randomized
map ``x -> f(x + N(0, sigma² I))`` is the Gaussian mechanism, (epsilon, delta)-DP with respect to
inputs at L2 distance ``L`` when ``sigma = L * sqrt(2 ln(1.25/delta)) / epsilon`` (epsilon <= 1),
so every class probability moves at most by ``p -> e^epsilon p + delta``; the prediction is stable
while ``pA_lower > e^(2 epsilon) pB_upper + (1 + e^epsilon) delta``.
"""

from __future__ import annotations

import math

from scipy import stats


def check_alpha(alpha: float) -> float:
    a = float(alpha)
    if not 0.0 < a < 1.0:
        raise ValueError(f"alpha must be in (0, 1), the failure probability (got {alpha!r})")
    return a


def clopper_pearson_lower(successes: int, trials: int, alpha: float) -> float:
    """One-sided ``1 - alpha`` Clopper-Pearson lower bound on a binomial proportion.

    ``P(p >= bound) >= 1 - alpha`` over ``successes ~ Binomial(trials, p)``, for every ``p``
    (exact, conservative): the ``alpha`` quantile of ``Beta(successes, trials - successes + 1)``.

    >>> round(clopper_pearson_lower(100, 100, 0.001), 4)   # alpha ** (1 / trials)
    0.9333
    """
    a = check_alpha(alpha)
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, trials >= 1 (got {successes}/{trials})")
    if successes == 0:
        return 0.0
    return float(stats.beta.ppf(a, successes, trials - successes + 1))


def cohen_radius(sigma: float, pa_lower: float) -> float:
    """Certified L2 radius ``sigma * Phi^-1(pA_lower)`` (Cohen et al. 2019), 0 if pA_lower <= 1/2.

    >>> round(cohen_radius(0.5, 0.97725), 3)
    1.0
    """
    if pa_lower <= 0.5:
        return 0.0
    return float(sigma * stats.norm.ppf(pa_lower))


def binomial_pvalue(top: int, second: int) -> float:
    """Two-sided p-value of ``top ~ Binomial(top + second, 1/2)``: PREDICT's test of the top two.

    >>> binomial_pvalue(0, 0)
    1.0
    """
    if top + second == 0:
        return 1.0
    return float(stats.binomtest(top, top + second, 0.5).pvalue)


def pixeldp_radius(sigma: float, pa_lower: float, pb_upper: float, *, delta: float) -> float:
    """PixelDP's certified L2 radius (Lecuyer et al. 2019) from the Gaussian mechanism's (ε, δ).

    Largest ``L`` such that the noise ``sigma`` makes the randomized classifier (ε, δ)-DP for
    inputs at L2 distance ``L`` (classical calibration ``sigma = L sqrt(2 ln(1.25/δ)) / ε``,
    valid for ε <= 1) and ``pA_lower > e^(2ε) pB_upper + (1 + e^ε) δ`` still holds. Solving the
    quadratic in ``t = e^ε`` gives ε, then ``L``. Always smaller than :func:`cohen_radius`:
    the DP view spends its slack on a worst case over all outputs.

    >>> r = pixeldp_radius(0.5, 0.99, 0.01, delta=1e-5)
    >>> 0 < r < cohen_radius(0.5, 0.99)
    True
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1) (got {delta!r})")
    pa, pb = float(pa_lower), max(float(pb_upper), 0.0)
    if pb > 0.0:  # pb t^2 + delta t + (delta - pa) < 0
        t = (-delta + math.sqrt(delta * delta - 4.0 * pb * (delta - pa))) / (2.0 * pb)
    else:
        t = (pa - delta) / delta
    if t <= 1.0:
        return 0.0
    eps = min(math.log(t), 1.0)  # the classical calibration holds for epsilon <= 1 only
    return float(sigma * eps / math.sqrt(2.0 * math.log(1.25 / delta)))
