"""What the ``dpkit`` commands share: the consoles, the ``query``/``preview`` flags, and the
parsers of ``--bounds``, ``--domain`` and ``--weights`` (imports click and rich only, so the
command line starts fast)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console

__all__ = [
    "cli_text",
    "console",
    "err_console",
    "make_console",
    "parse_bounds",
    "parse_domains",
    "parse_weights",
    "query_options",
]

console = Console()
err_console = Console(stderr=True)


def make_console(given: Any) -> Any:
    """``given`` if a console was passed (tests pass one writing to a buffer), else a new one."""
    return given if given is not None else Console()


def cli_text(text: str) -> str:
    """A library text (a note, a refusal) as a command-line user acts on it: the switch that
    turns the answer diagnostics off is ``--no-diagnostics`` here, not the Python keyword, and
    a table is loaded again with ``--replace``."""
    from dpkit.engine.spec import DROP_UNIT_ON, REPLACE_ON, respell

    return respell(text, "--no-diagnostics",
                   {REPLACE_ON: "--replace", DROP_UNIT_ON: "--drop-privacy-unit"})


def query_options(f: Any) -> Any:
    """The options ``--noise``, ``--rho``, ``--level``, ``--weights``, ``--no-diagnostics``;
    their values pass through
    as keyword arguments of :func:`dpkit.cli.query.query` / ``preview``."""
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
        click.option("--diagnostics/--no-diagnostics", default=True, show_default=True,
                     help="Spend 5% of the budget estimating rows dropped by the per-unit cap "
                          "and values clamped by the bounds (warns above 5%)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def parse_bounds(items: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """``("age=0:120",)`` -> ``{"age": (0.0, 120.0)}`` (the repeatable ``--bounds`` flag)."""
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


def parse_types(items: tuple[str, ...]) -> dict[str, str] | str | None:
    """``("code=VARCHAR,year=INTEGER",)`` -> ``{"code": "VARCHAR", "year": "INTEGER"}`` (the
    repeatable ``--types`` flag; ``--types infer``: the sniffer's types, ``"infer"``)."""
    if [i.strip().lower() for i in items] == ["infer"]:
        return "infer"
    types: dict[str, str] = {}
    for item in items:
        # a type may hold a comma (DECIMAL(10,2)): split only at commas outside parentheses
        for part in re.split(r",(?![^(]*\))", item):
            column, sep, type_ = part.partition("=")
            if not sep or not column.strip() or not type_.strip():
                raise click.BadParameter(f"write types as column=TYPE, e.g. "
                                         f"code=VARCHAR,year=INTEGER, or 'infer' (got {item!r})")
            types[column.strip()] = type_.strip()
    return types or None


def parse_domains(items: tuple[str, ...],
                  values: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """``("ward=A,B",)`` -> ``{"ward": ["A", "B"]}`` (the repeatable ``--domain`` flag; keys
    are CSV fields, so ``ward=A,"B, annex"`` keeps the comma); ``values``: the repeatable
    ``--domain-value ward=B, annex``, one key each, taken verbatim after the first ``=``."""
    import csv

    domains: dict[str, list[str]] = {}
    for item in items:
        column, sep, keys = item.partition("=")
        if not sep or not keys:
            raise click.BadParameter(f"write a domain as column=key1,key2 (got {item!r})")
        try:
            fields = next(csv.reader([keys], skipinitialspace=True, strict=True))
        except csv.Error as exc:
            raise click.BadParameter(f"cannot read the keys of {item!r} ({exc}); quote a key "
                                     f'with a comma as "B, annex", or use --domain-value '
                                     f"or --declare") from None
        domains.setdefault(column.strip(), []).extend(k.strip() for k in fields)
    for item in values:
        column, sep, key = item.partition("=")
        if not sep or not column.strip():
            raise click.BadParameter(f"write one key as column=value (got {item!r})")
        domains.setdefault(column.strip(), []).append(key)
    return domains


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
