"""The examples in the accounting docstrings run and give the numbers they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["__init__", "_common", "analytic_gaussian", "api", "approx", "budget", "calibrate",
           "gdp", "pure", "rdp", "sanity", "zcdp"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module("dpkit.accounting" if name == "__init__"
                                     else f"dpkit.accounting.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
