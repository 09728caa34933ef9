"""An analyst's own δ cap beside its ε cap (FINDINGS.md F9): without it one analyst capped at a
small ε could spend the project's whole δ on private group selections and leave every other
analyst without a query that needs δ."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import dpkit as dp
from dpkit.accounting import BudgetExceeded
from dpkit.cli import main
from dpkit.engine import Curator

FRAME = pd.DataFrame({"uid": range(40), "k": ["a", "b"] * 20})
SELECT = "SELECT k, COUNT(*) FROM t GROUP BY k"  # undeclared keys: private selection, needs δ


def _project(path: Path, accountant: str = "approx") -> Curator:
    cur = Curator.create(path, budget=dp.Budget(epsilon=3, delta=1e-6, accountant=accountant),
                         source=dp.noise.seeded(1))
    cur.add_table("t", FRAME, privacy_unit="uid", max_rows_per_unit=1)
    return cur


def test_default_delta_cap_is_proportional_and_queries_draw_a_tenth_of_it(
        tmp_path: Path) -> None:
    with _project(tmp_path / "p") as cur:
        alice = Curator.open(tmp_path / "p", token=cur.add_analyst("alice", epsilon=0.5))
        cur.add_analyst("carol")  # no own cap: no δ cap either
        assert cur.analysts()["alice"]["delta"] == pytest.approx(1e-6 / 6)
        assert cur.analysts()["carol"]["delta"] is None
        head = cur.ledger.head()
        alice.preview(SELECT, epsilon=0.01)
        assert cur.ledger.head() == head  # preview charges nothing
        ran = 0
        with pytest.raises(BudgetExceeded, match=r"analyst 'alice' has a budget of epsilon "
                                                 r"0\.5, delta 1\.66667e-07"):
            for _ in range(11):
                alice.sql(SELECT, epsilon=0.01)
                ran += 1
        assert ran == 10  # each drew a tenth of her own δ, not of the project's
        assert cur.ledger.head()[0] == head[0] + 10  # the refusal wrote nothing
        assert cur.budget().delta_remaining == pytest.approx(1e-6 * 5 / 6)


def test_explicit_caps_changes_and_refusals(tmp_path: Path) -> None:
    with _project(tmp_path / "p") as cur:
        cur.add_analyst("bob", epsilon=1.0, delta=5e-7)
        assert cur.analysts()["bob"]["delta"] == 5e-7
        cur.set_analyst_budget("bob", 2.0)  # a new ε cap: δ in proportion again
        assert cur.analysts()["bob"]["delta"] == pytest.approx(1e-6 * 2 / 3)
        cur.set_analyst_budget("bob", None)  # both removed
        assert cur.analysts()["bob"] == {"active": True, "epsilon": None, "delta": None}
        length = cur.ledger.head()[0]
        with pytest.raises(ValueError, match="goes with an epsilon cap"):
            cur.add_analyst("dan", delta=1e-7)
        with pytest.raises(ValueError, match=r"must lie in \[0, 1e-06\]"):
            cur.add_analyst("dan", epsilon=1.0, delta=2e-6)
        with pytest.raises(ValueError, match="must lie in"):
            cur.set_analyst_budget("bob", 1.0, float("nan"))
        assert cur.ledger.head()[0] == length  # refusals record nothing


def test_other_accountants_take_a_delta_cap_only_when_given(tmp_path: Path) -> None:
    """zcdp converts the project's δ into ρ: a proportional δ cap would silently shrink the
    analyst's ε cap, so none is set unless the owner gives one."""
    with _project(tmp_path / "p", accountant="zcdp") as cur:
        cur.add_analyst("alice", epsilon=0.5)
        cur.add_analyst("bob", epsilon=0.5, delta=1e-7)
        assert cur.analysts()["alice"]["delta"] is None
        assert cur.analysts()["bob"]["delta"] == 1e-7


def test_rows_written_before_delta_caps_keep_no_delta_cap(tmp_path: Path) -> None:
    with _project(tmp_path / "p") as cur:
        cur.add_analyst("old", epsilon=0.5)
        cur.ledger.record("analyst", {"analyst": "old", "epsilon": 0.5}, analyst="owner",
                          query="SET BUDGET old = 0.5")  # the row an older dpkit wrote
        assert cur.analysts()["old"]["delta"] is None
        # the project's δ (on this constant-work project less ten timing terms, Ledger.delta_for)
        setting = cur.ledger.config.constant_work
        assert setting is not None
        assert cur.ledger.delta_for("old") == cur.ledger.delta_for(None) == 1e-6 - 10 * setting[0]


def test_cli_add_and_list_show_the_delta_cap(tmp_path: Path) -> None:
    _project(tmp_path / "p").close()
    runner = CliRunner()
    out = runner.invoke(main, ["analyst", "add", str(tmp_path / "p"), "eve", "--epsilon", "1",
                               "--delta", "2e-7"])
    assert out.exit_code == 0, out.output
    assert "delta 2e-07" in out.output
    listed = runner.invoke(main, ["analyst", "list", str(tmp_path / "p")])
    assert listed.exit_code == 0 and "2e-07" in listed.output
