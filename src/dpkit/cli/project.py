"""``dpkit init``, ``dpkit add-table``, ``dpkit budget`` and ``dpkit demo``: a project's life.

Each command is a click wrapper over a plain function that takes a rich Console (tests call the
functions directly); the function opens the project, does one thing, prints it with rich and
closes the project again (so that several processes can take turns on it).

=================  ===================================================================
``init_project``   ``dpkit init PROJECT --epsilon E [--delta D] [--accountant A]``
``add_table``      ``dpkit add-table PROJECT NAME SOURCE [--privacy-unit C] ...``
``budget``         ``dpkit budget PROJECT [--json]``
``run_demo``       ``dpkit demo [--rows N] [--path P]``
=================  ===================================================================

The engine is imported inside the functions: ``dpkit --help`` then loads click and rich only
(0.07 s instead of 0.4 s with DuckDB and sqlglot).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from dpkit.cli.options import console, make_console, parse_bounds, parse_domains, parse_types

__all__ = ["add_table", "budget", "commands", "constant_work_line", "init_project", "load_progress",
           "run_demo"]


def init_project(project: str | Path, *, epsilon: float, delta: float = 0.0,
                 accountant: str | None = None, console: Any = None,
                 ledger: str | None = None, constant_work: bool | None = None) -> None:
    """Create a project folder with a total budget (``accountant`` default: pure if delta is 0,
    else approx); ``ledger``: a PostgreSQL DSN (default ``$DPKIT_LEDGER_DSN``, else SQLite);
    ``constant_work``: noise and selections on fixed plans (docs/attacks.md §6; None: on
    where the budget can pay for it, as ``Curator.create``)."""
    from dpkit.engine.curator import Curator

    con = make_console(console)
    cur = Curator.create(project, epsilon=epsilon, delta=delta, accountant=accountant,
                         ledger=ledger, constant_work=constant_work)
    cfg = cur.ledger.config
    con.print(f"created [bold]{project}[/] with budget epsilon {cfg.epsilon:g}, delta "
              f"{cfg.delta:g} (accountant {cfg.accountant})")
    con.print(constant_work_line(cfg, constant_work), markup=False, highlight=False)
    if cur.ledger.path.suffix == ".pg":
        con.print(f"ledger: {cur.ledger.where} (named by {cur.ledger.path}); back it up with "
                  f"pg_dump (docs/service.md)")
    # the real path, so the line can be copied (it said PROJECT)
    con.print(f"next: dpkit add-table {shlex.quote(str(project))} NAME FILE --privacy-unit "
              f"COLUMN --max-rows-per-unit N|auto --bounds col=low:high", style="dim",
              markup=False, highlight=False)
    cur.close()


def constant_work_line(config: Any, asked: bool | None) -> str:
    """One line on the new project's constant-work setting (``dpkit init``): on, or off and
    why (opted out, or the budget cannot pay for it)."""
    from dpkit.engine.ledger_rows import constant_work_refusal

    if config.constant_work is not None:
        return "constant work: on (timing-safe sampling; --no-constant-work to opt out)"
    if asked is False:
        return ("constant work: off (--no-constant-work: the samplers' time may follow the "
                "size of the noise)")
    why = constant_work_refusal(config.epsilon, config.delta, config.accountant)
    return f"constant work: off ({why}; the samplers' time may follow the size of the noise)"


def add_table(project: str | Path, name: str, source: str, *, privacy_unit: str | None = None,
              bounds: Mapping[str, tuple[float, float]] | None = None,
              max_rows_per_unit: int | str | None = None,
              max_groups_per_unit: int | None = None,
              domains: Mapping[str, Sequence[Any]] | None = None,
              not_null: Sequence[str] | None = None, public: bool = False,
              copy: bool = True, replace: bool = False, console: Any = None,
              declare: str | Path | None = None, rows_epsilon: float | None = None,
              max_text_length: int | str | None = "default",
              drop_privacy_unit: bool = False, source_format: str | None = None,
              column_names: Sequence[str] | None = None,
              types: Mapping[str, str] | str | None = None) -> None:
    """Register a table from a CSV / Parquet / JSON file or a DuckDB database (``db::table``).

    ``declare``: a JSON/YAML declaration file (:mod:`dpkit.engine.declare`); the other
    arguments add to it (the same column declared in both is refused: keep one).
    ``max_rows_per_unit="auto"`` chooses the cap privately, charged ``rows_epsilon``.
    ``max_text_length``: "default" (the engine's), a number of characters, or None.
    ``source_format``, ``column_names``: a file its name does not describe (``--format``,
    ``--column-names``; :meth:`Curator.add_table`)."""
    from dpkit.engine.bounds import AUTO_ROWS_EPSILON
    from dpkit.engine.curator import Curator
    from dpkit.engine.declare import read_declaration, where_declared

    con = make_console(console)
    declared: Mapping[str, Any] = read_declaration(declare) if declare is not None else {}
    kw = merge_declarations(declared, {
        "privacy_unit": privacy_unit, "bounds": dict(bounds or {}),
        "max_rows_per_unit": max_rows_per_unit, "max_groups_per_unit": max_groups_per_unit,
        "domains": dict(domains or {}), "not_null": list(not_null or []), "public": public,
        "types": dict(types) if isinstance(types, Mapping) else types})
    drop_privacy_unit = bool(kw.pop("drop_privacy_unit", False)) or drop_privacy_unit
    if max_text_length != "default":
        if "max_text_length" in kw and kw["max_text_length"] != max_text_length:
            raise ValueError(f"max_text_length is {kw['max_text_length']!r} in the --declare "
                             f"file and {max_text_length!r} on the command line: keep one")
        kw["max_text_length"] = max_text_length
    with Curator.open(project) as cur:
        if replace and not drop_privacy_unit:
            keep_the_unit(cur.tables().get(name), kw)
        t0 = time.perf_counter()
        with load_progress(con, f"loading {source}") as progress:
            try:
                meta = cur.add_table(name, source, copy=copy, replace=replace,
                                     progress=progress, drop_privacy_unit=drop_privacy_unit,
                                     source_format=source_format, column_names=column_names,
                                     rows_epsilon=AUTO_ROWS_EPSILON if rows_epsilon is None
                                     else rows_epsilon, **kw)
            except (ValueError, TypeError) as exc:
                if declare is None:
                    raise
                raise type(exc)(where_declared(declared, str(exc))) from exc
        if kw.get("max_rows_per_unit") == "auto":
            con.print(f"[yellow]{meta.description.rsplit('; ', 1)[-1]}[/]")
        from rich.table import Table

        # the heading on its own line: as the table's title it wrapped to the table's width
        # ("table education_levels (copy, 0.2" / "s)" above a two-column table)
        con.print(f"table [bold]{name}[/] ({meta.storage}, {time.perf_counter() - t0:.1f} s)")
        t = Table()
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


def keep_the_unit(old: Any, kw: Mapping[str, Any]) -> None:
    """Refuse a ``--replace`` that would silently drop the table's privacy unit: it reloads
    with only the flags given, and without ``--privacy-unit`` each row becomes its own unit, a
    weaker guarantee for everyone with several rows (found by the first hour's owner, who
    replaced a table to add bounds)."""
    if (old is None or old.public or old.privacy_unit is None or kw.get("public")
            or kw.get("privacy_unit")):
        return
    raise click.UsageError(
        f"table {old.name!r} is declared with privacy unit {old.privacy_unit!r} (at most "
        f"{old.max_rows_per_unit} rows per unit), and --replace reloads it with the flags given "
        f"only: without --privacy-unit each row would become its own unit, a weaker guarantee "
        f"for anyone with several rows. Repeat --privacy-unit {old.privacy_unit} "
        f"--max-rows-per-unit {old.max_rows_per_unit} (and the other declarations), or load "
        f"the rows under a new name, or add --drop-privacy-unit to make each row its own unit "
        f"on purpose. Nothing was loaded")


def merge_declarations(declared: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A declaration file's keywords plus the command line's; a column (or a setting) given
    in both is refused rather than silently overridden (which one would the owner mean?)."""
    out = dict(declared)
    for key, value in given.items():
        if value is None or value is False or (isinstance(value, (dict, list)) and not value):
            continue
        if isinstance(value, dict):
            if out.get(key) is not None and not isinstance(out[key], Mapping):
                raise ValueError(f"{key} is {out[key]!r} in the --declare file and given per "
                                 f"column on the command line: keep one")
            both = sorted(set(out.get(key) or {}) & set(value))
            if both:
                raise ValueError(f"{key} of {', '.join(both)} declared both in the --declare "
                                 f"file and on the command line: keep one")
            out[key] = {**(out.get(key) or {}), **value}
        elif isinstance(value, list):
            out[key] = list(dict.fromkeys([*(out.get(key) or []), *value]))
        elif key in out and out[key] != value:
            raise ValueError(f"{key} is {out[key]!r} in the --declare file and {value!r} on "
                             f"the command line: keep one")
        else:
            out[key] = value
    return out


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


def budget(project: str | Path, *, console: Any = None, as_json: bool = False,
           analyst: str | None = None, token: str | None = None,
           plot: str | Path | None = None) -> Any:
    """Print spent / remaining and the history (``as_json``: machine-readable, with the head
    hash to keep elsewhere). ``analyst``: the owner looks at one analyst; ``token``: an analyst
    looks at its own budget (default ``$DPKIT_TOKEN``); ``plot``: also draw the spend over
    time per analyst (.png/.svg/.pdf; needs matplotlib)."""
    from dpkit.engine.curator import Curator

    con = make_console(console)
    if plot is not None:
        from dpkit.engine.plots import check_plot_path

        check_plot_path(plot)
    with Curator.open(project, token=token) as cur:
        status = cur.budget(analyst)
        if as_json:
            con.print_json(json.dumps(status.to_dict()))
        else:
            con.print(status.table())
        if plot is not None:
            status.plot(plot)
            if not as_json:
                con.print(f"drew {plot}")
        return status


def run_demo(path: str | Path | None = None, console: Any = None, *, rows: int = 300_000,
             seed: int = 2024) -> Any:
    """The README's main job: see :func:`dpkit.engine.demo.run_demo`."""
    from dpkit.engine.demo import run_demo as engine_demo

    return engine_demo(path=path, console=make_console(console), rows=rows, seed=seed)


# ---------------------------------------------------------------------------------------------
# the click commands


@click.command("demo")
@click.option(
    "--rows", default=300_000, show_default=True, help="Rows of example data to generate."
)
@click.option(
    "--path",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the demo project here (default: a temporary folder, removed afterwards).",
)
def demo_command(rows: int, path: Path | None) -> None:
    """Run the main job on bundled, deterministically generated example data."""
    run_demo(path=path, console=console, rows=rows)


@click.command("init")
@click.argument("project", type=click.Path(path_type=Path))
@click.option("--epsilon", type=float, required=True, help="Total epsilon budget.")
@click.option("--delta", type=float, default=0.0, show_default=True, help="Total delta budget.")
@click.option(
    "--accountant",
    type=click.Choice(["pure", "approx", "zcdp", "rdp", "pld"]),
    default=None,
    help="How charges compose (default: pure when delta is 0, else approx).",
)
@click.option(
    "--ledger",
    default=None,
    metavar="DSN",
    help="Keep the ledger in PostgreSQL (postgresql://user@host/db; default $DPKIT_LEDGER_DSN, "
    "else ledger.sqlite in the folder). Needs the [postgres] extra.",
)
@click.option("--constant-work/--no-constant-work", default=None,
              help="Noise and selections on fixed plans: their time does not follow the noise "
              "or the data; each release also charges a delta <= 2^-40. Default: on when the "
              "budget can pay for it (--delta > 0, an accountant other than pure, epsilon up "
              "to about 27), else off.")
def init_command(project: Path, epsilon: float, delta: float, accountant: str | None,
                 ledger: str | None, constant_work: bool | None) -> None:
    """Create a curator project with a total privacy budget."""
    init_project(project, epsilon=epsilon, delta=delta, accountant=accountant, console=console,
                 ledger=ledger, constant_work=constant_work)


@click.command("add-table")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("name")
@click.argument("source")
@click.option("--privacy-unit", default=None, help="Column identifying one person (default: rows).")
@click.option("--bounds", multiple=True, help="Clamp a numeric column: age=0:120 (repeatable).")
@click.option("--types", multiple=True, metavar="COL=TYPE,...|infer",
              help="How a CSV/JSON file's columns are read: code=VARCHAR,year=INTEGER "
                   "(repeatable; others: DOUBLE with --bounds, a --domain's type, else "
                   "VARCHAR). 'infer': DuckDB guesses them from the rows, and analysts see "
                   "what it guessed.")
@click.option("--max-rows-per-unit", default=None,
              help="Rows one unit may contribute: a number, or 'auto' (chosen privately).")
@click.option("--rows-epsilon", type=float, default=None,
              help="Budget of --max-rows-per-unit auto (default 0.1).")
@click.option("--max-groups-per-unit", type=int, default=None, help="Groups one unit may touch.")
@click.option("--domain", multiple=True,
              help='Public keys of a column: ward=A,B,C (repeatable; quote a key with a comma: '
                   'ward=A,"B, annex").')
@click.option("--domain-value", "domain_value", multiple=True,
              help="One public key, verbatim (commas and all): ward=B, annex (repeatable).")
@click.option("--declare", type=click.Path(path_type=Path), default=None,
              help="Declarations from a JSON/YAML file (unit, bounds, domains, ...).")
@click.option("--not-null", "not_null", multiple=True,
              help="A column with no NULL/NaN (checked at load); AVG of it shares COUNT(*).")
@click.option("--public", is_flag=True, help="A public lookup table (no privacy; joinable).")
@click.option(
    "--no-copy", "no_copy", is_flag=True, help="Keep a view over the file instead of a copy."
)
@click.option("--replace", is_flag=True, help="Replace a table of the same name.")
@click.option("--drop-privacy-unit", "drop_privacy_unit", is_flag=True,
              help="With --replace: make a table declared with a privacy unit record level.")
@click.option("--max-text-length", "max_text_length", default=None, metavar="N|none",
              help="Cut text values longer than N characters at load (default 1000; 'none': "
                   "no bound; public, in the table's declarations).")
@click.option("--format", "source_format", type=click.Choice(["csv", "parquet", "json"]),
              default=None, help="The file's format when its name does not say it "
              "(adult.data.gz: csv; .gz/.zst compression is read from the name).")
@click.option("--column-names", "column_names", default=None, metavar="A,B,...",
              help="A CSV without a header line: its columns' names, in order.")
def add_table_command(
    project: Path,
    name: str,
    source: str,
    privacy_unit: str | None,
    bounds: tuple[str, ...],
    types: tuple[str, ...],
    max_rows_per_unit: str | None,
    rows_epsilon: float | None,
    max_groups_per_unit: int | None,
    domain: tuple[str, ...],
    domain_value: tuple[str, ...],
    declare: Path | None,
    not_null: tuple[str, ...],
    public: bool,
    no_copy: bool,
    replace: bool,
    drop_privacy_unit: bool,
    max_text_length: str | None,
    source_format: str | None,
    column_names: str | None,
) -> None:
    """Register a sensitive table with its privacy unit. SOURCE: a CSV, Parquet or JSON file
    (compressed: .csv.gz; named otherwise: --format), a folder of them named for their format
    (visits.parquet/: a dataset), or a DuckDB database (file.duckdb::table)."""
    from dpkit.cli.bounds import ask_max_rows, parse_max_rows

    rows = parse_max_rows(max_rows_per_unit)
    if declare is None:  # a declaration file may name the cap: the engine refuses if not
        rows = ask_max_rows(privacy_unit, rows, public=public)
    add_table(
        project,
        name,
        source,
        privacy_unit=privacy_unit,
        bounds=parse_bounds(bounds),
        max_rows_per_unit=rows,
        rows_epsilon=rows_epsilon,
        max_groups_per_unit=max_groups_per_unit,
        domains=parse_domains(domain, domain_value),
        not_null=[c for item in not_null for c in item.split(",") if c] or None,
        public=public,
        copy=not no_copy,
        replace=replace,
        console=console,
        declare=declare,
        max_text_length=parse_text_length(max_text_length),
        drop_privacy_unit=drop_privacy_unit,
        types=parse_types(types),
        source_format=source_format,
        column_names=None if column_names is None else
        [c.strip() for c in column_names.split(",")],
    )


def parse_text_length(text: str | None) -> int | str | None:
    """``--max-text-length``: absent ("default"), ``none`` (no bound) or a whole number."""
    if text is None:
        return "default"
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"a whole number of characters, or 'none' (got {text!r})",
                                 param_hint="--max-text-length") from None


@click.command("budget")
@click.argument("project", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--analyst", default=None, help="(Owner) show this analyst's own budget.")
@click.option("--token", default=None,
              help="Act as the analyst this token names (default: $DPKIT_TOKEN).")
@click.option("--plot", type=click.Path(path_type=Path), default=None,
              help="Also draw the spend over time per analyst (.png/.svg/.pdf; matplotlib).")
def budget_command(project: Path, as_json: bool, analyst: str | None,
                   token: str | None, plot: Path | None) -> None:
    """Show the budget: spent, remaining, and the history of charges."""
    budget(project, console=console, as_json=as_json, analyst=analyst, token=token, plot=plot)


#: what :mod:`dpkit.cli` registers on the ``dpkit`` group
commands = (demo_command, init_command, add_table_command, budget_command)
