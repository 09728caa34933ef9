"""The examples in the dpkit.learn docstrings run and give the results they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["linear", "naive_bayes", "cluster", "pac", "sq", "features", "batch_count"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"dpkit.learn.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_import_dpkit_learn_needs_no_heavy_extra() -> None:
    import subprocess
    import sys

    code = ("import sys, dpkit.learn; bad = [m for m in ('torch', 'sklearn', 'matplotlib', "
            "'polars') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
