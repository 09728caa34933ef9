"""The ``dpkit`` command.

Thin: every command parses its arguments, calls the library, and prints with rich. The curator
commands live in ``dpkit.engine.commands``; this module only wires them to the command line.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from dpkit.engine.cli_options import query_options

console = Console()
err_console = Console(stderr=True)


class _FriendlyGroup(click.Group):
    """Turns the library's ValueErrors (which already say what to do) into one red line, exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ValueError, FileNotFoundError, FileExistsError, PermissionError) as exc:
            err_console.print(f"[bold red]error:[/] {exc}")
            sys.exit(2)


@click.group(cls=_FriendlyGroup)
@click.version_option(package_name="dpkit")
def main() -> None:
    """dpkit: differential privacy you can deploy.

    Put a sensitive table behind a curator, ask aggregate SQL questions, and get answers with
    error bars while a privacy budget that can never be overspent is kept on disk.
    """


# ---------------------------------------------------------------------------------------------
# demo


@main.command()
@click.option(
    "--rows", default=300_000, show_default=True, help="Rows of example data to generate."
)
@click.option(
    "--path",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the demo project here (default: a temporary folder, removed afterwards).",
)
def demo(rows: int, path: Path | None) -> None:
    """Run the main job on bundled, deterministically generated example data."""
    try:
        from dpkit.engine import commands
    except ImportError:  # the curator is optional until it lands; show the foundation instead
        _foundation_demo()
        return
    commands.run_demo(path=path, console=console, rows=rows)


def _foundation_demo() -> None:
    import numpy as np

    import dpkit as dp

    console.rule("[bold]dpkit: exact noise, releases with error bars, tight accounting")
    r = dp.mechanisms.laplace(41.0, sensitivity=1.0, epsilon=0.5)
    console.print(f"Laplace(41, sensitivity 1, eps 0.5) -> {r.value:.3f}, 95% CI {_fmt_ci(r.ci)}")
    g = dp.mechanisms.gaussian(np.array([10.0, 20.0, 30.0]), sensitivity=1.0, rho=0.1)
    console.print(f"Gaussian([10, 20, 30], rho 0.1) -> {np.round(g.value, 3)}")
    event = dp.events.SelfComposed(
        dp.events.PoissonSampled(256 / 60000, dp.events.Gaussian(1.1)), 14062
    )
    _print_account_report(event, delta=1e-5)


def _fmt_ci(ci: Any) -> str:
    low, high = ci
    return f"[{low:.3f}, {high:.3f}]"


# ---------------------------------------------------------------------------------------------
# accounting calculator


@main.command()
@click.argument("event_json")
@click.option("--delta", type=float, default=None, help="Report epsilon at this delta.")
@click.option("--epsilon", type=float, default=None, help="Report delta at this epsilon.")
def account(event_json: str, delta: float | None, epsilon: float | None) -> None:
    """Privacy calculator: epsilon (or delta) of an event by every method, with timing.

    EVENT_JSON is an event in dpkit's JSON form, or @FILE to read it from a file, e.g.

      dpkit account '{"SelfComposed": {"event": {"Gaussian": [1.1]}, "count": 100}}' --delta 1e-5
    """
    import dpkit as dp

    text = Path(event_json[1:]).read_text() if event_json.startswith("@") else event_json
    event = dp.events.from_json(text)
    if delta is None and epsilon is None:
        delta = 1e-6
        console.print("[dim]no --delta or --epsilon given: reporting epsilon at delta = 1e-6[/]")
    if delta is not None:
        _print_account_report(event, delta=delta)
    if epsilon is not None:
        _print_delta_report(event, epsilon=epsilon)


def _print_account_report(event: Any, *, delta: float) -> None:
    from dpkit import accounting

    table = Table(title=f"epsilon at delta = {delta:g}", title_justify="left")
    table.add_column("method")
    table.add_column("epsilon (upper bound)", justify="right")
    table.add_column("time", justify="right")
    table.add_column("note")
    for row in accounting.report(event, delta):
        method, eps, seconds, note = row
        table.add_row(method, _fmt_eps(eps), f"{seconds * 1e3:.1f} ms", note or "")
    console.print(table)


