"""A cheap lower bound on the true ε of an event at δ: the floor every accountant must clear.

Composing more mechanisms never lowers the privacy loss: the optimal ε of a composition at δ is at
least the optimal ε, at the same δ, of each of its components (post-processing: the composed
output determines the component's output). So any accountant's answer below

    floor(event, δ) = max over the components u of  L(u, δ),

with ``L(u, δ)`` a provable lower bound on the worst case the event ``u`` describes, is a
numerical failure (underflow, lost δ, rounding) and :mod:`dpkit.accounting.api` discards it.

``L`` is the exact ε(δ) of a mechanism that the event covers (so it is <= the event's worst case):

==============================  ============================================================
``PureDP(ε)``, ``ApproxDP(ε,·)``  binary randomized response at ε: ln(e^ε − δ(1 + e^ε))
``RandomizedResponse(ε, k)``    k-ary RR at ε: ln(e^ε − δ(e^ε + k − 1)) (changing one value)
``Exponential(ε)``              RR at ε/2 (its privacy loss has range ε: ε-bounded range)
``Laplace(m)``                  exact Laplace: 1/m + 2 ln(1 − δ)
``Gaussian(m)``                 exact analytic Gaussian at μ = 1/m (Balle-Wang 2018)
``ZCDP(ρ)``                     the Gaussian at μ = sqrt(2ρ) (it is exactly ρ-zCDP)
others (sampled, discrete)      0 (no claim)
==============================  ============================================================

All clipped at 0 (a mechanism whose total variation is <= δ is (0, δ)-DP, so 0 can be the
truth) and lowered by a relative 1e-9 so that a method exact for one step (``kov``, ``gdp``)
is never discarded for the last bits of rounding.

>>> from dpkit import events as ev
>>> round(floor(ev.SelfComposed(ev.Laplace(2.0), 10), 1e-6), 6)
0.499998
"""

from __future__ import annotations

import math

from dpkit import events as ev
from dpkit.accounting._common import flatten

__all__ = ["floor", "leaf_lower_bound"]

_SLACK = 1e-9


def _rr(epsilon: float, delta: float, categories: int = 2) -> float:
    """ε(δ) of k-ary randomized response at ``epsilon``, exact (0 when its TV is <= δ)."""
    if epsilon == math.inf:
        return math.inf
    # e^ε − δ(e^ε + k − 1) = e^ε (1 − δ(1 + (k − 1) e^{−ε})), in log space (no overflow)
    shrink = delta * (1.0 + (categories - 1) * math.exp(-epsilon))
    if shrink >= 1.0:
        return 0.0
    return max(0.0, epsilon + math.log1p(-shrink))


def _gaussian(mu: float, delta: float) -> float:
    from dpkit.accounting import analytic_gaussian as _ag

    if mu == math.inf:
        return math.inf
    try:
        return _ag.epsilon_for_mu(mu, delta)
    except (ArithmeticError, ValueError, RuntimeError):  # no claim where it cannot compute
        return 0.0


def leaf_lower_bound(event: ev.Event, delta: float) -> float:
    """A lower bound on the optimal ε at ``delta`` of the worst mechanism ``event`` describes."""
    if delta >= 1.0:
        return 0.0
    if isinstance(event, (ev.PureDP, ev.ApproxDP)):
        return _rr(float(event.epsilon), delta)
    if isinstance(event, ev.RandomizedResponse):
        return _rr(float(event.epsilon), delta, event.categories)
    if isinstance(event, ev.Exponential):
        return _rr(float(event.epsilon) / 2.0, delta)
    if isinstance(event, ev.Laplace):
        eps0 = 1.0 / event.noise_multiplier if event.noise_multiplier > 0 else math.inf
        return max(0.0, eps0 + 2.0 * math.log1p(-delta))
    if isinstance(event, ev.Gaussian):
        m = event.noise_multiplier
        return _gaussian(1.0 / m if m > 0 else math.inf, delta)
    if isinstance(event, ev.ZCDP):
        return _gaussian(math.sqrt(2.0 * event.rho), delta) if event.rho > 0 else 0.0
    return 0.0


def floor(event: ev.Event, delta: float) -> float:
    """The largest :func:`leaf_lower_bound` over the leaves of a normalised ``event``, slackened.

    ``event`` must already be normalised (``dpkit.accounting._common.normalize``) so that the
    leaves are stated for the neighbouring relation being accounted.
    """
    best = 0.0
    for leaf in flatten(event):
        best = max(best, leaf_lower_bound(leaf, delta))
    if best == math.inf:
        return best
    return best * (1.0 - _SLACK)
