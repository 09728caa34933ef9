"""Small things the third first-hour walk met (docs/first_hour.md), each with its test."""

from __future__ import annotations

import sys

import pytest

from dpkit.server.client import RemoteResult


def test_to_pandas_without_pandas_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh ``pip install -e .`` has no pandas; ``Client.sql(...).to_pandas()`` raised a
    bare ``ModuleNotFoundError: No module named 'pandas'``."""
    res = RemoteResult(columns=["g", "n"], rows=[["a", 3]], intervals={"n": [[1.0, 5.0]]},
                       epsilon=0.1, delta=0.0, level=0.95, warnings=[], notes=[], budget={})
    assert res.to_dicts() == [{"g": "a", "n": 3, "n_ci_low": 1.0, "n_ci_high": 5.0}]
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    with pytest.raises(ImportError, match="pip install pandas"):
        res.to_pandas()
