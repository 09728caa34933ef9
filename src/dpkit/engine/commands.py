"""What the ``dpkit`` command line calls: plain functions that take a rich Console.

``dpkit.cli`` parses arguments and calls these; they open the project, do one thing, print it
with rich and close the project again (so that several processes can take turns on it).

=================  ===================================================================
``init_project``   ``dpkit init PROJECT --epsilon E [--delta D] [--accountant A]``
``add_table``      ``dpkit add-table PROJECT NAME SOURCE [--privacy-unit C] ...``
``query``          ``dpkit query PROJECT SQL --epsilon E | --rho R | --accuracy A [--output F]
                   [--noise laplace|gaussian] [--delta D] [--level L] [--weights n=1,avg=3]``
``preview``        ``dpkit preview PROJECT SQL --epsilon E`` (same flags)
``budget``         ``dpkit budget PROJECT [--json]``
``run_demo``       ``dpkit demo [--rows N] [--path P]``
=================  ===================================================================
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpkit.engine.cli_options import query_options
from dpkit.engine.curator import Curator
from dpkit.engine.demo import run_demo as _run_demo
from dpkit.engine.results import split_table, write_columns

__all__ = ["add_table", "budget", "init_project", "parse_weights", "preview", "query",
           "query_options", "run_demo"]


def _console(console: Any) -> Any:
    if console is not None:
        return console
    from rich.console import Console

    return Console()


def init_project(project: str | Path, *, epsilon: float, delta: float = 0.0,
                 accountant: str | None = None, console: Any = None) -> None:
    """Create a project folder with a total budget (``accountant`` default: pure if delta is 0,
    else approx)."""
    con = _console(console)
    cur = Curator.create(project, epsilon=epsilon, delta=delta, accountant=accountant)
    cfg = cur.ledger.config
    con.print(f"created [bold]{project}[/] with budget epsilon {cfg.epsilon:g}, delta "
              f"{cfg.delta:g} (accountant {cfg.accountant})")
    con.print("[dim]next: dpkit add-table PROJECT NAME FILE --privacy-unit COLUMN "
              "--bounds col=low:high[/]")
    cur.close()


def add_table(project: str | Path, name: str, source: str, *, privacy_unit: str | None = None,
              bounds: Mapping[str, tuple[float, float]] | None = None,
              max_rows_per_unit: int | None = None, max_groups_per_unit: int | None = None,
              domains: Mapping[str, Sequence[Any]] | None = None,
              not_null: Sequence[str] | None = None, public: bool = False,
              copy: bool = True, replace: bool = False, console: Any = None) -> None:
    """Register a table from a CSV / Parquet / JSON file or a DuckDB database (``db::table``)."""
    con = _console(console)
    with Curator.open(project) as cur:
        t0 = time.perf_counter()
        with load_progress(con, f"loading {source}") as progress:
            meta = cur.add_table(name, source, privacy_unit=privacy_unit, bounds=bounds or None,
                                 max_rows_per_unit=max_rows_per_unit,
                                 max_groups_per_unit=max_groups_per_unit,
                                 domains=domains or None, not_null=not_null,
                                 public=public, copy=copy, replace=replace, progress=progress)
        from rich.table import Table

        t = Table(title=f"table {name} ({meta.storage}, {time.perf_counter() - t0:.1f} s)",
                  title_justify="left")
        t.add_column("column")
        t.add_column("type")
        t.add_column("declared")
        for c in meta.columns:
            notes = []
            if c.name == meta.privacy_unit:
                notes.append("privacy unit")
            if c.name in meta.bounds:
                lo, hi = meta.bounds[c.name]
                notes.append(f"bounds [{lo:g}, {hi:g}]")
            if c.name in meta.domains:
                notes.append(f"domain of {len(meta.domains[c.name])} keys")
            if c.name in meta.not_null:
                notes.append("not null")
            t.add_row(c.name, c.type, ", ".join(notes))
        con.print(t)
        con.print(meta.summary())
        if not meta.public and meta.privacy_unit is None:
            con.print("[yellow]record-level privacy: each row is its own unit. If a person can "
                      "have several rows, name the column with --privacy-unit.[/]")


@contextlib.contextmanager
def load_progress(console: Any, title: str) -> Iterator[Callable[[str, float], None]]:
    """A rich progress bar for :meth:`Curator.add_table`'s ``progress`` callback: one bar per
    step of the load, filled as DuckDB reports its progress."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    bars = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                    TimeElapsedColumn(), console=console, transient=False)
    tasks: dict[str, Any] = {}

    def update(step: str, fraction: float) -> None:
        if step not in tasks:
            tasks[step] = bars.add_task(f"{title}: {step}", total=1.0)
        bars.update(tasks[step], completed=fraction)

    with bars:
        yield update


