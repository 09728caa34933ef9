"""Click options shared by ``dpkit query`` and ``dpkit preview`` (imports click only, so the
command line starts fast)."""

from __future__ import annotations

from typing import Any

import click

__all__ = ["query_options"]


def query_options(f: Any) -> Any:
    """The options ``--noise``, ``--rho``, ``--level``, ``--weights``; their values pass through
    as keyword arguments of :func:`dpkit.engine.commands.query` / ``preview``."""
    options = [
        click.option("--noise", type=click.Choice(["laplace", "gaussian"]), default="laplace",
                     show_default=True,
                     help="Laplace (pure DP) or discrete Gaussian noise (needs a project delta)."),
        click.option("--rho", type=float, default=None,
                     help="zCDP budget for --noise gaussian (instead of --epsilon)."),
        click.option("--level", type=float, default=0.95, show_default=True,
                     help="Confidence level of the intervals."),
        click.option("--weights", default=None,
                     help="Budget split per output name, e.g. n=1,avg_age=3 (others weigh 1)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f
