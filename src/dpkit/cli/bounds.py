"""``dpkit suggest-bounds`` and the rows-per-unit question of ``dpkit add-table``.

Bounds are public declarations, so a bound read off the data is a charged DP release
(:mod:`dpkit.engine.bounds`). ``suggest_bounds`` is a plain function taking a rich Console
(tests call it directly); ``suggest_bounds_command`` is its click wrapper.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import click

from dpkit.cli.options import console, make_console

__all__ = ["ask_max_rows", "commands", "parse_max_rows", "suggest_bounds"]


def parse_max_rows(value: str | int | None) -> int | str | None:
    """``--max-rows-per-unit``: a whole number >= 1, or ``auto`` (chosen privately)."""
    if value is None or isinstance(value, int):
        return value
    text = value.strip().lower()
    if text == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"--max-rows-per-unit takes a whole number >= 1 or 'auto' "
                                 f"(got {value!r})") from None


def ask_max_rows(privacy_unit: str | None, max_rows: int | str | None, *, public: bool,
                 interactive: bool | None = None) -> int | str | None:
    """The cap to declare: as given, or asked for (a terminal), or a clear refusal (a script)
    when a unit-level table names none. Nothing has been loaded yet either way."""
    if max_rows is not None or privacy_unit is None or public:
        return max_rows
    if interactive is None:
        interactive = sys.stdin.isatty()
    if not interactive:
        raise click.UsageError(
            f"--privacy-unit {privacy_unit} needs --max-rows-per-unit: the rows one unit may "
            f"contribute to a query (a number you know, e.g. 1 for one row per person), or "
            f"'auto' to choose it privately from the data (the 95th percentile of rows per "
            f"unit, charged --rows-epsilon, default 0.1). Nothing was loaded")
    answer = click.prompt(
        f"How many rows may one {privacy_unit} contribute to a query? A number, or 'auto' to "
        f"choose it privately (costs epsilon, see --rows-epsilon)", type=str)
    return parse_max_rows(answer)


def suggest_bounds(project: str | Path, table: str, column: str, *, epsilon: float,
                   search: tuple[float, float] | None = None, lower: float = 0.01,
                   upper: float = 0.99, bins: int | None = None, token: str | None = None,
                   grid: str = "auto", console: Any = None) -> dict[str, Any]:
    """Print (and return) clamp bounds for ``column`` from its private percentiles."""
    from dpkit.engine.curator import Curator

    con = make_console(console)
    with Curator.open(project, token=token) as cur:
        got = cur.suggest_bounds(table, column, epsilon=epsilon, search=search, lower=lower,
                                 upper=upper, bins=bins, grid=grid)
        spend = cur.budget().remaining
        whole = cur.tables()[table].column(column).cls == "int"
    lo, hi = got["bounds"]
    flag = " [red]INSECURE (seeded noise)[/]" if got.get("insecure") else ""
    con.print(f"suggested bounds for [bold]{table}.{column}[/]: {lo:.6g}:{hi:.6g}{flag}")
    if "grid" in got:  # why the bounds are not the estimates: the cells' outer edges
        con.print(f"[dim]  the outer edges of the grid cells holding the two quantiles, so "
                  f"no value of those cells is clamped (grid {got['grid']})[/]")
    for side in ("lower", "upper"):
        d = got[side]
        con.print(f"[dim]  {side}: the {d['probability']:g} quantile ~ {d['estimate']:.6g} "
                  f"({100 * got['level']:g}% CI {d['ci'][0]:.6g} to {d['ci'][1]:.6g})[/]")
    # an integer column's bounds rounded outward (17.8253:144.303 -> 17:145): no value the
    # estimates keep is clamped, and the line is what an owner would type
    shown = f"{math.floor(lo)}:{math.ceil(hi)}" if whole else f"{lo:.6g}:{hi:.6g}"
    con.print(f"[dim]spent epsilon {got['epsilon']:.4g} (ledger entry #{got['ledger_seq']}); "
              f"remaining {spend:.4g}. Declare them with: dpkit add-table ... --bounds "
              f"{column}={shown} --replace[/]")
    return got


def _range(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(low), float(high)
    except ValueError:
        raise click.BadParameter(f"write the range as low:high, e.g. 0:1000 (got {text!r})"
                                 ) from None


@click.command("suggest-bounds")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("table")
@click.argument("column")
@click.option("--epsilon", type=float, required=True, help="Budget the suggestion spends.")
@click.option("--search", default=None,
              help="Public range to search, low:high (default: the declared bounds).")
@click.option("--lower", type=float, default=0.01, show_default=True, help="Lower quantile.")
@click.option("--upper", type=float, default=0.99, show_default=True, help="Upper quantile.")
@click.option("--bins", type=int, default=None, help="Grid cells over the search range.")
@click.option("--grid", type=click.Choice(["auto", "log", "linear"]), default="auto",
              show_default=True,
              help="Grid cells: log-scale (long tails; symmetric around 0 for signed ranges), "
                   "equal, or log-scale when the range spans four orders of magnitude.")
@click.option("--token", default=None,
              help="Act as the analyst this token names (default: $DPKIT_TOKEN).")
def suggest_bounds_command(project: Path, table: str, column: str, epsilon: float,
                           search: str | None, lower: float, upper: float, bins: int | None,
                           grid: str, token: str | None) -> None:
    """Suggest clamp bounds for a column from its DP 1st/99th percentiles (spends budget)."""
    suggest_bounds(project, table, column, epsilon=epsilon, search=_range(search), lower=lower,
                   upper=upper, bins=bins, token=token, grid=grid, console=console)


#: what :mod:`dpkit.cli` registers on the ``dpkit`` group
commands = (suggest_bounds_command,)
