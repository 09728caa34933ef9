"""The service's data root: the one folder ``POST /v1/tables`` may read a source from.

The owner's own process (``Curator.add_table``, ``dpkit add-table``) reads any path: the owner
is the process. Over HTTP the owner is a bearer token, and a stolen token (or a mistyped path)
must not turn any file the service's account can read (``/etc/...``, the owner's home, the
project's own ``ledger.key`` or ``data.duckdb``) into a public table analysts can SELECT from.
So the service resolves the source (``..`` and symlinks too, as the load would) and refuses it
unless it lies under the data root: ``dpkit serve --data-root DIR``, by default the folder
``data/`` inside the project (:func:`default_data_root`). Relative sources are read from the
root. The project's own files are refused even under a wider root.
"""

from __future__ import annotations

from pathlib import Path

from dpkit.server.problems import Problem

__all__ = ["DATA_DIR", "confine", "default_data_root"]

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
