"""Red-team review: a vector grid-Laplace release is charged ``DiscreteLaplace(s, S)``, which
accountants (PLD, RDP) read as a *scalar* integer shift by S. That is sound only if no split of
the L1 budget S over several coordinates has a worse privacy curve than the scalar shift.
(For the discrete Gaussian it does not hold, which is why vector Gaussian releases are charged
``ZCDP``; see tests/mechanisms/test_mechanisms_gaussian.py.) Checked exactly here: the privacy
loss of DLap(0) vs DLap(d) takes the values (d - 2x)/s, so the hockey-stick divergence of a
product is a finite sum.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpkit as dp


def _pld(scale: float, d: int) -> dict[int, tuple[float, float]]:
    """Privacy loss (in units of 1/scale) -> (P mass, Q mass) for DLap(0) vs DLap(d)."""
    q = math.exp(-1.0 / scale)
    c = (1 - q) / (1 + q)
    out = {d: (1 / (1 + q), q**d / (1 + q)), -d: (q**d / (1 + q), 1 / (1 + q))}
    for x in range(1, d):
        p0, q0 = out.get(d - 2 * x, (0.0, 0.0))
        out[d - 2 * x] = (p0 + c * q**x, q0 + c * q ** (d - x))
    return out


def _product(scale: float, shifts: tuple[int, ...]) -> dict[int, tuple[float, float]]:
    total = {0: (1.0, 1.0)}
    for d in shifts:
        new: dict[int, tuple[float, float]] = {}
        for l1, (p1, q1) in total.items():
            for l2, (p2, q2) in _pld(scale, d).items():
                p0, q0 = new.get(l1 + l2, (0.0, 0.0))
                new[l1 + l2] = (p0 + p1 * p2, q0 + q1 * q2)
        total = new
    return total


def _delta(pld: dict[int, tuple[float, float]], eps: float) -> float:
    return sum(max(0.0, p - math.exp(eps) * q) for p, q in pld.values())


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0, 20.0])
@pytest.mark.parametrize("shifts", [(1, 1), (1, 1, 1), (2, 1), (1, 1, 1, 1), (2, 2), (3, 1, 1)])
def test_split_l1_shift_is_dominated_by_the_scalar_shift(scale: float,
                                                         shifts: tuple[int, ...]) -> None:
    total = sum(shifts)
    vector, scalar = _product(scale, shifts), _product(scale, (total,))
    for eps in np.linspace(0.0, total / scale, 41):
        assert _delta(vector, float(eps)) <= _delta(scalar, float(eps)) + 1e-12


def test_vector_laplace_event_is_charged_as_the_scalar_shift() -> None:
    r = dp.mechanisms.laplace(np.zeros(3), sensitivity=1.0, epsilon=1.0,
                              source=dp.noise.seeded(0))
    k = r.details["grid_exponent"]
    assert r.event.sensitivity == math.floor(math.ldexp(1.0, -k)) + 3  # floor(D) + n
    assert dp.accounting.epsilon(r.event, 0.0) <= 1.0
