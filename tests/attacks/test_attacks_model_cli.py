"""`dpkit attack inversion` and `dpkit attack membership-model` from the command line (small
sizes; the numbers are pinned by test_attacks_inversion.py / test_attacks_lira.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dpkit.cli import main


def test_commands_are_registered_beside_the_aggregate_membership() -> None:
    out = CliRunner().invoke(main, ["attack", "--help"])
    assert out.exit_code == 0
    for name in ("inversion", "membership-model", "membership"):
        assert name in out.output


def test_bad_epsilons_are_refused() -> None:
    out = CliRunner().invoke(main, ["attack", "membership-model", "--epsilons", "a,b"])
    assert out.exit_code == 2 and "comma-separated numbers" in out.output
    out = CliRunner().invoke(main, ["attack", "membership-model", "--epsilons", "-1",
                                    "--data", "adult"])
    assert out.exit_code == 2 and "epsilons must be finite numbers > 0" in out.output


def test_membership_model_on_adult(tmp_path: Path) -> None:
    from dpkit.learn.adult import data_dir

    if data_dir() is None:
        pytest.skip("adult.data.gz not in ../shared/data (set DPKIT_DATA)")
    args = ["attack", "membership-model", "--data", "adult", "--population", "200",
            "--shadows", "4", "--epsilons", "2", "--seed", "3"]
    if pytest.importorskip("matplotlib"):
        args += ["--plot", str(tmp_path)]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert "non-private" in out.output and "ε=2" in out.output
    assert (tmp_path / "attack_lira.png").stat().st_size > 1000


def test_inversion_command(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    from dpkit.attacks.model_targets import mnist_dir

    if mnist_dir() is None:
        pytest.skip("mnist_5k.csv.gz not in ../shared/data (set DPKIT_DATA)")
    out = CliRunner().invoke(main, ["attack", "inversion", "--method", "black-box",
                                    "--train-rows", "300", "--steps", "10", "--epsilons", "8",
                                    "--seed", "1", "--plot", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "DP-SGD ε=8" in out.output and "black-box" in out.output
    assert (tmp_path / "attack_inversion_300.png").stat().st_size > 1000
