"""Rényi DP (Mironov 2017): an RDP curve r(α) per event, composition adds curves.

A mechanism is (α, r)-RDP when D_α(M(x) ‖ M(x')) <= r for neighbours x, x'. Curves are evaluated
on a fixed grid of orders (:data:`DEFAULT_ORDERS`, dp_accounting's grid, plus :data:`EXTRA_ORDERS`)
and added under composition. Per event (add/remove-one neighbours unless stated):

==============================  ==================================================================
``Gaussian(m)``                 α/(2m²)
``DiscreteGaussian(σ², Δ)``     αΔ²/(2σ²)  (Canonne-Kamath-Steinke 2020)
``ZCDP(ρ)``                     αρ
``Laplace(m)``, ε = 1/m         (1/(α−1)) log(α/(2α−1) e^{(α−1)ε} + (α−1)/(2α−1) e^{−αε})
                                (Mironov 2017, Prop. 6; exact)
``DiscreteLaplace(s, Δ)``       exact closed form (three geometric sums), maximised over integer
                                shifts 1..Δ (Δ <= 256), never above the pure-ε bound below
``PureDP(ε)``, ``ApproxDP(ε,0)``  (1/(α−1)) log((e^{αε} + e^{(1−α)ε})/(1 + e^ε)): binary randomized
                                response, the worst ε-DP pair (the likelihood ratio lies in
                                [e^{−ε}, e^ε] and t ↦ t^α is convex)
``Exponential(ε)``              min(pure bound, αε²/8)  (Cesar-Rogers 2021)
``RandomizedResponse(ε, k)``    (1/(α−1)) log((e^{αε} + e^{(1−α)ε} + k − 2)/(e^ε + k − 1)), exact
                                for changing one unit's value
``PoissonSampled(q, G)``        Mironov-Talwar-Zhang 2019 for a Gaussian G (or compositions of
                                Gaussians, reduced to one noise multiplier as in dp_accounting):
                                log A_α/(α−1), integer α by the binomial sum, fractional α by the
                                two log-space series of MTZ19 §3.3 (as dp_accounting computes it)
``PoissonSampled(q, e)``        otherwise min(RDP of e, pure bound at log(1 + q(e^ε − 1)))
==============================  ==================================================================

Conversion to (ε, δ): the improved bound of Balle et al. 2020 (Prop. 12; also Asoodeh et al.)

    ε = min_α [ r(α) + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) ],

plus the KL shortcut of dp_accounting (δ >= sqrt(1 − e^{−r(α)}) ⇒ ε = 0) at orders >= 1.01 only.
Results never go negative or NaN: a negative RDP value (floating-point noise near α = 1) excludes
its order instead of collapsing ε to 0 (tensorflow/privacy#166).

With ``orders=DEFAULT_ORDERS`` the numbers equal dp_accounting's ``RdpAccountant`` (tested to 1e-6
relative); the default grid adds orders, so it is never looser.

**Approximate RDP**, as in :mod:`dpkit.accounting.zcdp`: an ``ApproxDP(0, δ)`` step (laws
within total variation δ: M(x) = (1 − δ)P + δP', M(x') = (1 − δ)P + δQ', D_α(P‖P) = 0) adds
nothing to the curve and δ to a δ part δ_A; the parts add under composition and the conversion
pays δ_A first (ε from the curve at δ − δ_A). :func:`rdp_delta` gives (curve, δ_A);
:func:`epsilon` / :func:`delta` convert both; :func:`rdp` refuses an event with a δ part. Only
``Composed`` / ``SelfComposed`` levels are searched for such steps (not ``PoissonSampled``).

Validity: composing RDP curves is valid for adaptively chosen mechanisms; minimising over many
orders *after* the sequence is fixed is tight for a sequence fixed in advance. As a privacy
filter (stopping adaptively on the budget), only a single fixed order is valid (Feldman-Zrnic
2021): see :class:`dpkit.accounting.budget.Budget`.

>>> from dpkit import events as ev
>>> e = ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 14062)
>>> round(epsilon(e, 1e-5, orders=DEFAULT_ORDERS), 4)
2.5966
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

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
    "DEFAULT_ORDERS",
    "EXTRA_ORDERS",
    "ORDERS",
    "delta",
    "delta_from_rdp",
    "epsilon",
    "epsilon_from_rdp",
    "rdp",
    "rdp_delta",
    "supports",
]

#: dp_accounting's default RDP orders.
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + [float(x) for x in range(11, 64)]
    + [128.0, 256.0, 512.0, 1024.0]
)
#: Orders we add: near 1 (large ε, weak mechanisms), between 64 and 1024, and large (pure-like).
EXTRA_ORDERS: tuple[float, ...] = (
    1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09,
    72.0, 80.0, 96.0, 112.0, 160.0, 192.0, 384.0, 768.0, 1536.0, 2048.0, 4096.0,
    8192.0, 16384.0, 65536.0,
)
ORDERS: tuple[float, ...] = tuple(sorted(set(DEFAULT_ORDERS) | set(EXTRA_ORDERS)))

_SUGGEST = "use method='basic', 'advanced' or 'kov' (or 'pld') for (ε, δ) events"


def _as_orders(orders: Sequence[float] | None) -> tuple[float, ...]:
    if orders is None:
        return ORDERS
    out = tuple(float(a) for a in orders)
    if not out:
        raise ValueError("orders must be a non-empty list of Rényi orders > 1")
    for a in out:
        if not a > 1.0 or math.isnan(a):
            raise ValueError(f"every RDP order must be > 1 (got {a!r}); e.g. orders=[1.5, 2, 4, 8]")
    return out


# --------------------------------------------------------------------------------------------
# Leaves


def _log_cosh(x: np.ndarray) -> np.ndarray:
    """ln cosh x to full relative precision, also for tiny x (where it is ~x²/2)."""
    x = np.abs(x)
    with np.errstate(over="ignore"):
        small = np.log1p(2.0 * np.sinh(np.minimum(x, 1.0) / 2.0) ** 2)
    large = x + np.log1p(np.exp(-2.0 * x)) - math.log(2.0)
    return np.where(x < 1.0, small, large)


# Relative rounding allowance on each RDP leaf (a few roundings of 2^-53, and the division of
# two logs that nearly cancel at α near 1): rounds the curve up, never down.
_RDP_UP = 1e-12


def _pure_rdp(eps: float, a: np.ndarray) -> np.ndarray:
    """Binary randomized response at ε: the largest RDP any ε-DP mechanism can have.

    (1/(α−1)) ln[(e^{αε} + e^{(1−α)ε})/(1 + e^ε)] = (ln cosh((α−½)ε) − ln cosh(ε/2))/(α−1):
    the cosh form keeps its precision for tiny ε, where the plain form cancels to 0 (and a
    SelfComposed count of 10^30 would then multiply 0).
    """
    if eps == 0.0:
        return np.zeros_like(a)
    with np.errstate(over="ignore", invalid="ignore"):
        num = _log_cosh((a - 0.5) * eps) - _log_cosh(np.full_like(a, eps / 2.0))
        out = np.maximum(num / (a - 1.0), 0.0) * (1.0 + _RDP_UP)
    # α ε·(ε-DP) bounds it too (RDP <= ε); also covers an overflowing product
    return np.where(np.isfinite(out), np.minimum(out, eps), eps)


def _rr_rdp(eps: float, k: int, a: np.ndarray) -> np.ndarray:
    if k == 2:
        return _pure_rdp(eps, a)
    log_k2 = math.log(k - 2)
    num = np.logaddexp(np.logaddexp(a * eps, (1.0 - a) * eps), log_k2)
    den = np.logaddexp(eps, math.log(k - 1))
    # num and den are ~ln k and cancel for small ε: add their absolute rounding error
    err = 1e-15 * (np.abs(num) + abs(den) + 1.0) / (a - 1.0)
    return np.minimum(np.maximum((num - den) / (a - 1.0), 0.0) + err, eps)


def _laplace_rdp_scalar(eps: float, a: float) -> float:
    # dp_accounting's _laplace_rdp (Mironov 2017, Prop. 6), same branches.
    if a < 1.1:
        c = math.expm1(eps * (1 - 2 * a)) / (2 * a - 1)
        v = -c * (a - 1)
        return eps + c * math.fsum(v ** (k - 1) / k for k in range(1, 100))
    return eps + math.log1p((a - 1) * math.expm1(eps * (1 - 2 * a)) / (2 * a - 1)) / (a - 1)


def _laplace_rdp(eps: float, a: np.ndarray) -> np.ndarray:
    return np.array([max(_laplace_rdp_scalar(eps, float(x)), 0.0) for x in a])


def _discrete_laplace_rdp(scale: float, sensitivity: int, a: np.ndarray) -> np.ndarray:
    """Exact D_α(DL(0) ‖ DL(d)), P(x) ∝ e^{−|x|/s}, maximised over shifts d = 1..Δ (Δ <= 256).

    With t = 1/s and c = tanh(t/2) the normaliser, Σ_x P(x)^α Q(x)^{1−α} is
    c[e^{t(α−1)d} + e^{−tαd}]/(1 − e^{−t}) + c e^{t(α−1)d} Σ_{x=1}^{d−1} e^{−t(2α−1)x}.
    """
    from scipy import special  # imported on use: scipy costs ~0.5 s to import

    t = 1.0 / scale
    eps = sensitivity * t
    bound = _pure_rdp(eps, a)
    if sensitivity > 256:
        return bound
    log_c = math.log(math.tanh(t / 2.0))
    log_1m = math.log(-math.expm1(-t))
    best = np.full_like(a, -np.inf)
    am1 = a - 1.0
    lr = -t * (2.0 * a - 1.0)  # log of the middle ratio r
    for d in range(1, sensitivity + 1):
        terms = [t * am1 * d - log_1m, -t * a * d - log_1m]
        if d > 1:
            # Σ_{x=1}^{d−1} r^x = r (1 − r^{d−1})/(1 − r)
            mid = lr + np.log(-np.expm1(lr * (d - 1))) - np.log(-np.expm1(lr))
            terms.append(t * am1 * d + mid)
        log_s = log_c + special.logsumexp(np.vstack(terms), axis=0)
        best = np.maximum(best, log_s / am1)
    return np.clip(best, 0.0, bound)


def _log_erfc(x: np.ndarray) -> np.ndarray:
    from scipy import special  # imported on use: scipy costs ~0.5 s to import

    return math.log(2.0) + special.log_ndtr(-x * math.sqrt(2.0))


@functools.lru_cache(maxsize=4096)
def _log_a_int(q: float, sigma: float, alpha: int) -> float:
    """log A_α for integer α (MTZ19 §3.2): log Σ_i C(α,i) q^i (1−q)^{α−i} e^{(i²−i)/(2σ²)}."""
    from scipy import special  # imported on use: scipy costs ~0.5 s to import

    i = np.arange(alpha + 1, dtype=float)
    log_coef = (special.gammaln(alpha + 1.0) - special.gammaln(i + 1.0)
                - special.gammaln(alpha - i + 1.0))
    s = log_coef + i * math.log(q) + (alpha - i) * math.log1p(-q) + (i * i - i) / (2 * sigma**2)
    return float(special.logsumexp(s))


_MAX_TERMS_FRAC = 20000


@functools.lru_cache(maxsize=4096)
def _log_a_frac(q: float, sigma: float, alpha: float) -> float:
    """log A_α for fractional α (MTZ19 §3.3), the two series summed in log space.

    Terms use |C(α, i)| (as dp_accounting does), an upper bound on the signed series. Stops with
    dp_accounting's rule (both term sequences decreasing and below total − 30) and adds a bound on
    the tail; returns ``inf`` (order excluded) if that has not happened after 20000 terms.
    """
    from scipy import special  # imported on use: scipy costs ~0.5 s to import

    z0 = sigma**2 * math.log(1.0 / q - 1.0) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    total_0 = total_1 = -np.inf
    last_s0 = last_s1 = -np.inf
    chunk = 64
    start = 0
    while start < _MAX_TERMS_FRAC:
        i = np.arange(start, start + chunk, dtype=float)
        j = alpha - i
        log_coef = (special.gammaln(alpha + 1.0) - special.gammaln(i + 1.0)
                    - special.gammaln(alpha - i + 1.0))
        log_t0 = log_coef + i * log_q + j * log_1mq
        log_t1 = log_coef + j * log_q + i * log_1mq
        log_e0 = math.log(0.5) + _log_erfc((i - z0) / (math.sqrt(2.0) * sigma))
        log_e1 = math.log(0.5) + _log_erfc((z0 - j) / (math.sqrt(2.0) * sigma))
        log_s0 = log_t0 + (i * i - i) / (2 * sigma**2) + log_e0
        log_s1 = log_t1 + (j * j - j) / (2 * sigma**2) + log_e1
        cum0 = np.logaddexp.accumulate(np.concatenate(([total_0], log_s0)))[1:]
        cum1 = np.logaddexp.accumulate(np.concatenate(([total_1], log_s1)))[1:]
        tot = np.logaddexp(cum0, cum1)
        prev0 = np.concatenate(([last_s0], log_s0[:-1]))
        prev1 = np.concatenate(([last_s1], log_s1[:-1]))
        done = (log_s0 < prev0) & (log_s1 < prev1) & (np.maximum(log_s0, log_s1) < tot - 30)
        hit = np.flatnonzero(done)
        if hit.size:
            n = hit[0]
            # The terms decay like i^-(α+2) when q and σ are such that the series converges only
            # polynomially; bound the tail generously by (term)·2(i+1) so the sum is never
            # short (dp_accounting stops here without a tail bound).
            tail = max(log_s0[n], log_s1[n]) + math.log(2.0 * (i[n] + 1.0))
            return float(np.logaddexp(tot[n], tail))
        total_0, total_1 = float(cum0[-1]), float(cum1[-1])
        last_s0, last_s1 = float(log_s0[-1]), float(log_s1[-1])
        start += chunk
        chunk = min(chunk * 2, 4096)
    return math.inf  # pragma: no cover - not converged: exclude this order


def _sampled_gaussian_rdp(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian mechanism (Mironov-Talwar-Zhang 2019)."""
    out = np.empty(len(orders))
    for n, a in enumerate(orders):
        if q == 0.0:
            out[n] = 0.0
        elif q == 1.0:
            out[n] = a / (2 * sigma**2)
        elif float(a).is_integer():
            out[n] = _log_a_int(q, sigma, int(a)) / (a - 1)
        else:
            out[n] = _log_a_frac(q, sigma, a) / (a - 1)
    # Sampling never hurts (add/remove): the fractional-order series, summed with |C(α, i)|, can
    # exceed the unsampled Gaussian's α/(2σ²) for large q; keep the smaller valid bound.
    return np.minimum(out, np.asarray(orders) / (2 * sigma**2))