def parse_weights(text: str | Mapping[str, float] | None) -> dict[str, float] | None:
    """``"n=1,avg_age=3"`` -> ``{"n": 1.0, "avg_age": 3.0}`` (the ``--weights`` flag); a mapping
    is passed through; None/empty -> None. Bad items raise ValueError with the expected form."""
    if text is None:
        return None
    if isinstance(text, Mapping):
        return {str(k): v for k, v in text.items()} or None
    out: dict[str, float] = {}
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"write weights as output=number pairs, e.g. --weights n=1,avg_age=3 "
                             f"(got {item!r})")
        try:
            out[name] = float(value)
        except ValueError:
            raise ValueError(f"weight for {name!r} must be a number, e.g. {name}=2 "
                             f"(got {value.strip()!r})") from None
    return out or None


def _noise_args(noise: str | None, epsilon: float | None, rho: float | None) -> dict[str, Any]:
    kind = (noise or "laplace").lower()
    if kind not in ("laplace", "gaussian"):
        raise ValueError(f"--noise must be laplace or gaussian (got {noise!r})")
    if rho is not None and kind != "gaussian":
        raise ValueError("--rho goes with --noise gaussian (zCDP); with Laplace noise give "
                         "--epsilon")
    return {"noise": kind, "rho": rho}


def query(project: str | Path, sql: str, *, epsilon: float | None = None,
          delta: float | None = None, accuracy: float | None = None, analyst: str | None = None,
          output: str | Path | None = None, console: Any = None, noise: str | None = None,
          rho: float | None = None, level: float | None = None,
          weights: str | Mapping[str, float] | None = None) -> Any:
    """Answer ``sql`` privately and print it with CIs and the budget left; optionally write it
    to a CSV or Parquet file (``output``).

    ``noise`` (``--noise laplace|gaussian``), ``rho`` (``--rho``, zCDP budget with Gaussian
    noise), ``level`` (``--level``, CI level, default 0.95), ``weights`` (``--weights
    n=1,avg=3``: budget split per output name) are passed to :meth:`Curator.sql`.
    """
    con = _console(console)
    if epsilon is None and accuracy is None and rho is None:
        raise ValueError("give --epsilon (the budget to spend), --rho (with --noise gaussian) "
                         "or --accuracy (a target CI half-width)")
    extra = _noise_args(noise, epsilon, rho)
    wts = parse_weights(weights)
    with Curator.open(project, analyst=analyst) as cur:
        t0 = time.perf_counter()
        res = cur.sql(sql, epsilon=epsilon, delta=delta, accuracy=accuracy,
                      level=0.95 if level is None else level, weights=wts, **extra)
        dt = time.perf_counter() - t0
        con.print(res.table())
        for note in res.notes:
            con.print(f"[dim]note: {note}[/]")
        con.print(split_table(res.split, title=f"budget split ({dt * 1000:.0f} ms)"))
        if output is not None:
            _write(res, Path(output))
            con.print(f"wrote {output}")
        return res


def _write(res: Any, path: Path) -> None:
    write_columns({c: res.data[c] for c in res.columns}, path)


def preview(project: str | Path, sql: str, *, epsilon: float | None = None,
            delta: float | None = None, console: Any = None, noise: str | None = None,
            rho: float | None = None, level: float | None = None,
            weights: str | Mapping[str, float] | None = None) -> Any:
    """Print what ``sql`` would cost and how accurate it would be; spends nothing (same flags
    as :func:`query`: ``noise``, ``rho``, ``level``, ``weights``)."""
    con = _console(console)
    if epsilon is None and rho is None:
        raise ValueError("give --epsilon (or --rho with --noise gaussian): the budget the query "
                         "would spend")
    extra = _noise_args(noise, epsilon, rho)
    wts = parse_weights(weights)
    with Curator.open(project) as cur:
        pv = cur.preview(sql, epsilon=epsilon, delta=delta,
                         level=0.95 if level is None else level, weights=wts, **extra)
        con.print(pv.table())
        for note in pv.notes:
            con.print(f"[dim]note: {note}[/]")
        con.print(split_table(pv.split))
        return pv


def budget(project: str | Path, *, console: Any = None, as_json: bool = False,
           analyst: str | None = None) -> Any:
    """Print spent / remaining and the history (``as_json``: machine-readable, with the head
    hash to keep elsewhere)."""
    con = _console(console)
    with Curator.open(project) as cur:
        status = cur.budget(analyst)
        if as_json:
            con.print_json(json.dumps(status.to_dict()))
        else:
            con.print(status.table())
        return status


def run_demo(path: str | Path | None = None, console: Any = None, *, rows: int = 300_000,
             seed: int = 2024) -> Any:
    """The README's main job: see :func:`dpkit.engine.demo.run_demo`."""
    return _run_demo(path=path, console=_console(console), rows=rows, seed=seed)
