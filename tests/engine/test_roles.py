"""Roles: the owner (holds the project's files and key) and analysts (act through tokens).

Every refusal is checked to change nothing: the ledger keeps its length and head.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import dpkit as dp
from dpkit.accounting import BudgetExceeded
from dpkit.engine import Curator
from dpkit.engine.ledger import key_path

ROWS = {"pid": [1, 2, 3, 4, 5, 6], "age": [30, 40, 50, 60, 70, 80]}


def _owned(folder: Path) -> tuple[Curator, str, str]:
    cur = Curator.create(folder / "p", epsilon=5.0, source=dp.noise.seeded(3))
    cur.add_table("t", ROWS, privacy_unit="pid", max_rows_per_unit=1, bounds={"age": (0, 100)})
    ann = cur.add_analyst("ann", epsilon=1.0)
    bob = cur.add_analyst("bob")
    return cur, ann, bob


@pytest.fixture
def owned(tmp_path: Path) -> tuple[Curator, str, str]:
    """A project with one table and two analysts: (owner's curator, ann's token, bob's)."""
    return _owned(tmp_path)


@pytest.fixture(scope="module")
def shared_owned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Curator, str, str]]:
    """:func:`owned` built once for the tests that only read the project or are refused
    (each asserts that the ledger kept its length and head, so a refusal that changed
    something still fails there); never for a test that charges, adds or revokes."""
    got = _owned(tmp_path_factory.mktemp("roles"))
    yield got
    got[0].close()


def _state(cur: Curator) -> tuple[int, str]:
    return cur.ledger.verify(), cur.ledger.head()[1]


def test_tokens_are_random_shown_once_and_stored_as_hashes(
        shared_owned: tuple[Curator, str, str]) -> None:
    cur, ann, bob = shared_owned
    for tok in (ann, bob):
        assert tok.startswith("dpkit_") and len(tok) == 6 + 64
    assert ann != bob
    raw = (cur.path / "ledger.sqlite").read_bytes()
    for f in cur.path.iterdir():
        raw += f.read_bytes() if f.is_file() else b""
    assert ann.encode() not in raw and ann[6:].encode() not in raw
    key = key_path(cur.path / "ledger.sqlite")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_the_analyst_name_comes_from_the_token(owned: tuple[Curator, str, str]) -> None:
    cur, ann, _ = owned
    a = Curator.open(cur.path, token=ann)
    assert a.analyst == "ann" and not a.is_owner
    a.sql("SELECT COUNT(*) FROM t", epsilon=0.75)
    with pytest.raises(BudgetExceeded, match="analyst 'ann'"):  # her cap of 1.0, not the 5.0
        a.sql("SELECT COUNT(*) FROM t", epsilon=0.5)
    assert [h.analyst for h in cur.budget().history] == ["ann"]


