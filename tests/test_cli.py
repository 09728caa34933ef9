"""The `dpkit` command: the calculator and attack commands print numbers that match the library."""

from __future__ import annotations

from click.testing import CliRunner

import dpkit as dp
from dpkit.cli import main

DPSGD_LIKE = '{"SelfComposed": {"event": {"Gaussian": [2.0]}, "count": 100}}'


def test_account_prints_every_method_and_the_exact_gdp_value() -> None:
    result = CliRunner().invoke(main, ["account", DPSGD_LIKE, "--delta", "1e-12"])
    assert result.exit_code == 0, result.output
    for method in ("pure", "zcdp", "rdp", "gdp"):
        assert method in result.output
    exact = dp.accounting.epsilon(dp.events.from_json(DPSGD_LIKE), 1e-12, method="gdp")
    assert f"{exact:.6f}" in result.output  # 47.049232 (REFERENCES.md: 47.04923)


def test_account_refuses_bad_json_with_the_fix() -> None:
    result = CliRunner().invoke(main, ["account", '{"Gausian": [1]}', "--delta", "1e-5"])
    assert result.exit_code == 2
    assert "unknown event kind 'Gausian'" in result.output
    assert "Gaussian" in result.output  # the known kinds are listed


def test_one_run_calculator_matches_the_library() -> None:
    args = ["attack", "one-run", "--canaries", "1000", "--guesses", "1000", "--correct", "1000"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    bound = dp.attacks.one_run_epsilon(canaries=1000, guesses=1000, correct=1000)
    assert f"{bound:.3f}" in result.output
