"""An answer and its preview state what the ledger charges (found by the second first-hour
walk, docs/first_hour.md): since constant work became the default, a pure-ε count on an
'approx' project is charged ``ε`` and the timing term ``δ_t``, and the console read
"Charged ε = 0.1, δ = 0" beside a budget that said "δ spent 1e-13"; a Gaussian query under
'approx' said δ = 0 while the ledger booked its δ; and a preview promised δ = 0 where the
refusal then said "requested ... δ=1e-13". The SQL path now takes both numbers from the
ledger's row, as the release families already did."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpkit as dp
from dpkit.engine.curator import Curator

COUNT = "SELECT COUNT(*) FROM t"


def _project(tmp_path: Path, name: str, **kw: object) -> Curator:
    cur = Curator.create(tmp_path / name, source=dp.noise.seeded(5), **kw)  # type: ignore[arg-type]
    cur.add_table("t", {"x": np.arange(400) % 7, "u": np.arange(400)}, privacy_unit="u",
                  max_rows_per_unit=1, bounds={"x": (0, 7)})
    return cur


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_answer_and_preview_state_the_charged_delta_under_constant_work(
        tmp_path: Path, noise: str) -> None:
    cur = _project(tmp_path, "cw.dpkit", epsilon=3.0, delta=1e-6)
    assert cur.ledger.config.constant_work is not None  # the default for this budget
    timing = cur.ledger.config.constant_work[0]
    preview = cur.preview(COUNT, epsilon=0.1, noise=noise)
    res = cur.sql(COUNT, epsilon=0.1, noise=noise)
    charged = cur.budget().history[-1]
    assert res.delta == pytest.approx(charged.delta, rel=1e-12)
    assert preview.delta == pytest.approx(charged.delta, rel=1e-12)
    assert res.delta >= timing > 0  # before: 0.0 for both noises
    if noise == "gaussian":  # its booked δ as well (before: 0.0 beside a 1e-7 charge)
        assert res.delta > 1e-9
    assert f"delta {res.delta:.3g}" in repr(res)


@pytest.mark.parametrize("accountant", ["pure", "zcdp"])
def test_other_accountants_state_what_their_ledger_row_says(
        tmp_path: Path, accountant: str) -> None:
    """'pure' charges no δ (none shown, as before); 'zcdp' prices a release as ε at the
    project's δ: the answer states that pair, as the history and the families do."""
    delta = 0.0 if accountant == "pure" else 1e-6
    cur = _project(tmp_path, f"{accountant}.dpkit", epsilon=3.0, delta=delta,
                   accountant=accountant)
    res = cur.sql(COUNT, epsilon=0.1)
    charged = cur.budget().history[-1]
    assert (res.epsilon, res.delta) == pytest.approx((charged.epsilon, charged.delta))
    assert res.delta == delta
    assert cur.preview(COUNT, epsilon=0.1).delta == delta


def test_a_cap_for_an_unknown_analyst_is_refused(tmp_path: Path) -> None:
    """`set_analyst_budget("bbo", 2)` recorded a cap for nobody; bob kept his old one."""
    cur = _project(tmp_path, "caps.dpkit", epsilon=3.0, delta=1e-6)
    cur.add_analyst("bob", epsilon=0.5)
    head = cur.ledger.head()
    with pytest.raises(ValueError, match=r"no analyst 'bbo'; analysts: \['bob'\]"):
        cur.set_analyst_budget("bbo", 2.0)
    assert cur.ledger.head() == head  # nothing recorded


def test_a_query_without_a_budget_names_every_front_ends_spelling(tmp_path: Path) -> None:
    """Over HTTP the refusal said "epsilon=0.5 (or accuracy=...)", Python's spelling."""
    cur = _project(tmp_path, "nobudget.dpkit", epsilon=3.0, delta=1e-6)
    with pytest.raises(ValueError, match=r'Python epsilon=0\.5, command line --epsilon 0\.5, '
                                         r'HTTP "epsilon": 0\.5'):
        cur.sql(COUNT)
    assert cur.budget().history == []


def test_a_pure_release_beside_the_timing_delta_is_priced_without_the_pld() -> None:
    """Under 'approx' a constant-work release is ``Composed(release, ApproxDP(0, δ_t))`` at
    δ share δ_t: no δ is left to trade for ε, so its ε is the pure steps' sum. The search over
    every method reached the same number through a PLD, importing scipy.optimize (~0.3-0.4 s
    of each `dpkit query` process) to do it. Where δ is left over the search still runs."""
    from dpkit import events as ev
    from dpkit.accounting import Budget, api

    release = ev.Composed((ev.DiscreteLaplace(400.0, 4), ev.Laplace(100.0)))
    charged = ev.Composed((release, ev.ApproxDP(0.0, 1e-13)))
    b = Budget(epsilon=1.0, delta=1e-6, accountant="approx")
    cost = b.charge(charged)
    assert cost.epsilon == pytest.approx(4 / 400 + 1 / 100, rel=1e-12) and cost.delta == 1e-13
    assert cost.epsilon <= api.epsilon(charged, 1e-13) * (1 + 1e-9)  # never above the search
    # δ left over (a share beyond δ_t): the tightest method, as before
    more = Budget(epsilon=1.0, delta=1e-6, accountant="approx").charge(charged, delta=1e-7)
    assert more.epsilon == pytest.approx(api.epsilon(charged, 1e-7), rel=1e-12)


def test_a_cli_query_on_a_default_project_does_not_import_scipy(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, dpkit as dp\n"
        f"cur = dp.Curator.create({str(tmp_path / 'd.dpkit')!r}, epsilon=3, delta=1e-6)\n"
        "assert cur.ledger.config.constant_work is not None\n"
        "cur.add_table('t', {'x': np.arange(50) % 5}, bounds={'x': (0, 5)})\n"
        "r = cur.sql('SELECT COUNT(*), AVG(x) FROM t', epsilon=0.1)\n"
        "print(r.epsilon, 'scipy.optimize' in sys.modules)\n")
    src = str(Path(__file__).parents[2] / "src")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": src})
    assert out.stdout.split() == ["0.1", "False"], out.stdout + out.stderr