def _effective_gaussian(event: ev.Event) -> float | None:
    """One Gaussian noise multiplier equivalent to a composition of Gaussians (or None)."""
    if isinstance(event, ev.Gaussian):
        return float(event.noise_multiplier)
    if isinstance(event, ev.SelfComposed):
        m = _effective_gaussian(event.event)
        if m is None or event.count == 0:
            return None
        return m / math.sqrt(event.count)
    if isinstance(event, ev.Composed):
        inv = 0.0
        for e in event.events:
            m = _effective_gaussian(e)
            if m is None:
                return None
            inv += m**-2
        return None if inv == 0.0 else inv**-0.5
    return None


# --------------------------------------------------------------------------------------------
# Walk


def _leaf_rdp(event: ev.Event, a: np.ndarray) -> np.ndarray:
    if isinstance(event, ev.NoOp):
        return np.zeros_like(a)
    if isinstance(event, ev.Gaussian):
        return a / (2.0 * event.noise_multiplier**2)
    if isinstance(event, ev.DiscreteGaussian):
        return a * float(event.sensitivity) ** 2 / (2.0 * event.sigma2)
    if isinstance(event, ev.ZCDP):
        return a * event.rho
    if isinstance(event, ev.Laplace):
        return _laplace_rdp(1.0 / event.noise_multiplier, a)
    if isinstance(event, ev.DiscreteLaplace):
        return _discrete_laplace_rdp(event.scale, event.sensitivity, a)
    if isinstance(event, ev.PureDP):
        return _pure_rdp(event.epsilon, a)
    if isinstance(event, ev.Exponential):
        return np.minimum(_pure_rdp(event.epsilon, a), a * (event.epsilon / 8.0) * event.epsilon)
    if isinstance(event, ev.RandomizedResponse):
        return _rr_rdp(event.epsilon, event.categories, a)
    if isinstance(event, ev.ApproxDP):
        if event.delta == 0.0:
            return _pure_rdp(event.epsilon, a)
        raise UnsupportedEvent("rdp", event, "(ε, δ)-DP with δ > 0 implies no RDP bound",
                               _SUGGEST)
    raise UnsupportedEvent("rdp", event, "no RDP rule for this event kind", _SUGGEST)


