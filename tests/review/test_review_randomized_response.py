"""Red-team review: randomized response must realise *at most* the stated epsilon.

The privacy loss of k-RR with keep probability p is max(ln(p/q), ln(q/p)), q = (1-p)/(k-1).
The original check only bounded p/q; for epsilon so small that no float lies in
[1/(1+(k-1)e^eps), 1/(1+(k-1)e^-eps)], the float keep probability fell *below* 1/k and the
other ratio, q/p, exceeded e^eps (e.g. k = 3, eps = 1e-17: realised eps 8.3e-17).
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from dpkit.mechanisms.randomized_response import keep_probability, randomized_response


def _realised_exceeds(epsilon: float, p: float, k: int) -> bool:
    P = Fraction(p)
    q = (1 - P) / (k - 1)
    ratio = max(P / q, q / P)  # exact e^(realised epsilon)
    with localcontext() as ctx:
        ctx.prec = 400  # epsilon down to 5e-324: e^eps - 1 must be resolved
        e = Decimal(epsilon).exp()
        realised = Decimal(ratio.numerator) / Decimal(ratio.denominator)
    return realised > e


@pytest.mark.parametrize("k", [2, 3, 7, 1000])
@pytest.mark.parametrize("epsilon", [5e-324, 1e-300, 1e-17, 3e-16, 1e-15, 1e-9, 0.5])
def test_keep_probability_never_exceeds_epsilon_in_either_direction(epsilon: float,
                                                                    k: int) -> None:
    try:
        p = keep_probability(epsilon, k)
    except ValueError as exc:  # refusing is sound; it must say why
        assert "too small" in str(exc)
        return
    assert not _realised_exceeds(epsilon, p, k)


def test_tiny_epsilon_is_refused_not_overspent() -> None:
    with pytest.raises(ValueError, match="too small"):
        randomized_response([0, 1, 2], epsilon=1e-17, categories=[0, 1, 2])
