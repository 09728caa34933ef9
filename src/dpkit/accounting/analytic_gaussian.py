"""The analytic Gaussian mechanism (Balle & Wang 2018): exact (ε, δ) of Gaussian noise.

Adding N(0, σ²) to a query of L2 sensitivity Δ is (ε, δ)-DP exactly when

    δ(ε) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ)          (Balle-Wang 2018, Thm. 8)

for the neighbouring relation under which Δ is the sensitivity (add/remove-one by default in
dpkit). The curve depends only on μ = Δ/σ, and it is also the trade-off curve of μ-Gaussian DP
(Dong-Roth-Su 2019): T Gaussian releases compose exactly to μ = sqrt(Σ (Δ_i/σ_i)²); see
:mod:`dpkit.accounting.gdp`.

Numerics: with x₁ = μ/2 − ε/μ and x₂ = −μ/2 − ε/μ one has ε − x₂²/2 = −x₁²/2, so with the scaled
complementary error function erfcx(z) = e^{z²} erfc(z)

    δ = ½ e^{−x₁²/2} (erfcx(−x₁/√2) − erfcx(−x₂/√2))            (x₁ ≤ 0)
    δ = Φ(x₁) − ½ e^{−x₁²/2} erfcx(−x₂/√2)                        (x₁ > 0)

Neither form overflows, and log δ is exact far below the smallest double (ε up to 1e3,
δ down to 1e-300 and beyond). Root finding is done on log δ.

>>> round(delta_for(1.0, 1.0), 12)
0.126936737507
>>> round(calibrate_sigma(1.0, 1e-5), 10)
3.7306316348
>>> round(epsilon_for(1.0, 1e-5), 10)
4.3771780957
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dpkit.accounting._common import check_delta, check_epsilon

__all__ = [
    "calibrate_sigma",
    "delta_for",
    "delta_for_mu",
    "epsilon_for",
    "epsilon_for_mu",
    "log_delta_for_mu",
    "mu_for",
]

_SQRT2 = math.sqrt(2.0)
_SQRTPI = math.sqrt(math.pi)


def _log_erfcx_diff(z1: float, z2: float) -> float:
    """log(erfcx(z1) − erfcx(z2)) for 0 <= z1 < z2 (erfcx is decreasing)."""
    from scipy import special  # imported on use: scipy costs ~0.5 s to import

    if z1 > 1e3:
        # Asymptotic series erfcx(z) = (1/√π)(1/z − 1/(2z³) + 3/(4z⁵) − …), differenced
        # term by term so that nothing cancels: 1/z1^n − 1/z2^n = (z2 − z1)·P_n / (z1 z2)^n.
        d = z2 - z1
        p1 = 1.0 / (z1 * z2)
        p3 = (z1 * z1 + z1 * z2 + z2 * z2) * p1**3
        s = d * (p1 - 0.5 * p3)
        return math.log(s) - math.log(_SQRTPI)
    diff = float(special.erfcx(z1)) - float(special.erfcx(z2))
    if diff <= 0.0:
        return -math.inf
    return math.log(diff)


#: Below this μ the closed forms cancel (relative error ~1e-16/μ); an upper bound is used.
_SMALL_MU = 1e-6
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _log_mean_excess(a: float) -> float:
    """log E[(Z − a)₊] for Z ~ N(0, 1), i.e. log(φ(a) − a Q(a)), rounded up by 1e-9 relative.

    a <= 0: both terms are positive. 0 < a <= 100: φ(a)(1 − a R(a)) with the Mills ratio
    R(a) = √(π/2) erfcx(a/√2) (cancellation costs ~a²·1e-16 relative, covered by the 1e-9).
    a > 100: 1 − a R(a) <= 1/a² − 3/a⁴ + 15/a⁶ (the Mills-ratio asymptotic series alternates
    and brackets R; cut after a negative term of R it bounds 1 − aR from above).
    """
    from scipy import special  # imported on use: scipy costs ~0.5 s to import

    log_phi = -0.5 * a * a - _LOG_SQRT_2PI
    if a <= 0.0:
        value = math.log(math.exp(log_phi) + (-a) * float(special.ndtr(a * -1.0)))
    elif a <= 100.0:
        gap = 1.0 - a * math.sqrt(math.pi / 2.0) * float(special.erfcx(a / _SQRT2))
        value = log_phi + math.log(max(gap, 0.5 / (a * a + 1.0)))
    else:
        ia2 = 1.0 / (a * a)
        value = log_phi + math.log(ia2 * (1.0 - 3.0 * ia2 + 15.0 * ia2 * ia2))
    return value + 1e-9


def _log_delta_small_mu(mu: float, epsilon: float) -> float:
    """Upper bound on log δ(ε) of μ-GDP for small μ, tight to relative ~μ(1 + ε/μ)⁻¹.

    With c = ε/μ + μ/2 and a = c − μ = ε/μ − μ/2, the hockey-stick divergence is
    δ = ∫₀^∞ φ(a + u)(1 − e^{−μu}) du <= μ ∫₀^∞ u φ(a + u) du = μ E[(Z − a)₊]
    (1 − e^{−y} <= y). No difference of nearly equal numbers is formed.
    """
    return math.log(mu) + _log_mean_excess(epsilon / mu - mu / 2.0)


def log_delta_for_mu(mu: float, epsilon: float) -> float:
    """log δ(ε) of μ-GDP (a Gaussian with Δ/σ = μ); ``-inf`` where δ = 0, 0 where δ = 1.

    Exact (closed form) for μ >= 1e-6; below that an upper bound within relative ~μ of the
    truth (:func:`_log_delta_small_mu`), because the closed forms cancel there."""
    from scipy import special  # imported on use: scipy costs ~0.5 s to import

    if epsilon == math.inf or mu == 0.0:
        return -math.inf
    if mu == math.inf:
        return 0.0
    if mu < _SMALL_MU:
        return min(0.0, _log_delta_small_mu(mu, epsilon))
    x1 = mu / 2.0 - epsilon / mu
    x2 = -mu / 2.0 - epsilon / mu
    z2 = -x2 / _SQRT2
    if x1 <= 0.0:
        z1 = -x1 / _SQRT2
        return math.log(0.5) - 0.5 * x1 * x1 + _log_erfcx_diff(z1, z2)
    d = float(special.ndtr(x1)) - 0.5 * float(special.erfcx(z2)) * math.exp(-0.5 * x1 * x1)
    if d <= 0.0:
        return -math.inf
    return math.log(min(d, 1.0))


def delta_for_mu(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-Gaussian DP, i.e. of a Gaussian mechanism with Δ/σ = μ (exact)."""
    if not mu >= 0:
        raise ValueError(f"mu must be >= 0 (got {mu!r})")
    epsilon = check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    return math.exp(log_delta_for_mu(float(mu), epsilon))


