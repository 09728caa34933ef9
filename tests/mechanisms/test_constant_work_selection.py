"""The exponential mechanism on fixed plans (a ``noise.ConstantWork`` source): the same exact
law, and work that does not depend on the scores.

Statistical tests: chi-square at false-failure probability 1e-6 (``_mech_stats``), fixed seeds.
The word count is the deterministic proxy of the selection's timing class: today's rejection
loop spends words in proportion to 1/acceptance, set by the scores; the fixed plan spends a
number set by the candidate count and the failure bound only.
"""

from __future__ import annotations

import numpy as np
import pytest
from _mech_stats import P_FAIL, chi_square_p

import dpkit as dp
from dpkit import noise
from dpkit.mechanisms._sampling import RowWeights, exponential_rows_sample, exponential_sample
from dpkit.mechanisms.exponential import _plan_exponential, selection_factor

SCORES = np.array([0.0, 1.0, 2.5, -3.0, 2.4, 0.75])
VECTORS = {
    "flat": np.zeros(64),
    "one peak": np.where(np.arange(64) == 9, 1e6, 0.0),
    "ramp": np.arange(64, dtype=np.float64),
    "huge spread": np.linspace(-1e300, 1e300, 64),
}


def _softmax(scores: np.ndarray, factor: float) -> np.ndarray:
    w = np.exp(factor * (scores - scores.max()))
    return w / w.sum()


def cw(seed: int, bits: int = 40) -> noise.ConstantWork:
    return noise.ConstantWork(noise.seeded(seed), bits=bits)


@pytest.mark.parametrize("trials", [None, 1])
def test_law_on_fixed_plans(trials: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """10k draws vs P(r) ∝ exp(ε q_r / (2Δ)); with the plan cut to one trial per draw the
    failure event (finished exactly by today's loop) is common, and the law must not change."""
    src = cw(3)
    if trials is not None:
        monkeypatch.setattr(noise.constant, "attempts_for", lambda *a: trials)
    w = _plan_exponential(SCORES, 0.7, 1.3, False)
    draws = exponential_sample(w, 10_000, src)
    counts = np.bincount(draws, minlength=SCORES.size)
    assert chi_square_p(counts, _softmax(SCORES, 1.3 / 1.4)) > P_FAIL
    assert (src.overruns > 0) == (trials is not None)


def test_rows_law_on_fixed_plans() -> None:
    """8,000 rows of two instances each through exponential_rows_sample's fixed plan."""
    scores = np.tile(np.array([[0.0, 3.0, 1.0, 2.9], [5.0, 0.0, 0.0, -1.0]]), (4000, 1))
    w = RowWeights(scores, selection_factor(2.0, 1.0, False))
    picks = exponential_rows_sample(w, cw(4)).reshape(4000, 2)
    for i in range(2):
        counts = np.bincount(picks[:, i], minlength=4)
        assert chi_square_p(counts, _softmax(scores[i], 1.0)) > P_FAIL


def _em_words(scores: np.ndarray, seed: int, rows: bool = False) -> int:
    src = cw(seed)
    if rows:
        dp.mechanisms.exponential_rows(np.vstack([scores, scores[::-1]]), sensitivity=1.0,
                                       epsilon=1.0, source=src)
    else:
        dp.mechanisms.exponential(list(range(scores.size)), scores, sensitivity=1.0,
                                  epsilon=1.0, source=src)
    assert src.overruns == 0
    return src.words


@pytest.mark.parametrize("rows", [False, True])
def test_words_do_not_depend_on_the_scores(rows: bool) -> None:
    """Very different score vectors of the same size, several seeds: the same words."""
    words = {_em_words(s, seed, rows) for s in VECTORS.values() for seed in range(3)}
    assert len(words) == 1


def test_todays_loop_spends_words_by_the_scores() -> None:
    """The channel being closed: on a plain source the word count follows the scores (the
    acceptance rate): a flat vector accepts at once, one peak among 64 needs ~64 trials."""
    def words(scores: np.ndarray) -> int:
        src = noise.ConstantWork(noise.seeded(0)).plain  # counts the words, plain samplers
        dp.mechanisms.exponential(list(range(64)), scores, sensitivity=1.0, epsilon=1.0,
                                  source=src)
        return src.of.words  # type: ignore[attr-defined, no-any-return]

    assert words(VECTORS["one peak"]) > 4 * words(VECTORS["flat"])


def test_permute_and_flip_on_fixed_plans() -> None:
    """report_noisy_max's default (permute-and-flip) on fixed plans: its law (20k draws,
    chi-square at 1e-6 against the exact law by enumeration) and the same words for any scores
    of a size."""
    from test_mechanisms_selection import _pf_exact

    w = _plan_exponential(SCORES, 0.7, 1.3, False)
    draws = dp.mechanisms._sampling.permute_and_flip_sample(w, 20_000, cw(5))
    counts = np.bincount(draws, minlength=SCORES.size)
    assert chi_square_p(counts, _pf_exact(SCORES, 1.3 / 1.4)) > P_FAIL
    words = set()
    for scores in VECTORS.values():
        src = cw(6)
        dp.mechanisms.report_noisy_max(scores, sensitivity=1.0, epsilon=1.0, source=src)
        words.add(src.words)
    assert len(words) == 1
