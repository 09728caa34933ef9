"""A throwaway PostgreSQL cluster for the PostgreSQL ledger's tests and benchmark.

``$DPKIT_TEST_PG_DSN`` (set by ``.ci/run``) names a server to use as is. Otherwise
:func:`throwaway_cluster` runs Debian's ``initdb`` / ``pg_ctl`` (package ``postgresql``) into
a temporary folder on a free loopback port (as the ``postgres`` user when run as root: initdb
refuses root) and removes it afterwards. :func:`unavailable` says why neither works, for a
``pytest.skip`` reason.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TEST_DSN_ENV = "DPKIT_TEST_PG_DSN"


def pg_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<v>/bin`` with initdb, or initdb on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def unavailable() -> str | None:
    """Why no PostgreSQL can be had here (None: one can)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install -e '.[postgres]'"
    if os.environ.get(TEST_DSN_ENV):
        return None
    if pg_bin() is None:
        return (f"no PostgreSQL server: set {TEST_DSN_ENV}, or install the Debian package "
                f"'postgresql' (initdb not found)")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: initdb refuses root"
    return None


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def throwaway_cluster(*, fsync: bool = True) -> Iterator[str]:
    """Start a fresh cluster and yield its DSN (database ``dpkit``); stop and remove it after.
    ``fsync=False`` only for speed where durability is not being measured."""
    env_dsn = os.environ.get(TEST_DSN_ENV)
    if env_dsn:
        yield env_dsn
        return
    binary = pg_bin()
    assert binary is not None, unavailable()
    root = Path(tempfile.mkdtemp(prefix="dpkit-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()
    data, log = root / "data", root / "log"
    run = lambda *cmd: subprocess.run(_as_postgres([str(c) for c in cmd]),  # noqa: E731
                                      check=True, capture_output=True, text=True, timeout=120)
    try:
        run(binary / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-locale",
            "-E", "UTF8")
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c max_connections=200"
        if not fsync:
            opts += " -c fsync=off"
        run(binary / "pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o", opts, "start")
        try:
            run(binary / "createdb", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "dpkit")
            yield f"host=127.0.0.1 port={port} user=postgres dbname=dpkit"
        finally:
            run(binary / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
