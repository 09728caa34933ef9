"""Unintended memorization: canary formats, exact exposure, extraction, DP vs no DP.

Bounds used below. A model trained without the canary ranks it uniformly, so
``P(exposure >= t) = P(rank <= |R| 2^-t) <= 2^-t``. A model that is (ε, δ)-DP for one line
and saw the canary ``r`` times is (rε, r e^{(r-1)ε} δ)-DP for those r lines (group privacy), so
``P(exposure >= t) <= e^{rε} 2^-t + r e^{(r-1)ε} δ``; a model (ε, δ)-DP for one *writer*, who
wrote all r copies, has ``P(exposure >= t) <= e^ε 2^-t + δ`` whatever r -- the false-failure
probability of each DP check, stated where it is used.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

import dpkit as dp
from dpkit.attacks.memorization import (
    MAX_CANDIDATES,
    CanaryFormat,
    deal_writers,
    grammar_corpus,
    insert_canaries,
    plant,
)


# ------------------------------------------------------------------ formats (no torch needed)
def test_format_round_trip_and_size() -> None:
    f = CanaryFormat("my code is ", "DDD-DD-D")
    assert f.size == 10**6
    for i in (0, 7, 281264, 999_999):
        assert f.index(f.secret(i)) == i
    assert f.secret(281264) == "281-26-4"
    assert f.line(5) == "my code is 000-00-5"


@pytest.mark.parametrize(("prefix", "pattern", "match"), [
    ("my code is ", "DDD-DD-DDDD", "10\\^9 is more than exact exposure enumerates"),
    ("my code is ", "---", "has no 'D'"),
    ("My Code is ", "DDD", "outside the model's alphabet"),
    ("my code is ", "DDD/DDD", "outside the model's alphabet"),
    ("", "DDD", "prefix is empty"),
    ("my very very long code prefix is ", "DDD-DDD", "lines hold at most"),
])
def test_bad_formats_are_refused(prefix: str, pattern: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CanaryFormat(prefix, pattern)


@pytest.mark.parametrize("secret", ["12-345", "123-45a", "123456", "1234-567", "١٢٣-456"])
def test_secrets_outside_the_candidate_space_are_refused(secret: str) -> None:
    with pytest.raises(ValueError, match="does not fit the format 'DDD-DDD'"):
        CanaryFormat("x ", "DDD-DDD").index(secret)


def test_corpus_is_seeded_and_canaries_are_inserted() -> None:
    a = grammar_corpus(200, source=dp.noise.seeded(3))
    assert a == grammar_corpus(200, source=dp.noise.seeded(3))
    assert a != grammar_corpus(200, source=dp.noise.seeded(4))
    out = insert_canaries(a, ["ann's code is 1", "bob's code is 2"], [5, 0],
                          source=dp.noise.seeded(0))
    assert len(out) == 205 and out.count("ann's code is 1") == 5
    assert "bob's code is 2" not in out
    assert not any("code is" in line for line in a)  # canaries' prefixes are never ordinary text
    with pytest.raises(ValueError, match="integers >= 0"):
        insert_canaries(a, ["x"], [-1])
    assert MAX_CANDIDATES == 10**7


def test_writers_are_dealt_evenly_and_each_canary_has_one_writer() -> None:
    w = deal_writers(103, 10, source=dp.noise.seeded(1))
    assert sorted(np.bincount(w).tolist()) == [10] * 7 + [11] * 3
    assert not np.array_equal(w, deal_writers(103, 10, source=dp.noise.seeded(2)))
    corpus = grammar_corpus(103, source=dp.noise.seeded(3))
    lines, units = plant(corpus, ["a 1", "b 2", "c 3"], [16, 4, 0], writers=w,
                         source=dp.noise.seeded(0))
    assert units is not None and len(units) == len(lines) == 123
    owners = [set(units[[i for i, t in enumerate(lines) if t == c]].tolist())
              for c in ("a 1", "b 2")]
    assert all(len(o) == 1 for o in owners) and owners[0] != owners[1]
    (a,) = owners[0]  # the canary's writer also keeps its ordinary lines
    assert np.count_nonzero(units == a) == 16 + np.count_nonzero(w == a)
    ordinary = [u for t, u in zip(lines, units, strict=True) if t in corpus]
    assert sorted(ordinary) == sorted(w.tolist())
    with pytest.raises(ValueError, match="only 2 writers"):
        plant(corpus, ["a", "b", "c"], [1, 1, 1], writers=np.arange(103) % 2)
    with pytest.raises(ValueError, match="one id per corpus line"):
        plant(corpus, ["a"], [1], writers=np.zeros(5, dtype=np.int64))
    with pytest.raises(ValueError, match="writers must be an integer"):
        deal_writers(10, 11)


def test_canaries_doctest_and_no_torch_at_import() -> None:
    import doctest
    import subprocess
    import sys

    from dpkit.attacks.memorization import canaries

    assert doctest.testmod(canaries).failed == 0
    code = ("import sys, dpkit.attacks.memorization, dpkit.cli; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ exposure (torch)
torch = pytest.importorskip("torch")


def _random_model(seed: int, window: int = 8):  # untrained: scores are arbitrary but fixed
    from dpkit.attacks.memorization.model import CharLM, init_weights

    m = CharLM(window=window, embed=4, hidden=16)
    init_weights(m, dp.noise.seeded(seed))
    return m.eval()


def test_both_rank_methods_equal_brute_force() -> None:
    from dpkit.attacks.memorization import exposure as xp

    fmt = CanaryFormat("kim's pin is ", "D-DD")  # 1,000 candidates: brute force is cheap
    m = _random_model(1)
    brute = np.array([xp.log_perplexity(m, fmt, fmt.secret(i)) for i in range(fmt.size)])
    assert np.allclose(xp.candidate_costs(m, fmt), brute, rtol=0, atol=1e-9)
    for i in (0, 17, 404, 999, int(np.argmin(brute)), int(np.argmax(brute))):
        s = fmt.secret(i)
        want = 1 + int(np.sum(brute < brute[i] - 1e-9))
        enum, pruned = xp.rank_enumerate(m, fmt, s), xp.rank_pruned(m, fmt, s)
        assert enum.rank == pruned.rank == want, (s, enum, pruned)
        assert pruned.nodes <= enum.nodes
    best = fmt.secret(int(np.argmin(brute)))
    assert xp.extract(m, fmt, beam=fmt.size) == best  # an unbounded beam is the exact argmax
    assert xp.rank_pruned(m, fmt, best).exposure == pytest.approx(math.log2(1000))
    assert xp.exposure(1000, 1000) == 0.0
    with pytest.raises(ValueError, match="rank must lie"):
        xp.exposure(0, 10)


def test_enumeration_with_digits_sliding_out_of_the_window() -> None:
    """A 2-character window: the first digits leave the context before the last is scored, so
    the per-position tables must drop them (checked against the model's own forward)."""
    from dpkit.attacks.memorization import exposure as xp

    fmt = CanaryFormat("pin ", "DD-D")
    m = _random_model(5, window=2)
    brute = np.array([xp.log_perplexity(m, fmt, fmt.secret(i)) for i in range(fmt.size)])
    assert np.allclose(xp.candidate_costs(m, fmt), brute, rtol=0, atol=1e-9)
    s = fmt.secret(int(np.argsort(brute)[40]))
    assert xp.rank_pruned(m, fmt, s).rank == xp.rank_enumerate(m, fmt, s).rank == 41


def _cfg(**kw: float):
    from dpkit.attacks.memorization.model import TrainConfig

    return TrainConfig(**kw)  # type: ignore[arg-type]


def _tiny_run(epsilon: float | None, units: tuple[str, ...] = ("record",)):
    from dpkit.attacks.memorization import experiment
    from dpkit.attacks.memorization.model import TrainConfig

    cfg = TrainConfig(epochs=12, batch_size=32, window=16, embed=8, hidden=64,
                      dp_batch_size=64, delta=1e-6, learning_rate=1e-2, dp_learning_rate=1e-2)
    return experiment.run(epsilons=[epsilon], units=units, insertions=(0, 64), repeats=1,
                          lines=300, config=cfg, source=dp.noise.seeded(11))


def test_a_tiny_model_memorises_a_64x_canary_without_dp() -> None:
    """Never-inserted control: P(exposure >= 10) <= 2^-10; the 64x canary is extracted."""
    (m,) = _tiny_run(None).models
    (control,), (canary,) = m.at(0), m.at(64)
    assert canary.exposure.exposure > 15.0, canary
    assert canary.extracted and canary.beam_extracted
    assert control.exposure.exposure < 10.0


def test_dp_sgd_hides_the_64x_canary() -> None:
    """ε = 0.02 per line, δ = 1e-6: the 64 copies are (1.28, 2.3e-4)-DP together, so
    P(exposure >= 12) <= e^1.28 2^-12 + 2.3e-4 < 1.2e-3 (the false-failure probability)."""
    (m,) = _tiny_run(0.02).models
    assert m.epsilon is not None and m.epsilon <= 0.02 + 1e-9
    (canary,) = m.at(64)
    assert canary.exposure.exposure < 12.0, canary
    assert not canary.extracted


def test_user_level_dp_hides_what_record_level_dp_lets_through() -> None:
    """Both models at ε = 1 on the same lines (300 lines dealt to 150 writers; the 64 copies of
    the canary by one writer). Record level: the copies are 64 records, the group bound is
    vacuous, and this seeded run exposes the canary fully (what makes the user-level check able
    to fail). User level: P(exposure >= 12) <= e 2^-12 + 1e-6 < 6.7e-4 (false failure)."""
    res = _tiny_run(1.0, ("record", "user"))
    record, user = res.models
    assert (record.unit, user.unit, res.writers) == ("record", "user", 150)
    assert user.epsilon is not None and user.epsilon <= 1.0 + 1e-9
    assert record.neighbours == "add/remove one line"
    assert user.neighbours.startswith("add/remove one writer")
    (seen,) = record.at(64)
    assert seen.exposure.exposure > 15.0 and seen.beam_extracted, seen
    (hidden,) = user.at(64)
    assert hidden.exposure.exposure < 12.0, hidden
    assert not hidden.extracted and not hidden.beam_extracted


def test_bad_input_is_refused_before_training(monkeypatch: pytest.MonkeyPatch) -> None:
    from dpkit.attacks.memorization import experiment

    def no_training(*a: object, **k: object) -> None:
        raise AssertionError("trained before checking the input")

    monkeypatch.setattr(experiment, "train", no_training)
    bad = [({"pattern": "DDDDDDDDD"}, "10\\^9"), ({"secrets": ["12-3456"]}, "does not fit"),
           ({"prefix": "my code is "}, "share the prefix"), ({"epsilons": [0.0]}, "epsilon"),
           ({"insertions": [-1]}, ">= 0"), ({"method": "guess"}, "method"),
           ({"repeats": 5}, "only 20 names"), ({"units": ["writer"]}, "units must be"),
           ({"units": []}, "units must be"), ({"writers": 0}, "writers must lie"),
           ({"writers": 9}, "10 canaries need as many writers"),
           ({"units": ["user"], "writers": 10, "config": _cfg(delta=0.2)}, "1/10"),
           ({"models": [(3.0, None)]}, "needs a unit"), ({"models": []}, "no model"),
           ({"models": [(None, "user")]}, "plain model")]
    for kwargs, match in bad:
        with pytest.raises(ValueError, match=match):
            experiment.run(**kwargs)  # type: ignore[arg-type]


def test_cli_refuses_a_format_outside_the_candidate_space() -> None:
    from dpkit.cli import main

    out = CliRunner().invoke(main, ["attack", "memorization", "--pattern", "DDD-DD-DDDD"])
    assert out.exit_code == 2
    assert "10^9 is more than exact exposure enumerates" in " ".join(out.output.split())
    out = CliRunner().invoke(main, ["attack", "memorization", "--unit", "user", "--epsilon", "2",
                                    "--no-baseline", "--insertions", "1", "--repeats", "1",
                                    "--lines", "40", "--epochs", "1", "--pattern", "DD",
                                    "--seed", "0"])
    assert out.exit_code == 0, out.output
    assert "ε = 2 (user)" in out.output and "record)" not in out.output


def test_cli_summary_small(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from dpkit.cli.attack_memorization import attack_memorization

    s = attack_memorization(epsilons=(2.0,), insertions=(1,), repeats=1, lines=40, epochs=1,
                            pattern="DD", seed=0, unit="both", plot=tmp_path / "m.png")
    assert [r[0] for r in s.rows] == ["no DP", "ε = 2 (record)", "ε = 2 (user)"]
    assert s.files and s.files[0].stat().st_size > 1000
    assert any("add/remove one line neighbours" in n for n in s.notes)
    assert any("add/remove one writer" in n for n in s.notes)
    assert any("dealt to 20 writers" in n for n in s.notes)
    with pytest.raises(ValueError, match="unit must be"):
        attack_memorization(unit="person")


@pytest.mark.slow
def test_the_figure_setting() -> None:
    """The docs figure's run (benchmarks/memorization_bench.py, ~90 CPU-s): without DP the 16x
    and 64x canaries are (nearly) fully exposed; record-level ε = 3 still lets the 64x canary
    through (seeded fact: 10.3-19.9 bits, checked > 8); at record level each once-inserted
    canary has P(exposure >= 14) <= e^3 2^-14 + 1e-5 < 1.3e-3 (4 canaries: 5.2e-3); at user
    level with ε <= 3 every canary, whatever its copies, has P(exposure >= 17) <=
    e^3 2^-17 + 1e-5 < 1.7e-4 (32 canary-model pairs: 5.4e-3). False failure < 1.1e-2 in all."""
    from dpkit.attacks.memorization import experiment

    res = experiment.run(models=[(None, None), (3.0, "record"), (8.0, "user"), (3.0, "user"),
                                 (1.0, "user")], repeats=4, source=dp.noise.seeded(0))
    by = {(m.target_epsilon, m.unit): m for m in res.models}
    plain, record = by[(None, None)], by[(3.0, "record")]
    assert min(c.exposure.exposure for c in plain.at(64)) > 19.0
    assert np.mean([c.exposure.exposure for c in plain.at(16)]) > 15.0
    assert any(c.extracted for c in plain.at(16) + plain.at(64))
    assert min(c.exposure.exposure for c in record.at(64)) > 8.0
    assert all(c.exposure.exposure < 14.0 and not c.extracted for c in record.at(1))
    for eps in (3.0, 1.0):
        cs = [c for c in by[(eps, "user")].canaries if c.canary.insertions > 0]
        assert all(c.exposure.exposure < 17.0 and not c.extracted for c in cs), eps
