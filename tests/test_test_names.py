"""Test modules in folders without ``__init__.py`` are imported by their basename (pytest's
default import mode), so two of them with one name make a clean checkout fail to collect
(a stale ``__pycache__`` can hide it locally). Also the helper modules they share."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

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
