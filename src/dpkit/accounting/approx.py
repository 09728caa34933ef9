"""Approximate (ε, δ)-DP composition: basic, advanced (Dwork-Rothblum-Vadhan), optimal (KOV).

All three hold for adaptively chosen mechanisms.

**Basic** (Dwork-Kenthapadi-McSherry-Mironov-Naor 2006): (ε_i, δ_i) compose to (Σ ε_i, Σ δ_i).
Events with no fixed (ε, δ) (Gaussian, zCDP, sampled Gaussian) receive an equal share of the δ
left after the fixed δ_i's and are converted at that share by their tight conversion (analytic
Gaussian, CKS zCDP); ``PoissonSampled(q, e)`` at δ uses e at δ/q and amplifies:
(log(1 + q(e^ε − 1)), qδ) (Balle-Barthe-Gaboardi 2018, Thm. 8). Basic composition is also a
valid privacy filter (Rogers-Roth-Ullman-Vadhan 2016).

**Advanced** (Dwork-Rothblum-Vadhan 2010; Dwork-Roth 2014, Thm. 3.20): k adaptive ε-DP steps are
(ε', δ')-DP with ε' = ε sqrt(2k ln(1/δ')) + kε(e^ε − 1); for different ε_i the same martingale
proof gives sqrt(2 ln(1/δ') Σ ε_i²) + Σ ε_i(e^{ε_i} − 1). Steps with δ_i add Σ δ_i. We report
min(advanced, basic): both are valid.

**Optimal homogeneous composition** (Kairouz-Oh-Viswanath 2015; exact sum form of
Murtagh-Vadhan 2016): k-fold adaptive composition of (ε, δ₀)-DP mechanisms is (ε_g, δ_g)-DP
exactly for

    δ_g = 1 − (1 − δ₀)^k (1 − S(ε_g)),
    S(ε_g) = Σ_{l=0}^{k} C(k,l) max(0, e^{(k−l)ε} − e^{ε_g + lε}) / (1 + e^ε)^k,

and no smaller δ_g holds for every such mechanism (binary randomized response attains it). S is
summed in log space (log C(k,l) by gammaln, (1 + e^ε)^k as k(ε + log1p(e^{−ε}))), so k up to 1e6
and ε up to 1e3 neither overflow nor lose the tail; ε_g is found by bisection, rounded up. For
compositions of different ε's we apply it with the largest ε (and δ) — still valid, no longer
optimal.

>>> round(kov_epsilon(0.1, count=100, delta=1e-5), 6)
4.306791
>>> eps, d = advanced_composition(0.1, count=100, delta_prime=1e-5)
>>> round(eps, 6)
5.850235
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import numpy as np

from dpkit import events as ev
from dpkit.accounting import analytic_gaussian as _ag
from dpkit.accounting import pure as _pure
from dpkit.accounting import zcdp as _zcdp
from dpkit.accounting._common import (
    UnsupportedEvent,
    check_delta,
    check_epsilon,
    flatten,
    is_supported,
    normalize,
)

__all__ = [
    "advanced_composition",
    "basic_composition",
    "delta",
    "epsilon",
    "fixed_pairs",
    "kov_delta",
    "kov_epsilon",
    "supports",
]

APPROX_METHODS = ("basic", "advanced", "kov")

# --------------------------------------------------------------------------------------------
# Numbers


def basic_composition(pairs: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """(Σ ε_i, Σ δ_i), δ capped at 1.

    >>> basic_composition([(0.5, 1e-6), (0.5, 1e-6)])
    (1.0, 2e-06)
    """
    eps_total, delta_total = 0.0, 0.0
    for e, d in pairs:
        eps_total += check_epsilon(e, allow_zero=True, allow_inf=True)
        if not 0.0 <= d <= 1.0:
            raise ValueError(f"every delta must lie in [0, 1] (got {d!r})")
        delta_total += d
    return eps_total, min(delta_total, 1.0)


def _drv(eps_sq_sum: float, drift: float, delta_prime: float) -> float:
    # a few roundings of relative 2^-53 each: 1e-13 up keeps the bound above the exact formula
    return (math.sqrt(2.0 * -math.log(delta_prime) * eps_sq_sum) + drift) * (1.0 + 1e-13)


def _eps_expm1(e: float) -> float:
    """ε(e^ε − 1), inf for large ε (no OverflowError)."""
    return math.inf if e > 700.0 else e * math.expm1(e)


def advanced_composition(epsilon: float, delta: float = 0.0, *, count: int,
                         delta_prime: float) -> tuple[float, float]:
    """Dwork-Rothblum-Vadhan: ``count`` adaptive (ε, δ) steps are (ε', kδ + δ')-DP with
    ε' = min(kε, ε sqrt(2k ln(1/δ')) + kε(e^ε − 1)).

    >>> eps, d = advanced_composition(0.1, count=100, delta_prime=1e-5)
    >>> round(eps, 6), d
    (5.850235, 1e-05)
    """
    epsilon = check_epsilon(epsilon, allow_zero=True)
    delta = check_delta(delta)
    delta_prime = check_delta(delta_prime, name="delta_prime", allow_zero=False)
    k = _check_count(count)
    eps = min(k * epsilon, _drv(k * epsilon**2, k * _eps_expm1(epsilon), delta_prime))
    return eps, min(1.0, k * delta + delta_prime)


def _check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"count must be an int >= 0 (got {count!r})")
    return int(count)


# The exact KOV sum has one term per binomial index in a window ~120 standard deviations wide;
# beyond this many terms (k ~ 1e8 for small ε) it is too slow and too large to hold, and the
# caller gets a clean refusal instead of a MemoryError.
KOV_MAX_TERMS = 1_000_000
# gammaln(k + 1) ~ k ln k is known to 2^-52 relative: the absolute error of a log term. Past this
# bound (k ~ 1e12) the sum is not known to a useful precision and KOV refuses.
_KOV_MAX_LOG_ERROR = 1e-3


def _kov_window(epsilon: float, k: int, eps_g: float) -> tuple[int, int]:
    """(l_min, l_max) of the KOV terms that are positive and not negligible (empty: l_max <
    l_min). Raises ValueError when the window exceeds :data:`KOV_MAX_TERMS`."""
    # Terms are positive for (k − 2l)ε > ε_g, i.e. l < (kε − ε_g)/(2ε).
    top = (k * epsilon - eps_g) / (2.0 * epsilon)
    if top <= 0.0:
        return 1, 0
    l_max = min(k, math.ceil(top) - 1)
    # The binomial weights C(k,l) p^l (1−p)^{k−l}, p = 1/(1+e^ε), peak near kp; beyond ~60 sd
    # below min(peak, l_max) they are < e^-1800 of the largest kept term and vanish in floats.
    p = 1.0 / (1.0 + math.exp(min(epsilon, 700.0)))
    sd = math.sqrt(k * p * (1.0 - p))
    l_min = max(0, math.floor(min(k * p, l_max) - 60.0 * sd - 100.0))
    if l_max - l_min + 1 > KOV_MAX_TERMS:
        raise ValueError(
            f"the exact KOV sum for count={k} at ε={epsilon!r} needs {l_max - l_min + 1} terms "
            f"(more than {KOV_MAX_TERMS}); use method='advanced', 'rdp' or 'zcdp'")
    return l_min, l_max


def _log_s_error(epsilon: float, k: int) -> float:
    """A bound on the absolute float error of :func:`_log_s` (each term and the logsumexp)."""
    size = 3.0 * (k + 1.0) * math.log(k + 2.0) + 2.0 * k * min(epsilon, 1e300) + k + 1.0
    return 1e-15 * size + 1e-12


def _log_s(epsilon: float, k: int, eps_g: float) -> float:
    """log S(ε_g) of the KOV / Murtagh-Vadhan sum (−inf when S = 0)."""
    from scipy import special  # imported on use: scipy costs ~0.5 s to import

    if k == 0:
        return -math.inf
    l_min, l_max = _kov_window(epsilon, k, eps_g)
    if l_max < l_min:
        return -math.inf
    ls = np.arange(l_min, l_max + 1, dtype=float)
    log_binom = (special.gammaln(k + 1.0) - special.gammaln(ls + 1.0)
                 - special.gammaln(k - ls + 1.0))
    log_norm = k * math.log1p(math.exp(-epsilon))  # (1+e^ε)^k = e^{kε}(1+e^{−ε})^k
    with np.errstate(divide="ignore"):
        gap = eps_g - (k - 2.0 * ls) * epsilon  # < 0 on the kept range
        terms = log_binom - ls * epsilon - log_norm + np.log(-np.expm1(np.minimum(gap, 0.0)))
    return float(special.logsumexp(terms))


def kov_delta(epsilon: float, *, count: int, epsilon_total: float, delta: float = 0.0) -> float:
    """Exact δ_g at ``epsilon_total`` of ``count``-fold composition of (ε, δ)-DP mechanisms.

    >>> round(kov_delta(0.1, count=100, epsilon_total=4.306791), 8)
    1e-05
    """
    epsilon = check_epsilon(epsilon, allow_zero=True)
    epsilon_total = check_epsilon(epsilon_total, name="epsilon_total", allow_zero=True,
                                  allow_inf=True)
    delta = check_delta(delta)
    k = _check_count(count)
    if epsilon == 0.0 or epsilon_total == math.inf:
        s = 0.0
    else:  # rounded up by the sum's float error bound (an upper bound on δ, never below)
        s = math.exp(min(0.0, _log_s(epsilon, k, epsilon_total) + _log_s_error(epsilon, k)))
    # 1 − (1 − δ)^k (1 − S)
    log_keep = k * math.log1p(-delta) + math.log1p(-min(s, 1.0)) if s < 1.0 else -math.inf
    return min(1.0, -math.expm1(log_keep))


def kov_epsilon(epsilon: float, *, count: int, delta: float, step_delta: float = 0.0) -> float:
    """Smallest ε_g with δ_g(ε_g) <= ``delta`` for ``count``-fold (ε, ``step_delta``)-DP.

    ``math.inf`` when ``delta`` is below 1 − (1 − step_delta)^count (no finite ε reaches it).

    >>> round(kov_epsilon(0.1, count=100, delta=1e-5), 6)
    4.306791
    """
    epsilon = check_epsilon(epsilon, allow_zero=True)
    delta = check_delta(delta)
    step_delta = check_delta(step_delta, name="step_delta")
    k = _check_count(count)
    if k == 0 or epsilon == 0.0:
        return 0.0 if 1.0 - (1.0 - step_delta) ** k <= delta or step_delta == 0.0 else math.inf
    if not math.isfinite(k * epsilon):
        return math.inf  # kε overflows: the truth (>= the first step's ε at δ) is past floats
    err = _log_s_error(epsilon, k)
    if err > _KOV_MAX_LOG_ERROR:
        raise ValueError(f"the exact KOV sum for count={k} is not computable to a useful "
                         "precision in floats; use method='advanced', 'rdp' or 'zcdp'")
    _kov_window(epsilon, k, 0.0)  # the widest window: refuse before any work
    # S(ε_g) must be <= δ_p = 1 − (1 − δ)/(1 − δ₀)^k.
    log_ratio = math.log1p(-delta) - k * math.log1p(-step_delta)
    if log_ratio > 0.0:
        return math.inf
    if log_ratio == 0.0:  # δ = 1 − (1 − δ₀)^k exactly: S must be 0, i.e. ε_g = kε
        return k * epsilon
    # S is computed to within e^{±err}: demand S·e^{err} <= δ_p so that float error in the sum
    # can only raise ε (the answer stays an upper bound)
    log_dp = math.log(-math.expm1(log_ratio)) - err
    if _log_s(epsilon, k, 0.0) <= log_dp:
        return 0.0
    lo, hi = 0.0, k * epsilon
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi or hi - lo <= 1e-14 * hi:
            break
        if _log_s(epsilon, k, mid) <= log_dp:
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------------------------------------
# Events


_NEEDS_DELTA = (ev.Gaussian, ev.DiscreteGaussian)


def _suggest(method: str) -> str:
    return (f"method {method!r} needs every step to be pure or (ε, δ)-DP; use method='basic' "
            "(splits δ), 'gdp', 'zcdp', 'rdp' or 'pld' for Gaussian or zCDP steps")


def _unit_pair(event: ev.Event, method: str) -> tuple[float, float]:
    """The fixed (ε, δ) of a flattened unit (a leaf or a PoissonSampled node)."""
    if isinstance(event, ev.ApproxDP):
        return float(event.epsilon), float(event.delta)
    if isinstance(event, ev.PoissonSampled):
        q = event.sampling_probability
        pairs = fixed_pairs(event.event, method=method, _normalized=True)
        e_in, d_in = _basic_from_pairs(pairs)
        return _pure.amplify_by_sampling(e_in, q), q * d_in
    try:
        return _pure._leaf_epsilon(event), 0.0
    except UnsupportedEvent:
        raise UnsupportedEvent(method, event, "it has no fixed (ε, δ)", _suggest(method)) from None


def _basic_from_pairs(pairs: dict[tuple[float, float], int]) -> tuple[float, float]:
    eps = math.fsum(e * n for (e, _), n in pairs.items())
    d = math.fsum(dd * n for (_, dd), n in pairs.items())
    return eps, min(1.0, d)


def fixed_pairs(event: ev.Event, *, method: str = "advanced", neighboring: str = "add_remove",
                _normalized: bool = False) -> dict[tuple[float, float], int]:
    """The multiset {(ε_i, δ_i): count} of an event made only of pure / (ε, δ) steps."""
    norm = event if _normalized else normalize(event, neighboring)
    out: dict[tuple[float, float], int] = {}
    for unit, n in flatten(norm).items():
        pair = _unit_pair(unit, method)
        out[pair] = out.get(pair, 0) + n
    return out


def _weight(event: ev.Event) -> int:
    """Number of steps that need a share of δ (Gaussian, zCDP with ρ > 0), with multiplicity."""
    if isinstance(event, ev.Composed):
        return sum(_weight(e) for e in event.events)
    if isinstance(event, ev.SelfComposed):
        return event.count * _weight(event.event)
    if isinstance(event, ev.PoissonSampled):
        return _weight(event.event) if event.sampling_probability > 0 else 0
    if isinstance(event, _NEEDS_DELTA):
        return 1
    if isinstance(event, ev.ZCDP):
        return 1 if event.rho > 0 else 0
    return 0


def _fixed_delta(event: ev.Event) -> float:
    """Σ δ_i of the (ε, δ) steps (Poisson sampling scales by q)."""
    if isinstance(event, ev.Composed):
        return math.fsum(_fixed_delta(e) for e in event.events)
    if isinstance(event, ev.SelfComposed):
        return event.count * _fixed_delta(event.event)
    if isinstance(event, ev.PoissonSampled):
        return event.sampling_probability * _fixed_delta(event.event)
    if isinstance(event, ev.ApproxDP):
        return float(event.delta)
    return 0.0


_REL_TOL = 1e-12


def _basic(event: ev.Event, delta: float) -> float:
    """ε of ``event`` at ``delta`` by basic composition with the δ split described above."""
    w = _weight(event)
    fixed = _fixed_delta(event)
    if fixed > delta * (1.0 + _REL_TOL):
        return math.inf
    free = max(0.0, delta - fixed)
    if w > 0 and free <= 0.0:
        return math.inf
    if isinstance(event, ev.Composed):
        total = 0.0
        for e in event.events:
            we = _weight(e)
            share = _fixed_delta(e) + (free * we / w if w else 0.0)
            total += _basic(e, share)
        return total
    if isinstance(event, ev.SelfComposed):
        if event.count == 0:
            return 0.0
        return event.count * _basic(event.event, delta / event.count)
    if isinstance(event, ev.PoissonSampled):
        q = event.sampling_probability
        if q == 0.0:
            return 0.0
        inner_delta = delta / q
        if inner_delta >= 1.0:
            return 0.0  # every mechanism is (0, 1)-DP, so the sampled one is (0, q)-DP
        return _pure.amplify_by_sampling(_basic(event.event, inner_delta), q)
    if isinstance(event, ev.Gaussian):
        return _ag.epsilon_for_mu(1.0 / event.noise_multiplier, min(delta, 1.0 - 1e-16))
    if isinstance(event, ev.DiscreteGaussian):
        rho = float(event.sensitivity) ** 2 / (2.0 * event.sigma2)
        return _zcdp.rho_to_epsilon(rho, min(delta, 1.0 - 1e-16))
    if isinstance(event, ev.ZCDP):
        return _zcdp.rho_to_epsilon(event.rho, min(delta, 1.0 - 1e-16))
    if isinstance(event, ev.ApproxDP):
        return float(event.epsilon)
    try:
        return _pure._leaf_epsilon(event)
    except UnsupportedEvent:
        raise UnsupportedEvent("basic", event, "no (ε, δ) rule for this event kind",
                               "use method='rdp' or 'pld'") from None


def _check_basic_supported(event: ev.Event) -> None:
    for unit in flatten(event):
        if isinstance(unit, ev.PoissonSampled):
            _check_basic_supported(unit.event)
        elif not isinstance(unit, (*_NEEDS_DELTA, ev.ZCDP, ev.ApproxDP)):
            try:
                _pure._leaf_epsilon(unit)
            except UnsupportedEvent:
                raise UnsupportedEvent("basic", unit, "no (ε, δ) rule for this event kind",
                                       "use method='rdp' or 'pld'") from None


def _advanced(pairs: dict[tuple[float, float], int], delta: float) -> float:
    basic_eps, fixed = _basic_from_pairs(pairs)
    if fixed > delta * (1.0 + _REL_TOL):
        return math.inf
    delta_prime = delta - fixed
    if delta_prime <= 0.0:
        return basic_eps
    sq = math.fsum(e * e * n for (e, _), n in pairs.items())
    drift = math.fsum(_eps_expm1(e) * n for (e, _), n in pairs.items())
    return min(basic_eps, _drv(sq, drift, delta_prime))


def _kov(pairs: dict[tuple[float, float], int], delta: float) -> float:
    if not pairs:
        return 0.0
    k = sum(pairs.values())
    eps = max(e for e, _ in pairs)
    step_delta = max(d for _, d in pairs)
    return _kov_cached(eps, k, delta, step_delta)


@functools.lru_cache(maxsize=1024)
def _kov_cached(eps: float, k: int, delta: float, step_delta: float) -> float:
    # O(k) per evaluation: cached because report(), the dispatcher and budgets ask again
    return kov_epsilon(eps, count=k, delta=delta, step_delta=step_delta)


def supports(event: ev.Event, *, method: str = "basic", neighboring: str = "add_remove") -> bool:
    """Whether ``method`` (``"basic"``, ``"advanced"`` or ``"kov"``) can bound ``event``."""
    return is_supported(lambda: _dispatch_check(event, method, neighboring))


def _dispatch_check(event: ev.Event, method: str, neighboring: str) -> ev.Event:
    if method not in APPROX_METHODS:
        raise ValueError(f"method must be one of {APPROX_METHODS} (got {method!r})")
    norm = normalize(event, neighboring)
    if method == "basic":
        _check_basic_supported(norm)
    else:
        fixed_pairs(norm, method=method, _normalized=True)
    return norm


def epsilon(event: ev.Event, delta: float, *, method: str = "basic",
            neighboring: str = "add_remove") -> float:
    """ε at ``delta`` by ``method`` in ``("basic", "advanced", "kov")``; ``inf`` if none."""
    delta = check_delta(delta)
    norm = _dispatch_check(event, method, neighboring)
    if method == "basic":
        return _basic(norm, delta)
    pairs = fixed_pairs(norm, method=method, _normalized=True)
    if method == "advanced":
        return _advanced(pairs, delta)
    return _kov(pairs, delta)


def delta(event: ev.Event, epsilon: float, *, method: str = "basic",
          neighboring: str = "add_remove") -> float:
    """Smallest δ (up to 1e-9 relative, rounded up) at which ``method`` gives ε <= ``epsilon``."""
    epsilon = check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    norm = _dispatch_check(event, method, neighboring)
    if method == "kov":
        pairs = fixed_pairs(norm, method=method, _normalized=True)
        if not pairs:
            return 0.0
        k = sum(pairs.values())
        eps0 = max(e for e, _ in pairs)
        d0 = max(d for _, d in pairs)
        return kov_delta(eps0, count=k, epsilon_total=epsilon, delta=d0)
    if method == "advanced":
        pairs = fixed_pairs(norm, method=method, _normalized=True)
        basic_eps, fixed = _basic_from_pairs(pairs)
        if basic_eps <= epsilon:
            return fixed
        sq = math.fsum(e * e * n for (e, _), n in pairs.items())
        drift = math.fsum(_eps_expm1(e) * n for (e, _), n in pairs.items())
        if epsilon <= drift or sq == 0.0:
            return 1.0
        # sqrt(2 ln(1/δ') sq) = ε − drift
        log_dp = -((epsilon - drift) ** 2) / (2.0 * sq)
        return min(1.0, fixed + math.exp(log_dp))
    return _invert(lambda d: _basic(norm, d), epsilon)


def _invert(eps_of_delta: Callable[[float], float], epsilon: float) -> float:
    """Smallest δ with eps_of_delta(δ) <= ε, for a nonincreasing eps_of_delta (log bisection)."""
    if eps_of_delta(0.0) <= epsilon:
        return 0.0
    hi = 1.0 - 1e-16
    if eps_of_delta(hi) > epsilon:
        return 1.0
    lo_log, hi_log = math.log(1e-320), math.log(hi)
    if eps_of_delta(math.exp(lo_log)) <= epsilon:
        return math.exp(lo_log)

    def f(x: float) -> float:
        return eps_of_delta(math.exp(x)) - epsilon

    for _ in range(200):
        mid = 0.5 * (lo_log + hi_log)
        if hi_log - lo_log <= 1e-10:
            break
        if f(mid) <= 0.0:
            hi_log = mid
        else:
            lo_log = mid
    return math.exp(hi_log)
