"""Local Laplace, heavy hitters, the SQ oracle and the JSON-lines report format."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

import dpkit.noise as noise
from dpkit.events import from_dict
from dpkit.local import (
    CountMeanSketch,
    GeneralizedRR,
    HaarRanges,
    HadamardCountMeanSketch,
    HadamardResponse,
    HierarchicalRanges,
    LocalLaplace,
    LocalSQOracle,
    NaiveBayes,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    PrefixExtension,
    Rappor,
    learn_naive_bayes,
)
from dpkit.local.reports import aggregate_jsonl, from_config, read_jsonl, report_line, write_jsonl

from ._stats import ALPHA, chi2_band, z_two_sided


# ------------------------------------------------------------------ local Laplace
def test_local_laplace_reports_are_integers_and_private_by_construction() -> None:
    lap = LocalLaplace(lower=-5.0, upper=20.0, epsilon=0.5)
    assert lap.event.epsilon == 0.5
    # the discrete Laplace scale used is >= Δ/ε, so the ratio for any two inputs is <= e^ε
    assert lap.scale >= lap.sensitivity / 0.5
    r = lap.randomize([-100.0, 3.3, 1e9], source=noise.seeded(2))
    assert r["y"].dtype == np.int64


def test_local_laplace_mean_unbiased_with_exact_variance() -> None:
    """1500 runs on n = 300 values: mean within z·sd/√R, MSE/Var within the χ²_1500 band."""
    lap = LocalLaplace(lower=-5.0, upper=20.0, epsilon=1.0)
    src = noise.seeded(3)
    x = np.linspace(-8.0, 25.0, 300) + 0.123456789  # some values are clamped
    truth = float(np.clip(x, -5.0, 20.0).mean())
    reps = 1500
    est = np.array([lap.estimate_mean(lap.randomize(x, source=src)).value for _ in range(reps)])
    var = lap.mean_variance(x)
    assert abs(est.mean() - truth) / math.sqrt(var / reps) < z_two_sided(ALPHA / 2)
    lo, hi = chi2_band(reps, ALPHA / 2)
    assert lo < np.mean((est - truth) ** 2) / var < hi


# ------------------------------------------------------------------ heavy hitters
def test_prefix_extension_finds_planted_heavy_hitters() -> None:
    src = noise.seeded(4)
    hh = np.array([123456789, 987654321, 55555, 4_000_000_000], dtype=np.int64)
    vals = np.concatenate([np.repeat(hh, [20_000, 15_000, 12_000, 10_000]),
                           noise.uniform_int(1 << 32, 40_000, source=src)])
    pem = PrefixExtension(bits=32, epsilon=2.0, top_k=8)
    res = pem.identify(pem.randomize(vals, source=src))
    assert set(hh) <= set(res.values[:6].tolist())
    assert res.event.epsilon == pem.epsilon <= 2.0


# ------------------------------------------------------------------ statistical queries
def test_sq_answers_within_hoeffding_tolerance_and_users_answer_once() -> None:
    """Each answer within the Hoeffding tolerance at failure 1e-7 per query (5 queries)."""
    src = noise.seeded(5)
    data = noise.uniform_int(1000, (100_000, 1), source=src) / 999.0
    sq = LocalSQOracle(data, epsilon=1.0, source=src)
    m = sq.batch_size(0.05, failure=ALPHA / 5)
    for k in range(5):
        phi_mean = float(np.mean(data[:, 0] ** (k + 1)))  # population value
        batch_start = sq._next
        got = sq.query(lambda r, k=k: r[:, 0] ** (k + 1), batch_size=m)
        batch = data[sq._order[batch_start : batch_start + m], 0] ** (k + 1)
        assert abs(got - batch.mean()) <= 0.05
        assert abs(got - phi_mean) <= 0.05 + 0.02  # plus sampling of the batch (tiny)
    assert sq.remaining == 100_000 - 5 * m
    with pytest.raises(ValueError, match="fresh users"):
        sq.query(lambda r: r[:, 0], batch_size=sq.remaining + 1)
    with pytest.raises(ValueError, match=r"into \[0, 1\]"):
        sq.query(lambda r: r[:, 0] * 2, batch_size=10)


def test_sq_naive_bayes_learns_nearly_as_well_as_the_true_model() -> None:
    src = noise.seeded(6)
    n, d = 150_000, 5
    y = noise.bernoulli(0.4, n, source=src).astype(np.int64)
    t1 = np.array([0.8, 0.7, 0.6, 0.3, 0.2])
    t0 = np.array([0.3, 0.4, 0.5, 0.6, 0.7])
    X = np.zeros((n, d), dtype=np.int64)
    for j in range(d):  # features with the stated class-conditional probabilities
        X[:, j] = np.where(y == 1, noise.bernoulli(float(t1[j]), n, source=src),
                           noise.bernoulli(float(t0[j]), n, source=src))
    model = learn_naive_bayes(LocalSQOracle(np.column_stack([X, y]), epsilon=1.0, source=src),
                              n_features=d)
    best = (NaiveBayes(0.4, t1, t0).predict(X) == y).mean()
    assert (model.predict(X) == y).mean() >= best - 0.02


# ------------------------------------------------------------------ JSON lines
MECHS = [
    lambda: GeneralizedRR(40, epsilon=1.0),
    lambda: OptimizedUnaryEncoding(40, epsilon=1.0),
    lambda: OptimizedLocalHashing(40, epsilon=1.0),
    lambda: HierarchicalRanges(40, epsilon=1.0),
    lambda: Rappor(num_bits=16, num_cohorts=2, source=noise.seeded(9)),
    lambda: HaarRanges(40, epsilon=1.0),
    lambda: HadamardResponse(40, epsilon=1.0),
    lambda: CountMeanSketch(epsilon=1.0, num_hashes=3, width=32, source=noise.seeded(8)),
    lambda: HadamardCountMeanSketch(epsilon=1.0, num_hashes=3, width=32, source=noise.seeded(8)),
    lambda: LocalLaplace(lower=0.0, upper=40.0, epsilon=1.0),
]


@pytest.mark.parametrize("make", MECHS, ids=["grr", "oue", "olh", "hier", "rappor", "haar", "hr",
                                             "cms", "hcms", "laplace"])
def test_jsonl_roundtrip_in_another_process_shape(make) -> None:
    mech = make()
    src = noise.seeded(7)
    reports = mech.randomize(noise.uniform_int(40, 700, source=src), source=src)
    buf = io.StringIO()
    assert write_jsonl(buf, mech, reports) == 700
    text = buf.getvalue()
    head, back = read_jsonl(io.StringIO(text))
    assert from_dict(head["event"]) == mech.event and head["insecure"] is True
    rebuilt = from_config(json.loads(json.dumps(head["config"])))
    assert np.array_equal(mech.aggregate(reports).stats, rebuilt.aggregate(back).stats)
    streamed = aggregate_jsonl(io.StringIO(text), rebuilt, chunk=128)
    assert np.array_equal(streamed.stats, mech.aggregate(reports).stats)


def test_jsonl_refuses_mismatched_configuration_and_bad_files() -> None:
    a, b = GeneralizedRR(10, epsilon=1.0), GeneralizedRR(10, epsilon=2.0)
    buf = io.StringIO()
    write_jsonl(buf, a, a.randomize([1, 2, 3], source=noise.seeded(1)))
    with pytest.raises(ValueError, match="were made with"):
        aggregate_jsonl(io.StringIO(buf.getvalue()), b)
    with pytest.raises(ValueError, match="header"):
        read_jsonl(io.StringIO('{"y": 3}\n'))
    line = json.loads(report_line(a, 4, source=noise.seeded(2)))
    assert set(line) == {"y"} and 0 <= line["y"] < 10