def _print_delta_report(event: Any, *, epsilon: float) -> None:
    from dpkit import accounting

    table = Table(title=f"delta at epsilon = {epsilon:g}", title_justify="left")
    table.add_column("method")
    table.add_column("delta (upper bound)", justify="right")
    table.add_column("note")
    for method in ("pld", "gdp", "rdp", "zcdp", "pure"):
        try:
            d = accounting.delta(event, epsilon, method=method)
        except (ValueError, NotImplementedError) as exc:
            table.add_row(method, "-", str(exc).splitlines()[0][:80])
            continue
        table.add_row(method, f"{d:.6g}", "")
    console.print(table)


def _fmt_eps(eps: float | None) -> str:
    if eps is None:
        return "-"
    if math.isinf(eps):
        return "inf"
    return f"{eps:.6f}"


# ---------------------------------------------------------------------------------------------
# the curator


def _commands() -> Any:
    try:
        from dpkit.engine import commands
    except ImportError as exc:  # pragma: no cover - only before the engine exists
        raise click.ClickException(f"the curator is not available in this build ({exc})") from exc
    return commands


@main.command()
@click.argument("project", type=click.Path(path_type=Path))
@click.option("--epsilon", type=float, required=True, help="Total epsilon budget.")
@click.option("--delta", type=float, default=0.0, show_default=True, help="Total delta budget.")
@click.option(
    "--accountant",
    type=click.Choice(["pure", "approx", "zcdp", "rdp", "pld"]),
    default=None,
    help="How charges compose (default: pure when delta is 0, else approx).",
)
def init(project: Path, epsilon: float, delta: float, accountant: str | None) -> None:
    """Create a curator project with a total privacy budget."""
    _commands().init_project(
        project, epsilon=epsilon, delta=delta, accountant=accountant, console=console
    )


@main.command("add-table")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("name")
@click.argument("source")
@click.option("--privacy-unit", default=None, help="Column identifying one person (default: rows).")
@click.option("--bounds", multiple=True, help="Clamp a numeric column: age=0:120 (repeatable).")
@click.option("--max-rows-per-unit", type=int, default=None, help="Contribution bound per unit.")
@click.option("--max-groups-per-unit", type=int, default=None, help="Groups one unit may touch.")
@click.option("--domain", multiple=True, help="Public keys of a column: ward=A,B,C (repeatable).")
@click.option("--not-null", "not_null", multiple=True,
              help="A column with no NULL/NaN (checked at load); AVG of it shares COUNT(*).")
@click.option("--public", is_flag=True, help="A public lookup table (no privacy; joinable).")
@click.option(
    "--no-copy", "no_copy", is_flag=True, help="Keep a view over the file instead of a copy."
)
@click.option("--replace", is_flag=True, help="Replace a table of the same name.")
def add_table(
    project: Path,
    name: str,
    source: str,
    privacy_unit: str | None,
    bounds: tuple[str, ...],
    max_rows_per_unit: int | None,
    max_groups_per_unit: int | None,
    domain: tuple[str, ...],
    not_null: tuple[str, ...],
    public: bool,
    no_copy: bool,
    replace: bool,
) -> None:
    """Register a sensitive table (CSV, Parquet, or a DuckDB database) with its privacy unit."""
    _commands().add_table(
        project,
        name,
        source,
        privacy_unit=privacy_unit,
        bounds=_parse_bounds(bounds),
        max_rows_per_unit=max_rows_per_unit,
        max_groups_per_unit=max_groups_per_unit,
        domains=_parse_domains(domain),
        not_null=[c for item in not_null for c in item.split(",") if c] or None,
        public=public,
        copy=not no_copy,
        replace=replace,
        console=console,
    )