def delta_for(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact δ at ``epsilon`` of Gaussian noise N(0, sigma²) on a query of L2 ``sensitivity``.

    The guarantee holds for the neighbouring relation under which ``sensitivity`` is stated.
    Formula: Balle-Wang 2018, Thm. 8 (see the module docstring). ``epsilon`` may be 0 (δ is then
    the total-variation distance) or ``math.inf`` (δ = 0).

    >>> round(delta_for(1.0, 1.0, sensitivity=1.0), 12)  # Balle-Wang 2018's example
    0.126936737507
    """
    sigma = _check_positive(sigma, "sigma")
    sensitivity = _check_positive(sensitivity, "sensitivity")
    epsilon = check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    return math.exp(log_delta_for_mu(sensitivity / sigma, epsilon))


def epsilon_for_mu(mu: float, delta: float) -> float:
    """Smallest ε with δ(ε) <= ``delta`` for μ-GDP (``math.inf`` at δ = 0, 0 if δ >= TV)."""
    from scipy import optimize  # imported on use: scipy costs ~0.5 s to import

    delta = check_delta(delta)
    if not mu >= 0 or math.isnan(mu):
        raise ValueError(f"mu must be >= 0 (got {mu!r})")
    if mu == 0.0:
        return 0.0
    if delta == 0.0 or mu == math.inf:
        return math.inf
    log_target = math.log(delta)
    if log_delta_for_mu(mu, 0.0) <= log_target:
        return 0.0

    def f(eps: float) -> float:
        return log_delta_for_mu(mu, eps) - log_target

    # Φ(−z) <= e^{−z²/2}/2, so at ε = μ²/2 + μ·sqrt(2 ln(1/δ)) we have δ(ε) <= Φ(x₁) <= δ/2.
    hi = mu * mu / 2.0 + mu * math.sqrt(2.0 * -log_target)
    while f(hi) > 0.0:  # pragma: no cover - the bound above always brackets
        hi *= 2.0
    lo = 0.0
    # xtol relative to the bracket: an absolute 1e-15 is no precision at all when ε ~ μ ~ 1e-17
    eps = optimize.brentq(f, lo, hi, xtol=hi * 1e-15, rtol=1e-15, maxiter=500)
    return _nudge_up(eps, lambda e: f(e) <= 0.0)


def epsilon_for(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest ε for which N(0, sigma²) noise on an L2-``sensitivity`` query is (ε, δ)-DP.

    Exact up to root-finding tolerance (~1e-15 relative), rounded up so the answer is never
    below the true ε. ``delta = 0`` gives ``math.inf`` (the Gaussian is never pure DP).

    >>> round(epsilon_for(1.0, 1e-5), 10)
    4.3771780957
    """
    sigma = _check_positive(sigma, "sigma")
    sensitivity = _check_positive(sensitivity, "sensitivity")
    return epsilon_for_mu(sensitivity / sigma, delta)


def mu_for(epsilon: float, delta: float) -> float:
    """Largest μ = Δ/σ for which the Gaussian mechanism is (``epsilon``, ``delta``)-DP."""
    from scipy import optimize  # imported on use: scipy costs ~0.5 s to import

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    log_target = math.log(delta)

    def f(log_mu: float) -> float:
        return log_delta_for_mu(math.exp(log_mu), epsilon) - log_target

    lo, hi = 0.0, 0.0
    while f(lo) > 0.0:  # δ increases with μ: walk down until below target
        lo -= 2.0
        if lo < -745.0:  # pragma: no cover - δ(μ→0) → 0 for every ε > 0
            return 0.0
    while f(hi) <= 0.0:
        hi += 2.0
        if hi > 745.0:  # pragma: no cover
            return math.inf
    log_mu = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=500)
    mu = math.exp(log_mu)
    # Round down until the guarantee holds (never report more privacy than there is).
    return _nudge(mu, lambda m: log_delta_for_mu(m, epsilon) <= log_target, -math.inf)


