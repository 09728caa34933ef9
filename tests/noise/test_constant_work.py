"""Constant-work samplers (dpkit.noise.constant): exact laws, fixed words, the plan's bounds.

Statistical tests: fixed seeds, each with false-failure probability <= 1e-6 for a correct
sampler (chi-square p-value threshold 1e-6, DKW/Massart at level 1e-6, as in
test_noise_distributions.py). The word counts are the deterministic proxy of a request's work:
a constant-work request must consume the same number of words whatever its noise.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from _noise_helpers import P_FAIL, Fixed
from scipy import stats
from test_noise_distributions import chi_square_pvalue, dgauss_cdf, dkw_distance, dlap_cdf

import dpkit.noise as noise
from dpkit.noise import constant

N = 100_000


def cw(seed: int, bits: int = 40) -> constant.ConstantWork:
    return constant.ConstantWork(noise.seeded(seed), bits=bits)


# ------------------------------------------------------------------ exact laws
@pytest.mark.parametrize("scale", [0.5, 1, 3, 1e3, 1e6, Fraction(7, 3), 1 / 0.3], ids=str)
def test_dlap_law_on_fixed_plans(scale: float | Fraction) -> None:
    x = noise.discrete_laplace(scale, N, source=cw(11))
    F = dlap_cdf(float(scale))
    assert chi_square_pvalue(x, F, max(float(scale), 0.5)) > P_FAIL
    dist, thr = dkw_distance(x, F)
    assert dist < thr


@pytest.mark.parametrize("sigma2", [0.5, 1, 10, 1e4, 1e12, Fraction(10, 3)], ids=str)
def test_dgauss_law_on_fixed_plans(sigma2: float | Fraction) -> None:
    x = noise.discrete_gaussian(sigma2, N, source=cw(12))
    F = dgauss_cdf(float(sigma2))
    assert chi_square_pvalue(x, F, max(math.sqrt(float(sigma2)) / 3, 0.25)) > P_FAIL
    dist, thr = dkw_distance(x, F)
    assert dist < thr


def test_many_single_draws_have_the_law() -> None:
    """The curator's usual request is small: 2,000 requests of one value at scale 3."""
    src = cw(13)
    x = np.concatenate([noise.discrete_laplace(3, 1, source=src) for _ in range(2000)])
    assert chi_square_pvalue(x, dlap_cdf(3.0), 3.0) > P_FAIL
    assert src.overruns == 0


@pytest.mark.parametrize("sampler", ["laplace", "gaussian"])
def test_overrun_requests_are_finished_exactly(sampler: str) -> None:
    """bits=1 makes the failure event common (<= 1/2 per request); the finished requests
    keep the exact law (the fallback continues the same i.i.d. attempts)."""
    src = cw(14, bits=1)
    draw = noise.discrete_laplace if sampler == "laplace" else noise.discrete_gaussian
    x = np.concatenate([draw(3, 7, source=src) for _ in range(1500)])
    assert src.overruns > 0
    F = dlap_cdf(3.0) if sampler == "laplace" else dgauss_cdf(3.0)
    assert chi_square_pvalue(x, F, 3.0 if sampler == "laplace" else 0.6) > P_FAIL


def test_plain_sources_get_todays_samplers() -> None:
    for f in (noise.discrete_laplace, noise.discrete_gaussian):
        a = f(3, 50, source=noise.seeded(5))
        b = getattr(noise.samplers, f.__name__)(3, 50, source=noise.seeded(5))
        assert a.tolist() == b.tolist()


# ------------------------------------------------------------------ words: the work proxy
def _words(f, param, size, src: constant.ConstantWork) -> int:  # type: ignore[no-untyped-def]
    before = src.words
    f(param, size, source=src)
    return src.words - before


@pytest.mark.parametrize("size", [1, 5, 300])
@pytest.mark.parametrize("f", [noise.discrete_laplace, noise.discrete_gaussian])
def test_words_do_not_depend_on_the_noise(f, size: int) -> None:  # type: ignore[no-untyped-def]
    """300 requests (seeds 0..299) whose largest |noise| ranges from tiny to several times the
    typical one: the same words, every request, and no overrun."""
    words, biggest = set(), []
    for seed in range(300):
        src = cw(seed)
        biggest.append(int(np.abs(f(3, size, source=src)).max()))
        words.add(src.words)
        assert src.overruns == 0
    assert len(words) == 1
    spread = 12 if f is noise.discrete_laplace else 4  # 4 scales; 2.3 standard deviations
    assert max(biggest) >= min(biggest) + spread  # the noise did differ widely


