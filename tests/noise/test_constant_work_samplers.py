"""The samplers a constant-work release still drew on today's paths (docs/attacks.md §6):
``bernoulli`` (DP-SGD's Poisson masks, FedAvg's clients), ``uniform_int`` (per-query seeds,
randomized response) and ``gaussian_float`` (DP-SGD's float noise) run fixed plans on a
``ConstantWork`` source; ``permutation`` and ``uniform_float01`` (synthetic records) were already
a function of their size and of words independent of their output.

Word counts are the deterministic proxy of the work: equal for planted words that drive the
output to its two extremes. Laws: Wilson intervals and a chi-square at 1e-6 false failure each
(fixed seeds).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
from _noise_helpers import P_FAIL, Fixed, ScriptedSource, wilson
from scipy import stats

import dpkit.noise as noise
from dpkit.noise import constant

N = 100_000


def _words(draw: Callable[[constant.ConstantWork], np.ndarray],
           src: constant.ConstantWork) -> tuple[int, np.ndarray]:
    before = src.words
    out = draw(src)
    return src.words - before, out


def test_bernoulli_words_do_not_follow_the_bits() -> None:
    """All-True words (0) and all-False words (2^32 - 1) cost the same; a word equal to p's
    32-bit prefix (today: a tie resolved with one more word per lane) costs the same too and
    is decided exactly by the plan's further words. Today's sampler pays for that tie."""
    p = Fraction(1, 3)
    lo = _words(lambda s: noise.bernoulli(p, 1000, source=s), constant.ConstantWork(Fixed(0, 0)))
    hi = _words(lambda s: noise.bernoulli(p, 1000, source=s),
                constant.ConstantWork(Fixed(0, 2**32 - 1)))
    tie_word = (1 << 32) // 3  # floor(p 2^32): today's tie, on every lane's first word
    tied = constant.ConstantWork(ScriptedSource(u32=[tie_word] * 1000))
    tie = _words(lambda s: noise.bernoulli(p, 1000, source=s), tied)
    assert np.all(lo[1]) and not np.any(hi[1])
    assert lo[0] == hi[0] == tie[0] and tied.overruns == 0
    plain = constant.ConstantWork(ScriptedSource(u32=[tie_word] * 1000)).plain
    noise.samplers.bernoulli(p, 1000, source=plain)
    assert plain.of.words >= 1000 + 2 * 1000  # type: ignore[attr-defined]  # a word per tie
    src = constant.ConstantWork(noise.seeded(5), bits=40)
    x = noise.bernoulli(0.3, N, source=src)
    low, high = wilson(int(x.sum()), N)
    assert low <= 0.3 <= high and src.overruns == 0


def test_bernoulli_ties_are_finished_exactly() -> None:
    """32-bit words equal to every digit of p = 1/3 (0x55555555): the failure event on each
    lane, finished by further (64-bit) words; zeros after the tied prefix put U below 1/3."""
    src = constant.ConstantWork(Fixed(0, 0x55555555), bits=10)
    assert noise.bernoulli(Fraction(1, 3), 4, source=src).tolist() == [True] * 4
    assert src.overruns == 1


def test_uniform_int_words_are_fixed_and_its_law_exact() -> None:
    few = _words(lambda s: noise.uniform_int(6, 50, source=s), constant.ConstantWork(Fixed(5, 5)))
    other = _words(lambda s: noise.uniform_int(6, 50, source=s),
                   constant.ConstantWork(noise.seeded(3)))
    assert few[0] == other[0] and few[1].tolist() == [5] * 50
    rejected = constant.ConstantWork(Fixed(2**64 - 1, 2**32 - 1))  # every word rejected
    w, _ = _words(lambda s: noise.uniform_int(6, 50, source=s), rejected)
    assert rejected.overruns == 1 and w > few[0]  # the failure event: finished exactly
    seed = _words(lambda s: noise.uniform_int(2**63 - 1, 1, source=s),
                  constant.ConstantWork(noise.seeded(4)))
    assert seed[0] == 4  # the per-query seed: two 64-bit words, always
    x = noise.uniform_int(7, N, source=constant.ConstantWork(noise.seeded(6), bits=40))
    assert stats.chisquare(np.bincount(x, minlength=7)).pvalue > P_FAIL


def test_gaussian_float_words_do_not_follow_the_radius() -> None:
    """The far tail (first word below 2^41 after the shift: every pair refined) against no
    tail at all: the same words on a ConstantWork source; today's sampler draws the extra
    word on the tail's lanes only."""
    tail, body = Fixed(1 << 20, 0), Fixed(2**64 - 1, 0)  # radius ~7.8 / ~0
    a = _words(lambda s: noise.gaussian_float(1.0, 1001, source=s), constant.ConstantWork(tail))
    b = _words(lambda s: noise.gaussian_float(1.0, 1001, source=s), constant.ConstantWork(body))
    assert a[0] == b[0] == 2 * 3 * 501
    assert float(np.abs(a[1]).max()) > 7.0 > 1.0 > float(np.abs(b[1]).max())
    plain_tail, plain_body = constant.ConstantWork(tail).plain, constant.ConstantWork(body).plain
    noise.gaussian_float(1.0, 1001, source=plain_tail)
    noise.gaussian_float(1.0, 1001, source=plain_body)
    assert plain_tail.of.words > plain_body.of.words  # type: ignore[attr-defined]
    z = noise.gaussian_float(2.0, N, source=constant.ConstantWork(noise.seeded(8)))
    assert stats.kstest(z / 2.0, "norm").pvalue > P_FAIL


def test_permutation_and_uniform_floats_follow_their_size_only() -> None:
    """Already data-independent: ``uniform_float01`` reads one word per value; ``permutation``
    one per element and redraws all on a collision, an event independent of the permutation
    it returns (given distinct keys every order is equally likely), so its work says nothing
    about the output. Two sources, the same words."""
    for seed in (1, 2):
        src = constant.ConstantWork(noise.seeded(seed))
        assert _words(lambda s: noise.uniform_float01(300, source=s), src)[0] == 600
        assert _words(lambda s: noise.permutation(300, source=s), src)[0] == 600
