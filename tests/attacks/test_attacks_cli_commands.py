"""Smoke tests of the functions behind `dpkit attack …` (small sizes; the numbers themselves
are pinned by the other test files)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from dpkit.cli import attack_runs as cc


def test_reconstruct_summary() -> None:
    s = cc.attack_reconstruct(n=32, queries=128, noise_levels=(0, 2), curator_epsilon=None,
                              seed=1)
    assert s.columns == ["system", "answered", "refused", "recovered"]
    assert len(s.rows) == 2 and s.rows[0][-1] == "100.0%"
    assert s.table().row_count == 2


def test_reconstruct_least_squares_summary() -> None:
    s = cc.attack_reconstruct(n=32, queries=128, noise_levels=(0, 1), attack="lsq",
                              curator_epsilon=None, seed=1)
    assert s.rows[0][-1] == "100.0%"
    # E = 1: sigma^2 = 2/3, diag (A^T A)^-1 ~ 4/(128 - 32): per-bit error sd 0.17, z = 3
    assert float(s.rows[1][-1].rstrip("%")) >= 90.0
    assert any(n.startswith("least squares predicted") for n in s.notes)
    with pytest.raises(ValueError, match="known_bound"):
        cc.attack_reconstruct(n=8, queries=8, attack="lsq", known_bound=True,
                              curator_epsilon=None)


def test_reconstruct_against_curator_small() -> None:
    pytest.importorskip("dpkit.engine")
    s = cc.attack_reconstruct(n=16, queries=8, noise_levels=(), curator_epsilon=1.0, seed=2)
    (row,) = s.rows
    assert row[0].startswith("dpkit curator") and row[1] == 8 and row[2] >= 1


def test_difference_and_average_summaries() -> None:
    d = cc.attack_difference(n=40, targets=4, repeats=50, curator_epsilon=None, seed=3)
    assert d.rows[0][-1] == "100.0%" and d.rows[1][-1] == "100.0%"  # exact, suppression
    a = cc.attack_average(n=40, repeats=(1, 100), questions=2, curator_epsilon=None, seed=4)
    assert [r[0] for r in a.rows] == [1, 100]
    # fresh Laplace noise of scale 8 (sd 11.3) averaged 100 times: sd 1.13; 5 is 4.4 sd away
    assert a.rows[1][1] < 5


def test_membership_and_audits(tmp_path: Path) -> None:
    plots = importlib.util.find_spec("matplotlib") is not None  # the optional extra
    m = cc.attack_membership(kind="aggregate", trials=2000, seed=5,
                             plot_dir=tmp_path if plots else None)
    assert m.rows[0][0] == "count, exact" and m.rows[0][1] == 1.0
    if plots:
        assert [p.name for p in m.files] == ["attack_roc_aggregate.png"]
        assert (tmp_path / "attack_roc_aggregate.png").exists()
    o = cc.attack_one_run(canaries=1000, guesses=1000, correct=1000)
    assert 5.80 < o.rows[0][-1] < 5.82
    r = cc.attack_audit(trials=200, names=["geometric"], seed=6)
    assert r.rows[0][0] == "geometric" and r.rows[0][-1] == "ok"
    with pytest.raises(ValueError, match="kind"):
        cc.attack_membership(kind="nope")


def test_summary_fits_80_columns_without_cutting_a_number() -> None:
    """`dpkit attack membership-model` printed 12 columns into 80 as `0.…` each: the summary
    now prints in parts that repeat the row's names (data, model) and keep every figure."""
    from rich.console import Console

    cols = ["data", "model"] + [f"TPR@{k}%" for k in range(10)]
    rows = [["adult", "non-private"] + [0.0012345 * (k + 1) for k in range(10)],
            ["adult", "ε=1"] + [0.0002468 * (k + 1) for k in range(10)]]
    con = Console(width=80, record=True, color_system=None)
    con.print(cc.AttackSummary("LiRA", cols, rows))
    out = con.export_text()
    assert "…" not in out and "(part 2 of" in out
    for v in rows[0][2:] + rows[1][2:]:
        assert f"{v:.4g}" in out
    assert out.count("non-private") >= 2  # the names repeated in each part
