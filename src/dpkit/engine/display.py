"""Tables that fit the terminal without cutting a number.

A rich ``Table`` squeezed into 80 columns ellipsises cells (``141…``): for a private answer
that hides the very value the budget paid for. :class:`FitTable` knows which columns hold
numbers (never cut, never wrapped inside a number) and which hold text that may fold (a query,
a long label). It renders as one table when that fits the console's width; otherwise it splits
the columns into several tables that each fit, repeating the key columns (the GROUP BY keys, a
ledger row's number) in each, and keeping a value with its interval; when even one value and
the keys do not fit, each row becomes a small two-column card. Imports rich only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Col", "FitTable"]

_FLEX_MIN = 24  # the narrowest a folding text column (a query) is worth showing
_HEADER_MAX = 12  # a longer header folds onto several lines rather than widen its column


@dataclass
class Col:
    """One column: header, cells (already formatted), and how it may be laid out.

    ``key``: repeated in every part when the table is split (group keys, a row number).
    ``flex``: text that may fold over several lines (never a number). ``unit``: columns with
    the same unit stay in the same part (a value and its interval).
    """

    header: str
    cells: list[str]
    justify: Literal["left", "right"] = "right"
    key: bool = False
    flex: bool = False
    unit: int = -1
    style: str | None = None

    @property
    def width(self) -> int:
        """The fixed width of a non-folding column: its widest cell, and its header up to
        :data:`_HEADER_MAX` characters."""
        widest = max((len(c) for c in self.cells), default=0)
        return max(widest, min(len(self.header), _HEADER_MAX), 1)

    def need(self) -> int:
        """Columns of the console this one takes, borders and padding included."""
        return (min(self.width, _FLEX_MIN) if self.flex else self.width) + 3


@dataclass
class FitTable:
    """A table laid out for the console it is printed on (see the module docstring)."""

    cols: list[Col]
    title: str | None = None
    caption: str | None = None
    notes: list[str] = field(default_factory=list)

    def parts(self, width: int) -> list[list[Col]] | None:
        """The columns of each table printed at ``width``; None: too narrow for any table
        (each row is then printed as a card)."""
        keys = [c for c in self.cols if c.key]
        base = 1 + sum(c.need() for c in keys)
        units: list[list[Col]] = []
        for c in self.cols:
            if c.key:
                continue
            if units and c.unit >= 0 and units[-1][0].unit == c.unit:
                units[-1].append(c)
            else:
                units.append([c])
        if base + sum(c.need() for u in units for c in u) <= width:
            return [self.cols]
        parts: list[list[Col]] = []
        current: list[Col] = []
        used = base
        for u in units:
            w = sum(c.need() for c in u)
            if base + w > width:
                return None
            if current and used + w > width:
                parts.append(keys + current)
                current, used = [], base
            current += u
            used += w
        parts.append(keys + current)
        return parts

    def _table(self, cols: Sequence[Col]) -> Any:
        from rich.table import Table
        from rich.text import Text

        t = Table()
        for c in cols:
            if c.flex:
                t.add_column(c.header, justify=c.justify, overflow="fold", style=c.style,
                             min_width=min(c.width, _FLEX_MIN), ratio=1)
            else:
                t.add_column(c.header, justify=c.justify, overflow="fold", style=c.style,
                             width=c.width)
        rows = len(cols[0].cells) if cols else 0
        for i in range(rows):
            t.add_row(*(Text(c.cells[i]) for c in cols))
        return t

    def _cards(self) -> Iterator[Any]:
        """Too narrow for a table: each row as lines ``name`` / ``  value``."""
        from rich.text import Text

        if self.title:
            yield Text(self.title)
        rows = len(self.cols[0].cells) if self.cols else 0
        for i in range(rows):
            card = Text(f"-- row {i + 1} of {rows}", style="dim")
            for c in self.cols:
                card.append(f"\n{c.header}", style="bold")
                card.append(f"\n  {c.cells[i]}")
            yield card

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.text import Text

        parts = self.parts(options.max_width)
        if parts is None:
            yield from self._cards()
        else:
            for n, cols in enumerate(parts):
                title = self.title
                if len(parts) > 1:
                    title = f"{self.title or ''} (part {n + 1} of {len(parts)})".strip()
                if title:  # as wide as the console, and Text: a query's [b] is not markup
                    yield Text(title, style="italic")
                yield self._table(cols)
        if self.caption:  # below the last part, as wide as the console (not the last table)
            yield Text(self.caption, style="dim")
        yield from self.notes
