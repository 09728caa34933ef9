"""RAPPOR, count-mean sketches, packed bit counting."""

from __future__ import annotations

from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import binomtest

import dpkit.noise as noise
from dpkit.local import CountMeanSketch, HadamardCountMeanSketch, Rappor, RapporClient
from dpkit.local._bits import count_packed_bits

from ._stats import ALPHA, chi2_band, z_two_sided


def _ln(fr: Fraction) -> Decimal:
    getcontext().prec = 60
    return (Decimal(fr.numerator) / Decimal(fr.denominator)).ln()


@pytest.mark.parametrize("n,nbytes", [(1, 1), (254, 3), (255, 128), (3000, 9), (4087, 16)])
def test_packed_bit_counts_match_unpackbits(n: int, nbytes: int) -> None:
    bits = noise.uniform_int(256, (n, nbytes), source=noise.seeded(n)).astype(np.uint8)
    want = np.unpackbits(bits, axis=1, bitorder="little").sum(axis=0)
    assert np.array_equal(count_packed_bits(bits, nbytes * 8), want)
    assert np.array_equal(count_packed_bits(bits, nbytes * 8 - 3), want[:-3])


# ------------------------------------------------------------------ RAPPOR
def test_rappor_epsilons_are_true_upper_bounds() -> None:
    r = Rappor(num_bits=32, num_hashes=2, num_cohorts=4, f=0.5, p=0.5, q=0.75,
               source=noise.seeded(0))
    half = Fraction(1, 4)
    assert 2 * 2 * _ln((1 - half) / half) <= Decimal(r.epsilon)
    assert Decimal(r.epsilon) - 4 * _ln(Fraction(3)) < Decimal("1e-12")
    qs, ps = r.q_star, r.p_star
    assert 2 * _ln(qs * (1 - ps) / (ps * (1 - qs))) <= Decimal(r.epsilon_one_report)
    assert r.event.epsilon == r.epsilon
    with pytest.raises(ValueError, match="f must be in"):
        Rappor(f=0, source=noise.seeded(0))


def test_rappor_report_law() -> None:
    """P[S_i = 1] is q* on Bloom bits and p* elsewhere (exact binomial tests, Bonferroni)."""
    r = Rappor(num_bits=16, num_hashes=2, num_cohorts=1, source=noise.seeded(1))
    N = 40_000
    rep = r.randomize(np.full(N, 12345), cohorts=np.zeros(N, dtype=np.int64),
                      source=noise.seeded(2))
    ones = count_packed_bits(rep["bits"], 16)
    bloom = r.bloom([12345], [0])[0]
    for b in range(16):
        prob = r.q_star if bloom[b] else r.p_star
        assert binomtest(int(ones[b]), N, float(prob)).pvalue > ALPHA / 16


def test_rappor_client_memoises_the_permanent_response() -> None:
    r = Rappor(num_bits=64, num_hashes=2, num_cohorts=4, source=noise.seeded(3))
    client = RapporClient(r, source=noise.seeded(4))
    reports = [client.report(7) for _ in range(400)]
    assert len(client._memo) == 1
    bits = np.array([np.unpackbits(np.frombuffer(bytes.fromhex(x["bits"]), np.uint8),
                                   bitorder="little") for x in reports])
    perm = client._memo[7][0]
    # every bit is Bernoulli(q) where B' = 1 and Bernoulli(p) where B' = 0, for all reports
    for b in range(64):
        prob = r.q if perm[b] else r.p
        assert binomtest(int(bits[:, b].sum()), 400, float(prob)).pvalue > ALPHA / 64


def test_rappor_unbiased_with_exact_covariance() -> None:
    """200 runs, fixed hashes: mean error within z·sd/√R; MSE/Var inside the χ²_200 band."""
    src = noise.seeded(5)
    r = Rappor(num_bits=32, num_hashes=2, num_cohorts=4, source=src)
    cand = np.array([11, 22, 33, 44, 55, 66])
    truth = np.array([900, 600, 300, 200, 0, 0])
    x = np.repeat(cand, truth)
    reps = 200
    errs = np.array([r.estimate(r.randomize(x, source=src), cand).counts - truth
                     for _ in range(reps)])
    var = np.diag(r.count_covariance(truth, cand))
    z = errs.mean(axis=0) / np.sqrt(var / reps)
    assert np.abs(z).max() < z_two_sided(ALPHA / 2 / cand.size)
    lo, hi = chi2_band(reps, ALPHA / 2 / 2)
    for v in (0, 5):
        assert lo < np.mean(errs[:, v] ** 2) / var[v] < hi


# ------------------------------------------------------------------ count-mean sketches
@pytest.mark.parametrize("cls", [CountMeanSketch, HadamardCountMeanSketch], ids=["cms", "hcms"])
def test_sketch_unbiased_and_variance_over_hash_draws(cls) -> None:
    """400 runs, hashes redrawn each run (the estimator is unbiased over the hash choice).

    300 distinct keys of 10 users each keep the collision term small against the RR noise, so
    errors are near-normal and MSE/Var must lie in the χ²_400 band (α/2 split over 2 keys)."""
    src = noise.seeded(6)
    keys = np.arange(300, dtype=np.int64) * 7919 + 13
    x = np.repeat(keys, 10)
    probe = np.array([keys[0], 10**15 + 3])  # a held key and an absent one
    reps = 400
    errs = []
    for _ in range(reps):
        s = cls(epsilon=2.0, num_hashes=4, width=64, source=src)
        errs.append(s.estimate(s.randomize(x, source=src), probe).counts - np.array([10, 0]))
    errs = np.array(errs)
    var = s.count_variance({int(k): 10 for k in keys}, probe)
    z = errs.mean(axis=0) / np.sqrt(var / reps)
    assert np.abs(z).max() < z_two_sided(ALPHA / 2 / 2)
    lo, hi = chi2_band(reps, ALPHA / 2 / 2)
    ratio = np.mean(errs**2, axis=0) / var
    assert np.all((lo < ratio) & (ratio < hi)), ratio


def test_sketch_privacy_parameters() -> None:
    cms = CountMeanSketch(epsilon=2.0, num_hashes=4, width=64, source=noise.seeded(0))
    flip = cms.flip
    assert 2 * _ln((1 - flip) / flip) <= Decimal(cms.epsilon) <= Decimal(2)
    h = HadamardCountMeanSketch(epsilon=2.0, num_hashes=4, width=64, source=noise.seeded(0))
    assert _ln(h.keep / (1 - h.keep)) <= Decimal(h.epsilon) <= Decimal(2)
    with pytest.raises(ValueError, match="power of two"):
        HadamardCountMeanSketch(epsilon=1.0, width=100, source=noise.seeded(0))
