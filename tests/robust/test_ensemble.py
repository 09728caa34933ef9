"""dpkit.robust.Ensemble: the combination rules, K-consensus, shape checks before noise, torch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from _robust_helpers import CountingSource, wrong_certificates
from scipy import stats

import dpkit.noise as noise
from dpkit.robust import ABSTAIN, Ensemble, Smoothed


def step(offset: float) -> Callable[[np.ndarray], np.ndarray]:
    """Scores (-(x0 - offset), x0 - offset): class 1 where x[0] > offset."""
    return lambda b: np.stack([offset - b[:, 0], b[:, 0] - offset], axis=1)



def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_combination_rules() -> None:
    batch = noise.gaussian_float(1.0, (50, 3), source=noise.seeded(1))
    a, b, c = (lambda x: x * 3.0), (lambda x: -x), (lambda x: x[:, ::-1] * 0.5)
    outs = [a(batch), b(batch), c(batch)]
    soft = Ensemble([a, b, c], num_classes=3)(batch)
    assert soft == pytest.approx(np.mean([softmax(o) for o in outs], axis=0))
    hot = Ensemble([a, b, c], num_classes=3, temperature=2.0)(batch)
    assert hot == pytest.approx(np.mean([softmax(o / 2.0) for o in outs], axis=0))
    logits = Ensemble([a, b, c], num_classes=3, combine="logits")(batch)
    assert logits == pytest.approx(np.mean(outs, axis=0))
    votes = Ensemble([a, b, c], num_classes=3, combine="vote")(batch)
    expected = np.zeros((50, 3))
    for o in outs:
        expected[np.arange(50), o.argmax(axis=1)] += 1
    assert np.array_equal(votes, expected)


def test_vote_accepts_labels_and_breaks_ties_to_the_lowest_class() -> None:
    ones = lambda x: np.ones(len(x), dtype=np.int64)  # noqa: E731
    zeros = lambda x: np.zeros((len(x), 2))  # noqa: E731  argmax of a tie: class 0
    twos = lambda x: np.stack([np.zeros(len(x)), np.ones(len(x))], axis=1)  # noqa: E731
    f = Ensemble([ones, zeros], num_classes=2, combine="vote")
    assert f(np.zeros((4, 2))).argmax(axis=1).tolist() == [0, 0, 0, 0]  # 1 vote each: class 0
    g = Ensemble([ones, twos, zeros], num_classes=2, combine="vote")
    assert g(np.zeros((3, 2))).argmax(axis=1).tolist() == [1, 1, 1]


def consensus_ensemble() -> Ensemble:
    # first two agree where x0 > 0 (both 1) or x0 <= -1 (both 0); in (-1, 0] the three vote
    # 0, 1, 0: the whole classifier is exactly the half-space x0 > 0, so pA = Phi(x0 / sigma)
    return Ensemble([step(0.0), step(-1.0), step(1.0)], num_classes=2, combine="vote",
                    consensus=2)


def test_consensus_is_a_fixed_function_of_each_row() -> None:
    f = consensus_ensemble()
    batch = noise.gaussian_float(1.0, (400, 2), source=noise.seeded(3))
    out = f(batch)
    assert out.shape == (400,) and out.dtype == np.int64
    assert np.array_equal(out, (batch[:, 0] > 0).astype(np.int64))
    # the same rows in other batches, alone or reversed: the same answers (determinism)
    assert np.array_equal(f(batch[::-1])[::-1], out)
    assert [int(f(batch[i:i + 1])[0]) for i in range(0, 400, 37)] == out[::37].tolist()
    # K-consensus with soft fallback equals its definition
    g = Ensemble([step(0.0), step(-1.0), step(2.0)], num_classes=2, consensus=2)
    full = Ensemble([step(0.0), step(-1.0), step(2.0)], num_classes=2)(batch).argmax(axis=1)
    agree = (batch[:, 0] > 0) | (batch[:, 0] <= -1)
    want = np.where(agree, (batch[:, 0] > 0).astype(np.int64), full)
    assert np.array_equal(g(batch), want)


def test_consensus_certificate_coverage() -> None:
    """The K-consensus classifier above is the half-space x0 > 0 (true radius x0): over T
    certifications at alpha, more than the 1 - 1e-6 quantile of Binomial(T, alpha) wrong
    certificates fails the test (false-failure probability < 1e-6); early exit would break
    this only if it made the base classifier depend on something other than its input."""
    sigma, alpha, trials, d = 1.0, 0.1, 200, 0.4
    k = int(stats.binom.isf(1e-6, trials, alpha))
    g = Smoothed(consensus_ensemble(), sigma, 2, source=noise.seeded(4))
    bad = wrong_certificates(g, d, trials, alpha)
    assert bad <= k, f"{bad} of {trials} certificates wrong (allowed {k})"
    # power: far from the boundary the ensemble certifies a radius near the truth
    label, radius = Smoothed(consensus_ensemble(), 0.5, 2, source=noise.seeded(5)).certify(
        np.array([0.5, 1.0]), n0=100, n=20_000, alpha=0.001)
    assert label == 1 and 0.4 < radius <= 0.5


BAD_MEMBERS: list[tuple[Callable[[np.ndarray], np.ndarray], str]] = [
    (lambda b: np.zeros((len(b), 3)), r"member 1 returned shape \(1, 3\)"),
    (lambda b: np.zeros(len(b), dtype=np.int64), r"member 1 returned shape \(1,\)"),
    (lambda b: np.zeros((len(b) + 1, 2)), r"member 1 returned shape \(2, 2\)"),
    (lambda b: np.full((len(b), 2), np.nan), "member 1 returned non-finite"),
]


@pytest.mark.parametrize(("bad", "match"), BAD_MEMBERS)
@pytest.mark.parametrize("consensus", [0, 1])
def test_wrong_member_output_fails_before_noise(bad: Callable[[np.ndarray], np.ndarray],
                                                match: str, consensus: int) -> None:
    src = CountingSource(6)
    # with consensus=1 the bad member would never run on rows the first answers alone
    f = Ensemble([step(0.0), bad], num_classes=2, consensus=consensus)
    g = Smoothed(f, 1.0, 2, source=src)
    with pytest.raises(ValueError, match=match):
        g.certify(np.array([3.0, 0.0]), n0=10, n=100, alpha=0.01)
    with pytest.raises(ValueError, match=match):
        g.predict(np.array([3.0, 0.0]), n=100, alpha=0.01)
    assert src.draws == 0


def test_vote_refuses_labels_out_of_range() -> None:
    f = Ensemble([step(0.0), lambda b: np.full(len(b), 2)], num_classes=2, combine="vote")
    with pytest.raises(ValueError, match=r"member 1 returned labels outside \[0, 2\)"):
        f(np.zeros((3, 2)))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"members": []}, "non-empty"), ({"num_classes": 1}, "num_classes"),
    ({"combine": "median"}, "combine must be one of"), ({"temperature": 0.0}, "temperature"),
    ({"consensus": 3}, r"consensus must be an integer in \[0, 2\]"),
    ({"consensus": -1}, "consensus"), ({"members": [step(0.0), 42]}, "callable"),
])
def test_bad_arguments(kwargs: dict, match: str) -> None:
    args = {"members": [step(0.0), step(1.0)], "num_classes": 2} | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        Ensemble(args.pop("members"), **args)


def test_torch_members_match_numpy() -> None:
    torch = pytest.importorskip("torch")
    mods = []
    for offset in (0.0, -1.0, 1.0):
        lin = torch.nn.Linear(2, 2)
        with torch.no_grad():  # the step(offset) scores as a module
            lin.weight.copy_(torch.tensor([[-1.0, 0.0], [1.0, 0.0]]))
            lin.bias.copy_(torch.tensor([offset, -offset]))
        mods.append(lin.eval())
    batch = noise.gaussian_float(1.0, (300, 2), source=noise.seeded(7))
    for combine in ("softmax", "logits", "vote"):
        via_torch = Ensemble(mods, num_classes=2, combine=combine)(batch)
        via_numpy = Ensemble([step(0.0), step(-1.0), step(1.0)], num_classes=2,
                             combine=combine)(batch)
        assert via_torch == pytest.approx(via_numpy, abs=1e-5)
    x = np.array([1.5, 0.0])
    g = Smoothed(Ensemble(mods, num_classes=2, consensus=2), 0.5, 2, source=noise.seeded(8))
    label, radius = g.certify(x, n0=50, n=2000, alpha=0.01)
    assert label == 1 and radius > 0.9
    assert Smoothed(Ensemble(mods, num_classes=2), 0.5, 2).predict(
        np.zeros(2), n=10, alpha=1e-6) == ABSTAIN
