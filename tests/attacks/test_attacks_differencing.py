"""Differencing and averaging attacks against the naive oracles.

Error rates (Laplace scale b = 2, k = 1000 repeats per query): the difference of two averages
of k discrete-Laplace draws has variance 2 Var/k with Var = 2q/(1-q)^2 = 7.83 (q = e^-1/2), so
sd 0.125; a target is misread only if that noise exceeds 1/2 = 4 sd (probability ~6e-5,
normal approximation; Bernstein's inequality gives < 1e-3), so P(>= 2 of 30 targets wrong)
< 1e-6 under the normal approximation. The thresholds below allow 1 error.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpkit as dp
from dpkit.attacks import differencing as dif
from dpkit.attacks import oracles as orc
from dpkit.attacks import reconstruction as rec

TARGETS = list(range(30))


@pytest.fixture(scope="module")
def people() -> rec.Population:
    return rec.make_population(200, source=dp.noise.seeded(31))


def test_exact_and_suppressed_systems_lose_every_target(people: rec.Population) -> None:
    for oracle in (orc.ExactOracle(people), orc.SuppressionOracle(people, threshold=20)):
        assert dif.differencing_success(oracle, people.qid, people.secret, TARGETS) == 1.0
        assert oracle.suppressed == 0


def test_suppression_hides_small_counts(people: rec.Population) -> None:
    oracle = orc.SuppressionOracle(people, threshold=20)
    one = np.zeros(people.n, dtype=bool)
    one[0] = True
    answer = oracle.ask(rec.SubsetQuery(f"qid = {people.qid[0]}", one))
    assert np.isnan(answer).all() and oracle.suppressed == 1


def test_fresh_noise_falls_to_averaging(people: rec.Population) -> None:
    oracle = orc.NoisyOracle(people, scale=2.0, noise="laplace", source=dp.noise.seeded(32))
    rate = dif.differencing_success(oracle, people.qid, people.secret, TARGETS, repeats=1000)
    assert rate >= 29 / 30


def test_sticky_noise_resists_repeats_but_not_rewrites(people: rec.Population) -> None:
    oracle = orc.StickyNoiseOracle(people, scale=2.0, source=dp.noise.seeded(33))
    q = rec.SubsetQuery("qid >= 0", np.ones(people.n, dtype=bool))
    same = dif.averaging_attack(oracle, q, repeats=50)
    assert same.distinct_texts == 1 and np.unique(same.answers).size == 1
    rewritten = dif.averaging_attack(oracle, q, repeats=50, rewrite=True)
    assert rewritten.distinct_texts == 50 and np.unique(rewritten.answers).size > 1
    rate = dif.differencing_success(oracle, people.qid, people.secret, TARGETS, repeats=1000,
                                    rewrite=True)
    assert rate >= 29 / 30


def test_sticky_noise_with_suppression_also_falls(people: rec.Population) -> None:
    oracle = orc.SuppressionOracle(people, threshold=20, scale=2.0, source=dp.noise.seeded(34))
    rate = dif.differencing_success(oracle, people.qid, people.secret, TARGETS[:10],
                                    repeats=1000, rewrite=True)
    assert rate >= 0.9


def test_rewrites_keep_the_meaning(people: rec.Population) -> None:
    q = rec.random_subsets(people.qid, 1, source=dp.noise.seeded(35))[0]
    rw = dif.rewrites(q, 3)
    assert len({r.predicate for r in rw}) == 3
    assert all(np.array_equal(r.mask, q.mask) for r in rw)
    exact = orc.ExactOracle(people)
    assert np.all(exact.ask(rw) == exact.ask(q)[0])
    with pytest.raises(ValueError, match="k must"):
        dif.rewrites(q, 0)


def test_target_index_is_checked(people: rec.Population) -> None:
    with pytest.raises(ValueError, match="target"):
        dif.differencing_attack(orc.ExactOracle(people), people.qid, target=people.n)
