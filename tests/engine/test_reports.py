"""Budget reports tell the ledger's truth: per-analyst spent and remaining, for every accountant.

The expected numbers are recomputed here from the ledger's own charge rows, replayed into fresh
:class:`dpkit.accounting.Budget` objects (the accountant itself, not the report code), and
compared with ``Curator.budget`` (owner and analyst views) and ``dpkit budget --json``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console

from dpkit.accounting import Budget
from dpkit.cli.project import budget as cli_budget
from dpkit.engine import Curator
from dpkit.engine.roles import headroom


@pytest.fixture
def spend(project: Callable[..., Curator], visits_data: Callable[..., Any]) -> Callable[..., Any]:
    return lambda accountant: _spend_everywhere(project, visits_data(), accountant)


ACCOUNTANTS = ["pure", "approx", "zcdp", "rdp", "pld"]
Q = "SELECT ward, COUNT(*) FROM visits GROUP BY ward"


def _replayed(cur: Curator, analyst: str | None, total: float) -> Budget:
    cfg = cur.ledger.config
    # a constant-work zcdp / rdp project (the default) keeps a δ reserve for its timing terms
    reserve = {"approx_delta": cfg.approx_delta} if cfg.approx_delta else {}
    b = Budget(epsilon=total, delta=cfg.delta, accountant=cfg.accountant, **reserve)
    for e in cur.entries():
        if e.kind == "charge" and analyst in (None, e.analyst):
            share = e.view.get("delta_share") if cfg.accountant == "approx" else None
            b.charge(e.event, delta=share)
    return b


def _spend_everywhere(project: Callable[..., Curator], data: Any,
                      accountant: str) -> tuple[Curator, dict[str, str]]:
    cur = project(epsilon=3.0, delta=0.0 if accountant == "pure" else 1e-6,
                  accountant=accountant)
    cur.add_table("visits", data, privacy_unit="pid", max_rows_per_unit=2,
                  domains={"ward": ["A", "B", "C", "D"]})
    tokens = {"alice": cur.add_analyst("alice"), "bob": cur.add_analyst("bob", epsilon=1.0),
              "carol": cur.add_analyst("carol")}  # carol never queries
    cur.sql(Q, epsilon=0.2)
    for name, eps in (("alice", 0.15), ("bob", 0.1), ("alice", 0.1)):
        with Curator.open(cur.path, token=tokens[name]) as c:
            c.sql(Q, epsilon=eps)
    if accountant != "pure":  # a Gaussian charge: a delta share under approx, rho under zcdp
        with Curator.open(cur.path, token=tokens["bob"]) as c:
            c.sql(Q, epsilon=0.1, noise="gaussian", delta=1e-7)
    return cur, tokens


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
def test_per_analyst_report_equals_replayed_ledger(spend: Callable[..., Any],
                                                   accountant: str) -> None:
    cur, tokens = spend(accountant)
    total = cur.ledger.config.epsilon
    whole = _replayed(cur, None, total)
    status = cur.budget()
    assert status.spent == pytest.approx(whole.spent.epsilon, rel=1e-9)
    assert status.remaining == pytest.approx(whole.remaining.epsilon, rel=1e-9)
    caps = {"alice": None, "bob": 1.0, "carol": None, "owner": None}
    for name, cap in caps.items():
        own = _replayed(cur, name, total if cap is None else min(cap, total))
        truth = min(own.remaining.epsilon, whole.remaining.epsilon)
        views = [cur.budget(name)]
        if name in tokens:
            with Curator.open(cur.path, token=tokens[name]) as c:
                views.append(c.budget())
        for v in views:
            assert v.spent == pytest.approx(own.spent.epsilon, rel=1e-9, abs=1e-12), name
            assert v.remaining == pytest.approx(truth, rel=1e-9), (name, v.remaining, truth)
            if v.history:  # the running own total ends at the analyst's spent
                assert v.history[-1].analyst_spent == pytest.approx(v.spent, rel=1e-9)
        row = status.per_analyst.get(name)
        if name != "carol" or row is not None:
            assert row is not None, name
            assert row["spent"] == pytest.approx(own.spent.epsilon, rel=1e-9, abs=1e-12)
            assert row["remaining"] == pytest.approx(truth, rel=1e-9)
    # the CLI's JSON says the same for an analyst who spent nothing: the project's remaining,
    # not the total (the issue-14 report showed 5 where 1.44 was left)
    out = io.StringIO()
    cli_budget(cur.path, console=Console(file=out, width=200), as_json=True, analyst="carol")
    shown = json.loads(out.getvalue())
    assert shown["spent"] == 0.0
    assert shown["remaining"] == pytest.approx(whole.remaining.epsilon, rel=1e-9)
    assert shown["remaining"] < total


def test_budget_table_shows_each_analyst(spend: Callable[..., Any]) -> None:
    cur, _ = spend("approx")
    out = io.StringIO()
    cli_budget(cur.path, console=Console(file=out, width=80))
    text = out.getvalue()
    assert "per analyst" in text
    for name in ("alice", "bob", "carol", "owner"):
        assert name in text
    remaining = f"{cur.budget('alice').remaining:.4g}"
    assert remaining in text
    assert max(len(line) for line in text.splitlines()) <= 80


def _history_json(status: Any) -> list[dict[str, Any]]:
    return status.to_dict()["history"]


def test_budget_json_history_has_running_totals(spend: Callable[..., Any]) -> None:
    cur, _ = spend("pure")
    hist = _history_json(cur.budget())
    alice = [h["analyst_spent"] for h in hist if h["analyst"] == "alice"]
    assert alice == pytest.approx([0.15, 0.25])
    assert [h["epsilon_spent"] for h in hist][-1] == pytest.approx(0.55)


def test_an_answer_and_a_preview_show_what_the_next_query_may_use(
        project: Callable[..., Curator], visits_data: Callable[..., Any]) -> None:
    cur = project(epsilon=1.0, delta=0.0, accountant="pure")
    cur.add_table("visits", visits_data(), privacy_unit="pid", max_rows_per_unit=2,
                  domains={"ward": ["A", "B", "C", "D"]})
    token = cur.add_analyst("bob", epsilon=0.8)
    cur.sql(Q, epsilon=0.6)
    with Curator.open(cur.path, token=token) as bob:
        res = bob.sql(Q, epsilon=0.1)
        # bob's cap leaves 0.7, the project only 0.3: the answer must say 0.3
        assert res.remaining == pytest.approx(0.3)
        assert bob.preview(Q, epsilon=0.1).remaining == pytest.approx(0.3)
        assert bob.budget().remaining == pytest.approx(0.3)
    assert cur.budget("bob").remaining == pytest.approx(0.3)
    assert headroom(cur.ledger, "bob") == pytest.approx(0.3)