def test_planted_huge_noise_costs_the_same_words() -> None:
    """Words planted so that the geometric part is 44 (noise 177 at scale 4, probability
    e^-44) against words that give noise 0: equal word counts on the fixed plan, no overrun;
    today's sampler, fed the analogous words, spends more on the huge one (its exact path)."""
    huge, tiny = constant.ConstantWork(Fixed(1, 1)), constant.ConstantWork(Fixed(1 << 63, 0))
    assert noise.discrete_laplace(4, 1, source=huge).tolist() == [177]
    assert noise.discrete_laplace(4, 1, source=tiny).tolist() == [0]
    assert huge.words == tiny.words and huge.overruns == tiny.overruns == 0
    # today's sampler: u32 = 0 sends every geometric lane to the exact Fraction path
    plain_huge = constant.ConstantWork(Fixed(1 << 63, 0)).plain
    plain_tiny = constant.ConstantWork(Fixed(1 << 63, 1 << 31)).plain
    assert abs(int(noise.samplers.discrete_laplace(4, 1, source=plain_huge)[0])) >= 88
    assert noise.samplers.discrete_laplace(4, 1, source=plain_tiny).tolist() == [0]
    assert plain_huge.of.words > plain_tiny.of.words  # type: ignore[attr-defined]


def test_words_are_a_function_of_the_public_parameters() -> None:
    a, b = cw(1), cw(2)
    for scale in (0.5, 3, 1e6, Fraction(7, 3)):
        assert _words(noise.discrete_laplace, scale, 10, a) == _words(
            noise.discrete_laplace, scale, 10, b)
    assert _words(noise.discrete_laplace, 3, 10, a) != _words(noise.discrete_laplace, 3, 11, a)


# ------------------------------------------------------------------ the plan's bounds
@pytest.mark.parametrize(("n", "rate", "bits"), [(1, 0.3, 40), (5, 0.31, 40), (300, 0.6, 50),
                                                 (1, 1e-3, 30), (1000, 0.2, 60)])
def test_attempts_meet_the_failure_bound(n: int, rate: float, bits: int) -> None:
    m = constant.attempts_for(n, rate, bits)
    assert stats.binom.logcdf(n - 1, m, rate) <= -bits * math.log(2)
    # and not wastefully: a quarter fewer attempts would miss the bound for n = 1
    if n == 1:
        assert (1 - rate) ** int(m * 0.75) > 2.0**-bits


def test_slots_meet_the_failure_bound() -> None:
    for lanes, bits in ((40, 42), (1000, 60), (100_000, 50)):
        k = constant.slots_for(lanes, bits)
        assert stats.binom.logsf(k, lanes, 2.0**-31) <= -bits * math.log(2) + 1e-9
        assert k >= 1


def test_charge_scope_splits_the_failure_bound() -> None:
    src = cw(3, bits=40)
    assert constant.request_bits(src) == 40
    with noise.charge_scope():
        got = [constant.request_bits(src) for _ in range(4)]
        with noise.charge_scope():  # nested: the same count
            got.append(constant.request_bits(src))
    assert got == [41, 43, 44, 45, 45]
    assert sum(2.0 ** -(b - 40) for b in got) <= 1.0
    assert constant.request_bits(src) == 40


def _split_run(delay: float) -> tuple[list[int], list[list[int]]]:
    """A release (one charge scope) whose thread makes requests and hands three draws of two
    requests each to another thread (DP-SGD's noise ahead), that thread running late by
    ``delay`` seconds: the bits of the main thread's requests and of each handed draw's."""
    import threading
    import time

    src = cw(3, bits=40)
    main: list[int] = []
    drawn: list[list[int]] = []
    threads = []

    def draw(share: constant.ScopeShare | None, out: list[int]) -> None:
        time.sleep(delay)
        with noise.shared_scope(share):
            out.extend(constant.request_bits(src) for _ in range(2))

    with noise.charge_scope():
        for _ in range(3):
            main.append(constant.request_bits(src))  # e.g. the step's Poisson mask
            drawn.append([])
            t = threading.Thread(target=draw, args=(noise.reserve_share(), drawn[-1]))
            t.start()
            threads.append(t)
            main.append(constant.request_bits(src))
        for t in threads:
            t.join()
    return main, drawn


