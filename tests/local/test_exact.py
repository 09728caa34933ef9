"""The rational stand-ins for e^ε and the safe-direction stated ε."""

from __future__ import annotations

from decimal import Decimal, getcontext
from fractions import Fraction

import pytest

from dpkit.local._exact import check_epsilon, exp_lower, ratio_below, stated_epsilon


def _exp(x: Fraction) -> Decimal:
    getcontext().prec = 80
    return (Decimal(x.numerator) / Decimal(x.denominator)).exp()


def _dec(fr: Fraction) -> Decimal:
    getcontext().prec = 80
    return Decimal(fr.numerator) / Decimal(fr.denominator)


@pytest.mark.parametrize("x", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(0.1),
                               Fraction(7, 2), Fraction(40)])
def test_exp_lower_is_a_tight_lower_bound(x: Fraction) -> None:
    lo = exp_lower(x)
    assert _dec(lo) <= _exp(x)
    assert _exp(x) - _dec(lo) <= _exp(x) * Decimal(2) ** -70


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 2.302585092994046, 12.0])
def test_ratio_below_and_stated_epsilon(eps: float) -> None:
    e = Fraction(eps)
    rho = ratio_below(e)
    assert _dec(rho) <= _exp(e)
    assert _dec(rho) >= _exp(e) * (1 - Decimal(2) ** -48)
    stated = stated_epsilon(rho, cap=e)
    assert stated <= eps
    getcontext().prec = 80
    assert _dec(rho).ln() <= Decimal(stated)
    # without the cap the bound is still valid and tight
    free = stated_epsilon(rho)
    assert _dec(rho).ln() <= Decimal(free) <= _dec(rho).ln() + Decimal("1e-12")


def test_stated_epsilon_with_power_and_bad_inputs() -> None:
    rho = Fraction(3, 2)
    s = stated_epsilon(rho, power=4)
    getcontext().prec = 80
    assert 4 * _dec(rho).ln() <= Decimal(s)
    with pytest.raises(ValueError, match="ratio must be >= 1"):
        stated_epsilon(Fraction(1, 2))
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        check_epsilon(0)
    with pytest.raises(TypeError, match=r"epsilon must be an int, fractions\.Fraction or float"):
        check_epsilon("1")

