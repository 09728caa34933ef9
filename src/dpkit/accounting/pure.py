"""Pure ε-DP: basic composition, group privacy, amplification by sampling.

Basic composition (Dwork-McSherry-Nissim-Smith 2006): running ε_1, …, ε_k-DP mechanisms
adaptively is (Σ ε_i)-DP. It is also a valid privacy *filter*: the budget may be checked after
each adaptively chosen step (Rogers-Roth-Ullman-Vadhan 2016).

Group privacy: an ε-DP mechanism is kε-DP for datasets differing in k units; an (ε, δ)-DP one is
(kε, k e^{(k−1)ε} δ)-DP (Vadhan 2017, Lemma 2.2).

Leaves with a pure bound (add/remove-one unless the event says otherwise):

==============================  ============================================================
``Laplace(m)``                  1/m
``DiscreteLaplace(s, Δ)``       Δ/s
``PureDP(ε)``, ``Exponential``  ε
``RandomizedResponse(ε, k)``    ε (for changing one unit's value: the local model)
``ApproxDP(ε, 0)``              ε
``ZCDP(0)``, ``NoOp()``         0
``PoissonSampled(q, e)``        log(1 + q(e^ε − 1)) (Balle-Barthe-Gaboardi 2018, Thm. 8)
==============================  ============================================================

Gaussian noise, ρ > 0 zCDP and δ > 0 events have no pure bound (:class:`UnsupportedEvent`).

>>> from dpkit import events as ev
>>> epsilon(ev.SelfComposed(ev.Laplace(2.0), 30))
15.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from dpkit import events as ev
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
    "amplify_by_sampling",
    "compose",
    "delta",
    "epsilon",
    "group_privacy",
    "pure_epsilon",
    "supports",
]

_SUGGEST = "use a method that takes delta > 0 (method='rdp', 'zcdp', 'pld' or 'gdp')"


def compose(epsilons: Iterable[float]) -> float:
    """Basic composition: the sum of the ε's (each must be >= 0).

    >>> compose([0.5, 0.25, 0.25])
    1.0
    """
    total = 0.0
    for e in epsilons:
        total += check_epsilon(e, allow_zero=True, allow_inf=True)
    return total


def group_privacy(epsilon: float, delta: float = 0.0, *, group_size: int) -> tuple[float, float]:
    """Guarantee for groups of ``group_size`` units: (kε, k e^{(k−1)ε} δ) (Vadhan 2017, 2.2).

    A δ larger than 1 is reported as 1 (no guarantee). For pure DP (δ = 0) this is kε.

    >>> group_privacy(0.5, group_size=4)
    (2.0, 0.0)
    """
    epsilon = check_epsilon(epsilon, allow_zero=True)
    delta = check_delta(delta)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1 (got {group_size!r})")
    k = group_size
    if delta == 0.0:
        return k * epsilon, 0.0
    log_d = math.log(k) + (k - 1) * epsilon + math.log(delta)
    return k * epsilon, 1.0 if log_d >= 0.0 else math.exp(log_d)


def amplify_by_sampling(epsilon: float, sampling_probability: float) -> float:
    """ε' = log(1 + q(e^ε − 1)) for Poisson sampling at rate q (add/remove; BBG 2018 Thm. 8).

    Computed without overflow for ε up to any finite value.

    >>> round(amplify_by_sampling(1.0, 0.01), 6)
    0.017037
    """
    q = float(sampling_probability)
    if q <= 0.0 or epsilon == 0.0:
        return 0.0
    if q >= 1.0:
        return float(epsilon)
    if epsilon == math.inf:
        return math.inf
    if epsilon < 30.0:
        return math.log1p(q * math.expm1(epsilon))
    return epsilon + math.log(q + (1.0 - q) * math.exp(-epsilon))


def _leaf_epsilon(event: ev.Event) -> float:
    if isinstance(event, ev.NoOp):
        return 0.0
    if isinstance(event, ev.Laplace):
        return 1.0 / event.noise_multiplier
    if isinstance(event, ev.DiscreteLaplace):
        return event.sensitivity / event.scale
    if isinstance(event, (ev.PureDP, ev.Exponential, ev.RandomizedResponse)):
        return float(event.epsilon)
    if isinstance(event, ev.ApproxDP):
        if event.delta == 0.0:
            return float(event.epsilon)
        raise UnsupportedEvent("pure", event, "an (ε, δ)-DP event with δ > 0 has no pure ε bound",
                               "use method='basic', 'advanced' or 'kov' with delta > 0")
    if isinstance(event, ev.ZCDP):
        if event.rho == 0.0:
            return 0.0
        raise UnsupportedEvent("pure", event, "ρ-zCDP with ρ > 0 implies no pure ε bound",
                               "use method='zcdp' or 'rdp' with delta > 0")
    if isinstance(event, (ev.Gaussian, ev.DiscreteGaussian)):
        raise UnsupportedEvent("pure", event, "Gaussian noise is never pure ε-DP", _SUGGEST)
    raise UnsupportedEvent("pure", event, "no pure-DP rule for this event kind", _SUGGEST)


def _epsilon(event: ev.Event) -> float:
    if isinstance(event, ev.Composed):
        parts = [_epsilon(e) for e in event.events]
        return math.inf if math.inf in parts else fsum_up(parts)
    if isinstance(event, ev.SelfComposed):
        return 0.0 if event.count == 0 else mul_up(event.count, _epsilon(event.event))
    if isinstance(event, ev.PoissonSampled):
        return amplify_by_sampling(_epsilon(event.event), event.sampling_probability)
    return _leaf_epsilon(event)


def pure_epsilon(event: ev.Event, *, neighboring: str = "add_remove") -> float:
    """The ε of ``event`` as a pure ε-DP mechanism (basic composition); raises if none exists."""
    return _epsilon(normalize(event, neighboring))


def supports(event: ev.Event, *, neighboring: str = "add_remove") -> bool:
    """Whether ``event`` has a pure ε-DP bound."""
    return is_supported(lambda: pure_epsilon(event, neighboring=neighboring))


def epsilon(event: ev.Event, delta: float = 0.0, *, neighboring: str = "add_remove") -> float:
    """Pure ε of ``event`` by basic composition; valid at every ``delta`` (it ignores δ)."""
    check_delta(delta)
    return pure_epsilon(event, neighboring=neighboring)


def delta(event: ev.Event, epsilon: float, *, neighboring: str = "add_remove") -> float:
    """δ at ``epsilon`` implied by the pure bound ε₀ alone.

    Every ε₀-DP pair is dominated by binary randomized response, whose hockey-stick divergence
    at e^ε is (e^{ε₀} − e^ε)/(1 + e^{ε₀}) for ε < ε₀ (0 for ε >= ε₀).
    """
    epsilon = check_epsilon(epsilon, allow_zero=True, allow_inf=True)
    eps0 = pure_epsilon(event, neighboring=neighboring)
    if epsilon >= eps0:
        return 0.0
    # (e^{ε0} − e^ε)/(1 + e^{ε0}) = (1 − e^{ε−ε0}) / (1 + e^{−ε0})
    return -math.expm1(epsilon - eps0) / (1.0 + math.exp(-eps0))
