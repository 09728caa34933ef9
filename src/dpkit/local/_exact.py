"""Exact rational stand-ins for e^ε, and epsilon stated in the safe direction.

Local randomizers need probabilities such as ``e^ε / (e^ε + d - 1)``; ``e^ε`` is irrational for
every rational ``ε > 0`` (Lindemann), so no sampler that works on rationals can hit it exactly.
dpkit's design (docs/local.md, "Exactness"):

1. ``ratio_below(ε, bits)`` returns a rational ``ρ = A/B`` with ``ρ <= e^ε`` *proven* (a lower
   bound of the Taylor series in integer arithmetic) and ``ρ >= e^ε (1 - 2^-bits)``.
2. The mechanism is built from ρ alone (e.g. GRR keeps the true value with probability
   ``ρ / (ρ + d - 1)``), and every probability it uses is an exact ``Fraction``, sampled exactly
   by :mod:`dpkit.noise`.
3. The privacy it gives is ``ln ρ <= ε``; :func:`stated_epsilon` returns a float ``ε'`` with
   ``ln ρ <= ε' <= ε`` proven by checking ``ρ <= exp_lower(ε')``. Events carry ``ε'``.

So the stated ε is a true upper bound, and at most ``2^-bits`` (relative) below the request.
"""

from __future__ import annotations

import math
from fractions import Fraction

from dpkit.noise import as_rational

__all__ = ["check_epsilon", "exp_lower", "ratio_below", "stated_epsilon"]

#: Largest ε accepted by the local randomizers (e^50 ~ 5e21 still leaves room for 2^-40 precision
#: inside int64 denominators).
MAX_EPSILON = 40.0


def check_epsilon(epsilon: object) -> Fraction:
    """Validate a local ε (0 < ε <= 40) and return it as an exact Fraction."""
    eps = as_rational(epsilon, "epsilon")
    if not 0 < eps <= MAX_EPSILON:
        raise ValueError(
            f"epsilon must be > 0 and <= {MAX_EPSILON:g} (got {float(eps)!r}); "
            "local randomizers are useless beyond that"
        )
    return eps


def exp_lower(x: Fraction, precision: int = 96) -> Fraction:
    """A rational ``L`` with ``L <= e^x`` (proven) and ``L >= e^x (1 - 2^-(precision - 16))``.

    ``x >= 0`` rational. Integer fixed point with ``precision`` fractional bits: every Taylor term
    ``x^k/k!`` is computed from the previous (already floored) term and floored again, so each
    computed term is <= the true one and the truncated sum is a lower bound. Each floor loses
    less than one unit; with at most ~8 x + 200 terms the relative loss is far below 2^-80.
    """
    if x < 0:
        raise ValueError(f"exp_lower needs x >= 0 (got {x})")
    num, den = x.numerator, x.denominator
    one = 1 << precision
    term = one
    total = one
    k = 0
    while term:
        k += 1
        term = term * num // (den * k)
        total += term
    return Fraction(total, one)


def ratio_below(epsilon: Fraction, bits: int = 48) -> Fraction:
    """A rational ``ρ = A / 2^s`` with ``ρ <= e^ε`` and ``ρ > e^ε (1 - 2^-bits)``.

    The denominator is a power of two so that derived probabilities have small denominators.
    """
    lower = exp_lower(epsilon, precision=bits + 48)
    scale = bits + 2
    return Fraction(math.floor(lower * (1 << scale)), 1 << scale)


def stated_epsilon(ratio: Fraction, *, power: int = 1, cap: Fraction | None = None) -> float:
    """A float ``ε'`` with ``power · ln(ratio) <= ε'`` proven, and ``ε' <= cap`` when given.

    The float estimate is nudged upward until ``ratio**power <= exp_lower(ε')`` holds exactly,
    so ``ln(ratio**power) <= ln(exp_lower(ε')) <= ε'``. If ``cap`` (the requested ε, with
    ``ratio**power <= e^cap`` already proven by construction) is smaller, ``cap`` is returned.
    """
    if ratio < 1:
        raise ValueError(f"ratio must be >= 1 (got {ratio})")
    target = ratio**power
    est = power * (math.log(ratio.numerator) - math.log(ratio.denominator))
    est = max(est, 0.0)
    est = math.nextafter(est, math.inf)
    while exp_lower(Fraction(est), precision=128) < target:
        est = math.nextafter(est + abs(est) * 1e-15, math.inf)
    if cap is not None and float(cap) <= est and Fraction(float(cap)) == cap:
        return float(cap)
    return est
