"""Test modules in folders without ``__init__.py`` are imported by their basename (pytest's
default import mode), so two of them with one name make a clean checkout fail to collect
(a stale ``__pycache__`` can hide it locally). Also the helper modules they share."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_basenames_of_test_modules_outside_packages_are_unique() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for f in TESTS.rglob("*.py"):
        if "__pycache__" in f.parts or (f.parent / "__init__.py").exists():
            continue
        if f.name in ("conftest.py", "__init__.py"):
            continue
        seen[f.stem].append(str(f.relative_to(TESTS)))
    clashes = {k: v for k, v in seen.items() if len(v) > 1}
    assert not clashes, f"rename one of each (pytest imports them by basename): {clashes}"


def test_node_ids_of_collected_tests_are_unique(request: pytest.FixtureRequest) -> None:
    # pytest-xdist hands out work by node id: two items with one id run once (schemathesis
    # items under pytest 9.2 did, tests/server/test_fuzz.py), and --durations cannot tell
    # them apart. Checks the whole collection when the whole suite runs.
    seen: dict[str, int] = defaultdict(int)
    for item in request.session.items:
        seen[item.nodeid] += 1
    twice = sorted(k for k, n in seen.items() if n > 1)
    assert not twice, f"give these items distinct ids (parametrize ids=...): {twice[:10]}"
