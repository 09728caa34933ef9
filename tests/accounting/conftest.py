"""pytest setup for the dpkit.accounting tests: make ``src/`` importable from a bare checkout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("dpkit") is None:  # running from a checkout without `pip install -e`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import pytest


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    """Each test starts with an empty answer memo: tests that swap in a fake PLD module must not
    see (or leave behind) answers computed with another one."""
    from dpkit.accounting import api

    clear = getattr(api, "clear_memo", None)  # absent before issue 12 (running old code)
    if clear is not None:
        clear()