@functools.lru_cache(maxsize=2048)
def _rdp_cached(event: ev.Event, orders: tuple[float, ...]) -> np.ndarray:
    out = _rdp_compute(event, orders)
    out.flags.writeable = False  # shared through the cache
    return out


def _rdp_compute(event: ev.Event, orders: tuple[float, ...]) -> np.ndarray:
    a = np.asarray(orders, dtype=float)
    if isinstance(event, ev.Composed):
        total = np.zeros_like(a)
        for e in event.events:
            total = total + _rdp_cached(e, orders)
        return total
    if isinstance(event, ev.SelfComposed):
        if event.count == 0:
            return np.zeros_like(a)
        return event.count * _rdp_cached(event.event, orders)
    if isinstance(event, ev.PoissonSampled):
        q = event.sampling_probability
        if q == 0.0:
            return np.zeros_like(a)
        m = _effective_gaussian(event.event)
        if m is not None:
            return _sampled_gaussian_rdp(q, m, orders)
        candidates = []
        with contextlib.suppress(UnsupportedEvent):
            candidates.append(_rdp_cached(event.event, orders))
        with contextlib.suppress(UnsupportedEvent):
            candidates.append(_pure_rdp(_pure._epsilon(event), a))
        if not candidates:
            raise UnsupportedEvent("rdp", event, "the sampled event has no RDP bound", _SUGGEST)
        return np.minimum.reduce(candidates)
    return _leaf_rdp(event, a)


