"""Constant work is the default for new projects whose budget can pay for it.

``Curator.create(..., constant_work=None)`` (the default) resolves to on when the budget has
δ > 0, an accountant other than ``pure`` and an ε small enough for the failure bits (about 27,
22 under ``zcdp`` / ``rdp`` at δ = 1e-6), off otherwise; the genesis row records the resolved
value and reopening keeps it, whatever the default is now (docs/attacks.md §6).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import dpkit as dp
from dpkit import noise
from dpkit.engine.ledger import Ledger


@pytest.mark.parametrize(("budget", "on"), [
    ({"epsilon": 3.0, "delta": 0.0}, False),                          # pure ε-DP: no δ to pay
    ({"epsilon": 3.0, "delta": 1e-6, "accountant": "pure"}, False),   # pure cannot carry δ
    ({"epsilon": 3.0, "delta": 1e-6}, True),                          # approx (the default)
    ({"epsilon": 3.0, "delta": 1e-6, "accountant": "approx"}, True),
    ({"epsilon": 3.0, "delta": 1e-6, "accountant": "zcdp"}, True),
    ({"epsilon": 3.0, "delta": 1e-6, "accountant": "rdp"}, True),
    ({"epsilon": 3.0, "delta": 1e-6, "accountant": "pld"}, True),
    ({"epsilon": 25.0, "delta": 1e-6, "accountant": "approx"}, True),
    ({"epsilon": 25.0, "delta": 1e-6, "accountant": "zcdp"}, False),  # > 80 bits under zcdp
    ({"epsilon": 100.0, "delta": 1e-6}, False),                       # huge ε: > 80 bits
    ({"epsilon": 1000.0, "delta": 1e-3, "accountant": "pld"}, False),
])
def test_the_default_follows_what_the_budget_can_pay(tmp_path: Path, budget: dict,
                                                     on: bool) -> None:
    cur = dp.Curator.create(tmp_path / "p.dpkit", **budget)
    assert (cur.ledger.config.constant_work is not None) is on
    assert isinstance(cur._source, noise.ConstantWork) is on
    cur.close()
    with dp.Curator.open(tmp_path / "p.dpkit") as again:  # recorded: reopening keeps it
        assert (again.ledger.config.constant_work is not None) is on


def test_a_budget_object_resolves_the_same(tmp_path: Path) -> None:
    with dp.Curator.create(tmp_path / "a.dpkit",
                           budget=dp.Budget(epsilon=3.0, delta=1e-6)) as cur:
        assert cur.ledger.config.constant_work is not None
    with dp.Curator.create(tmp_path / "b.dpkit", budget=dp.Budget(epsilon=3.0)) as cur:
        assert cur.ledger.config.constant_work is None


def test_opting_out_and_in(tmp_path: Path) -> None:
    with dp.Curator.create(tmp_path / "off.dpkit", epsilon=3.0, delta=1e-6,
                           constant_work=False) as cur:
        assert cur.ledger.config.constant_work is None and cur._source is None
    with dp.Curator.open(tmp_path / "off.dpkit") as cur:
        assert cur.ledger.config.constant_work is None
    with pytest.raises(ValueError, match="delta > 0"):  # asked for, on a budget that cannot pay
        dp.Curator.create(tmp_path / "on.dpkit", epsilon=3.0, constant_work=True)
    with pytest.raises(TypeError, match="True, False or None"):
        dp.Curator.create(tmp_path / "odd.dpkit", epsilon=3.0, delta=1e-6,
                          constant_work="yes")  # type: ignore[arg-type]
    for name in ("on.dpkit", "odd.dpkit"):  # refused before anything was written
        assert not (tmp_path / name).exists() or not any((tmp_path / name).iterdir())


def test_a_project_made_before_the_default_keeps_its_setting(tmp_path: Path) -> None:
    """A genesis row without a constant-work record (every project made before the flip, with
    a δ > 0 budget that could pay for it) opens as it was made: not constant work."""
    folder = tmp_path / "old.dpkit"
    folder.mkdir()
    Ledger.create(folder / "ledger.sqlite", epsilon=3.0, delta=1e-6,
                  accountant="approx").close()
    from dpkit.engine.backend_duckdb import init_database

    init_database(folder / "data.duckdb")
    with dp.Curator.open(folder) as cur:
        assert cur.ledger.config.constant_work is None and cur._source is None
        cur.add_table("t", {"x": [1.0, 2.0]}, bounds={"x": (0, 3)})
        cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        item = cur.budget().history[-1]  # charged without a timing term
        assert item.query.startswith("SELECT") and not isinstance(item.event, dp.events.Composed)


def test_dpkit_init_says_the_setting(tmp_path: Path) -> None:
    from dpkit.cli import main

    runner = CliRunner()
    on = runner.invoke(main, ["init", str(tmp_path / "a.dpkit"), "--epsilon", "3",
                              "--delta", "1e-6"])
    assert on.exit_code == 0, on.output
    assert "constant work: on (timing-safe sampling; --no-constant-work to opt out)" in on.output
    out = runner.invoke(main, ["init", str(tmp_path / "b.dpkit"), "--epsilon", "3",
                               "--delta", "1e-6", "--no-constant-work"])
    assert out.exit_code == 0 and "constant work: off (--no-constant-work" in out.output
    pure = runner.invoke(main, ["init", str(tmp_path / "c.dpkit"), "--epsilon", "3"])
    assert "constant work: off (the budget has delta = 0" in pure.output
    huge = runner.invoke(main, ["init", str(tmp_path / "d.dpkit"), "--epsilon", "100",
                                "--delta", "1e-6"])
    assert "constant work: off (epsilon 100 is too large" in huge.output
    with dp.Curator.open(tmp_path / "a.dpkit") as cur:
        assert cur.ledger.config.constant_work is not None
    with dp.Curator.open(tmp_path / "b.dpkit") as cur:
        assert cur.ledger.config.constant_work is None


def test_a_default_project_charges_the_epsilon_asked_and_fits_ten_default_deltas(
        tmp_path: Path) -> None:
    """The timing term is charged beside a release's δ share, not out of it (the release's ε,
    calibrated at its share, is priced at that share), and the default share (a tenth of
    ``Ledger.delta_for``) leaves room for it: ten default selections fit the project's δ."""
    import pandas as pd

    from dpkit.accounting import BudgetExceeded

    cur = dp.Curator.create(tmp_path / "p.dpkit", epsilon=3.0, delta=1e-6,
                            source=noise.seeded(3))
    setting = cur.ledger.config.constant_work
    assert setting is not None
    frame = pd.DataFrame({"uid": range(40), "k": ["a", "b"] * 20})
    cur.add_table("u", frame, privacy_unit="uid", max_rows_per_unit=1)  # undeclared keys
    ran = 0
    with pytest.raises(BudgetExceeded):
        for _ in range(12):  # private partition selection: a tenth of delta_for each
            cur.sql("SELECT k, COUNT(*) AS n FROM u GROUP BY k", epsilon=0.01)
            ran += 1
    assert ran == 10 and cur.budget().delta_remaining >= 0.0
    cur.close()
    cur = dp.Curator.create(tmp_path / "q.dpkit", epsilon=3.0, delta=1e-6,
                            source=noise.seeded(3))
    cur.add_table("t", frame, privacy_unit="uid", max_rows_per_unit=1, domains={"k": ["a", "b"]})
    res = cur.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=0.1, delta=1e-7,
                  noise="gaussian")
    item = cur.budget().history[-1]
    assert res.epsilon == pytest.approx(0.1, rel=1e-9) and item.epsilon == res.epsilon
    assert item.delta == pytest.approx(1e-7 + setting[0], rel=1e-9)
    cur.close()


