"""``dpkit analyst add|list|cap|revoke``, ``dpkit migrate``, ``dpkit restore-head``: the owner's
commands for roles and the ledger's upkeep.

The owner is whoever opens the project without a token (they hold its files and the key that
authenticates the ledger); these commands refuse to run with ``--token`` / ``$DPKIT_TOKEN``
set to an analyst's token (PermissionError from the curator). A token is printed once, by
``analyst add``: only its SHA-256 is kept.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from dpkit.cli.options import console, make_console

__all__ = ["add_analyst", "commands", "list_analysts", "migrate", "restore_head", "revoke_analyst",
           "set_cap"]


def add_analyst(project: str | Path, name: str, *, epsilon: float | None = None,
                expires_days: float | None = None, delta: float | None = None,
                console: Any = None) -> str:
    """Add analyst ``name`` (own caps ``epsilon`` and ``delta``) and print their token once."""
    from dpkit.engine.curator import Curator

    con = make_console(console)
    with Curator.open(project) as cur:
        token = cur.add_analyst(name, epsilon=epsilon, delta=delta, expires_days=expires_days)
        dcap = cur.analysts()[name]["delta"]
    cap = f"epsilon {epsilon:g} of the project's budget" if epsilon is not None else "no own cap"
    if dcap is not None:
        cap += f", delta {dcap:.3g}"
    con.print(f"analyst [bold]{name}[/] added ({cap}). Their token, shown only now:")
    con.print(token, markup=False, highlight=False, soft_wrap=True)
    con.print("[dim]give it to them privately; they use it as DPKIT_TOKEN=... or --token. "
              "Revoke with `dpkit analyst revoke`.[/]")
    return token


def list_analysts(project: str | Path, *, console: Any = None) -> dict[str, Any]:
    from rich.table import Table

    from dpkit.engine.curator import Curator

    con = make_console(console)
    with Curator.open(project) as cur:
        info = cur.analysts()
        spent = {n: cur.budget(n).spent for n in info}
    t = Table(title="analysts", title_justify="left")
    for col in ("analyst", "status", "own epsilon cap", "own delta cap", "spent"):
        t.add_column(col)
    for n, i in info.items():
        t.add_row(n, "active" if i["active"] else "revoked",
                  "-" if i["epsilon"] is None else f"{i['epsilon']:g}",
                  "-" if i.get("delta") is None else f"{i['delta']:.3g}", f"{spent[n]:.4g}")
    con.print(t)
    return info


def set_cap(project: str | Path, name: str, *, epsilon: float | None,
            delta: float | None = None, console: Any = None) -> dict[str, Any]:
    """Give analyst ``name`` a new own cap (``epsilon`` None: none, only the project's budget
    binds); what they spent stays spent. The owner's answer to a refusal that names the cap."""
    from dpkit.engine.curator import Curator

    with Curator.open(project) as cur:
        cur.set_analyst_budget(name, epsilon, delta)
        info, spent = cur.analysts()[name], cur.budget(name).spent
    cap = ("no own cap (the project's budget binds)" if info["epsilon"] is None
           else f"epsilon {info['epsilon']:g}"
           + (f", delta {info['delta']:.3g}" if info.get("delta") is not None else ""))
    make_console(console).print(f"analyst [bold]{name}[/]: {cap}; spent epsilon {spent:.4g} "
                                f"so far")
    return info


def revoke_analyst(project: str | Path, name: str, *, console: Any = None) -> None:
    from dpkit.engine.curator import Curator

    with Curator.open(project) as cur:
        cur.revoke_analyst(name)
    make_console(console).print(f"analyst [bold]{name}[/] revoked: their token opens nothing "
                                f"from now on (their history stays in the ledger)")


def migrate(project: str | Path, *, console: Any = None) -> Path:
    """Rewrite an old project's unkeyed ledger as a keyed one (keeps the old file)."""
    from dpkit.engine.ledger import migrate as migrate_ledger
    from dpkit.engine.project import LEDGER_FILE

    kept = migrate_ledger(Path(project) / LEDGER_FILE)
    make_console(console).print(f"ledger migrated to the keyed format; the old file is {kept}. "
                                f"The owner key is {Path(project) / 'ledger.key'} (mode 0600)")
    return kept