def rdp(event: ev.Event, orders: Sequence[float] | None = None, *,
        neighboring: str = "add_remove") -> np.ndarray:
    """The RDP curve of ``event`` at ``orders`` (default :data:`ORDERS`), as a new array;
    refuses an event with ``ApproxDP(0, δ)`` steps (see :func:`rdp_delta`)."""
    orders_t = _as_orders(orders)
    return np.array(_rdp_cached(normalize(event, neighboring), orders_t), dtype=float)


def _split_delta(event: ev.Event) -> tuple[ev.Event, float]:
    """``event`` without its ``ApproxDP(0, δ)`` steps (at ``Composed``/``SelfComposed`` levels),
    and their summed δ, rounded up."""
    if isinstance(event, ev.ApproxDP) and event.epsilon == 0.0 and event.delta > 0.0:
        return ev.NoOp(), float(event.delta)
    if isinstance(event, ev.Composed):
        parts = [_split_delta(e) for e in event.events]
        d = fsum_up([x for _, x in parts])
        return (ev.Composed(tuple(e for e, _ in parts)) if d else event), min(1.0, d)
    if isinstance(event, ev.SelfComposed) and event.count:
        inner, d = _split_delta(event.event)
        if d:
            return ev.SelfComposed(inner, event.count), min(1.0, mul_up(event.count, d))
    return event, 0.0


