"""CI runs the optional extras' paths: with ``DPKIT_REQUIRE_EXTRAS=1`` (set by ``.ci/run``)
a missing extra fails here, instead of its tests quietly skipping (``pytest.importorskip``).
Elsewhere this test skips: the core needs none of them."""

from __future__ import annotations

import importlib
import os

import pytest

# module -> the extra of pyproject.toml that installs it (all are in the `test` extra too)
EXTRAS = {"polars": "dataframes", "matplotlib": "plots", "openpyxl": "xlsx", "yaml": "yaml",
          "pandas": "dataframes", "sklearn": "test", "torch": "torch",
          "playwright": "test", "pytest_playwright": "test", "psycopg": "postgres",
          "pyspark": "spark", "cryptography": "fastnoise"}


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_the_extras_are_installed_in_ci(module: str) -> None:
    """(torch is installed by .ci/run's own line, ``pip install torch==2.13.0``: the CPU
    build; an unpinned torch pulls a multi-GB CUDA build.)"""
    if not os.environ.get("DPKIT_REQUIRE_EXTRAS"):
        pytest.skip("outside CI (DPKIT_REQUIRE_EXTRAS unset): the extras are optional")
    try:
        importlib.import_module(module)
    except ImportError:
        pytest.fail(f"{module} (extra {EXTRAS[module]!r}) is missing: pip install -e '.[test]' "
                    f"installs it, so that its tests run instead of skipping")
