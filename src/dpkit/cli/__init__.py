"""The ``dpkit`` command (floor F7: it may import every floor below).

Thin: every command parses its arguments, calls the library, and prints with rich. One module
per area, each a list of click commands that this module registers on :func:`main`:

===================  ==============================================================
``project``          ``demo``, ``init``, ``add-table``, ``budget``
``analysts``         ``analyst`` (``add``, ``list``, ``revoke``), ``migrate``, ``restore-head``
``query``            ``query``, ``preview``
``release``          ``cdf``, ``quantiles``, ``ranges``, ``marginals``, ``synthetic``
``learn``            ``fit`` (a dpkit.learn model trained on a private table)
``account``          ``account`` (the privacy calculator)
``serve``            ``serve`` (the HTTP service, extra ``[server]``), ``owner-token``
``attack``           the ``attack`` group (runs in ``attack_runs``)
``options``          the consoles, shared flags and their parsers
===================  ==============================================================

A new command goes into the module of its area (or a new one) and is added to ``_COMMANDS``.
The library is imported inside the commands, so ``dpkit --help`` loads click and rich only.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.markup import escape

from dpkit.cli import account, analysts, attack, bounds, learn, project, query, release, serve
from dpkit.cli.options import cli_text, err_console

__all__ = ["main"]


class _FriendlyGroup(click.Group):
    """Turns the library's ValueErrors and ledger refusals (which already say what to do) into
    one red line, exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ValueError, FileNotFoundError, FileExistsError, PermissionError) as exc:
            err_console.print(f"[bold red]error:[/] {escape(cli_text(str(exc)))}")
            sys.exit(2)
        except RuntimeError as exc:  # a refused ledger (tampered, truncated, head lost)
            from dpkit.engine.ledger_rows import LedgerError  # only now: --help loads no library

            if not isinstance(exc, LedgerError):
                raise
            err_console.print(f"[bold red]error:[/] {escape(cli_text(str(exc)))}")
            sys.exit(2)
        except ImportError as exc:  # a missing optional extra says which to install
            if "pip install" not in str(exc):
                raise
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
            sys.exit(2)


@click.group(cls=_FriendlyGroup)
@click.version_option(package_name="dpkit")
def main() -> None:
    """dpkit: differential privacy you can deploy.

    Put a sensitive table behind a curator, ask aggregate SQL questions, and get answers with
    error bars while a privacy budget that can never be overspent is kept on disk.
    """


_COMMANDS: tuple[click.Command, ...] = (
    *project.commands,
    *analysts.commands,
    *query.commands,
    *release.commands,
    *learn.commands,
    *bounds.commands,
    *serve.commands,
    account.account,
    attack.attack,
)
for _command in _COMMANDS:
    main.add_command(_command)

