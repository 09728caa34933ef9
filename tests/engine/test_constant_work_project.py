"""``Curator.create(..., constant_work=True)``: fixed-plan noise and selections, their δ charged
with every release, the setting kept on reopening, refused where the budget cannot pay it.

The words the project's source hands out during a query are the deterministic proxy of its
timing class (docs/attacks.md §6): on neighbouring datasets with the same seed they must be
equal for a MEDIAN (an exponential mechanism over data-dependent scores) on a constant-work
project, while today's rejection loop spends a number that follows the data (in law).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit import events as ev
from dpkit import noise

QUERY = "SELECT k, COUNT(*) AS n, SUM(x) AS s, MEDIAN(x) AS med FROM t GROUP BY k"


def _rows(extra: list[float]) -> pd.DataFrame:
    x = [float(i % 10) for i in range(200)] + extra
    return pd.DataFrame({"uid": range(len(x)), "k": ["ab"[i % 2] for i in range(len(x))],
                         "x": x})


def _project(path: Path, rows: pd.DataFrame, constant_work: bool,
             accountant: str = "approx") -> dp.Curator:
    cur = dp.Curator.create(path, epsilon=3.0, delta=1e-6, source=noise.seeded(7),
                            constant_work=constant_work, accountant=accountant)
    cur.add_table("t", rows, privacy_unit="uid", max_rows_per_unit=1, bounds={"x": (0, 10)},
                  domains={"k": ["a", "b"]})
    return cur


def _words(cur: dp.Curator) -> int:
    src = cur._source
    assert isinstance(src, noise.ConstantWork)
    before = src.words
    cur.sql(QUERY, epsilon=0.5)
    return src.words - before


@pytest.mark.parametrize("accountant", ["approx", "pld", "zcdp", "rdp"])
def test_every_release_is_charged_its_timing_delta(tmp_path: Path, accountant: str) -> None:
    cur = _project(tmp_path / "p.dpkit", _rows([]), True, accountant)
    setting = cur.ledger.config.constant_work
    assert setting is not None
    delta_t, bits = setting
    assert 0 < delta_t <= 1e-12 and (1 + np.exp(3.0)) * 2.0**-bits <= delta_t / 2
    preview = cur.preview(QUERY, epsilon=0.5)
    res = cur.sql(QUERY, epsilon=0.5)
    item = cur.budget().history[-1]
    assert isinstance(item.event, ev.Composed)
    assert item.event.events[-1] == ev.ApproxDP(0.0, delta_t)
    assert item.delta >= delta_t
    # the accountant prices it: beyond any epsilon, delta(event) keeps the timing term
    assert dp.accounting.delta(item.event, epsilon=50.0) >= delta_t
    assert preview.cost == pytest.approx(item.epsilon)
    assert res.to_pandas().shape[0] == 2
    if accountant in ("zcdp", "rdp"):  # approximate zCDP / RDP: δ/100 kept for the timing
        spend = cur.ledger.spend()
        assert cur.ledger.config.approx_delta == pytest.approx(1e-8) and delta_t <= 1e-14
        values = item.event.events[0]  # the release without its timing term
        plain = (dp.accounting.zcdp.rho_to_epsilon(spend.rho_spent or 0.0, 1e-6 - delta_t)
                 if accountant == "zcdp" else dp.accounting.rdp.epsilon(values, 1e-6 - delta_t))
        assert spend.spent >= plain > 0
    cur.close()
    again = dp.Curator.open(tmp_path / "p.dpkit")  # the setting is the project's
    assert isinstance(again._source, noise.ConstantWork) and again._source.bits == bits
    again.close()


@pytest.mark.parametrize(("kw", "match"), [
    ({"delta": 0.0}, "delta > 0"),
    ({"delta": 1e-6, "accountant": "pure"}, "'approx', 'pld', 'zcdp' or 'rdp'"),
    ({"delta": 1e-6, "epsilon": 100.0}, "smaller total epsilon"),
])
def test_budgets_that_cannot_pay_are_refused(tmp_path: Path, kw: dict, match: str) -> None:
    args = {"epsilon": 3.0, **kw}
    with pytest.raises(ValueError, match=match):
        dp.Curator.create(tmp_path / "p.dpkit", constant_work=True, **args)
    assert not (tmp_path / "p.dpkit").exists() or not any((tmp_path / "p.dpkit").iterdir())


def test_the_work_of_a_median_does_not_follow_the_data(tmp_path: Path) -> None:
    """D, D plus one unit of ordinary value, D plus one unit far beyond the bound: the same
    words on a constant-work project (same seed, same query). (That today's loop spends words
    by the scores is shown on the mechanism itself: tests/mechanisms/
    test_constant_work_selection.py; one unit moves its acceptance rate too little to show in
    one query.)"""
    data = {"D": _rows([]), "D+1": _rows([5.0]), "D+extreme": _rows([1e9])}
    fixed = {n: _words(_project(tmp_path / f"cw{n}.dpkit", d, True)) for n, d in data.items()}
    assert len(set(fixed.values())) == 1, fixed


def test_the_command_line_sets_it(tmp_path: Path) -> None:
    from dpkit.cli.project import init_project

    init_project(tmp_path / "c.dpkit", epsilon=3.0, delta=1e-6, constant_work=True)
    with dp.Curator.open(tmp_path / "c.dpkit") as cur:
        assert cur.ledger.config.constant_work is not None


@pytest.mark.slow  # ~5 s with torch's import; the samplers' own word tests run in CI
def test_the_work_of_a_dp_sgd_fit_does_not_follow_the_data(tmp_path: Path) -> None:
    """DP-SGD through the curator (the noisy row count, Poisson masks over the units, float
    Gaussian noise per step): D and D with one unit's rows moved to the far end of the bound
    (the same row count) consume the same words on a constant-work project."""
    pytest.importorskip("torch")
    from dpkit.learn import MLPClassifier

    rows = _rows([])
    far = rows.copy()
    far.loc[far["uid"] == 3, "x"] = 10.0
    words = []
    for i, frame in enumerate((rows, far)):
        cur = _project(tmp_path / f"fit{i}.dpkit", frame, True)
        src = cur._source
        assert isinstance(src, noise.ConstantWork)
        before = src.words
        cur.fit(MLPClassifier((), epochs=1, sample_rate=0.2, max_grad_norm=1.0),
                "SELECT x FROM t", label="k", epsilon=1.0)
        words.append(src.words - before)
        cur.close()
    assert words[0] == words[1] > 0
