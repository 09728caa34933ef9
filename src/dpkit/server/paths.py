"""The service's data root: the one folder ``POST /v1/tables`` may read a source from.

The owner's own process (``Curator.add_table``, ``dpkit add-table``) reads any path: the owner
is the process. Over HTTP the owner is a bearer token, and a stolen token (or a mistyped path)
must not turn any file the service's account can read (``/etc/...``, the owner's home, the
project's own ``ledger.key`` or ``data.duckdb``) into a public table analysts can SELECT from.
So the service resolves the source (``..`` and symlinks too, as the load would) and refuses it
unless it lies under the data root: ``dpkit serve --data-root DIR``, by default the folder
``data/`` inside the project (:func:`default_data_root`). Relative sources are read from the
root. The project's own files are refused even under a wider root.

Checking a name and then letting DuckDB open the name is not enough: anyone who may write
inside the root could swap a folder on the path for a symlink between the check and the open
(a TOCTOU race) and have the service read any file. So :func:`opened` walks the checked path
again from an open descriptor of the root, one component at a time (``openat`` with
``O_NOFOLLOW``: a symlink met anywhere is refused), ``fstat``s what it opened (a regular file,
or a folder of data files walked the same way), and hands DuckDB ``/proc/self/fd/N``: the open
file itself, whatever happens to its name afterwards. Without ``/proc/self/fd`` (not Linux)
there is no name for an open file that DuckDB can read, so the service refuses to load over
HTTP there (409, naming ``dpkit add-table``) rather than read by name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dpkit.engine.duckdb_sources import DATASET_SUFFIX, file_format
from dpkit.engine.tables import OpenedSource
from dpkit.server.problems import Problem

__all__ = ["DATA_DIR", "MAX_DATASET_FILES", "confine", "default_data_root", "opened"]

DATA_DIR = "data"
_GLOB = set("*?[{")  # DuckDB expands these in a file name: a pattern could reach past a link


def default_data_root(project: str | Path) -> Path:
    """``PROJECT/data``: beside the ledger, in the folder the service's account reads anyway,
    copied with the project to another host; never the project folder itself (it holds
    ``ledger.key`` and the private rows in ``data.duckdb``)."""
    return Path(project) / DATA_DIR


def confine(source: str, root: Path, project: Path) -> str:
    """``source`` as an absolute path with no symlink, when it lies under ``root`` (a DuckDB
    ``file.duckdb::table`` keeps its table part); else a 409 problem naming the root and how to
    widen it (the owner's endpoint: the owner may see the service's paths)."""
    root = root.expanduser().resolve()
    text, table = source, ""
    if "::" in text and not _under(root, text).exists():
        text, table = text.rsplit("::", 1)
        table = "::" + table
    if _GLOB & set(text):
        raise Problem(409, "refused", f"source {source!r} has a glob character (one of "
                                      f"{''.join(sorted(_GLOB))}); name one file. Nothing "
                                      f"was loaded")
    resolved = _under(root, text).resolve()
    project = project.resolve()
    own = resolved.is_relative_to(project) and not resolved.is_relative_to(
        default_data_root(project))
    if own or not resolved.is_relative_to(root):
        why = ("is one of the project's own files (its key, ledger or data), never a source"
               if own else f"is outside the service's data root {root}")
        raise Problem(409, "outside-data-root",
                      f"source {source!r} resolves to {resolved}, which {why}. Over HTTP the "
                      f"service reads tables only from its data root, so that an owner token "
                      f"cannot publish the machine's other files: put the file under {root} "
                      f"(relative sources are read from there), or restart the service with "
                      f"`dpkit serve --data-root DIR` naming a folder that holds it "
                      f"(`dpkit add-table` on the machine reads any path). Nothing was loaded")
    return str(resolved) + table


def _under(root: Path, text: str) -> Path:
    """``text`` as a path, a relative one taken from ``root``."""
    path = Path(text).expanduser()
    return path if path.is_absolute() else root / path


FD_DIR = "/proc/self/fd"
MAX_DATASET_FILES = 256  # open descriptors held during one load (the usual limit is 1,024)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
# a folder on the way: O_PATH (Linux) needs no read permission on it, only search, as a
# lookup by name did; O_DIRECTORY refuses anything else, a symlink included (ENOTDIR)
_WAY = _NOFOLLOW | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_PATH", os.O_RDONLY)
_LIST = _NOFOLLOW | getattr(os, "O_DIRECTORY", 0) | os.O_RDONLY  # a dataset's folders
_LAST = _NOFOLLOW | os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block


@contextmanager
def opened(checked: str, root: Path, project: Path) -> Iterator[OpenedSource]:
    """The source :func:`confine` checked, opened without following any name again: each
    folder on the way from the root's descriptor with ``O_NOFOLLOW``, the last component
    ``fstat``-ed (a regular file, or a folder whose data files are opened the same way).
    Yields the open files as ``/proc/self/fd/N`` paths; they stay open until the ``with``
    block ends. A component swapped for a symlink (or anything but a file or folder) since
    the check is a 409."""
    if not os.path.isdir(FD_DIR) or not hasattr(os, "O_NOFOLLOW"):
        raise Problem(409, "refused",
                      f"this platform has no {FD_DIR}, so the service cannot hand the loader "
                      f"the very file it checked (a name could be swapped for a symlink in "
                      f"between); load the table on the machine with `dpkit add-table`. "
                      f"Nothing was loaded")
    text, table = checked, None
    if "::" in text and not Path(text).exists():
        text, table = text.rsplit("::", 1)
    root = root.expanduser().resolve()
    parts = Path(text).relative_to(root).parts
    fds: list[int] = []
    try:
        # the root's own path is the operator's choice, above what the root's writers reach
        fds.append(os.open(root, _WAY if parts else _LIST))  # the root itself: listed
        for part in parts[:-1]:
            fds.append(_open_at(fds[-1], part, text, _WAY))
        if parts:
            fds.append(_open_at(fds[-1], parts[-1], text, _LAST))
        files = ([fds[-1]] if stat.S_ISREG(os.fstat(fds[-1]).st_mode)
                 else _dataset(fds, text))
        _not_own(files, project, text)
        source = OpenedSource(text, tuple(f"{FD_DIR}/{fd}" for fd in files), table)
        try:
            yield source
        except ValueError as exc:  # the loader's refusal names what it opened: the owner's name
            shown = str(exc)
            for path in sorted(source.paths, key=len, reverse=True):  # fd/12 before fd/1
                shown = shown.replace(path, text)
            if type(exc) is not ValueError or shown == str(exc):
                raise
            raise ValueError(shown) from None
    finally:
        for fd in fds:
            os.close(fd)


def _open_at(parent: int, part: str, source: str, flags: int) -> int:
    """``part`` in the folder open as ``parent``, never through a symlink: a regular file or a
    folder (a FIFO, device or socket is refused after its non-blocking open)."""
    try:
        fd = os.open(part, flags, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):  # O_NOFOLLOW, O_DIRECTORY
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise _changed(source, f"{part!r} is a symbolic link") from None
            raise _changed(source, f"{part!r} is not a folder") from None
        if exc.errno == errno.ENOENT:
            raise Problem(409, "refused", f"source file {source} does not exist (or was "
                                          f"removed after it was checked); nothing was "
                                          f"loaded") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise Problem(409, "refused", f"source {source}: the service's account may not "
                                          f"read {part!r}; give it read access. Nothing was "
                                          f"loaded") from None
        raise
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        os.close(fd)
        raise _changed(source, f"{part!r} is neither a regular file nor a folder")
    return fd


def _dataset(fds: list[int], source: str) -> list[int]:
    """The data files of the folder open as ``fds[-1]``, opened (appended to ``fds``, which
    the caller closes): DuckDB's own rule for a folder (``**/*.parquet`` and so on). A
    symlink anywhere in it is refused, not followed; other files are skipped unopened."""
    try:
        suffix = DATASET_SUFFIX.get(file_format(Path(source)))
    except ValueError as exc:
        raise Problem(409, "refused", f"{exc}. Nothing was loaded") from None
    if suffix is None:
        raise Problem(409, "refused", f"source {source} is a folder; a DuckDB database is one "
                                      f"file. Nothing was loaded")
    files: list[int] = []
    stack = [(fds[-1], source)]
    while stack:
        folder, where = stack.pop()
        for name in sorted(os.listdir(folder)):
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise _changed(f"{where}/{name}", f"{name!r} is a symbolic link")
            if not (stat.S_ISDIR(mode) or name.endswith(suffix)):
                continue  # DuckDB skips it too; a folder is walked even if its name matches
            fd = _open_at(folder, name, f"{where}/{name}", _LIST if stat.S_ISDIR(mode)
                          else _LAST)  # the open, not the stat, decides: O_NOFOLLOW again
            fds.append(fd)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                stack.append((fd, f"{where}/{name}"))
            else:
                files.append(fd)
            if len(fds) > MAX_DATASET_FILES:
                raise Problem(409, "refused", f"source {source} holds more than "
                                              f"{MAX_DATASET_FILES} data files and folders; "
                                              f"merge them into fewer files. Nothing was "
                                              f"loaded")
    return files


def _not_own(files: list[int], project: Path, source: str) -> None:
    """Refuse a file that is one of the project's own (a hard link to ``ledger.key`` under
    the root has another name but the same inode as the key)."""
    own = set()
    for entry in os.scandir(project):
        if entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            own.add((st.st_dev, st.st_ino))
    for fd in files:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in own:
            raise Problem(409, "outside-data-root",
                          f"source {source!r} is one of the project's own files (its key, "
                          f"ledger or data) under another name, never a source. Nothing was "
                          f"loaded")


def _changed(source: str, why: str) -> Problem:
    return Problem(409, "refused",
                   f"source {source} cannot be opened as checked: {why}. The service opens "
                   f"each folder and file under its data root without following a symlink "
                   f"(one could lead out of it, or be swapped in after the check): put the "
                   f"files themselves there. Nothing was loaded")
