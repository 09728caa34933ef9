"""The Gaussian mechanism on a grid and the discrete Gaussian mechanism on integers.

Noise is the exact discrete Gaussian ``P(z) ∝ exp(-z² / (2 σ²))`` on the integers
(Canonne-Kamath-Steinke 2020, "The Discrete Gaussian for Differential Privacy"):

* **zCDP** (CKS 2020, Thm. 14; independent coordinates for vectors): an integer-valued query
  with L2 sensitivity ``Δ`` plus discrete Gaussian noise of variance parameter ``σ²`` per
  coordinate is ``ρ``-zCDP with ``ρ = Δ² / (2σ²)``, exactly as for continuous noise.
* **(ε, δ)** for a scalar query with integer sensitivity ``Δ`` (CKS 2020, Thm. 7), exact::

      δ(ε) = P[X > εσ²/Δ − Δ/2] − e^ε P[X > εσ²/Δ + Δ/2],   X ~ N_Z(0, σ²)

  computed here with exact tail sums (:mod:`dpkit.mechanisms.accuracy`). For vectors the
  (ε, δ) target is met through zCDP: ``ρ = accounting.zcdp.epsilon_to_rho(ε, δ)`` (the largest ρ
  whose CKS conversion gives (ε, δ)), which is sound for the multivariate discrete Gaussian.
  Either way σ² is then raised, if needed, until the accountant certifies (ε, δ) both ways:
  ``dpkit.accounting.delta(event, ε) <= δ`` and ``dpkit.accounting.epsilon(event, δ) <= ε``
  (what a budget charges), so a release never costs more than was asked.

Events: ``DiscreteGaussian(σ², Δ)`` for a scalar; ``ZCDP(Δ²/(2σ²))`` for a vector, because an
accountant reads ``DiscreteGaussian`` as a scalar shift, whose (ε, δ) curve can be *better* than
that of a multi-coordinate integer shift of the same L2 norm (see :func:`_event`).

Real values are released on a grid of width ``2**k``: for ``n`` coordinates the L2 sensitivity
in grid units after rounding is ``floor(Δ/2**k) + 1`` for a scalar and ``Δ/2**k + sqrt(n)`` for a
vector (triangle inequality: rounding moves each changed coordinate by less than one unit; see
:mod:`dpkit.mechanisms._calibrate`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit import accounting, noise
from dpkit.accounting import zcdp  # analytic_gaussian (scipy) is reached lazily, on first use
from dpkit.events import ZCDP, DiscreteGaussian, Event
from dpkit.mechanisms import validate as v
from dpkit.mechanisms._calibrate import (
    MAX_SIGMA2,
    dgausssigma2_for_rho,
    grid_l2_exponent,
    l2_sensitivity_on_grid,
    on_grid,
)
from dpkit.mechanisms.accuracy import (
    dgauss_halfwidth,
    dgauss_norm,
    dgauss_upper_sum,
    interval_release,
)
from dpkit.mechanisms.release import Release
from dpkit.noise import Source

__all__ = ["check_gaussian", "dgauss_delta", "discrete_gaussian", "gaussian"]


# ----------------------------------------------------------------------------- privacy curve
def _prob_greater(t: float, sigma2: float, norm: float, *, upper: bool = True) -> float:
    """``P[X > t]`` for ``X ~ N_Z(0, sigma2)`` and real ``t`` (exact for sigma <= 4096; beyond,
    an upper or lower bound as asked)."""
    if t >= 0:
        return dgauss_upper_sum(math.floor(t) + 1, sigma2, upper=upper) / norm
    # P[X > t] = 1 - P[X <= t] = 1 - P[X >= -t] = 1 - P[X >= ceil(-t)]
    return 1.0 - dgauss_upper_sum(math.ceil(-t), sigma2, upper=not upper) / norm


def dgauss_delta(sigma2: float, sensitivity: int, epsilon: float) -> float:
    """Exact δ(ε) of the scalar discrete Gaussian mechanism with integer ``sensitivity``
    (CKS 2020, Thm. 7): ``P[X > εσ²/Δ − Δ/2] − e^ε P[X > εσ²/Δ + Δ/2]``.

    >>> round(dgauss_delta(1.0, 1, 1.0), 4)   # the continuous Gaussian gives 0.1269
    0.1414
    """
    if sensitivity != math.floor(sensitivity) or sensitivity < 1:
        raise ValueError(f"dgauss_delta needs an integer sensitivity >= 1 (got {sensitivity!r})")
    norm = dgauss_norm(sigma2)
    c = epsilon * sigma2 / sensitivity
    # beyond exact summation (sigma > 4096), bounds that can only overstate delta
    first = _prob_greater(c - sensitivity / 2.0, sigma2, norm, upper=True)
    second = _prob_greater(c + sensitivity / 2.0, sigma2, norm, upper=False)
    return max(0.0, first - math.exp(epsilon) * second)


def _calibrate_scalar(sensitivity: int, epsilon: float, delta: float) -> float:
    """Smallest float σ² (to relative 1e-7) with exact ``dgauss_delta(σ², Δ, ε) <= δ``.

    A relative margin of 1e-9 on δ absorbs the float error of the tail sums."""
    target = delta * (1.0 - 1e-9)

    def ok(s2: float) -> bool:
        return dgauss_delta(s2, sensitivity, epsilon) <= target

    from dpkit.accounting import analytic_gaussian  # scipy: imported on first use

    sigma = analytic_gaussian.calibrate_sigma(epsilon, delta, sensitivity=float(sensitivity))
    hi = sigma * sigma * (1.0 + 1e-6)
    step = 1e-3
    while not ok(hi):
        hi *= 1.0 + step
        step *= 2.0
    lo = hi * (1.0 - 1e-3)
    while ok(lo):
        hi, lo = lo, lo * 0.9
    # invariant: ok(hi) and not ok(lo)
    while hi - lo > 1e-7 * hi:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _accountant_agrees(
    sigma2: float, sensitivity: float, dimension: int, epsilon: float, delta: float
) -> bool:
    """Whether the accountant certifies (``epsilon``, ``delta``) in both directions, with no
    slack: ``accounting.delta(event, epsilon) <= delta`` and ``accounting.epsilon(event,
    delta) <= epsilon``. The second is what a budget charges (``Budget.charge(event,
    delta=delta)``); a discretised accountant (PLD) can pass the first and fail the second."""
    event = _event(sigma2, sensitivity, dimension)
    if accounting.delta(event, epsilon=epsilon) > delta:
        return False
    return accounting.epsilon(event, delta) <= epsilon


def _bump_for_accountant(
    sigma2: float, sensitivity: float, dimension: int, epsilon: float, delta: float
) -> float:
    """The smallest σ² >= ``sigma2`` (to relative 1e-4) that the accountant charges at most
    (ε, δ) for: the release must cost what was asked, whichever accountant the budget uses.

    With an accountant that knows the exact discrete Gaussian curve this returns ``sigma2``;
    with a looser one (zCDP/RDP conversions) it adds the noise needed to meet its bound."""
    def ok(s2: float) -> bool:
        return _accountant_agrees(s2, sensitivity, dimension, epsilon, delta)

    if ok(sigma2):
        return sigma2
    lo, hi, step = sigma2, sigma2 * 1.01, 0.01
    while not ok(hi):
        lo, step = hi, step * 2.0
        hi = hi * (1.0 + step)
    while hi - lo > 1e-4 * hi:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=1024, typed=True)
def _sigma2(
    sensitivity: float, n: int, rho: float | None, epsilon: float | None, delta: float | None
) -> float:
    """σ² (grid or integer units) for L2 ``sensitivity`` in those units and ``n`` coordinates.

    Cached: the (ε, δ) path consults the accountant, which may be slow (PLD)."""
    if rho is not None:
        return dgausssigma2_for_rho(sensitivity, rho)
    assert epsilon is not None and delta is not None
    if n == 1 and sensitivity == math.floor(sensitivity) and sensitivity >= 1:
        s2 = _calibrate_scalar(int(sensitivity), epsilon, delta)
    else:
        s2 = dgausssigma2_for_rho(sensitivity, zcdp.epsilon_to_rho(epsilon, delta))
    return _bump_for_accountant(s2, sensitivity, n, epsilon, delta)


def _privacy_args(
    rho: Any, epsilon: Any, delta: Any, mechanism: str
) -> tuple[float | None, float | None, float | None]:
    if rho is not None and (epsilon is not None or delta is not None):
        raise ValueError(
            f"{mechanism}: pass either rho= (zCDP) or epsilon= and delta=, not both"
        )
    if rho is not None:
        return v.check_rho(rho), None, None
    if epsilon is None and delta is None:
        raise ValueError(
            f"{mechanism}: pass rho= (zCDP, e.g. rho=0.1) or epsilon= and delta= "
            "(e.g. epsilon=1.0, delta=1e-6)"
        )
    if epsilon is None:
        raise ValueError(f"{mechanism}: delta= needs epsilon= too (e.g. epsilon=1.0)")
    if delta is None:
        raise ValueError(
            f"{mechanism}: Gaussian noise cannot give pure epsilon-DP; pass delta= as well "
            "(e.g. delta=1e-6), or use rho=, or use laplace()/geometric() for pure DP"
        )
    return None, v.check_epsilon(epsilon), v.check_delta(delta)


# ----------------------------------------------------------------------------- real values
def _event(sigma2: float, sensitivity: float, dimension: int) -> Event:
    """``DiscreteGaussian(σ², Δ)`` for a scalar; ``ZCDP(Δ²/(2σ²))`` (rounded up) for a vector.

    Why not ``DiscreteGaussian`` for vectors: the event carries no dimension, and an accountant
    would read it as a *scalar* integer shift by Δ. For several coordinates the (ε, δ) curve of
    the discrete Gaussian is not the scalar one and can be worse (σ² = 1, shift (1, 1, 1, 1)
    against a scalar shift of 2: δ(2) = 0.315 vs 0.267), so the scalar PLD would under-charge.
    zCDP is exact for both (CKS 2020: Rényi divergences of independent coordinates add)."""
    if dimension == 1:
        return DiscreteGaussian(sigma2, sensitivity)
    exact = Fraction(sensitivity) ** 2 / (2 * Fraction(sigma2))
    rho = float(exact)
    if Fraction(rho) < exact:
        rho = math.nextafter(rho, math.inf)
    return ZCDP(rho)


@dataclass(frozen=True)
class _GridGaussian:
    k: int
    sensitivity: float  # L2 sensitivity in grid units
    sigma2: float  # discrete Gaussian variance parameter in grid units
    dimension: int = 1

    @functools.cached_property
    def event(self) -> Event:
        return _event(self.sigma2, self.sensitivity, self.dimension)

    def noisy_grid(self, x: np.ndarray, size: tuple[int, ...], src: Source) -> np.ndarray:
        n = on_grid(x, self.k, saturate=True)
        return n + noise.discrete_gaussian(self.sigma2, size + x.shape, source=src)

    def sample(self, x: np.ndarray, size: int, src: Source) -> np.ndarray:
        return noise.grid.from_grid(self.noisy_grid(x, (size,), src), self.k)


@functools.lru_cache(maxsize=1024, typed=True)  # pure, immutable; errors not cached
def _plan_gaussian(
    sensitivity: float, n: int, rho: float | None, epsilon: float | None, delta: float | None
) -> _GridGaussian:
    if rho is not None:
        hint = sensitivity / math.sqrt(2.0 * rho)
    else:
        assert epsilon is not None and delta is not None
        from dpkit.accounting import analytic_gaussian  # scipy: imported on first use

        hint = analytic_gaussian.calibrate_sigma(epsilon, delta, sensitivity=sensitivity)
    k = grid_l2_exponent(sensitivity, hint, n)
    while True:
        if k > 1000:
            raise ValueError(
                "the privacy parameters are too strict for the sampler: the discrete Gaussian "
                "variance exceeds 2**80 grid units on every grid; raise rho (or epsilon/delta)"
            )
        S2 = l2_sensitivity_on_grid(sensitivity, k, n)
        s2 = _sigma2(S2, n, rho, epsilon, delta)
        if s2 <= MAX_SIGMA2:
            return _GridGaussian(k=k, sensitivity=S2, sigma2=s2, dimension=n)
        k += 1


def check_gaussian(*, sensitivity: float, rho: float, size: int = 1) -> None:
    """Raise the ``ValueError`` that :func:`gaussian` would raise for ``size`` coordinates at
    this ``sensitivity`` and ``rho`` whatever their values (a ``rho`` that is not > 0, a
    variance past the sampler's limit on every grid); draws nothing. For callers that must
    refuse before a charge what their releases could not calibrate after it."""
    _plan_gaussian(v.check_sensitivity(sensitivity), int(size), v.check_rho(rho), None, None)


def gaussian(
    value: Any,
    *,
    sensitivity: float,
    rho: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[Any]:
    """Gaussian mechanism for a real number or vector, with exact discrete Gaussian noise on a
    grid. Give ``rho`` (ρ-zCDP) or ``epsilon`` and ``delta`` ((ε, δ)-DP).

    **Guarantee**: ρ-zCDP, or (ε, δ)-DP, for the neighbouring relation under which
    ``sensitivity`` holds (add/remove one unit by default): ``||f(D) - f(D')||_2 <= sensitivity``
    (L2 norm of the whole vector). Values are not clamped to data bounds here,
    but answers beyond the grid's range (``|x| >= 2**(52+k)``, ±inf) saturate at its ends,
    ``±noise.grid.max_grid_value(k) 2**k``: clamping is 1-Lipschitz per coordinate, so the
    guarantee is unchanged and whether the call succeeds never depends on the value. NaN is
    refused (``ValueError``): it has no sensible value to release; impute or drop it first.

    **Calibration**: grid ``2**k`` with ``k = choose_exponent(sensitivity / sqrt(n), σ)``; L2
    sensitivity in grid units ``Δ_g = floor(sensitivity/2**k) + 1`` (scalar) or
    ``sensitivity/2**k + sqrt(n)`` (vector); ``σ² = Δ_g² / (2ρ)`` (CKS 2020, rounded up), or for
    (ε, δ): the smallest σ² whose exact discrete-Gaussian curve (CKS Thm. 7) gives δ(ε) <= δ
    (scalar; start: the analytic Gaussian of Balle-Wang 2018), via zCDP for vectors; then
    raised if needed until ``dpkit.accounting`` gives δ(ε) <= δ and ε(δ) <= ε for the event.
    Event: ``DiscreteGaussian(σ², Δ_g)`` (scalar) or ``ZCDP(Δ_g²/(2σ²))`` (vector).

    **Accuracy**: ``ci`` (per coordinate) covers the unrounded input with probability at least
    ``level``: ``m`` = smallest integer with ``P(|Z| <= m) >= level`` from exact discrete
    Gaussian tail sums, ``ci = ((Y - m) 2**k - 2**(k-1), (Y + m) 2**k + 2**(k-1))``.

    >>> import dpkit as dp
    >>> r = dp.mechanisms.gaussian(41.3, sensitivity=1.0, rho=0.125, source=dp.noise.seeded(1))
    >>> r.event
    DiscreteGaussian(sigma2=4202500.0, sensitivity=1025.0)
    >>> r.ci[0] < r.value < r.ci[1]
    True
    """
    sens = v.check_sensitivity(sensitivity)
    rho_, eps, dlt = _privacy_args(rho, epsilon, delta, "gaussian")
    lvl = v.check_level(level)
    x = v.check_reals(value, allow_inf=True)
    src = v.resolve_source(source)
    plan = _plan_gaussian(sens, x.size, rho_, eps, dlt)
    y = plan.noisy_grid(x, (), src)
    m, coverage = dgauss_halfwidth(plan.sigma2, lvl)
    return interval_release(
        y,
        m,
        coverage,
        k=plan.k,
        shape=x.shape,
        event=plan.event,
        level=lvl,
        insecure=src.insecure,
        details={
            "mechanism": "gaussian (discrete Gaussian on a 2**k grid)",
            "neighbouring": "as for the stated L2 sensitivity (add/remove one unit by default)",
            "grid_exponent": plan.k,
            "grid_sensitivity": plan.sensitivity,
            "grid_sigma2": plan.sigma2,
            "sigma": math.ldexp(math.sqrt(plan.sigma2), plan.k),
        },
    )


# ----------------------------------------------------------------------------- integers
@dataclass(frozen=True)
class _DiscreteGaussian:
    sensitivity: float
    sigma2: float
    dimension: int = 1

    @functools.cached_property
    def event(self) -> Event:
        return _event(self.sigma2, self.sensitivity, self.dimension)

    def sample(self, x: np.ndarray, size: int, src: Source) -> np.ndarray:
        return x + noise.discrete_gaussian(self.sigma2, (size, *x.shape), source=src)


@functools.lru_cache(maxsize=1024, typed=True)  # pure, immutable; errors not cached
def _plan_discrete_gaussian(
    sensitivity: float,
    n: int,
    rho: float | None,
    epsilon: float | None,
    delta: float | None,
    sigma2: float | None,
) -> _DiscreteGaussian:
    # An integer scalar that moves by at most s moves by at most floor(s). An integer vector of
    # L2 norm below sqrt(2) has at most one non-zero coordinate, of size at most 1: that is a
    # scalar shift, so the exact scalar curve (and event) applies.
    if sensitivity >= 1 and (n == 1 or sensitivity * sensitivity < 2):
        sens, n = float(math.floor(sensitivity)), 1
    else:
        sens = sensitivity
    s2 = sigma2 if sigma2 is not None else _sigma2(sens, n, rho, epsilon, delta)
    if s2 > MAX_SIGMA2:
        raise ValueError(
            f"the discrete Gaussian variance {s2:.4g} exceeds the sampler's limit 2**80: "
            "raise rho/epsilon or lower the sensitivity"
        )
    return _DiscreteGaussian(sensitivity=sens, sigma2=s2, dimension=n)


def discrete_gaussian(
    value: Any,
    *,
    sensitivity: float,
    rho: float | None = None,
    sigma2: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    level: float = 0.95,
    source: Source | None = None,
) -> Release[Any]:
    """Discrete Gaussian mechanism for integer queries: integers in, integers out.

    Give exactly one of ``rho`` (ρ-zCDP), ``sigma2`` (the noise parameter itself), or
    ``epsilon`` and ``delta``.

    **Guarantee**: ρ-zCDP with ``ρ = Δ²/(2σ²)`` (CKS 2020, Thm. 14) and, for a scalar, the exact
    (ε, δ) curve of CKS Thm. 7; neighbouring relation: the one under which the L2
    ``sensitivity`` ``Δ`` holds (add/remove one unit by default). For a scalar the sensitivity
    is taken as ``floor(Δ)`` (an integer that moves by at most Δ moves by at most floor(Δ)).
    Answers beyond ``±(2**62 - 1)`` (±inf included) saturate there (1-Lipschitz: the guarantee
    is unchanged and the call never fails on the value); NaN is refused: there is no integer to
    release for it.

    **Calibration**: ``σ² = Δ²/(2ρ)`` rounded up; for (ε, δ) the smallest σ² with exact
    ``δ(ε) <= delta`` (scalar) or via ``zcdp.epsilon_to_rho`` (vectors).
    Event: ``DiscreteGaussian(σ², Δ)`` (scalar) or ``ZCDP(Δ²/(2σ²))`` (vector).

    **Accuracy**: ``ci = (Y - m, Y + m)``, ``m`` the smallest integer with
    ``P(|Z| <= m) >= level`` from exact tail sums; exact coverage in ``details["coverage"]``.

    >>> import dpkit as dp
    >>> r = dp.mechanisms.discrete_gaussian(41, sensitivity=1, rho=0.5, source=dp.noise.seeded(1))
    >>> r.event, r.ci[1] - r.ci[0]
    (DiscreteGaussian(sigma2=1.0, sensitivity=1.0), 4)
    """
    sens = v.check_sensitivity(sensitivity)
    if sigma2 is not None:
        if rho is not None or epsilon is not None or delta is not None:
            raise ValueError(
                "discrete_gaussian: pass one of sigma2=, rho=, or epsilon= with delta="
            )
        s2 = v.check_sensitivity(sigma2, "sigma2")
        rho_ = eps = dlt = None
    else:
        s2 = None
        rho_, eps, dlt = _privacy_args(rho, epsilon, delta, "discrete_gaussian")
    lvl = v.check_level(level)
    x = v.check_integers(value, saturate=True)
    src = v.resolve_source(source)
    plan = _plan_discrete_gaussian(sens, x.size, rho_, eps, dlt, s2)
    y = x + noise.discrete_gaussian(plan.sigma2, x.shape, source=src)
    m, coverage = dgauss_halfwidth(plan.sigma2, lvl)
    return interval_release(
        y,
        m,
        coverage,
        k=None,
        shape=x.shape,
        event=plan.event,
        level=lvl,
        insecure=src.insecure,
        details={
            "mechanism": "discrete gaussian",
            "neighbouring": "as for the stated L2 sensitivity (add/remove one unit by default)",
            "sigma2": plan.sigma2,
        },
    )