def restore_head(project: str | Path, *, expected_head: str | None = None,
                 console: Any = None) -> tuple[int, str]:
    """Rewrite a lost or unreadable head file from the ledger's verified rows (owner only)."""
    from dpkit.engine.ledger import restore_head as restore
    from dpkit.engine.project import ledger_file

    ledger = ledger_file(Path(project))
    if ledger is None:
        raise click.UsageError(f"{project} is not a dpkit project (no ledger in it)")
    kept = None
    if expected_head is not None:
        seq, _, digest = expected_head.partition(":")
        if not (seq.isascii() and seq.isdigit()) or re.fullmatch(r"[0-9a-f]{64}",
                                                                  digest) is None:
            raise click.UsageError("--expected-head takes SEQ:HASH (the head `dpkit budget "
                                   "--json` printed: its seq, a colon, its 64 hex digits)")
        kept = (int(seq), digest)
    from dpkit.engine.ledger import Ledger

    head = restore(ledger, expected_head=kept)
    led = Ledger.open(ledger)
    try:
        newest, spent = led.entries()[-1], led.spend().spent
    finally:
        led.close()
    checked = "it reaches the head you kept" if kept else "no kept head was given to check"
    con = make_console(console)
    con.print(f"head restored at row {head[0]} ({head[1][:12]}...): the chain verifies under "
              f"the owner key, {checked}. Its newest row: {newest.time} ({newest.kind}, "
              f"{newest.analyst}); epsilon spent {spent:g}")
    if kept is None:  # the owner's word is all that vouches for the end: say what it costs
        con.print(f"[bold]Without --expected-head the ledger's end is taken as it is:[/] if "
                  f"this project charged anything after {newest.time}, those rows were lost "
                  f"with the head file and their budget is open again (a double spend). Check "
                  f"the service's audit log, then restore the folder from a backup that has "
                  f"them, before answering queries")
    return head


@click.group("analyst")
def analyst_group() -> None:
    """Analysts and their tokens (the owner's commands)."""


@analyst_group.command("add")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("name")
@click.option("--epsilon", type=float, default=None, help="The analyst's own epsilon cap.")
@click.option("--delta", type=float, default=None,
              help="Their delta cap beside --epsilon (default on an 'approx' project: the "
                   "project's delta in the same proportion as --epsilon).")
@click.option("--expires-days", type=float, default=None,
              help="The token opens nothing after this many days (default: never).")
def add_command(project: Path, name: str, epsilon: float | None, delta: float | None,
                expires_days: float | None) -> None:
    """Add an analyst; prints their token once."""
    add_analyst(project, name, epsilon=epsilon, delta=delta, expires_days=expires_days,
                console=console)


@analyst_group.command("list")
@click.argument("project", type=click.Path(path_type=Path))
def list_command(project: Path) -> None:
    """List analysts: active or revoked, cap, spent."""
    list_analysts(project, console=console)


@analyst_group.command("cap")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("name")
@click.option("--epsilon", type=float, default=None,
              help="The analyst's new own epsilon cap (what they spent counts against it).")
@click.option("--delta", type=float, default=None,
              help="Their delta cap beside --epsilon (default as for `analyst add`).")
@click.option("--none", "no_cap", is_flag=True,
              help="Remove their own caps: only the project's budget binds.")
def cap_command(project: Path, name: str, epsilon: float | None, delta: float | None,
                no_cap: bool) -> None:
    """Raise or lower an analyst's own cap (what they spent stays spent)."""
    if (epsilon is None) == (not no_cap) or (no_cap and delta is not None):
        raise click.UsageError("give the new cap with --epsilon E (and --delta D), or --none "
                               "to remove it")
    set_cap(project, name, epsilon=epsilon, delta=delta, console=console)


@analyst_group.command("revoke")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("name")
def revoke_command(project: Path, name: str) -> None:
    """Revoke an analyst's token."""
    revoke_analyst(project, name, console=console)


@click.command("migrate")
@click.argument("project", type=click.Path(path_type=Path))
def migrate_command(project: Path) -> None:
    """Upgrade a project made by an older dpkit (unkeyed ledger) to the keyed ledger."""
    migrate(project, console=console)


@click.command("restore-head")
@click.argument("project", type=click.Path(path_type=Path))
@click.option("--expected-head", default=None, metavar="SEQ:HASH",
              help="a head kept outside the folder (`dpkit budget --json`): the rows must reach "
                   "it")
def restore_head_command(project: Path, expected_head: str | None) -> None:
    """Rewrite a lost or unreadable ledger head file from the verified rows."""
    restore_head(project, expected_head=expected_head, console=console)


#: what :mod:`dpkit.cli` registers on the ``dpkit`` group
commands = (analyst_group, migrate_command, restore_head_command)