def test_a_share_of_the_scope_keeps_the_release_within_its_bound() -> None:
    """Requests made on another thread with a reserved share and those of the charging thread
    together stay within the release's ``2^-bits``, and each request's bits follow from the
    program order of its own thread, not from how the threads interleave."""
    main, drawn = _split_run(0.0)
    assert (main, drawn) == _split_run(0.02)  # the drawing thread late: the same plans
    # shares take the 2nd, 4th, 6th places of the scope: 2^-40 / (i (i + 1)), split again
    assert drawn[0] == [40 + 3 + 1, 40 + 3 + 3] and main[:2] == [41, 44]
    total = sum(2.0 ** -(b - 40) for b in main + [b for d in drawn for b in d])
    assert total <= 1.0
    assert noise.reserve_share() is None  # outside a scope: nothing to share
    src = cw(3, bits=40)
    with noise.shared_scope(None):  # a draw handed out outside any scope: its own bits
        assert constant.request_bits(src) == 40
    with noise.charge_scope(), pytest.raises(RuntimeError, match="another thread"), \
            noise.shared_scope(noise.reserve_share()):
        pass


def test_bits_for_pays_the_timing_term() -> None:
    bits = constant.bits_for(3.0, 2.0**-40)
    assert (1 + math.exp(3.0)) * 2.0**-bits <= 2.0**-41
    with pytest.raises(ValueError, match="smaller total epsilon"):
        constant.bits_for(60.0, 2.0**-40)


def test_bad_settings_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"bits must be an int in \[1, 80\]"):
        constant.ConstantWork(noise.seeded(1), bits=0)
    with pytest.raises(TypeError, match="Source"):
        constant.ConstantWork(object())  # type: ignore[arg-type]
    src = constant.ConstantWork(cw(1))  # a wrapper of a wrapper is one wrapper
    assert not isinstance(src.inner, constant.ConstantWork)
    with pytest.raises(ValueError, match="scale must be > 0"):
        noise.discrete_laplace(-1, 3, source=src)
    assert src.words == 0  # refused before any word


def test_level_coins_decide_tied_offsets_exactly() -> None:
    """``[(A_11 + V)/2^32 < e^-11]`` is true with probability ``frac(e^-11 2^32)`` (~0.70): one
    tied lane per call (a slot) and 2,000 at once (beyond the slots: finished exactly), each
    against the exact value with a binomial test at 1e-6; untied offsets decide alone."""
    a = int(constant.level_thresholds()[11])
    frac = math.exp(-11) * 2**32 - a
    src = cw(21)
    one = [bool(constant.level_coins(np.array([a]), np.array([11]), src, 40)[0][0])
           for _ in range(3000)]
    assert stats.binomtest(sum(one), len(one), frac).pvalue > P_FAIL
    assert src.overruns == 0
    many, overran = constant.level_coins(np.full(2000, a), np.full(2000, 11), src, 40)
    assert overran and stats.binomtest(int(many.sum()), 2000, frac).pvalue > P_FAIL
    plain, _ = constant.level_coins(np.array([0, a - 1, a + 1, 5]), np.array([11, 11, 11, 0]),
                                    src, 40)
    assert plain.tolist() == [True, True, False, True]


def test_geometric_part_is_exact_on_its_thresholds() -> None:
    """The 128-bit geometric lane against exact counting: every threshold ``A_v`` itself and
    its two neighbours, random prefixes, and the extremes; ties and the tail are flagged."""
    from dpkit.noise.exact import exp_neg_fixed

    _, vmax, *_ = constant._geo128()
    thresholds = [exp_neg_fixed(v, 1, 256)[0] >> 128 for v in range(1, vmax + 1)]
    rng = np.random.default_rng(5)
    prefixes = [a + d for a in thresholds for d in (-1, 0, 1)] + [0, 1, 2**64, 2**128 - 1]
    prefixes += [int(h) << 64 | int(lo) for h, lo in rng.integers(0, 2**63, (500, 2))]
    hi = np.array([p >> 64 for p in prefixes], dtype=np.uint64)
    lo = np.array([p & (2**64 - 1) for p in prefixes], dtype=np.uint64)
    v, fail = constant._geometric128(hi, lo)
    for p, vi, fi in zip(prefixes, v.tolist(), fail.tolist(), strict=True):
        if p in thresholds or p <= thresholds[-1]:
            assert fi, p
        else:
            assert not fi and vi == sum(p < a for a in thresholds), p
