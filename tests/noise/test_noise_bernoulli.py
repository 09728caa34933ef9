"""Bernoulli(p), Bernoulli(exp(-gamma)), uniform integers, and the exact fallback paths.

Frequency tests use Wilson intervals at z = 4.892: false-failure probability 1e-6 per interval.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from _noise_helpers import P_FAIL, ScriptedSource, wilson
from scipy import stats

import dpkit.noise as noise
from dpkit.noise import samplers
from dpkit.noise.exact import LazyUniform, exp_neg_fixed

N = 200_000


def _check_rate(x: np.ndarray, p: float) -> None:
    lo, hi = wilson(int(x.sum()), x.size)
    assert lo <= p <= hi, f"observed {x.mean():.6g}, expected {p:.6g}, interval ({lo}, {hi})"


@pytest.mark.parametrize(
    "p",
    [
        Fraction(1, 3),
        0.3,
        1e-5,
        1 - 1e-5,
        Fraction(10**40 + 1, 3 * 10**40),  # huge rational: exact integer thresholds
        Fraction(2**100 - 1, 2**101),
        0.5,
    ],
)
def test_bernoulli_frequency(p: float | Fraction) -> None:
    x = noise.bernoulli(p, N, source=noise.seeded(11))
    assert x.dtype == bool and x.shape == (N,)
    _check_rate(x, float(p))


def test_bernoulli_endpoints_exact() -> None:
    src = noise.seeded(1)
    assert not noise.bernoulli(0, 1000, source=src).any()
    assert noise.bernoulli(1, 1000, source=src).all()
    assert noise.bernoulli(Fraction(0), (2, 3), source=src).shape == (2, 3)



@pytest.mark.parametrize(
    "p",
    [Fraction(1, 3), Fraction(85, 256), Fraction(1, 1000), Fraction(511, 512), 0.3, 1e-5],
)
def test_bernoulli_matrix_frequency(p: float | Fraction) -> None:
    """One byte per draw; 1/3 and 1/1000 go through the tie lanes (256p not an integer)."""
    x = noise.bernoulli_matrix(p, (400, 1000), source=noise.seeded(13))
    assert x.dtype == bool and x.shape == (400, 1000)
    _check_rate(x, float(p))


def test_bernoulli_matrix_tie_lanes_are_driven() -> None:
    # p = 1/3: T = floor(256/3) = 85 and 256p - T = 1/3. Bytes (little-endian word) 84, 85, 86, 85:
    # lane 0 True, lane 2 False, lanes 1 and 3 tie and take Bernoulli(1/3) from the u32 queue,
    # A = floor(2**32/3): A - 1 < A (True), A + 1 > A (False).
    A = (1 << 32) // 3
    word = int.from_bytes(bytes([84, 85, 86, 85, 0, 0, 0, 0]), "little")
    src = ScriptedSource(u32=[A - 1, A + 1], u64=[word])
    out = noise.bernoulli_matrix(Fraction(1, 3), 4, source=src)
    assert out.tolist() == [True, True, False, False]


def test_bernoulli_matrix_endpoints_and_errors() -> None:
    src = noise.seeded(1)
    assert not noise.bernoulli_matrix(0, (3, 5), source=src).any()
    assert noise.bernoulli_matrix(Fraction(1), 7, source=src).all()
    assert noise.bernoulli_matrix(0.5, (0, 4), source=src).shape == (0, 4)
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        noise.bernoulli_matrix(Fraction(3, 2), 3)
    with pytest.raises(TypeError, match="p must be an int"):
        noise.bernoulli_matrix("0.5", 3)  # type: ignore[arg-type]


def test_bernoulli_lanes_is_exact_for_each_lane() -> None:
    """Three Wilson intervals at 1e-6 / 3 each (1e-6 for the test); 0 and 1 are exact."""
    p = np.array([0.3, 1e-3, 0.5 + 2**-40, 0.0, 1.0])
    n = 60_000
    draws = noise.bernoulli_lanes(np.tile(p, (n, 1)), source=noise.seeded(1))
    assert draws.shape == (n, 5) and draws.dtype == bool
    z = float(stats.norm.isf(P_FAIL / 6))
    for j, pj in enumerate(p):
        ones = int(draws[:, j].sum())
        if pj in (0.0, 1.0):
            assert ones == int(pj) * n
        else:
            lo, hi = wilson(ones, n, z)
            assert lo <= pj <= hi, (pj, ones / n)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        noise.bernoulli_lanes([0.5, float("nan")])


def test_bernoulli_lanes_tie_lane_is_driven() -> None:
    # p = 1e-5 (its float has bits below 2**-62): T = floor(p 2**62); a word equal to T ties and
    # finishes with Bernoulli(p 2**62 - T), drawn from the u32 queue (word 0: True, as rem > 0).
    p = 1e-5
    scaled = Fraction(p) * 2**62
    T = math.floor(scaled)
    assert scaled != T
    src = ScriptedSource(u64=[T, T - 1, T + 1], u32=[0])
    assert noise.bernoulli_lanes([p, p, p], source=src).tolist() == [True, True, False]

@pytest.mark.parametrize(
    "gamma",
    [Fraction(1, 10**9), 1e-3, 0.5, 1, Fraction(7, 3), 2.5, 10, Fraction(10**30 + 7, 10**30)],
)
def test_bernoulli_exp_frequency(gamma: float | Fraction) -> None:
    x = noise.bernoulli_exp(gamma, N, source=noise.seeded(12))
    _check_rate(x, math.exp(-float(gamma)))


def test_bernoulli_exp_zero_and_large() -> None:
    src = noise.seeded(2)
    assert noise.bernoulli_exp(0, 1000, source=src).all()
    # P(any True) = 1e6 * exp(-60) < 1e-20
    assert not noise.bernoulli_exp(60, 1_000_000, source=src).any()
    assert not noise.bernoulli_exp(Fraction(10**12), 1000, source=src).any()


@pytest.mark.parametrize("p", [1.5, -0.1, Fraction(4, 3)])
def test_bernoulli_rejects_bad_p(p: float) -> None:
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        noise.bernoulli(p, 3)


def test_bernoulli_exp_rejects_negative() -> None:
    with pytest.raises(ValueError, match=r"gamma must be >= 0 \(got -1\)"):
        noise.bernoulli_exp(-1, 3)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_parameters(bad: float) -> None:
    with pytest.raises(ValueError, match="must be finite"):
        noise.bernoulli(bad, 3)


def test_type_errors_name_the_types() -> None:
    with pytest.raises(TypeError, match=r"int, fractions\.Fraction or float"):
        noise.bernoulli("0.5", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="size must be"):
        noise.bernoulli(0.5, 3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size must be non-negative"):
        noise.bernoulli(0.5, -1)


# ----------------------------------------------------------------- exact fallback, driven directly
def test_bernoulli_fallback_is_driven_and_exact() -> None:
    # p = 1/3 = 0.010101...b; A = floor(2**32/3) = 0x55555555 is the ambiguous word.
    A = (1 << 32) // 3
    assert A == 0x55555555
    # next 64 bits 0x5555... keep it ambiguous; then 0 decides U < 1/3.
    src = ScriptedSource(u32=[A, A], u64=[0x5555555555555555, 0, 0xFFFFFFFFFFFFFFFF])
    out = noise.bernoulli(Fraction(1, 3), 2, source=src)
    assert out.tolist() == [True, False]
    assert src.calls64 == 3  # two extensions for lane 0, one for lane 1


def test_bernoulli_exp_fallback_is_driven() -> None:
    A = samplers._exp_neg_floor32(Fraction(1))  # floor(e**-1 * 2**32)
    assert int(math.exp(-1) * 2**32) == A
    src = ScriptedSource(u32=[A, A, A - 1, A + 1], u64=[0, 0xFFFFFFFFFFFFFFFF])
    out = noise.bernoulli_exp(1, 4, source=src)
    # e**-1 * 2**32 = A + 0.55..., so A + 0/2**64 < it and A + (2**64-1)/2**64 > it
    assert out.tolist() == [True, False, True, False]


def test_lazy_uniform_matches_exact_comparison() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n, d = int(rng.integers(0, 10**6)), int(rng.integers(1, 10**6))
        prefix = int(rng.integers(0, 2**32))
        lazy = LazyUniform(prefix, 32, noise.seeded(int(rng.integers(0, 2**31))))
        res = lazy.less_than_fraction(Fraction(n, d))
        # the decided prefix fixes U's interval; check it is on the reported side of n/d
        lo, hi = Fraction(lazy.prefix, 2**lazy.nbits), Fraction(lazy.prefix + 1, 2**lazy.nbits)
        assert (hi <= Fraction(n, d)) if res else (lo >= Fraction(n, d))


@pytest.mark.parametrize(("n", "d"), [(1, 1), (3, 7), (50, 1), (10**20 + 3, 10**18), (1, 10**30)])
def test_exp_neg_fixed_brackets(n: int, d: int) -> None:
    for P in (64, 200, 600):
        lo, hi = exp_neg_fixed(n, d, P)
        assert 0 <= lo <= hi
        assert hi - lo <= 4  # a few units in the last place
    lo, hi = exp_neg_fixed(n, d, 200)
    approx = math.exp(-n / d)
    assert lo / 2**200 <= approx * (1 + 1e-15) + 1e-300
    assert hi / 2**200 >= approx * (1 - 1e-15) - 1e-300


def test_exp_neg_fixed_exact_enough() -> None:
    # exp(-1) to 200 bits, against the rational series computed independently with Fractions
    s = sum(Fraction((-1) ** i, math.factorial(i)) for i in range(80))
    lo, hi = exp_neg_fixed(1, 1, 200)
    assert Fraction(lo, 2**200) <= s <= Fraction(hi, 2**200)


# ------------------------------------------------- vectorised BernExp kernel: fast path never wrong
def _exact_side(u: int, gamma: Fraction) -> bool | None:
    """True if [u, u+1)/2**32 is below exp(-gamma), False if above, None if it straddles."""
    lo, hi = exp_neg_fixed(gamma.numerator, gamma.denominator, 160)
    if (u + 1) << 128 <= lo:
        return True
    if u << 128 >= hi:
        return False
    return None


def test_kernel_fast_path_never_contradicts_exact() -> None:
    """Adversarial words next to the threshold: the float fast path must defer or be right."""
    rng = np.random.default_rng(9)
    ints = rng.integers(1, 10**9, size=(300, 2))
    gammas = [Fraction(int(a) - 1, int(b)) for a, b in ints]
    gammas += [Fraction(int(rng.integers(0, 2**56)), 2**56) for _ in range(100)]
    gammas += [Fraction(k, 1) for k in range(0, 70)] + [Fraction(639, 10), Fraction(6401, 100)]
    for gamma in gammas:
        A = samplers._exp_neg_floor32(gamma) if gamma else 2**32
        words = [w for w in (A - 2, A - 1, A, A + 1, A + 2) if 0 <= w < 2**32]
        g = np.full(len(words), float(gamma))
        src = ScriptedSource(u32=words)
        calls: list[int] = []

        def exact(i: int, gamma: Fraction = gamma, calls: list[int] = calls) -> Fraction:
            calls.append(i)
            return gamma

        out = samplers._bern_exp_lanes(g, src, exact)
        for i, w in enumerate(words):
            side = _exact_side(w, gamma)
            if i in calls:
                continue  # decided exactly
            assert side is not None, (gamma, w)
            assert bool(out[i]) == side, (gamma, w)


def test_kernel_forced_exact_lanes() -> None:
    g = np.array([0.5, 0.5])
    force = np.array([False, True])
    seen: list[int] = []
    samplers._bern_exp_lanes(g, noise.seeded(1), lambda i: seen.append(i) or Fraction(1, 2), force)
    assert 1 in seen


def test_geometric_fallback_words() -> None:
    T = samplers._GEO_T  # ascending A_22..A_1
    A1, A2 = int(T[-1]), int(T[-2])
    # u = A1 ambiguous for v = 1; next word 0 puts U below exp(-1) (V >= 1) but above exp(-2)
    src = ScriptedSource(u32=[A1, A1, A2 + 1, 0], u64=[0, 2**64 - 1])
    V = samplers._geometric_e1(4, src)
    assert V[0] == 1 and V[1] == 0 and V[2] == 1
    assert V[3] >= 22


def test_geometric_e1_distribution() -> None:
    # P(V = v) = (1 - e**-1) e**-v; chi-square with pooled tail; false failure 1e-6.
    V = samplers._geometric_e1(N, noise.seeded(4))
    k = 9
    counts = np.bincount(np.minimum(V, k), minlength=k + 1)
    probs = np.array([(1 - math.exp(-1)) * math.exp(-v) for v in range(k)] + [math.exp(-k)])
    assert stats.chisquare(counts, probs * N).pvalue > P_FAIL


# ----------------------------------------------------------------- uniform integers
@pytest.mark.parametrize("high", [1, 2, 6, 1000, 2**31, 2**32 - 5, 2**32, 2**40 + 3, 2**62 + 1])
def test_uniform_int_chi_square(high: int) -> None:
    x = noise.uniform_int(high, N, source=noise.seeded(21))
    assert x.dtype == np.int64 and x.min() >= 0 and x.max() < high
    if high == 1:
        return
    bins = min(high, 64)
    # bin j holds values v with floor(v * bins / high) = j; exact expected sizes via integers
    edges = [-((-j * high) // bins) for j in range(bins + 1)]  # ceil(j*high/bins)
    expected = np.diff(np.array(edges, dtype=object)).astype(float) / high * N
    idx = np.searchsorted(np.array(edges[1:-1], dtype=np.int64), x, side="right")
    counts = np.bincount(idx, minlength=bins)
    assert stats.chisquare(counts, expected).pvalue > P_FAIL


def test_uniform_int_no_modulo_bias() -> None:
    # high = 3 * 2**61: plain `w % high` would put 3/4 of the mass below 2**62, uniform puts 2/3.
    high = 3 * 2**61
    x = noise.uniform_int(high, N, source=noise.seeded(22))
    _check_rate(x < 2**62, 2 / 3)


@pytest.mark.parametrize("high", [0, -3, 2**63])
def test_uniform_int_range_errors(high: int) -> None:
    with pytest.raises(ValueError, match="high must satisfy"):
        noise.uniform_int(high, 3)


def test_uniform_int_shapes() -> None:
    src = noise.seeded(0)
    assert noise.uniform_int(10, (3, 4), source=src).shape == (3, 4)
    assert noise.uniform_int(10, (), source=src).shape == ()
    assert noise.uniform_int(10, 0, source=src).shape == (0,)


def test_permutation_uniform() -> None:
    # all 24 permutations of 4 items equally likely; chi-square, false failure 1e-6
    src = noise.seeded(8)
    perms = np.array([noise.permutation(4, source=src) for _ in range(24_000)])
    codes = perms @ np.array([64, 16, 4, 1])
    _, counts = np.unique(codes, return_counts=True)
    assert counts.size == 24
    assert stats.chisquare(counts).pvalue > P_FAIL
    p = noise.permutation(1000, source=src)
    assert p.dtype == np.int64 and np.array_equal(np.sort(p), np.arange(1000))
    assert noise.permutation(0, source=src).shape == (0,)


def test_uniform_float01() -> None:
    x = noise.uniform_float01((100, 10), source=noise.seeded(3))
    assert x.shape == (100, 10) and x.dtype == np.float64
    assert np.all((x >= 0) & (x < 1))
    assert np.all(x * 2.0**53 == np.floor(x * 2.0**53))


class _FixedWordSource(ScriptedSource):
    """Every 32-bit word is ``word`` (the ambiguous one); 64-bit words come from PCG64."""

    def __init__(self, word: int, seed: int) -> None:
        super().__init__(seed=seed)
        self.word = word

    def uint32(self, n: int) -> np.ndarray:
        return np.full(n, self.word, dtype=np.uint32)


def test_fallback_conditional_law_fraction() -> None:
    # Given the first 32 bits equal A = floor(2**32/3), U < 1/3 has conditional probability
    # frac(2**32/3) = 1/3. Every lane takes the exact path; Wilson at 1e-6.
    A = (1 << 32) // 3
    x = noise.bernoulli(Fraction(1, 3), 20_000, source=_FixedWordSource(A, 1))
    _check_rate(x, 1 / 3)


def test_fallback_conditional_law_kernel() -> None:
    # Vectorised kernel with every word ambiguous: P(True | u = A) = frac(exp(-gamma) * 2**32).
    gamma = Fraction(7, 5)
    A = samplers._exp_neg_floor32(gamma)
    g = np.full(10_000, float(gamma))
    x = samplers._bern_exp_lanes(g, _FixedWordSource(A, 2), lambda i: gamma)
    _check_rate(x, math.exp(-1.4) * 2**32 - A)
    # and through the public scalar sampler
    y = noise.bernoulli_exp(gamma, 10_000, source=_FixedWordSource(A, 3))
    _check_rate(y, math.exp(-1.4) * 2**32 - A)
