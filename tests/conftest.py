"""Suite-wide settings.

One BLAS thread: CI and this project's machines have 2 shared cores, where OpenBLAS's own threads
made the linear-algebra tests (release/, attacks/) 5-10x slower, not faster. Set before numpy is
imported by any test module; an explicit setting in the environment wins.

Parallel runs (pytest-xdist, the [test] extra): ``DPKIT_TEST_WORKERS=2`` (``.ci/run`` sets it)
runs the suite in that many worker processes, so the README's test command stays one line and
reads the same in both places. Work is handed out a test file at a time (each module's fixtures
are built once), and all of ``tests/spark/`` goes to one worker with the other file that starts a
Spark session (``SPARK_UNIT``): one local Spark session (a JVM) per run, and
``test_zz_session_dies.py`` runs after the files that use the session. The longest units go out
first (``FIRST``), so that neither worker idles at the end while the other finishes one.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

WORKERS_ENV = "DPKIT_TEST_WORKERS"
# files (a folder: its files) that must share one worker and run in collection order: one
# Spark session (getOrCreate) between them, stopped by tests/spark/test_zz_session_dies.py last
SPARK_UNIT = "tests/spark/"
ONE_WORKER = {"tests/review/test_redteam3_spark.py": SPARK_UNIT, "tests/spark/": SPARK_UNIT}
# the longest work units (measured, docs/development.md: together ~35% of a run), handed out
# before the others, longest first: xdist's order (by number of tests) started them half-way
# through, and a worker then idled for a minute or more while the other finished one
FIRST = (SPARK_UNIT, "tests/attacks/test_side_channels.py", "tests/review/test_redteam3_crash.py",
         "tests/server/test_side_channels_service.py", "tests/server/test_fit_endpoint.py",
         "tests/learn_torch/test_mlp_auto_batch.py", "tests/server/test_console_browser.py",
         "tests/attacks/test_side_channels_fit.py")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``DPKIT_TEST_WORKERS=N``: as if ``-n N`` had been given (an explicit ``-n`` wins)."""
    wanted = os.environ.get(WORKERS_ENV, "").strip()
    if not wanted or hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if not config.pluginmanager.hasplugin("xdist"):
        raise pytest.UsageError(f"{WORKERS_ENV}={wanted} needs pytest-xdist: "
                                "pip install -e '.[test]' (or unset the variable)")
    if not wanted.isdigit():
        raise pytest.UsageError(f"{WORKERS_ENV} must be a number of workers (got {wanted!r})")
    if config.getoption("numprocesses", None) is None and not config.getoption("usepdb"):
        config.option.numprocesses = int(wanted)
        if config.option.dist == "no":
            config.option.dist = "loadfile"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Files as work units, with the ONE_WORKER files as one unit (for ``-n N`` alone too:
    xdist's default, test by test, would split tests/spark/ over two sessions), FIRST first.

    Grouping by path, not by ``xdist_group`` marks: under pytest 9.2 xdist 3.8's ``loadgroup``
    renames items through ``item._nodeid``, which pytest no longer reads, so its groups are
    silently ignored.
    """
    if config.getoption("dist") not in ("load", "loadfile"):
        return None  # an explicit --dist loadscope / worksteal / each: as asked
    from xdist.scheduler import LoadFileScheduling

    class FolderScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for prefix, unit in ONE_WORKER.items():
                if nodeid.startswith(prefix):
                    return unit
            return super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            for unit in reversed(FIRST):
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    return FolderScheduling(config, log)