def _parse_bounds(items: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    bounds: dict[str, tuple[float, float]] = {}
    for item in items:
        column, sep, rng = item.partition("=")
        low, sep2, high = rng.partition(":")
        if not sep or not sep2:
            raise click.BadParameter(
                f"write bounds as column=low:high, e.g. age=0:120 (got {item!r})"
            )
        try:
            bounds[column.strip()] = (float(low), float(high))
        except ValueError:
            raise click.BadParameter(
                f"bounds must be numbers, e.g. age=0:120 (got {item!r})"
            ) from None
    return bounds


def _parse_domains(items: tuple[str, ...]) -> dict[str, list[str]]:
    domains: dict[str, list[str]] = {}
    for item in items:
        column, sep, keys = item.partition("=")
        if not sep or not keys:
            raise click.BadParameter(f"write a domain as column=key1,key2 (got {item!r})")
        domains[column.strip()] = [k.strip() for k in keys.split(",")]
    return domains


@main.command()
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
@click.option("--analyst", default=None, help="Charge this analyst's budget.")
@click.option(
    "--output", type=click.Path(path_type=Path), default=None, help="Also write CSV/Parquet."
)
@query_options
def query(
    project: Path,
    sql: str,
    epsilon: float | None,
    delta: float | None,
    accuracy: float | None,
    analyst: str | None,
    output: Path | None,
    **flags: Any,
) -> None:
    """Answer an aggregate SQL query privately (spends budget)."""
    _commands().query(
        project,
        sql,
        epsilon=epsilon,
        delta=delta,
        accuracy=accuracy,
        analyst=analyst,
        output=output,
        console=console,
        **flags,
    )


@main.command()
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("sql")
@click.option("--epsilon", type=float, default=None, help="Budget the query would spend.")
@click.option("--delta", type=float, default=None)
@query_options
def preview(project: Path, sql: str, epsilon: float | None, delta: float | None,
            **flags: Any) -> None:
    """Show what a query would cost and how accurate it would be, spending nothing."""
    _commands().preview(project, sql, epsilon=epsilon, delta=delta, console=console, **flags)


@main.command()
@click.argument("project", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--analyst", default=None, help="Show this analyst's own budget.")
def budget(project: Path, as_json: bool, analyst: str | None) -> None:
    """Show the budget: spent, remaining, and the history of charges."""
    _commands().budget(project, console=console, as_json=as_json, analyst=analyst)


if __name__ == "__main__":  # pragma: no cover
    main()


# ---------------------------------------------------------------------------------------------
# attacks: why DP is needed, and checks that dpkit keeps its promises

_SEED = click.option(
    "--seed", type=int, default=None, help="Reproducible INSECURE noise (default: CSPRNG)."
)
_PLOTS = click.option(
    "--plots",
    "plot_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Write PNG figures to this folder (needs matplotlib: pip install 'dpkit[plots]').",
)


@main.group()
def attack() -> None:
    """Run attacks against naive systems and against the dpkit curator."""


def _show(summary: Any) -> None:
    console.print(summary.table())
    for note in summary.notes:
        console.print(f"[dim]- {note}[/]")
    for path in summary.files:
        console.print(f"wrote {path}")


def _attacks() -> Any:
    from dpkit.attacks import cli_commands

    return cli_commands


@attack.command("reconstruct")
@click.option("--n", "n", default=256, show_default=True, help="People (one secret bit each).")
@click.option("--queries", default=1024, show_default=True, help="Subset-sum questions asked.")
@click.option(
    "--noise",
    "noise_levels",
    default="0,4,16,64,128",
    show_default=True,
    help="Comma-separated noise magnitudes E of the naive system.",
)
@click.option(
    "--noise-kind", type=click.Choice(["uniform", "laplace", "gaussian"]), default="uniform"
)
@click.option("--subsets", type=click.Choice(["random", "hashed"]), default="random")
@click.option(
    "--attack",
    "attack_kind",
    type=click.Choice(["lp", "lsq", "lsq-box"]),
    default="lp",
    show_default=True,
    help="lp: L1 linear program (or Dinur-Nissim LP with --known-bound); lsq: least squares "
    "(with its predicted success rate); lsq-box: least squares within [0, 1].",
)
@click.option("--known-bound", is_flag=True,
              help="LP attack: the attacker knows the noise bound E (Dinur-Nissim LP).")
@click.option(
    "--curator-epsilon",
    type=float,
    default=1.0,
    show_default=True,
    help="Also attack a dpkit curator with this total budget (0: skip).",
)
@_SEED
@_PLOTS
def attack_reconstruct(
    n: int,
    queries: int,
    noise_levels: str,
    noise_kind: str,
    subsets: str,
    attack_kind: str,
    known_bound: bool,
    curator_epsilon: float,
    seed: int | None,
    plot_dir: Path | None,
) -> None:
    """Dinur-Nissim reconstruction: recover secret bits from noisy subset sums."""
    levels = tuple(float(x) for x in noise_levels.split(",") if x.strip())
    _show(
        _attacks().attack_reconstruct(
            n=n,
            queries=queries,
            noise_levels=levels,
            noise_kind=noise_kind,
            subsets=subsets,
            attack=attack_kind,
            known_bound=known_bound,
            curator_epsilon=curator_epsilon or None,
            seed=seed,
            plot_dir=plot_dir,
        )
    )


@attack.command("difference")
@click.option("--n", "n", default=200, show_default=True)
@click.option("--targets", default=20, show_default=True, help="People the attacker targets.")
@click.option("--threshold", default=5, show_default=True, help="Low-count suppression level.")
@click.option("--curator-epsilon", type=float, default=1.0, show_default=True)
@_SEED
def attack_difference(
    n: int, targets: int, threshold: int, curator_epsilon: float, seed: int | None
) -> None:
    """Differencing attack: two innocent-looking counts that differ by one person."""
    _show(
        _attacks().attack_difference(
            n=n, targets=targets, threshold=threshold, curator_epsilon=curator_epsilon, seed=seed
        )
    )


@attack.command("average")
@click.option("--n", "n", default=200, show_default=True)
@click.option("--scale", default=8.0, show_default=True, help="Noise scale of the naive system.")
@click.option("--curator-epsilon", type=float, default=1.0, show_default=True)
@_SEED
def attack_average(n: int, scale: float, curator_epsilon: float, seed: int | None) -> None:
    """Averaging attack: ask the same question again until fresh noise averages away."""
    _show(_attacks().attack_average(n=n, scale=scale, curator_epsilon=curator_epsilon, seed=seed))


@attack.command("membership")
@click.option("--epsilon", type=float, default=1.0, show_default=True)
@click.option("--kind", type=click.Choice(["aggregate", "model", "both"]), default="both")
@_SEED
@_PLOTS
def attack_membership(epsilon: float, kind: str, seed: int | None, plot_dir: Path | None) -> None:
    """Membership inference on a released count and on a trained model (LiRA)."""
    _show(_attacks().attack_membership(epsilon=epsilon, kind=kind, seed=seed, plot_dir=plot_dir))


@attack.command("audit")
@click.option("--trials", default=5000, show_default=True, help="Runs per neighbouring input.")
@click.option("--confidence", default=0.95, show_default=True)
@_SEED
def attack_audit(trials: int, confidence: float, seed: int | None) -> None:
    """Empirical-epsilon audit of every mechanism: the certified lower bound vs the claim."""
    _show(_attacks().attack_audit(trials=trials, confidence=confidence, seed=seed))


@attack.command("one-run")
@click.option("--canaries", type=int, required=True)
@click.option("--guesses", type=int, required=True)
@click.option("--correct", type=int, required=True)
@click.option("--delta", type=float, default=0.0, show_default=True)
@click.option("--confidence", default=0.95, show_default=True)
def attack_one_run(
    canaries: int, guesses: int, correct: int, delta: float, confidence: float
) -> None:
    """One-run audit calculator (Steinke-Nasr-Jagielski 2023): the epsilon guesses prove."""
    _show(
        _attacks().attack_one_run(
            canaries=canaries,
            guesses=guesses,
            correct=correct,
            delta=delta,
            confidence=confidence,
        )
    )


# ---------------------------------------------------------------------------------------------
# release families (range / CDF / quantiles / marginals / synthetic data), see dpkit.release

def _register_release_commands() -> None:
    from dpkit.engine import release_commands

    for command in release_commands.commands:
        main.add_command(command)


_register_release_commands()