def rdp_delta(event: ev.Event, orders: Sequence[float] | None = None, *,
              neighboring: str = "add_remove") -> tuple[np.ndarray, float]:
    """(curve, δ_A): ``event`` is δ_A-approximately RDP with that curve (module docstring)."""
    rest, d = _split_delta(normalize(event, neighboring))
    return np.array(_rdp_cached(rest, _as_orders(orders)), dtype=float), d


def supports(event: ev.Event, *, neighboring: str = "add_remove") -> bool:
    """Whether ``event`` has an (approximate) RDP bound."""
    return is_supported(lambda: rdp_delta(event, (2.0,), neighboring=neighboring))


# --------------------------------------------------------------------------------------------
# Conversion


def epsilon_from_rdp(orders: Sequence[float], rdp_values: npt.ArrayLike,
                     delta: float) -> tuple[float, float]:
    """(ε, optimal order) from an RDP curve at ``delta`` (Balle et al. 2020, Prop. 12).

    Never negative or NaN; ``math.inf`` where no order gives a finite bound (e.g. δ = 0).
    """
    delta = check_delta(delta)
    a = np.asarray(_as_orders(orders), dtype=float)
    r = np.asarray(rdp_values, dtype=float)
    if a.shape != r.shape:
        raise ValueError(f"orders and rdp must have the same length ({a.size} != {r.size})")
    if delta == 0.0:
        if np.all(r == 0.0):
            return 0.0, float(a[0])
        return math.inf, float(a[0])
    valid = np.isfinite(r) & (r >= 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        shift = np.log(a - 1.0) - np.log(a)
        tail = (math.log(delta) + np.log(a)) / (a - 1.0)
        eps = r + shift - tail
        # the three terms cancel: add their rounding error so the bound never rounds down
        eps = eps + 1e-14 * (np.abs(r) + np.abs(shift) + np.abs(tail))
        # TV <= sqrt(1 − e^{−KL}) <= δ (Bretagnolle-Huber, KL <= D_α): (0, δ)-DP; with a margin
        kl_zero = (a >= 1.01) & (delta**2 * (1.0 - 1e-9) + np.expm1(-r) > 0.0)
    eps = np.where(kl_zero, 0.0, eps)
    eps = np.where(valid & ~np.isnan(eps), eps, np.inf)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


def delta_from_rdp(orders: Sequence[float], rdp_values: npt.ArrayLike,
                   epsilon: float) -> tuple[float, float]:
    """(δ, optimal order) from an RDP curve at ``epsilon`` (Balle et al. 2020, Prop. 12)."""
    epsilon = check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    a = np.asarray(_as_orders(orders), dtype=float)
    r = np.asarray(rdp_values, dtype=float)
    if a.shape != r.shape:
        raise ValueError(f"orders and rdp must have the same length ({a.size} != {r.size})")
    if epsilon == math.inf:
        return 0.0, float(a[-1])
    valid = np.isfinite(r) & (r >= 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_d = (a - 1.0) * (r - epsilon + np.log(a - 1.0) - np.log(a)) - np.log(a)
        kl = np.where(r > 0.0, 0.5 * np.log(-np.expm1(-r)), -np.inf)
        log_d = np.where(a >= 1.01, np.minimum(log_d, kl), log_d)
    log_d = np.where(valid & ~np.isnan(log_d), log_d, np.inf)
    i = int(np.argmin(log_d))
    return min(1.0, math.exp(min(float(log_d[i]), 0.0))), float(a[i])


def epsilon(event: ev.Event, delta: float, *, orders: Sequence[float] | None = None,
            neighboring: str = "add_remove") -> float:
    """ε at ``delta`` from the composed RDP curve of ``event`` (improved conversion); a δ part
    δ_A is paid first (the curve converts at ``delta − δ_A``; ``inf`` when nothing is left)."""
    delta = check_delta(delta)
    orders_t = _as_orders(orders)
    curve, d = rdp_delta(event, orders_t, neighboring=neighboring)
    if d:
        left = delta - d
        if not left > 0.0:
            return math.inf
        delta = math.nextafter(left, 0.0)  # never more δ than is left
    return epsilon_from_rdp(orders_t, curve, delta)[0]


def delta(event: ev.Event, epsilon: float, *, orders: Sequence[float] | None = None,
          neighboring: str = "add_remove") -> float:
    """δ at ``epsilon`` from the composed RDP curve of ``event``, plus its δ part."""
    orders_t = _as_orders(orders)
    curve, d = rdp_delta(event, orders_t, neighboring=neighboring)
    base = delta_from_rdp(orders_t, curve, epsilon)[0]
    return base if not d else min(1.0, fsum_up([base, d]))
