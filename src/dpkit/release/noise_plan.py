"""Calibrated integer noise for a strategy: scale, event, exact variance, tail bounds.

A strategy ``M`` (integers) is measured as ``y = M x + z`` with ``z`` i.i.d. on ``Z^r``:

* **Laplace** (``epsilon=``): ``z_k ~ DLap(s)``, ``P(z) ∝ exp(−|z|/s)``, with
  ``s = c Δ₁(M) / ε`` (``c`` = contributions per unit). ε-DP: one unit moves ``x`` by at most
  ``c`` in L1, hence ``M x`` by at most ``c Δ₁(M)`` in L1 (an integer), and the discrete
  Laplace mechanism with that sensitivity is ε-DP (Ghosh-Roughgarden-Sundararajan 2009).
  Event ``DiscreteLaplace(s, c Δ₁(M))``, as for histograms in :mod:`dpkit.mechanisms`.
* **Gaussian** (``rho=``, or ``epsilon=`` with ``delta=``): ``z_k ~ N_Z(0, σ²)`` with
  ``σ² = (c Δ₂(M))² / (2ρ)``; ρ-zCDP for an integer vector query of L2 sensitivity ``cΔ₂(M)``
  (Canonne-Kamath-Steinke 2020, Thm. 14). Event ``ZCDP(ρ)``: a ``DiscreteGaussian`` event
  would be read by the PLD accountant as a *scalar* shift, which can under-charge a shift
  spread over several coordinates (see :func:`dpkit.mechanisms.gaussian._event`).

Variances are exact for the integer laws: ``Var DLap(s) = 1 / (2 sinh²(1/(2s)))`` (slightly
below the continuous ``2s²``) and ``Var N_Z(0, σ²) = σ² (1 − 4π²σ² Σ_k k² e^{−2π²σ²k²} /
Σ_k e^{−2π²σ²k²})`` (Poisson summation; direct sums for σ < 2).

**Tail bounds** for an answer's error ``Σ_k c_k z_k`` (the coefficients are those of ``W R``):

* discrete Gaussian is σ²-subgaussian (CKS 2020, Cor. 9), so
  ``P(|err| > sqrt(2 σ² ‖c‖² ln(2/α))) <= α``;
* discrete Laplace: ``ψ(t) = ln E e^{t z} = 2 ln(1−q) − ln(1 − q e^t) − ln(1 − q e^{−t})``
  (``q = e^{−1/s}``) has non-negative Taylor coefficients, so ``ψ(t) <= κ_θ t²`` on
  ``|t| <= θ/s`` with ``κ_θ = ψ(θ/s) / (θ/s)²``. Chernoff with ``t <= θ / (s ‖c‖_∞)`` gives
  ``P(|err| > u) <= α`` for ``u = 2 sqrt(κ_θ ‖c‖² L)`` if that ``t`` is allowed, else
  ``u = (L + κ_θ T² ‖c‖²) / T`` (``L = ln(2/α)``, ``T = θ/(s‖c‖_∞)``); we take the best of a
  fixed grid of θ (each is a valid bound, the grid does not depend on the data).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpkit import noise
from dpkit.accounting import zcdp
from dpkit.events import ZCDP, DiscreteLaplace, Event
from dpkit.mechanisms import validate as v
from dpkit.mechanisms.plan import discrete_laplace_plan
from dpkit.noise import Source

__all__ = ["NoisePlan", "dgauss_variance", "dlap_variance", "plan_noise"]

_THETAS = np.linspace(0.05, 0.95, 19)


def dlap_variance(scale: float) -> float:
    """Exact variance of the discrete Laplace law ``P(z) ∝ exp(−|z|/scale)``."""
    return 1.0 / (2.0 * math.sinh(0.5 / scale) ** 2)


def dgauss_variance(sigma2: float) -> float:
    """Exact variance of the discrete Gaussian ``N_Z(0, σ²)`` (to double precision)."""
    if sigma2 < 4.0:
        r = int(60 * math.sqrt(sigma2)) + 10
        x = np.arange(-r, r + 1, dtype=np.float64)
        w = np.exp(-(x * x) / (2.0 * sigma2))
        return float(np.sum(x * x * w) / np.sum(w))
    k = np.arange(1, 6, dtype=np.float64)
    e = np.exp(-2.0 * math.pi**2 * sigma2 * k * k)
    return sigma2 * (
        1.0
        - 4.0
        * math.pi**2
        * sigma2
        * 2.0
        * float(np.sum(k * k * e))
        / (1.0 + 2.0 * float(np.sum(e)))
    )


def _dlap_psi(t: np.ndarray, scale: float) -> np.ndarray:
    a = 1.0 / scale
    return 2.0 * math.log(-math.expm1(-a)) - np.log(-np.expm1(t - a)) - np.log(-np.expm1(-t - a))


@dataclass(frozen=True)
class NoisePlan:
    """Integer noise calibrated to a strategy: what is sampled, what it costs, how big it is.

    ``parameter`` is the discrete Laplace scale (``kind == "laplace"``) or the discrete
    Gaussian ``σ²`` (``"gaussian"``), in the strategy's integer units; ``sensitivity`` is the
    L1 (Laplace) or L2 (Gaussian) sensitivity of ``M x`` it was calibrated to.
    """

    kind: str
    parameter: float
    sensitivity: float
    event: Event
    variance: float
    epsilon: float | None = None
    rho: float | None = None

    def sample(self, size: int | tuple[int, ...], source: Source | None) -> np.ndarray:
        if self.kind == "laplace":
            return noise.discrete_laplace(self.parameter, size, source=source)
        return noise.discrete_gaussian(self.parameter, size, source=source)

    def halfwidths(
        self, sq_norms: np.ndarray, coef_max: np.ndarray | None, level: float
    ) -> np.ndarray:
        """``u_j`` with ``P(|Σ_k c_jk z_k| > u_j) <= 1 − level`` for each answer ``j``, from
        ``‖c_j‖²`` and ``‖c_j‖_∞`` (``None``: bounded by ``‖c_j‖₂``); see the module docstring."""
        V = np.maximum(np.asarray(sq_norms, dtype=np.float64), 0.0)
        L = math.log(2.0 / (1.0 - level))
        if self.kind == "gaussian":
            return np.sqrt(2.0 * self.parameter * V * L)
        s = self.parameter
        cmax = np.sqrt(V) if coef_max is None else np.asarray(coef_max, dtype=np.float64)
        cmax = np.maximum(cmax, 1e-300)
        best = np.full(V.shape, np.inf)
        for theta in _THETAS:
            t0 = theta / s
            kappa = float(_dlap_psi(np.array([t0]), s)[0]) / (t0 * t0)
            T = theta / (s * cmax)
            free = np.sqrt(L / np.maximum(kappa * V, 1e-300)) <= T
            u = np.where(free, 2.0 * np.sqrt(kappa * V * L), (L + kappa * T * T * V) / T)
            best = np.minimum(best, u)
        return np.where(V > 0, best * (1.0 + 1e-12), 0.0)


def sigma2_for(s2: int, rho: float) -> float:
    """Smallest float ``σ²`` with ``s2 / (2σ²) <= rho`` exactly (``s2`` an integer)."""
    r = Fraction(rho)
    sigma2 = float(Fraction(s2) / (2 * r))
    while Fraction(s2) > 2 * r * Fraction(sigma2):
        sigma2 = math.nextafter(sigma2, math.inf)
    return sigma2


def plan_noise(
    l1_sensitivity: int,
    l2_sensitivity_sq: int,
    *,
    epsilon: float | None = None,
    rho: float | None = None,
    delta: float | None = None,
    contributions: int = 1,
) -> NoisePlan:
    """Calibrate noise for an integer query of the given sensitivities (one unit moving one
    cell by 1); ``contributions`` multiplies both (a unit moving ``x`` by up to ``c`` in L1).

    Exactly one privacy target: ``epsilon=`` (pure ε-DP, discrete Laplace), ``rho=``
    (ρ-zCDP, discrete Gaussian) or ``epsilon=`` with ``delta=`` (discrete Gaussian at the
    largest ρ whose zCDP→(ε, δ) conversion meets the target).
    """
    c = v.check_positive_int(contributions, "contributions")
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise ValueError("pass either rho= (zCDP) or epsilon= [with delta=], not both")
        r = v.check_rho(rho)
        kind = "gaussian"
        eps = None
    elif epsilon is not None and delta is not None:
        eps = v.check_epsilon(epsilon)
        r = zcdp.epsilon_to_rho(eps, v.check_delta(delta))
        kind = "gaussian"
    elif epsilon is not None:
        eps = v.check_epsilon(epsilon)
        r = None
        kind = "laplace"
    else:
        raise ValueError(
            "pass a privacy target: epsilon= (pure DP, discrete Laplace noise), rho= (zCDP, "
            "discrete Gaussian noise) or epsilon= with delta="
        )
    if kind == "laplace":
        assert eps is not None
        sens = c * int(l1_sensitivity)
        scale = discrete_laplace_plan(sensitivity=sens, epsilon=eps).scale
        return NoisePlan(
            kind="laplace",
            parameter=scale,
            sensitivity=float(sens),
            event=DiscreteLaplace(scale, sens),
            variance=dlap_variance(scale),
            epsilon=eps,
        )
    assert r is not None
    s2 = c * c * int(l2_sensitivity_sq)
    sigma2 = sigma2_for(s2, r)
    if sigma2 > float(noise.MAX_DGAUSS_SIGMA2):
        raise ValueError(
            f"the noise variance {sigma2:.3g} exceeds the sampler's limit 2**80: raise rho"
        )
    exact = Fraction(s2) / (2 * Fraction(sigma2))
    rho_used = float(exact)
    if Fraction(rho_used) < exact:
        rho_used = math.nextafter(rho_used, math.inf)
    return NoisePlan(
        kind="gaussian",
        parameter=sigma2,
        sensitivity=math.sqrt(s2),
        event=ZCDP(rho_used),
        variance=dgauss_variance(sigma2),
        epsilon=eps,
        rho=rho_used,
    )
