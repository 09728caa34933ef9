"""``exponential_rows``: many independent exact exponential mechanisms at once.

Each row ``i`` must pick column ``j`` with probability ``exp(c q_ij) / Σ_l exp(c q_il)``,
``c = ε/(2Δ)`` (``ε/Δ`` when monotonic), rows independent. The law checks are Pearson
chi-square tests against the exact probabilities (computed here from the formula, not from our
code), each with threshold ``chi2.ppf(1 - 1e-6, df)``: false-failure probability 1e-6 per test
(asymptotically; every expected cell count is >= 300, where the chi-square approximation is
accurate).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from scipy import stats

import dpkit as dp
from dpkit import events as ev
from dpkit.mechanisms import _sampling, exponential_rows

ALPHA = 1e-6
# the module (the package attribute of the same name is the function)
exp_mod = sys.modules["dpkit.mechanisms.exponential"]


def _law(scores: list[float], factor: float) -> np.ndarray:
    q = np.asarray(scores, dtype=np.float64)
    w = np.exp(factor * (q - q.max()))
    return w / w.sum()


def _chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    assert expected.min() >= 300, "test design: expected counts too small for chi-square"
    return float(((counts - expected) ** 2 / expected).sum())


def _check_law(values: np.ndarray, kinds: list[list[float]], factor: float) -> None:
    """Rows cycle through ``kinds``; one combined chi-square over all kinds."""
    stat, df = 0.0, 0
    for t, sc in enumerate(kinds):
        picks = values[t :: len(kinds)]
        counts = np.bincount(picks, minlength=len(sc)).astype(np.float64)
        assert counts.size == len(sc)  # no out-of-range column
        stat += _chi2(counts, _law(sc, factor))
        df += len(sc) - 1
    assert stat < stats.chi2.ppf(1 - ALPHA, df), (stat, df)


KINDS = [[0.0, 1.0, 2.0], [5.0, 5.0, 2.0, 4.0], [3.0, 0.5, 2.5], [7.0, 7.25, 6.5]]


def _matrix(kinds: list[list[float]], reps: int) -> np.ndarray:
    """``reps`` copies of each kind, interleaved; short rows padded with a very low score (the
    padded columns have probability < exp(-400): a pick of one fails the size check)."""
    width = max(len(k) for k in kinds)
    rows = [k + [-1000.0] * (width - len(k)) for k in kinds]
    return np.tile(np.asarray(rows), (reps, 1))


def test_law_per_row_matches_the_formula() -> None:
    reps = 6000
    r = exponential_rows(_matrix(KINDS, reps), sensitivity=1.0, epsilon=1.0,
                         source=dp.noise.seeded(11))
    assert r.value.dtype == np.int64 and r.value.shape == (reps * len(KINDS),)
    _check_law(r.value, KINDS, 0.5)  # c = ε / (2Δ)


def test_law_monotonic_and_sensitivity() -> None:
    reps = 10000
    r = exponential_rows(_matrix(KINDS, reps), sensitivity=2.0, epsilon=1.5, monotonic=True,
                         source=dp.noise.seeded(12))
    _check_law(r.value, KINDS, 0.75)  # c = ε / Δ


def test_law_across_blocks_and_low_acceptance(monkeypatch: pytest.MonkeyPatch) -> None:
    # tiny blocks: rows split into many blocks and proposals into many rounds; a row whose
    # best candidate is rare among many poorer ones (acceptance 0.2) must keep its law
    monkeypatch.setattr(_sampling, "ROW_LANES", 16)
    monkeypatch.setattr(exp_mod, "ROW_LANES", 16)
    kinds = [[0.0] + [-2.0] * 11, [1.0, 0.0, 0.5, -0.5, 0.25, 0.0]]
    reps = 8000
    r = exponential_rows(_matrix(kinds, reps), sensitivity=1.0, epsilon=2.0,
                         source=dp.noise.seeded(13))
    _check_law(r.value, kinds, 1.0)


def test_law_with_many_poor_candidates() -> None:
    # one good candidate, 1000 poor ones (gamma = 8: the sampler's envelope levels and its exact
    # tie-break at the level thresholds) and 10 middling ones (gamma = 3.5); c = ε/(2Δ) = 1.
    # Cells pool equal-score columns: {0}, five chunks of 200 poor columns, the 10 middling.
    row = [0.0] + [-8.0] * 1000 + [-3.5] * 10
    reps = 8000
    r = exponential_rows(np.tile(row, (reps, 1)), sensitivity=1.0, epsilon=2.0,
                         source=dp.noise.seeded(15))
    cell = np.concatenate([[0], 1 + np.arange(1000) // 200, [6] * 10])
    counts = np.bincount(cell[r.value], minlength=7).astype(np.float64)
    w = np.array([1.0] + [200 * math.exp(-8.0)] * 5 + [10 * math.exp(-3.5)])
    stat = _chi2(counts, w / w.sum())
    assert stat < stats.chi2.ppf(1 - ALPHA, 6), stat


def test_rows_are_independent() -> None:
    # pairs of rows (2i, 2i+1) with the same scores: the joint counts must follow the product
    # of the exact marginals (k^2 - 1 degrees of freedom)
    sc = [0.0, 1.0, 0.5]
    pairs = 12000
    r = exponential_rows(np.tile(sc, (2 * pairs, 1)), sensitivity=1.0, epsilon=1.0,
                         source=dp.noise.seeded(14))
    joint = r.value[0::2] * 3 + r.value[1::2]
    counts = np.bincount(joint, minlength=9).astype(np.float64)
    p = _law(sc, 0.5)
    stat = _chi2(counts, np.outer(p, p).ravel())
    assert stat < stats.chi2.ppf(1 - ALPHA, 8), stat


def test_far_scores_and_single_candidate() -> None:
    # differences overflow to inf in float: decided exactly, never the far candidates
    q = np.array([[0.0, -1e308, 1e308], [5.0, 5.0, 5.0]])
    r = exponential_rows(q[:1], sensitivity=1e-300, epsilon=1.0, source=dp.noise.seeded(1))
    assert r.value.tolist() == [2]
    one = exponential_rows(np.zeros((5, 1)), sensitivity=1, epsilon=1.0,
                           source=dp.noise.seeded(2))
    assert one.value.tolist() == [0] * 5


def test_event_details_and_utility_bound() -> None:
    r = exponential_rows([[1, 2, 3], [3, 2, 1]], sensitivity=1, epsilon=0.5, level=0.9,
                         source=dp.noise.seeded(3))
    assert r.event == ev.Exponential(0.5)
    assert r.insecure and r.ci is None and r.level == 0.9
    assert r.details["instances"] == 2
    # Dwork-Roth 3.11: (2Δ/ε)(ln n + ln(1/(1-level)))
    assert r.details["utility_bound"] == pytest.approx(4.0 * (math.log(3) + math.log(10)))


@pytest.mark.parametrize(
    ("scores", "kw", "err", "match"),
    [
        ([1.0, 2.0], {}, ValueError, "2-d"),
        ([[[1.0]]], {}, ValueError, "2-d"),
        (np.zeros((0, 3)), {}, ValueError, "empty"),
        (np.zeros((2, 0)), {}, ValueError, "empty"),
        ([[0.0, math.nan]], {}, ValueError, r"score \[0, 1\]"),
        ([[0.0, -math.inf]], {}, ValueError, "finite"),
        ([["a", "b"]], {}, TypeError, "2-d array of numbers"),
        ([[0.0, 1.0]], {"epsilon": 0.0}, ValueError, "epsilon"),
        ([[0.0, 1.0]], {"epsilon": -1.0}, ValueError, "epsilon"),
        ([[0.0, 1.0]], {"sensitivity": 0.0}, ValueError, "sensitivity"),
        ([[0.0, 1.0]], {"level": 1.0}, ValueError, "level"),
    ],
)
def test_argument_errors(scores: object, kw: dict[str, float], err: type[Exception],
                         match: str) -> None:
    args = {"sensitivity": 1.0, "epsilon": 1.0, **kw}
    with pytest.raises(err, match=match):
        exponential_rows(scores, **args, source=dp.noise.seeded(0))


def test_privacy_parameters_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        exponential_rows([[0.0, 1.0]], 1.0, 1.0)  # type: ignore[misc]