@pytest.mark.parametrize("constant_work", [None, False])
def test_the_budget_table_explains_the_timing_delta(tmp_path: Path,
                                                    constant_work: bool | None) -> None:
    """Every release of a constant-work project charges its δ_t, so a pure-ε count shows a
    δ of ~1e-12 in ``dpkit budget``: the caption says where it comes from."""
    import io

    import pandas as pd
    from rich.console import Console

    cur = dp.Curator.create(tmp_path / "p.dpkit", epsilon=3.0, delta=1e-6,
                            constant_work=constant_work, source=noise.seeded(1))
    cur.add_table("t", pd.DataFrame({"uid": range(50), "x": [1] * 50}), privacy_unit="uid",
                  max_rows_per_unit=1)
    cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.1)
    status = cur.budget()
    out = io.StringIO()
    Console(file=out, width=200).print(status.table())
    setting = cur.ledger.config.constant_work
    if constant_work is None:
        assert setting is not None and status.timing_delta == setting[0]
        assert status.history[-1].delta >= setting[0]
        assert f"includes {setting[0]:.3g} for constant work" in out.getvalue()
    else:
        assert status.timing_delta is None and "constant work" not in out.getvalue()
    assert status.to_dict()["timing_delta"] == status.timing_delta
    cur.close()