def test_token_from_the_environment(shared_owned: tuple[Curator, str, str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cur, _, bob = shared_owned
    before = _state(cur)
    monkeypatch.setenv("DPKIT_TOKEN", bob)
    b = Curator.open(cur.path)
    assert b.analyst == "bob" and not b.is_owner
    b.close()
    assert _state(cur) == before


@pytest.mark.parametrize("action", [
    lambda c: c.add_table("u", ROWS, privacy_unit="pid", max_rows_per_unit=1),
    lambda c: c.add_table("t", ROWS, privacy_unit="pid", max_rows_per_unit=50, replace=True),
    lambda c: c.add_public_table("lookup", {"k": [1, 2]}),
    lambda c: c.set_analyst_budget("ann", 100.0),
    lambda c: c.add_analyst("mallory"),
    lambda c: c.revoke_analyst("bob"),
    lambda c: c.analysts(),
    lambda c: c.drop_orphans(),
], ids=["add", "replace", "public", "budget", "add-analyst", "revoke", "list", "cleanup"])
def test_analysts_cannot_act_as_owner(shared_owned: tuple[Curator, str, str],
                                      action: object) -> None:
    cur, ann, _ = shared_owned
    before = _state(cur)
    tables = cur.tables()
    a = Curator.open(cur.path, token=ann)
    with pytest.raises(PermissionError, match="owner's credential"):
        action(a)  # type: ignore[operator]
    assert _state(cur) == before
    assert cur.tables() == tables


def test_analyst_sees_only_its_own_history(owned: tuple[Curator, str, str]) -> None:
    cur, ann, bob = owned
    a, b = Curator.open(cur.path, token=ann), Curator.open(cur.path, token=bob)
    a.sql("SELECT COUNT(*) FROM t", epsilon=0.5)
    b.sql("SELECT COUNT(*) FROM t", epsilon=2.0)
    cur.sql("SELECT COUNT(*) FROM t", epsilon=2.0)
    mine = b.budget()
    assert [h.analyst for h in mine.history] == ["bob"]
    assert mine.spent == pytest.approx(2.0)
    assert mine.remaining == pytest.approx(0.5)  # the project's 5 - 4.5 binds, not bob's own
    assert set(mine.analysts) <= {"bob"}
    with pytest.raises(PermissionError, match="only its own"):
        b.budget("ann")
    assert {e.analyst for e in b.entries() if e.kind == "charge"} == {"bob"}
    assert [h.analyst for h in cur.budget().history] == ["ann", "bob", "owner"]
    assert cur.budget("ann").spent == pytest.approx(0.5)


def test_revoked_unknown_and_malformed_tokens_are_refused(
        owned: tuple[Curator, str, str]) -> None:
    cur, ann, bob = owned
    still_open = Curator.open(cur.path, token=bob)
    cur.revoke_analyst("bob")
    assert cur.analysts() == {"ann": {"active": True, "epsilon": 1.0, "delta": None},
                              "bob": {"active": False, "epsilon": None, "delta": None}}
    with pytest.raises(PermissionError, match="unknown to the project, or was revoked"):
        Curator.open(cur.path, token=bob)
    before = _state(cur)
    with pytest.raises(PermissionError, match="revoked"):  # a curator opened before: no charge
        still_open.sql("SELECT COUNT(*) FROM t", epsilon=0.1)
    assert _state(cur) == before
    unknown = "dpkit_" + "0" * 64
    with pytest.raises(PermissionError, match="unknown"):
        Curator.open(cur.path, token=unknown)
    for bad in ("", "dpkit_xyz", ann[:-1], ann.upper(), "Bearer " + ann):
        with pytest.raises(ValueError, match="malformed analyst token"):
            Curator.open(cur.path, token=bad)
    with pytest.raises(ValueError, match="no active analyst"):
        cur.revoke_analyst("bob")


def test_analyst_names_are_checked(shared_owned: tuple[Curator, str, str]) -> None:
    cur, _, _ = shared_owned
    before = _state(cur)
    for bad in ("owner", "", "a b", "x" * 65, "ann;drop"):
        with pytest.raises(ValueError, match="analyst name"):
            cur.add_analyst(bad)
    with pytest.raises(ValueError, match="exists already"):
        cur.add_analyst("ann")
    with pytest.raises(ValueError):
        cur.add_analyst("carol", epsilon=-1.0)
    assert _state(cur) == before and set(cur.analysts()) == {"ann", "bob"}


def test_caller_chosen_analyst_is_refused(shared_owned: tuple[Curator, str, str]) -> None:
    cur, _, _ = shared_owned
    before = _state(cur)
    with pytest.raises(TypeError, match="token"):
        Curator.open(cur.path, analyst="ann")
    with pytest.raises(TypeError, match="token"):
        cur.sql("SELECT COUNT(*) FROM t", epsilon=0.1, analyst="ann")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="token"):
        cur.preview("SELECT COUNT(*) FROM t", epsilon=0.1, analyst="ann")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="token"):
        cur.cdf("t", "age", epsilon=0.1, analyst="ann")
    with pytest.raises(TypeError):
        cur.table("t").count().run(epsilon=0.1, analyst="ann")  # type: ignore[call-arg]
    assert _state(cur) == before