def calibrate_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ for which N(0, σ²) on an L2-``sensitivity`` query is (ε, δ)-DP (exact).

    Balle-Wang 2018's analytic Gaussian mechanism: solve δ(ε; Δ/σ) = δ for σ (log-space root
    finding), rounded up so the guarantee holds exactly. Compare the textbook
    σ = Δ·sqrt(2 ln(1.25/δ))/ε (4.8448 at ε = 1, δ = 1e-5; only valid for ε < 1).

    >>> round(calibrate_sigma(1.0, 1e-5), 10)
    3.7306316348
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    sensitivity = _check_positive(sensitivity, "sensitivity")
    mu = mu_for(epsilon, delta)
    sigma = sensitivity / mu
    log_target = math.log(delta)
    return _nudge_up(sigma, lambda s: log_delta_for_mu(sensitivity / s, epsilon) <= log_target)


def _nudge_up(x: float, ok: Callable[[float], bool]) -> float:
    return _nudge(x, ok, math.inf)


def _nudge(x: float, ok: Callable[[float], bool], towards: float) -> float:
    """A float from ``x`` towards ``towards`` where ok holds: steps of 1 ulp, then relative
    steps doubling up to a factor 2 (so a root found to ~1e-15 costs a few evaluations and a
    poor one cannot loop for ever). Raises ArithmeticError rather than return an unverified
    value."""
    y = x
    for i in range(2200):
        if ok(y):
            return y
        gap = abs(y) * 2.0 ** (min(i, 52) - 52)
        moved = y + gap if towards > 0 else y - gap
        step = math.nextafter(y, towards)
        y = max(moved, step) if towards > 0 else min(moved, step)
        if not math.isfinite(y):
            break
    raise ArithmeticError(  # pragma: no cover - ok() is monotone and reachable in every use
        f"analytic_gaussian: could not certify a bound near {x!r}; please report this")


def _check_positive(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number > 0 (got {value!r})")
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")
    return value
