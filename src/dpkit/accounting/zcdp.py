"""Zero-concentrated DP (Bun-Steinke 2016): ρ per event, composition adds ρ.

A mechanism is ρ-zCDP when D_α(M(x) ‖ M(x')) <= ρα for every order α > 1 and neighbours x, x'.
Composition (adaptive, and as a privacy filter: Feldman-Zrnic 2021 at each order, hence for ρ)
adds ρ. Per-event ρ (add/remove-one neighbours unless stated):

==============================  ===================================================================
``Gaussian(m)``                 1/(2m²)                      (Bun-Steinke 2016, Prop. 1.6)
``DiscreteGaussian(σ², Δ)``     Δ²/(2σ²)                     (Canonne-Kamath-Steinke 2020, Thm. 14)
``Laplace(m)``, ε = 1/m         ε + e^{−ε} − 1 (tight)       (Harrison-Manurangsi 2025); this is the
                                KL divergence, the α → 1 limit of Laplace's RDP/α, and we checked
                                numerically (tests/accounting/test_zcdp.py) that RDP(α)/α never
                                exceeds it; it is below ε²/2 for every ε > 0
``PureDP(ε)``, ``DiscreteLaplace``, ``RandomizedResponse(ε, k)``, ``ApproxDP(ε, 0)``:  ε²/2
                                                             (Bun-Steinke 2016, Prop. 3.3)
``Exponential(ε)``              ε²/8 (ε-bounded range)       (Cesar-Rogers 2021)
``ZCDP(ρ)``                     ρ
``PoissonSampled(q, e)``        min(ρ(e), ε'²/2) with ε' the amplified pure ε of e when it has one
                                (sampling never hurts under add/remove; zCDP itself does not
                                amplify)
==============================  ===================================================================

``ApproxDP(ε, δ)`` with ε > 0 and δ > 0 has no zCDP bound (:class:`UnsupportedEvent`).

**Approximate zCDP** (Bun-Steinke 2016, Def. 8.1): M is δ-approximately ρ-zCDP when for all
neighbours x, x' there are P, P', Q, Q' with M(x) = (1 − δ)P + δP', M(x') = (1 − δ)Q + δQ' and
D_α(P‖Q), D_α(Q‖P) <= ρα for all α > 1. ``ApproxDP(0, δ)`` is δ-approximately 0-zCDP (its two
laws are within total variation δ: take P = Q their common part). Composition, adaptive
included, adds both parts (ibid., Lemma 8.3: (ρ₁ + ρ₂, δ₁ + δ₂), rounded up here), and the
conversion pays the δ part on top: δ_A-approximate ρ-zCDP implies (ε(ρ, δ'), δ' + δ_A)-DP
(M(x)(S) <= (1 − δ_A)P(S) + δ_A <= e^ε M(x')(S) + δ' + δ_A). :func:`rho_delta` gives the pair,
:func:`epsilon` / :func:`delta` convert it; :func:`rho` refuses an event whose δ part is > 0.
This is what carries a constant-work project's timing term ``ApproxDP(0, δ_t)``
(:mod:`dpkit.noise.constant`) beside ρ; an ``ApproxDP`` inside ``PoissonSampled`` is refused.

Conversion to (ε, δ) uses the tight form of Canonne-Kamath-Steinke 2020 (Prop. 12 / Cor. 13):

    ε(δ) = inf_{α>1} [ αρ + (ln(1/δ) + (α−1) ln(1 − 1/α) − ln α)/(α − 1) ]

minimised over t = ln(α − 1) by a coarse grid then Brent's method; any α gives a valid bound, so
the answer is an upper bound whatever the optimiser does. It is clamped at 0 (an (ε, δ) guarantee
with ε < 0 implies (0, δ)).

>>> round(rho_to_epsilon(0.5, 1e-5), 6)
4.728387
>>> round(rho_to_epsilon(epsilon_to_rho(1.0, 1e-6), 1e-6), 9)
1.0
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from dpkit import events as ev
from dpkit.accounting import pure as _pure
from dpkit.accounting._common import (
    UnsupportedEvent,
    check_delta,
    check_epsilon,
    fsum_up,
    is_supported,
    mul_up,
    normalize,
)

__all__ = [
    "delta",
    "epsilon",
    "epsilon_to_rho",
    "laplace_rho",
    "rho",
    "rho_delta",
    "rho_to_delta",
    "rho_to_epsilon",
    "supports",
]

# t = ln(α − 1): α from 1 + e^-40 to 1 + e^80 covers ρ from 1e-30 to 1e30 at δ >= 1e-300.
_T_GRID = np.linspace(-40.0, 80.0, 961)


def _softplus(t: np.ndarray | float) -> np.ndarray | float:
    """ln(1 + e^t) without overflow."""
    return np.logaddexp(0.0, t)


def _eps_of_t(t: np.ndarray | float, rho: float, log_inv_delta: float) -> np.ndarray | float:
    # α = 1 + e^t, ln α = softplus(t), ln(1 − 1/α) = t − ln α.
    log_a = _softplus(t)
    with np.errstate(over="ignore", invalid="ignore"):
        return (1.0 + np.exp(t)) * rho + (t - log_a) + (log_inv_delta - log_a) * np.exp(-t)


def _minimize_over_t(f: Callable[[np.ndarray | float], np.ndarray | float]) -> float:
    """min over the t grid, refined by bounded Brent around the best grid point."""
    from scipy import optimize  # imported on first use: scipy costs ~0.5 s at import

    values = np.asarray(f(_T_GRID), dtype=float)
    values = np.where(np.isnan(values), np.inf, values)
    i = int(np.argmin(values))
    best = float(values[i])
    lo = _T_GRID[max(i - 1, 0)]
    hi = _T_GRID[min(i + 1, len(_T_GRID) - 1)]
    if math.isfinite(best) and hi > lo:
        res = optimize.minimize_scalar(lambda t: float(f(t)), bounds=(lo, hi), method="bounded",
                                       options={"xatol": 1e-12})
        val = float(f(float(res.x)))
        if math.isfinite(val) and val < best:
            best = val
    return best


def rho_to_epsilon(rho: float, delta: float) -> float:
    """Smallest ε (CKS 2020 tight conversion) such that ρ-zCDP implies (ε, δ)-DP.

    Returns 0 for ρ = 0, ``math.inf`` for δ = 0 (ρ > 0). Never negative or NaN.

    >>> round(rho_to_epsilon(0.1, 1e-5), 6)
    1.914239
    """
    rho = _check_rho(rho)
    delta = check_delta(delta)
    if rho == 0.0:
        return 0.0
    if delta == 0.0 or rho == math.inf:
        return math.inf
    log_inv_delta = -math.log(delta)
    eps = _minimize_over_t(lambda t: _eps_of_t(t, rho, log_inv_delta))
    # The terms near the optimum are of the size of ρ + 2 sqrt(ρ ln(1/δ)) and cancel: their
    # float error (~1e-16 of that size) is added, so tiny ρ never rounds down to a smaller ε
    # (or to 0 when the exact minimum is positive).
    margin = 1e-13 * (rho + 2.0 * math.sqrt(rho * log_inv_delta))
    if eps < -margin:
        return 0.0  # clearly negative: (0, δ)-DP holds (the CKS bound at ε = 0 is <= δ)
    return max(0.0, eps) + margin


def rho_to_delta(rho: float, epsilon: float) -> float:
    """Smallest δ (CKS 2020, Cor. 13) such that ρ-zCDP implies (ε, δ)-DP.

        δ = inf_{α>1} exp((α−1)(αρ − ε)) · (1 − 1/α)^α / (α − 1)
    """
    rho = _check_rho(rho)
    epsilon = check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    if rho == 0.0 or epsilon == math.inf:
        return 0.0
    if rho == math.inf:
        return 1.0

    def log_delta(t: np.ndarray | float) -> np.ndarray | float:
        log_a = _softplus(t)
        with np.errstate(over="ignore", invalid="ignore"):
            am1 = np.exp(t)
            return am1 * ((1.0 + am1) * rho - epsilon) + (1.0 + am1) * (t - log_a) - t

    best = _minimize_over_t(log_delta)
    return 1.0 if best >= 0.0 else math.exp(best)


def epsilon_to_rho(epsilon: float, delta: float) -> float:
    """Largest ρ such that ρ-zCDP implies (``epsilon``, ``delta``)-DP by the CKS conversion.

    For each α the CKS bound is linear in ρ, so the answer is
    max_α [ε − ln(1 − 1/α) − (ln(1/δ) − ln α)/(α − 1)] / α, found like :func:`rho_to_epsilon`
    and rounded down until ``rho_to_epsilon(result, delta) <= epsilon`` holds. δ = 0 gives 0.

    >>> round(epsilon_to_rho(4.728387, 1e-5), 5)
    0.5
    """
    epsilon = check_epsilon(epsilon, allow_zero=True)
    delta = check_delta(delta)
    if delta == 0.0 or epsilon == 0.0:
        return 0.0
    log_inv_delta = -math.log(delta)

    def neg_rho(t: np.ndarray | float) -> np.ndarray | float:
        log_a = _softplus(t)
        with np.errstate(over="ignore", invalid="ignore"):
            num = epsilon - (t - log_a) - (log_inv_delta - log_a) * np.exp(-t)
            return -num / (1.0 + np.exp(t))

    r = max(0.0, -_minimize_over_t(neg_rho))
    for i in range(200):  # shrink by 1e-12, 2e-12, 4e-12, ... until the conversion agrees
        if r == 0.0 or rho_to_epsilon(r, delta) <= epsilon:
            return r
        r *= 1.0 - min(0.5, 1e-12 * 2.0**i)
    return 0.0  # pragma: no cover - never return an unverified rho; 0 is always valid


def laplace_rho(epsilon: float) -> float:
    """Tight zCDP of the Laplace mechanism with pure ε: ε + e^{−ε} − 1 (Harrison-Manurangsi 2025).

    For small ε the Taylor series ε²/2 − ε³/6 + ε⁴/24 (alternating, cut after a positive term:
    an upper bound) avoids cancellation.
    """
    if epsilon < 1e-3:
        return epsilon * epsilon / 2.0 - epsilon**3 / 6.0 + epsilon**4 / 24.0
    return epsilon + math.expm1(-epsilon)


_SUGGEST_APPROX = "use method='basic', 'advanced' or 'kov' (or 'pld') for (ε, δ) events"


def _sq_over(x: float, d: float) -> float:
    """x²/d rounded up: ``inf`` past the float range, never 0 for x > 0 (a tiny step's ρ must
    not vanish from a budget), and never a half-ulp below the exact quotient."""
    if x == 0.0:
        return 0.0
    if not math.isfinite(d):
        return math.ulp(0.0)  # the smallest positive float: above the (tiny) exact value
    try:
        out = (x / d) * x
    except OverflowError:  # pragma: no cover - float * float gives inf, not an error
        return math.inf
    if math.isfinite(out) and Fraction(out) < Fraction(x) ** 2 / Fraction(d):
        out = math.nextafter(out, math.inf)
    return out


def _leaf_rho(event: ev.Event) -> float:
    if isinstance(event, ev.NoOp):
        return 0.0
    if isinstance(event, ev.Gaussian):
        m = event.noise_multiplier
        return _sq_over(1.0, 2.0 * m * m) if m > 1e-150 else math.inf
    if isinstance(event, ev.DiscreteGaussian):
        return _sq_over(float(event.sensitivity), 2.0 * event.sigma2)
    if isinstance(event, ev.Laplace):
        eps = 1.0 / event.noise_multiplier
        if eps < 1e-150:
            return _sq_over(eps, 2.0)  # the series' first term: an upper bound, rounded up
        return laplace_rho(eps) * (1.0 + 1e-15) if math.isfinite(eps) else math.inf
    if isinstance(event, ev.DiscreteLaplace):
        return _sq_over(event.sensitivity / event.scale, 2.0)
    if isinstance(event, (ev.PureDP, ev.RandomizedResponse)):
        return _sq_over(float(event.epsilon), 2.0)
    if isinstance(event, ev.Exponential):
        return _sq_over(float(event.epsilon), 8.0)
    if isinstance(event, ev.ZCDP):
        return float(event.rho)
    if isinstance(event, ev.ApproxDP):
        if event.delta == 0.0:
            return _sq_over(float(event.epsilon), 2.0)
        raise UnsupportedEvent("zcdp", event, "(ε, δ)-DP with ε > 0 and δ > 0 implies no zCDP "
                               "bound", _SUGGEST_APPROX)
    raise UnsupportedEvent("zcdp", event, "no zCDP rule for this event kind", _SUGGEST_APPROX)


def _rho_delta(event: ev.Event) -> tuple[float, float]:
    """(ρ, δ_A): ``event`` is δ_A-approximately ρ-zCDP (module docstring)."""
    if isinstance(event, ev.ApproxDP) and event.epsilon == 0.0 and event.delta > 0.0:
        return 0.0, float(event.delta)
    if isinstance(event, ev.Composed):
        parts = [_rho_delta(e) for e in event.events]
        rhos = [r for r, _ in parts]
        rho_sum = math.inf if math.inf in rhos else fsum_up(rhos)
        return rho_sum, min(1.0, fsum_up([d for _, d in parts]))
    if isinstance(event, ev.SelfComposed):
        if event.count == 0:
            return 0.0, 0.0
        r, d = _rho_delta(event.event)
        return mul_up(event.count, r), min(1.0, mul_up(event.count, d))
    if isinstance(event, ev.PoissonSampled):
        return _sampled_rho(event), 0.0
    return _leaf_rho(event), 0.0


def _sampled_rho(event: ev.PoissonSampled) -> float:
    if event.sampling_probability == 0.0:
        return 0.0
    try:
        inner: float | None = _rho(event.event)
    except UnsupportedEvent:
        inner = None
    try:
        eps = _pure._epsilon(event)
        amplified: float | None = eps * eps / 2.0
    except UnsupportedEvent:
        amplified = None
    if inner is None and amplified is None:
        raise UnsupportedEvent("zcdp", event, "the sampled event has no zCDP bound",
                               _SUGGEST_APPROX)
    return min(x for x in (inner, amplified) if x is not None)


def _rho(event: ev.Event) -> float:
    r, d = _rho_delta(event)
    if d > 0.0:
        raise UnsupportedEvent(
            "zcdp", event, f"it has a δ part ({d:.3g}): it is only δ-approximately ρ-zCDP",
            "use rho_delta(event) for the pair, or epsilon()/delta(), which convert both")
    return r


def rho(event: ev.Event, *, neighboring: str = "add_remove") -> float:
    """ρ such that ``event`` is ρ-zCDP under ``neighboring`` (see the module table); refuses an
    event with a δ part (``ApproxDP(0, δ)``: see :func:`rho_delta`).

    >>> from dpkit import events as ev
    >>> rho(ev.SelfComposed(ev.Gaussian(2.0), 10))
    1.25
    """
    return _rho(normalize(event, neighboring))


def rho_delta(event: ev.Event, *, neighboring: str = "add_remove") -> tuple[float, float]:
    """(ρ, δ_A) such that ``event`` is δ_A-approximately ρ-zCDP (Bun-Steinke 2016, Def. 8.1):
    ρ as :func:`rho`, δ_A the summed δ of its ``ApproxDP(0, δ)`` steps.

    >>> from dpkit import events as ev
    >>> rho_delta(ev.Composed((ev.Gaussian(2.0), ev.ApproxDP(0.0, 1e-12))))
    (0.125, 1e-12)
    """
    return _rho_delta(normalize(event, neighboring))


def supports(event: ev.Event, *, neighboring: str = "add_remove") -> bool:
    """Whether ``event`` has an (approximate) zCDP bound."""
    return is_supported(lambda: rho_delta(event, neighboring=neighboring))


def epsilon(event: ev.Event, delta: float, *, neighboring: str = "add_remove") -> float:
    """ε at ``delta`` of ``event`` via zCDP composition and the CKS conversion; a δ part δ_A
    is paid first: the conversion runs at ``delta − δ_A`` (``inf`` when nothing is left)."""
    delta = check_delta(delta)
    r, d = rho_delta(event, neighboring=neighboring)
    if d == 0.0:
        return rho_to_epsilon(r, delta)
    left = delta - d
    if not left > 0.0:
        return math.inf
    # delta − d rounds to nearest: step down one ulp so the conversion never gets more δ
    return rho_to_epsilon(r, math.nextafter(left, 0.0))


def delta(event: ev.Event, epsilon: float, *, neighboring: str = "add_remove") -> float:
    """δ at ``epsilon`` of ``event`` via zCDP composition and the CKS conversion, plus its δ
    part (rounded up, at most 1)."""
    epsilon = check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    r, d = rho_delta(event, neighboring=neighboring)
    base = rho_to_delta(r, epsilon)
    return base if d == 0.0 else min(1.0, fsum_up([base, d]))


def _check_rho(rho: float) -> float:
    return check_epsilon(rho, name="rho", allow_zero=True, allow_inf=True)