def test_noise_source_is_fixed_at_creation(tmp_path: Path) -> None:
    cur = Curator.create(tmp_path / "p", epsilon=5.0, source=dp.noise.seeded(7))
    cur.add_table("t", ROWS, privacy_unit="pid", max_rows_per_unit=1, bounds={"age": (0, 100)})
    assert cur.insecure and cur.sql("SELECT COUNT(*) FROM t", epsilon=0.1).insecure
    cur.close()
    with pytest.raises(ValueError, match="fixed when the project is created"):
        Curator.open(tmp_path / "p", source=dp.noise.seeded(7))
    with pytest.raises(ValueError, match="fixed when the project is created"):
        Curator.open(tmp_path / "p", source=dp.noise.secure())
    # reopened: seeded again (never the secure source silently), INSECURE on every answer,
    # and derived from the recorded seed and the ledger's length: two copies of the same
    # project state give the same answer
    import shutil

    answers = []
    for copy in ("c1", "c2"):
        shutil.copytree(tmp_path / "p", tmp_path / copy)
        with Curator.open(tmp_path / copy) as again:
            assert again.insecure and "INSECURE" in repr(again._source)
            res = again.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.1)
            assert res.insecure
            answers.append(res.to_pandas().to_dict())
    assert answers[0] == answers[1]


def test_reopen_seed_depends_on_seed_and_length_only(tmp_path: Path) -> None:
    from dpkit.engine.roles import reopen_seed

    assert reopen_seed(7, 5) == reopen_seed(7, 5)
    assert len({reopen_seed(7, 5), reopen_seed(7, 6), reopen_seed(8, 5)}) == 3


def test_secure_project_says_secure(tmp_path: Path) -> None:
    cur = Curator.create(tmp_path / "p", epsilon=5.0)
    cur.add_table("t", ROWS, privacy_unit="pid", max_rows_per_unit=1, bounds={"age": (0, 100)})
    assert not cur.sql("SELECT COUNT(*) FROM t", epsilon=0.1).insecure
    cur.close()
    again = Curator.open(tmp_path / "p")
    assert not again.insecure and again._source is None
    with pytest.raises(TypeError, match="seeded"):
        Curator.create(tmp_path / "q", epsilon=1.0, source=object())  # type: ignore[arg-type]


def test_cli_analyst_tour(tmp_path: Path) -> None:
    """The owner adds an analyst on the command line; the analyst queries with the printed
    token (flag or DPKIT_TOKEN); add-table with a token is refused; revoke closes the door."""
    import re

    import pandas as pd
    from click.testing import CliRunner

    from dpkit.cli import main

    run = CliRunner().invoke
    proj = str(tmp_path / "p")
    csv = tmp_path / "t.csv"
    pd.DataFrame(ROWS).to_csv(csv, index=False)
    assert run(main, ["init", proj, "--epsilon", "3"]).exit_code == 0
    assert run(main, ["add-table", proj, "t", str(csv), "--privacy-unit", "pid",
                          "--max-rows-per-unit", "1"]).exit_code == 0
    out = run(main, ["analyst", "add", proj, "ann", "--epsilon", "1"])
    assert out.exit_code == 0, out.output
    found = re.findall(r"dpkit_[0-9a-f]{64}", out.output)
    assert len(found) == 1
    token = found[0]
    q = run(main, ["query", proj, "SELECT COUNT(*) FROM t", "--epsilon", "0.5", "--token", token])
    assert q.exit_code == 0, q.output
    env = {"DPKIT_TOKEN": token}
    refused = run(main, ["add-table", proj, "u", str(csv)], env=env)
    assert refused.exit_code == 2 and "owner's credential" in refused.output
    mine = run(main, ["budget", proj, "--json"], env=env)
    assert mine.exit_code == 0 and '"analyst": "ann"' in mine.output
    listed = run(main, ["analyst", "list", proj])
    assert listed.exit_code == 0 and "ann" in listed.output and "active" in listed.output
    assert run(main, ["analyst", "revoke", proj, "ann"]).exit_code == 0
    after = run(main, ["query", proj, "SELECT COUNT(*) FROM t", "--epsilon", "0.1"], env=env)
    assert after.exit_code == 2 and "revoked" in after.output
