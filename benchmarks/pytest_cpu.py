"""A pytest plugin: CPU seconds per test (user + sys of the process, all its threads, and of
its waited-for children), the total and the 40 costliest, printed after the run. CPU time
moves less than wall time on a shared machine, so before/after figures of a test's cost are
comparable across loads:

    PYTHONPATH=$PWD/src:benchmarks python -m pytest -p pytest_cpu tests/attacks -q
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from typing import Any

import pytest

_RECORDS: list[tuple[float, float, str]] = []


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    c, w = _cpu(), time.perf_counter()
    yield
    _RECORDS.append((_cpu() - c, time.perf_counter() - w, item.nodeid))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    total = sum(r[0] for r in _RECORDS)
    terminalreporter.write_line(f"CPU total {total:.1f} s over {len(_RECORDS)} tests")
    for cpu, wall, name in sorted(_RECORDS, reverse=True)[:40]:
        terminalreporter.write_line(f"cpu {cpu:7.2f} s  wall {wall:7.2f} s  {name}")
