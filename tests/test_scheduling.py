"""The parallel run's work units (tests/conftest.py): what FIRST and ONE_WORKER name exists, so
that a renamed file cannot silently fall back to xdist's order or split the Spark session."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# by path: in a whole run, ``import conftest`` gives whichever folder's conftest came last
_spec = importlib.util.spec_from_file_location("_root_conftest", ROOT / "tests" / "conftest.py")
assert _spec is not None and _spec.loader is not None
conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)


def test_the_units_named_first_and_grouped_exist() -> None:
    for name in (*conftest.FIRST, *conftest.ONE_WORKER):
        assert (ROOT / name).exists(), name
    assert conftest.FIRST[0] == conftest.SPARK_UNIT  # the longest unit goes out first
    assert set(conftest.ONE_WORKER.values()) == {conftest.SPARK_UNIT}
