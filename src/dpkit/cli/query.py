"""``dpkit query`` and ``dpkit preview``: aggregate SQL answered privately, or costed.

``query`` / ``preview`` are plain functions taking a rich Console (tests call them directly);
``query_command`` / ``preview_command`` are their click wrappers. The flags ``--noise``,
``--rho``, ``--level``, ``--weights`` (:func:`dpkit.cli.options.query_options`) pass through
as keywords to :meth:`Curator.sql` / :meth:`Curator.preview`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from dpkit.cli.options import cli_text, console, make_console, parse_weights, query_options

__all__ = ["commands", "preview", "query"]


def _noise_args(noise: str | None, epsilon: float | None, rho: float | None) -> dict[str, Any]:
    kind = (noise or "laplace").lower()
    if kind not in ("laplace", "gaussian"):
        raise ValueError(f"--noise must be laplace or gaussian (got {noise!r})")
    if rho is not None and kind != "gaussian":
        raise ValueError("--rho goes with --noise gaussian (zCDP); with Laplace noise give "
                         "--epsilon")
    return {"noise": kind, "rho": rho}


def query(project: str | Path, sql: str, *, epsilon: float | None = None,
          delta: float | None = None, accuracy: float | None = None, token: str | None = None,
          output: str | Path | None = None, console: Any = None, noise: str | None = None,
          rho: float | None = None, level: float | None = None,
          weights: str | Mapping[str, float] | None = None, dialect: str | None = None,
          plot: str | Path | None = None, diagnostics: bool = True,
          accuracy_rows: float | None = None) -> Any:
    """Answer ``sql`` privately and print it with CIs and the budget left; optionally write it
    to ``output`` (.csv, .parquet, .json or .xlsx, from the extension) and draw it to ``plot``
    (.png, .svg, .pdf; needs matplotlib). Both paths are checked before anything is charged.

    ``noise`` (``--noise laplace|gaussian``), ``rho`` (``--rho``, zCDP budget with Gaussian
    noise), ``level`` (``--level``, CI level, default 0.95), ``weights`` (``--weights
    n=1,avg=3``: budget split per output name) are passed to :meth:`Curator.sql`.
    """
    from dpkit.engine.curator import Curator
    from dpkit.engine.plots import check_plot_path
    from dpkit.engine.results import check_output_path, split_table

    con = make_console(console)
    if epsilon is None and accuracy is None and rho is None:
        raise ValueError("give --epsilon (the budget to spend), --rho (with --noise gaussian) "
                         "or --accuracy (a target CI half-width)")
    extra = _noise_args(noise, epsilon, rho)
    wts = parse_weights(weights)
    if output is not None:
        check_output_path(output)
    if plot is not None:
        check_plot_path(plot)
    with Curator.open(project, token=token) as cur:
        t0 = time.perf_counter()
        res = cur.sql(sql, epsilon=epsilon, delta=delta, accuracy=accuracy,
                      level=0.95 if level is None else level, weights=wts, dialect=dialect,
                      diagnostics=diagnostics, accuracy_rows=accuracy_rows, **extra)
        dt = time.perf_counter() - t0
        con.print(res.table())
        for note in res.notes:
            con.print(f"[dim]note: {cli_text(note)}[/]")
        print_diagnostics(con, res)
        con.print(split_table(res.split, title=f"budget split ({dt * 1000:.0f} ms)"))
        if output is not None:
            res.write(output)
            con.print(f"wrote {output}")
        if plot is not None:
            res.plot(plot)
            con.print(f"drew {plot}")
        return res


def print_diagnostics(con: Any, res: Any) -> None:
    """What bounding did (DP estimates, dim) and the warnings (yellow) of a result."""
    from dpkit.engine.diagnose import share_text

    text = share_text(getattr(res, "diagnostics", {}))
    if text:
        con.print(f"[dim]what bounding changed, estimated privately (share of rows; in brackets "
                  f"the share it is at least, with 95% confidence): {text}[/]")
    for w in getattr(res, "warnings", []):
        con.print(f"[yellow]warning: {w}[/]")


def preview(project: str | Path, sql: str, *, epsilon: float | None = None,
            delta: float | None = None, console: Any = None, noise: str | None = None,
            rho: float | None = None, level: float | None = None,
            weights: str | Mapping[str, float] | None = None, token: str | None = None,
            dialect: str | None = None, diagnostics: bool = True) -> Any:
    """Print what ``sql`` would cost and how accurate it would be; spends nothing (same flags
    as :func:`query`: ``noise``, ``rho``, ``level``, ``weights``)."""
    from dpkit.engine.curator import Curator
    from dpkit.engine.results import split_table

    con = make_console(console)
    if epsilon is None and rho is None:
        raise ValueError("give --epsilon (or --rho with --noise gaussian): the budget the query "
                         "would spend")
    extra = _noise_args(noise, epsilon, rho)
    wts = parse_weights(weights)
    with Curator.open(project, token=token) as cur:
        pv = cur.preview(sql, epsilon=epsilon, delta=delta,
                         level=0.95 if level is None else level, weights=wts, dialect=dialect,
                         diagnostics=diagnostics, **extra)
        con.print(pv.table())
        for note in pv.notes:
            con.print(f"[dim]note: {cli_text(note)}[/]")
        con.print(split_table(pv.split))
        return pv


# ---------------------------------------------------------------------------------------------
# the click commands


_DIALECT = click.option(
    "--dialect", default=None,
    help="SQL dialect of the query when not DuckDB's: tsql, postgres, mysql, bigquery, ...")


@click.command("query")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("sql")
@click.option("--epsilon", type=float, default=None, help="Budget to spend on this query.")
@click.option(
    "--delta",
    type=float,
    default=None,
    help="Delta to spend (Gaussian noise, partition selection).",
)
@click.option(
    "--accuracy", type=float, default=None, help="Target CI half-width; dpkit picks the budget."
)
@click.option("--accuracy-rows", type=float, default=None,
              help="With --accuracy for AVG/quantiles: the fewest rows of a group you target.")
@click.option("--token", default=None,
              help="Act as the analyst this token names (default: $DPKIT_TOKEN).")
@click.option(
    "--output", type=click.Path(path_type=Path), default=None,
    help="Also write the answer: .csv, .parquet, .json or .xlsx (from the extension).",
)
@click.option("--plot", type=click.Path(path_type=Path), default=None,
              help="Also draw it: .png/.svg/.pdf (bars or a line, CI whiskers; matplotlib).")
@_DIALECT
@query_options
def query_command(
    project: Path,
    sql: str,
    epsilon: float | None,
    delta: float | None,
    accuracy: float | None,
    token: str | None,
    output: Path | None,
    plot: Path | None,
    **flags: Any,
) -> None:
    """Answer an aggregate SQL query privately (spends budget)."""
    query(
        project,
        sql,
        epsilon=epsilon,
        delta=delta,
        accuracy=accuracy,
        token=token,
        output=output,
        plot=plot,
        console=console,
        **flags,
    )


@click.command("preview")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("sql")
@click.option("--epsilon", type=float, default=None, help="Budget the query would spend.")
@click.option("--delta", type=float, default=None)
@click.option("--token", default=None,
              help="Act as the analyst this token names (default: $DPKIT_TOKEN).")
@_DIALECT
@query_options
def preview_command(project: Path, sql: str, epsilon: float | None, delta: float | None,
                    token: str | None, **flags: Any) -> None:
    """Show what a query would cost and how accurate it would be, spending nothing."""
    preview(project, sql, epsilon=epsilon, delta=delta, console=console, token=token, **flags)


#: what :mod:`dpkit.cli` registers on the ``dpkit`` group
commands = (query_command, preview_command)
