"""μ-Gaussian DP (Dong-Roth-Su 2019): exact accounting for compositions of Gaussian mechanisms.

A Gaussian mechanism with noise multiplier m = σ/Δ is μ-GDP with μ = 1/m, and μ-GDP mechanisms
compose *exactly* (adaptively, Dong-Roth-Su 2019 Cor. 3.3): T of them give μ = sqrt(Σ μ_i²). The
(ε, δ) curve of μ-GDP is the analytic Gaussian one (Balle-Wang 2018):

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2),

computed in log space (:mod:`dpkit.accounting.analytic_gaussian`), so 100 × (σ/Δ = 2), μ = 5,
gives ε = 55.70932 at δ = 1e-18 (dp_accounting's PLD returns inf there).

Only compositions of ``Gaussian`` events (and ``NoOp``) are supported. Poisson-subsampled Gaussians
are *not*: the central-limit μ for DP-SGD (Bu et al. 2020) is an approximation that can lie below
the true ε (Opacus' GDP accountant reports 2.32 where the truth is 2.38), so it is never used
here; ask for ``"pld"`` or ``"rdp"``. The discrete Gaussian is not exactly GDP either (use
``"zcdp"``/``"rdp"``).

>>> from dpkit import events as ev
>>> round(epsilon(ev.SelfComposed(ev.Gaussian(2.0), 100), 1e-12), 5)
47.04923
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from dpkit import events as ev
from dpkit.accounting import analytic_gaussian as _ag
from dpkit.accounting._common import (
    UnsupportedEvent,
    check_delta,
    check_epsilon,
    is_supported,
    normalize,
)

__all__ = ["compose", "delta", "epsilon", "mu", "mu_to_delta", "mu_to_epsilon", "supports"]


def compose(mus: Iterable[float]) -> float:
    """sqrt(Σ μ_i²): exact composition of μ_i-GDP mechanisms.

    >>> compose([3.0, 4.0])
    5.0
    """
    total = 0.0
    for m in mus:
        if not m >= 0:
            raise ValueError(f"every mu must be >= 0 (got {m!r})")
        total += m * m
    return math.sqrt(total)


def mu_to_epsilon(mu: float, delta: float) -> float:
    """Smallest ε such that μ-GDP implies (ε, δ)-DP (exact)."""
    return _ag.epsilon_for_mu(mu, delta)


def mu_to_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (exact)."""
    return _ag.delta_for_mu(mu, epsilon)


_SUGGEST = "use method='pld' or 'rdp' (or 'zcdp')"


def _mu_sq(event: ev.Event) -> float:
    if isinstance(event, ev.NoOp):
        return 0.0
    if isinstance(event, ev.Gaussian):
        return event.noise_multiplier**-2
    if isinstance(event, ev.Composed):
        return math.fsum(_mu_sq(e) for e in event.events)
    if isinstance(event, ev.SelfComposed):
        return 0.0 if event.count == 0 else event.count * _mu_sq(event.event)
    if isinstance(event, ev.PoissonSampled):
        if event.sampling_probability == 0.0:
            return 0.0
        if event.sampling_probability == 1.0:
            return _mu_sq(event.event)
        raise UnsupportedEvent(
            "gdp", event,
            "subsampled Gaussians are not exactly GDP (the CLT μ can under-estimate ε)", _SUGGEST)
    raise UnsupportedEvent("gdp", event, "only compositions of Gaussian events are exactly μ-GDP",
                           _SUGGEST)


def mu(event: ev.Event, *, neighboring: str = "add_remove") -> float:
    """μ such that ``event`` is μ-GDP (exactly), for compositions of Gaussian events.

    >>> from dpkit import events as ev
    >>> mu(ev.SelfComposed(ev.Gaussian(2.0), 100))
    5.0
    """
    return math.sqrt(_mu_sq(normalize(event, neighboring)))


def supports(event: ev.Event, *, neighboring: str = "add_remove") -> bool:
    """Whether ``event`` is a composition of Gaussian events (exact μ-GDP)."""
    return is_supported(lambda: mu(event, neighboring=neighboring))


def epsilon(event: ev.Event, delta: float, *, neighboring: str = "add_remove") -> float:
    """Exact ε at ``delta`` of a composition of Gaussian events."""
    delta = check_delta(delta)
    return _ag.epsilon_for_mu(mu(event, neighboring=neighboring), delta)


def delta(event: ev.Event, epsilon: float, *, neighboring: str = "add_remove") -> float:
    """Exact δ at ``epsilon`` of a composition of Gaussian events."""
    epsilon = check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    return _ag.delta_for_mu(mu(event, neighboring=neighboring), epsilon)
