"""Command-line front ends for the curator's release families (``dpkit cdf`` and friends).

Click commands, registered on the ``dpkit`` group by :mod:`dpkit.cli`; each opens the project,
answers one family through :mod:`dpkit.engine.families` (the curator's methods; charged to
the ledger once), prints it with rich and closes the project again.

===============  ==========================================================================
``cdf``          ``dpkit cdf PROJECT TABLE COLUMN --epsilon E [--where W] [--bins N]``
``quantiles``    ``dpkit quantiles PROJECT TABLE COLUMN -p 0.5 -p 0.9 --epsilon E``
``ranges``       ``dpkit ranges PROJECT TABLE COLUMN --range 0:17 --range 18:64 --epsilon E``
``marginals``    ``dpkit marginals PROJECT TABLE --columns ward,age [--k 2] --epsilon E``
``synthetic``    ``dpkit synthetic PROJECT TABLE --columns ward,age --epsilon E --output F``
===============  ==========================================================================

Every command takes ``--epsilon`` (pure DP, discrete Laplace noise), ``--epsilon`` with
``--delta`` (discrete Gaussian noise) or ``--rho`` (zCDP), ``--where``, ``--level``,
``--token`` (an analyst token; default ``$DPKIT_TOKEN``; none: the owner), and ``--preview``
(cost and expected error only: spends nothing) where it
applies. Errors (unknown column, budget exceeded, ...) are ``ValueError``s whose message says
what to do; the ``dpkit`` group prints them as one red line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from dpkit.cli.options import cli_text

__all__ = ["cdf", "commands", "marginals", "quantiles", "ranges", "synthetic"]

_MAX_SHOWN = 40


def _console() -> Any:
    from rich.console import Console

    return Console()


def _privacy_options(f: Any) -> Any:
    f = click.option("--diagnostics/--no-diagnostics", default=True, show_default=True,
                     help="Estimate (5% of the budget) the rows dropped by the per-unit cap "
                          "and outside the bounds, and warn above 5%.")(f)
    f = click.option("--token", default=None,
                     help="Act as the analyst this token names (default: $DPKIT_TOKEN).")(f)
    f = click.option("--level", type=float, default=0.95, show_default=True,
                     help="Confidence level of the intervals.")(f)
    f = click.option("--where", default=None, help="SQL condition on the table's rows.")(f)
    f = click.option("--rho", type=float, default=None, help="zCDP rho (discrete Gaussian).")(f)
    f = click.option("--delta", type=float, default=None,
                     help="With --epsilon: Gaussian noise at (epsilon, delta).")(f)
    f = click.option("--epsilon", type=float, default=None,
                     help="Budget to spend (pure DP, discrete Laplace noise).")(f)
    return f

_accuracy_option = click.option("--accuracy", type=float, default=None,
                                help="Largest CI half-width wanted (instead of --epsilon).")
_preview_option = click.option("--preview", "preview_only", is_flag=True,
                               help="Cost and accuracy; spend nothing.")
_output_option = click.option("--output", type=click.Path(path_type=Path), default=None,
                              help="Also write CSV/Parquet.")


def _shown(res: Any, show_all: bool) -> Any:
    """The result, or an evenly spaced subset of its rows (the last one included)."""
    n = len(res)
    if show_all or n <= _MAX_SHOWN:
        return res
    import numpy as np  # here: `dpkit --help` loads click and rich only (0.2 s less)

    idx = np.unique(np.linspace(0, n - 1, _MAX_SHOWN).round().astype(int))
    return dataclasses.replace(res, data={c: np.asarray(v)[idx] for c, v in res.data.items()})


def _print(con: Any, res: Any, title: str, *, show_all: bool = False) -> None:
    from dpkit.cli.query import print_diagnostics
    from dpkit.engine.results import split_table

    sub = _shown(res, show_all)
    con.print(sub.table(title=title + ("" if sub is res else
                                       f" ({len(sub)} of {len(res)} rows; --all for every row)")))
    for note in res.notes:
        con.print(f"[dim]note: {cli_text(note)}[/]")
    print_diagnostics(con, res)
    con.print(split_table(res.split, title=f"ledger entry #{res.ledger_seq}"))


def _write(res: Any, path: Path) -> None:
    from dpkit.engine.results import write_columns

    write_columns({c: res.data[c] for c in res.columns}, path)


def _open(project: Path, token: str | None) -> Any:
    from dpkit.engine.curator import Curator

    return Curator.open(project, token=token)


def _preview(con: Any, cur: Any, kind: str, *args: Any, **kwargs: Any) -> None:
    pv = cur.preview_release(kind, *args, **kwargs)
    con.print(pv.table())
    for note in pv.notes:
        con.print(f"[dim]note: {cli_text(note)}[/]")


def _privacy(epsilon: float | None, delta: float | None, rho: float | None,
             diagnostics: bool = True) -> dict[str, Any]:
    return {"epsilon": epsilon, "delta": delta, "rho": rho, "diagnostics": diagnostics}


def _release(con: Any, cur: Any, kind: str, *args: Any, preview_only: bool,
             accuracy: float | None, title: str, show_all: bool, output: Path | None,
             **kw: Any) -> None:
    """Preview family ``kind`` (spends nothing) or release it, print it, and write ``output``."""
    if preview_only:
        _preview(con, cur, kind, *args, **kw)
        return
    if output is not None:
        from dpkit.engine.results import check_output_path

        check_output_path(output)
    res = getattr(cur, kind)(*args, accuracy=accuracy, **kw)
    _print(con, res, title, show_all=show_all)
    if output is not None:
        _write(res, output)
        con.print(f"wrote {output}")


_grid_option = click.option(
    "--grid", type=click.Choice(["linear", "log", "auto"]), default="linear", show_default=True,
    help="Cells: equal, log-scale (long tails; symmetric around 0 for signed ranges), or "
         "log-scale when the bounds span four orders of magnitude.")


@click.command("cdf")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("table")
@click.argument("column")
@_privacy_options
@_accuracy_option
@click.option("--bins", type=int, default=None, help="Equal cells over the bounds.")
@click.option("--strategy", default=None, help="identity, tree, tree:b, optimized (default auto).")
@_grid_option
@_preview_option
@click.option("--all", "show_all", is_flag=True, help="Print every row.")
@_output_option
def cdf(project: Path, table: str, column: str, epsilon: float | None, delta: float | None,
        rho: float | None, where: str | None, level: float, token: str | None,
        accuracy: float | None, bins: int | None, strategy: str | None, grid: str,
        preview_only: bool, show_all: bool, output: Path | None,
        diagnostics: bool = True) -> None:
    """The private CDF of a bounded numeric column, with a simultaneous band."""
    con = _console()
    with _open(project, token) as cur:
        _release(con, cur, "cdf", table, column, preview_only=preview_only, accuracy=accuracy,
                 title=f"CDF of {table}.{column}", show_all=show_all, output=output,
                 where=where, bins=bins, strategy=strategy, level=level, grid=grid,
                 **_privacy(epsilon, delta, rho, diagnostics))


@click.command("quantiles")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("table")
@click.argument("column")
@click.option("-p", "--probability", "probabilities", type=float, multiple=True,
              required=True, help="A probability in [0, 1]; repeat for several.")
@_privacy_options
@_accuracy_option
@click.option("--bins", type=int, default=None, help="Equal cells over the bounds.")
@_grid_option
def quantiles(project: Path, table: str, column: str, probabilities: tuple[float, ...],
              epsilon: float | None, delta: float | None, rho: float | None,
              where: str | None, level: float, token: str | None, accuracy: float | None,
              bins: int | None, grid: str, diagnostics: bool = True) -> None:
    """Quantiles of a bounded numeric column from one private CDF (one charge)."""
    con = _console()
    with _open(project, token) as cur:
        res = cur.quantiles(table, column, list(probabilities), where=where, bins=bins,
                            level=level, accuracy=accuracy, grid=grid,
                            **_privacy(epsilon, delta, rho, diagnostics))
        _print(con, res, f"quantiles of {table}.{column}")


def _parse_range(text: str) -> tuple[float, float]:
    try:
        lo, hi = text.split(":")
        return float(lo), float(hi)
    except ValueError:
        raise click.BadParameter(f"write a range as LOW:HIGH, e.g. 18:64 (got {text!r})") from None


@click.command("ranges")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("table")
@click.argument("column")
@click.option("-r", "--range", "ranges_", multiple=True, required=True,
              help="LOW:HIGH (inclusive); repeat for several.")
@_privacy_options
@_accuracy_option
@click.option("--bins", type=int, default=None, help="Equal cells over the bounds.")
@click.option("--strategy", default=None, help="identity, tree, tree:b, optimized (default auto).")
@_preview_option
@_output_option
def ranges(project: Path, table: str, column: str, ranges_: tuple[str, ...],
           epsilon: float | None, delta: float | None, rho: float | None, where: str | None,
           level: float, token: str | None, accuracy: float | None, bins: int | None,
           strategy: str | None, preview_only: bool, output: Path | None,
           diagnostics: bool = True) -> None:
    """Counts of rows in many ranges of one column, answered together (one charge)."""
    con = _console()
    pairs = [_parse_range(r) for r in ranges_]
    with _open(project, token) as cur:
        _release(con, cur, "ranges", table, column, pairs, preview_only=preview_only,
                 accuracy=accuracy, title=f"ranges of {table}.{column}", show_all=True,
                 output=output, where=where, bins=bins, strategy=strategy, level=level,
                 **_privacy(epsilon, delta, rho, diagnostics))


def _columns(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise click.BadParameter("give column names separated by commas, e.g. ward,age")
    return cols


@click.command("marginals")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("table")
@click.option("--columns", required=True, help="Columns, comma-separated (e.g. ward,age).")
@click.option("--k", type=int, default=None, help="Marginal order (default min(2, #columns)).")
@_privacy_options
@_accuracy_option
@click.option("--bins", type=int, default=None, help="Cells for numeric columns.")
@_preview_option
@click.option("--all", "show_all", is_flag=True, help="Print every row.")
@_output_option
def marginals(project: Path, table: str, columns: str, k: int | None, epsilon: float | None,
              delta: float | None, rho: float | None, where: str | None, level: float,
              token: str | None, accuracy: float | None, bins: int | None,
              preview_only: bool, show_all: bool, output: Path | None,
              diagnostics: bool = True) -> None:
    """All k-way marginal tables of the columns over their declared domains (one charge)."""
    con = _console()
    cols = _columns(columns)
    with _open(project, token) as cur:
        _release(con, cur, "marginals", table, cols, preview_only=preview_only,
                 accuracy=accuracy, title=f"marginals of {table}", show_all=show_all,
                 output=output, k=k, where=where, bins=bins, level=level,
                 **_privacy(epsilon, delta, rho, diagnostics))


@click.command("synthetic")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("table")
@click.option("--columns", required=True, help="Columns, comma-separated (e.g. ward,age).")
@click.option("--output", type=click.Path(path_type=Path), required=True,
              help="Where to write the records (.parquet or .csv).")
@click.option("--rows", type=int, default=None, help="Records to write (default: the private "
              "estimate of the number of rows).")
@click.option("--method", type=click.Choice(["auto", "factorization", "mwem", "mst"]),
              default="auto", show_default=True,
              help="auto: factorization up to 4096 grid cells, mst (marginal-based, any "
                   "number of columns) beyond.")
@click.option("--k", type=int, default=None, help="Marginal order preserved (default 2).")
@click.option("--rounds", type=int, default=20, show_default=True, help="MWEM rounds.")
@click.option("--target", default=None, help="MST: a column measured with every selected pair "
              "(e.g. the label a model will predict).")
@click.option("--bins", type=int, default=None, help="Cells for numeric columns.")
@_privacy_options
def synthetic(project: Path, table: str, columns: str, output: Path, rows: int | None,
              method: str, k: int | None, rounds: int, target: str | None, bins: int | None,
              epsilon: float | None, delta: float | None, rho: float | None,
              where: str | None, level: float, token: str | None,
              diagnostics: bool = True) -> None:
    """Synthetic records over the declared domains of the columns (one charge)."""
    from rich.table import Table

    from dpkit.cli.query import print_diagnostics

    con = _console()
    from dpkit.engine.results import check_output_path

    cols = _columns(columns)
    check_output_path(output)
    with _open(project, token) as cur:
        syn = cur.synthetic(table, cols, rows=rows, method=method, k=k, rounds=rounds,
                            target=target, bins=bins, where=where, level=level,
                            **_privacy(epsilon, delta, rho, diagnostics))
        syn.write(output)
        t = Table(title=f"synthetic {table} ({len(syn)} records, first 10)", title_justify="left")
        for c in syn.columns:
            t.add_column(c)
        for i in range(min(10, len(syn))):
            t.add_row(*[str(syn.data[c][i]) for c in syn.columns])
        spend = cur.budget()
        t.caption = (f"epsilon spent {syn.epsilon:.4g} (ledger entry #{syn.ledger_seq}); "
                     f"remaining {spend.remaining:.4g}"
                     + ("; INSECURE seeded noise" if syn.insecure else ""))
        con.print(t)
        for note in syn.notes:
            con.print(f"[dim]note: {cli_text(note)}[/]")
        print_diagnostics(con, syn)
        con.print(f"wrote {output}")


#: what :mod:`dpkit.cli` registers on the ``dpkit`` group
commands = (cdf, quantiles, ranges, marginals, synthetic)
