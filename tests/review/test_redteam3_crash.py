"""Third red-team pass: the ledger under kill -9 and races (FINDINGS.md H, part 2).

A worker process answers queries and prints each answer only once ``cur.sql`` returned it;
it is killed (SIGKILL) at fixed points of a query (after the commit and before the head file;
inside the head file's write; after the noise, before the answer is returned) and at random
moments of a query loop, on the SQLite and the PostgreSQL ledger. After each kill the project
must open (the chain and the head verify), every answer printed must have its charge on the
ledger, and the budget left must be the budget less the charges. Threads racing the last of
the budget, each with its own ``Curator`` or all on one, must never overspend it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dpkit as dp
from dpkit.accounting import BudgetExceeded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from pg_cluster import throwaway_cluster, unavailable

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def pg_dsn() -> Iterator[str]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"PostgreSQL ledger tests skipped: {reason}")
    try:
        with throwaway_cluster(fsync=False) as dsn:
            yield dsn
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot start a PostgreSQL cluster ({exc})")


@pytest.fixture(params=["sqlite", "postgres"])
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None
    path = tmp_path / "p"
    cur = dp.Curator.create(path, budget=dp.Budget(epsilon=100.0, delta=1e-6, accountant="pure"),
                            ledger=dsn, constant_work=False)
    cur.add_table("t", {"x": [1.0, 2.0, 3.0]}, bounds={"x": (0, 5)})
    cur.close()
    return path


_WORKER = textwrap.dedent(
    """
    import os, signal, sys
    import dpkit as dp
    import dpkit.engine.query_methods as qm
    from dpkit.engine import ledger_rows
    point = sys.argv[2]

    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "before_head":  # the row is committed, the head file not yet written
        ledger_rows.HeadFile.write = die
    elif point == "inside_head":  # the new head's temporary file written, not yet renamed
        real = os.replace
        def half(src, dst):
            if str(dst).endswith("ledger.head"):
                die()
            return real(src, dst)
        os.replace = half
    elif point == "after_noise":  # the noisy values made, the answer not yet returned
        real_release = qm.release
        def release_then_die(*a, **k):
            real_release(*a, **k)
            die()
        qm.release = release_then_die
    cur = dp.Curator.open(sys.argv[1])
    for i in range(int(sys.argv[3])):
        cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        print("answer", i, flush=True)
    """
)


def _worker(path: Path, point: str, queries: int = 1) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen([sys.executable, "-c", _WORKER, str(path), point, str(queries)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _check(path: Path, answers: int) -> int:
    """The project opens and verifies; at least ``answers`` charges, budget = 100 - spent."""
    cur = dp.Curator.open(path)
    try:
        cur.verify()
        b = cur.budget()
        charges = len(b.history)
        assert charges >= answers, (charges, answers)
        assert b.spent == pytest.approx(0.5 * charges)
        assert b.remaining == pytest.approx(100.0 - 0.5 * charges)
        return charges
    finally:
        cur.close()


@pytest.mark.parametrize("point", ["before_head", "inside_head", "after_noise"])
def test_a_kill_at_each_point_of_a_query_keeps_its_charge(project: Path, point: str) -> None:
    proc = _worker(project, point)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    assert "answer" not in out  # nothing was released
    assert _check(project, 0) == 1  # the charge of the killed query stands
    proc = _worker(project, "none", 2)  # and the project keeps working
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert _check(project, 0) == 3


@pytest.mark.slow  # ~20 s per store: eight worker start-ups
def test_kills_at_random_moments_lose_no_released_answer(project: Path) -> None:
    """Eight kills, each after a delay from a fixed sequence spread over start-up and the
    query loop; every answer the worker printed is on the ledger (``-m slow``)."""
    answers = 0
    for delay in (0.9, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8, 3.1):
        proc = _worker(project, "none", 40)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
        answers += out.count("answer")
        _check(project, answers)


@pytest.mark.parametrize("shared", [False, True])
def test_threads_racing_the_last_of_the_budget_never_overspend(project: Path,
                                                               shared: bool) -> None:
    """12 threads, 3 queries of epsilon 0.5 each, with 97 of the 100 already spent: exactly
    6 are answered, the rest refused (``pure``: the sums are exact)."""
    cur = dp.Curator.open(project)
    cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=97.0)
    cur.close()
    own = [dp.Curator.open(project) for _ in range(1 if shared else 12)]
    answered: list[int] = []
    start = threading.Barrier(12)

    def work(i: int) -> None:
        c = own[0 if shared else i]
        start.wait()
        for _ in range(3):
            try:
                c.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
                answered.append(i)
            except BudgetExceeded:
                pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for c in own:
        c.close()
    assert len(answered) == 6  # 3.0 left, 0.5 each
    again = dp.Curator.open(project)
    assert again.budget().spent == pytest.approx(100.0)
    assert again.budget().remaining == pytest.approx(0.0)
    again.close()
