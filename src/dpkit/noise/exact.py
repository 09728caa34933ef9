"""Exact arithmetic for the rare lanes the vectorised fast paths cannot decide.

Everything here uses Python integers only (no floats, no libm). Two pieces:

* :func:`exp_neg_fixed` -- integers ``lo <= exp(-n/d) * 2**P <= hi`` (certified bounds), from
  the alternating Taylor series with floor/ceil rounding, and binary powering of ``exp(-1)``.
* :class:`LazyUniform` -- a uniform real ``U`` in [0, 1) of which only a prefix of bits has been
  drawn; comparisons with a target ``x`` draw further 64-bit words until every real with the
  drawn prefix lies on the same side of ``x``. The answer is exactly ``[U < x]``, so
  ``P(True) = x``.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sources import Source

__all__ = ["LazyUniform", "exp_neg_fixed"]


def _exp_neg_frac_fixed(r: int, d: int, W: int) -> tuple[int, int]:
    """Bounds ``lo <= exp(-r/d) * 2**W <= hi`` for ``0 <= r <= d`` (so the argument is in [0,1]).

    Terms ``f**i / i!`` are non-increasing for ``f <= 1``, so the alternating series' tail after
    term ``i`` is at most ``f**i / i!``; each term is bracketed by floor/ceil fixed-point values.
    """
    one = 1 << W
    t_lo = t_hi = one
    s_lo = s_hi = one
    i = 0
    while True:
        i += 1
        den = d * i
        t_lo = (t_lo * r) // den
        t_hi = -((-t_hi * r) // den)
        if i & 1:
            s_lo -= t_hi
            s_hi -= t_lo
        else:
            s_lo += t_lo
            s_hi += t_hi
        if t_hi <= 1:
            break
    # tail magnitude <= f**(i+1)/(i+1)! <= f**i/i! <= t_hi / 2**W <= 1 unit
    return max(s_lo - 1, 0), min(s_hi + 1, one)


def _pow_fixed(lo: int, hi: int, m: int, W: int) -> tuple[int, int]:
    """Bounds on ``x**m * 2**W`` given ``lo <= x * 2**W <= hi`` (all non-negative)."""
    r_lo = r_hi = 1 << W
    b_lo, b_hi = lo, hi
    while m:
        if m & 1:
            r_lo = (r_lo * b_lo) >> W
            r_hi = -((-r_hi * b_hi) >> W)
        m >>= 1
        if m:
            b_lo = (b_lo * b_lo) >> W
            b_hi = -((-b_hi * b_hi) >> W)
    return r_lo, r_hi


@lru_cache(maxsize=512)
def _exp_neg_int_fixed(m: int, W: int) -> tuple[int, int]:
    """Bounds on ``exp(-m) * 2**W`` for an integer ``m >= 1`` (cached: few distinct m, W)."""
    e_lo, e_hi = _exp_neg_frac_fixed(1, 1, W)
    return _pow_fixed(e_lo, e_hi, m, W)


def exp_neg_fixed(n: int, d: int, P: int) -> tuple[int, int]:
    """Integers ``lo, hi`` with ``lo <= exp(-n/d) * 2**P <= hi`` (``n >= 0``, ``d >= 1``).

    The width ``hi - lo`` tends to 0 (relative to ``2**P``) as ``P`` grows, which is all the lazy
    comparison needs to terminate with probability 1.
    """
    if n < 0 or d <= 0:
        raise ValueError("exp_neg_fixed needs n >= 0 and d >= 1")
    if n == 0:
        return 1 << P, 1 << P
    m, r = divmod(n, d)
    if m >= P:  # exp(-gamma) <= exp(-m) < 2**-m <= 2**-P
        return 0, 1
    W = P + 2 * m.bit_length() + 24
    lo, hi = _exp_neg_frac_fixed(r, d, W)
    if m:
        p_lo, p_hi = _exp_neg_int_fixed(m, W)
        lo = (lo * p_lo) >> W
        hi = -((-hi * p_hi) >> W)
    shift = W - P
    return lo >> shift, -((-hi) >> shift)


class LazyUniform:
    """A uniform real in [0, 1) known by its first ``nbits`` bits (``prefix``); more on demand."""

    __slots__ = ("nbits", "prefix", "source")

    def __init__(self, prefix: int, nbits: int, source: Source) -> None:
        self.prefix = int(prefix)
        self.nbits = int(nbits)
        self.source = source

    def _extend(self) -> None:
        self.prefix = (self.prefix << 64) | int(self.source.uint64(1)[0])
        self.nbits += 64

    def less_than_fraction(self, x: Fraction) -> bool:
        """Exactly ``[U < x]`` for rational ``x``."""
        n, d = x.numerator, x.denominator
        while True:
            scaled = n << self.nbits  # x * 2**nbits * d
            if (self.prefix + 1) * d <= scaled:
                return True  # U < (prefix+1)/2**nbits <= x
            if self.prefix * d >= scaled:
                return False  # U >= prefix/2**nbits >= x
            self._extend()

    def less_than_exp_neg(self, gamma: Fraction) -> bool:
        """Exactly ``[U < exp(-gamma)]`` for rational ``gamma >= 0``."""
        n, d = gamma.numerator, gamma.denominator
        if n == 0:
            return True  # U < 1 always
        while True:
            P = self.nbits + 64
            lo, hi = exp_neg_fixed(n, d, P)
            if (self.prefix + 1) << 64 <= lo:
                return True  # U < (prefix+1)/2**nbits <= lo/2**P <= exp(-gamma)
            if self.prefix << 64 >= hi:
                return False  # U >= prefix/2**nbits >= hi/2**P >= exp(-gamma)
            self._extend()
