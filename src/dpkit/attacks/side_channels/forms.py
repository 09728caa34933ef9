"""The release families' pairs and spellings the grammar draws (FINDINGS.md M): ranges for
``cur.ranges`` / ``DP_RANGES`` / ``COUNT(*) FILTER (WHERE c BETWEEN a AND b)``, and other
spellings of the SQL release forms. Each is a function of the declared bounds and a draw (or a
stream of its own, seeded by what the main stream drew), so that every seed's other queries
stay as they were. Public things only: the refused spellings (reversed pairs, pairs beyond
the bounds, probabilities outside [0, 1]) are refused alike on D and D'.
"""

from __future__ import annotations

import zlib

from dpkit.attacks.side_channels.draw import Draw

__all__ = ["filter_pairs", "lazy_constants", "ranges_pairs", "sql_form"]


def ranges_pairs(d: Draw, lo: float, hi: float, tags: list[str]) -> tuple[tuple[float, float], ...]:
    """``cur.ranges``' pairs over the bounds ``[lo, hi]``: a partition, overlapping ones,
    a single point, and now and then a pair the release refuses (reversed, or beyond the
    bounds: public, so refused alike on D and D')."""
    mid, q = (lo + hi) / 2, (hi - lo) / 4
    form = d.pick(("halves", "halves", "overlap", "point", "whole", "reversed", "beyond"))
    tags.append(f"ranges_{form}")
    return {"halves": ((lo, mid), (mid, hi)), "overlap": ((lo, mid + q), (mid - q, hi), (lo, hi)),
            "point": ((mid, mid), (lo, lo)), "whole": ((lo, hi),),
            "reversed": ((mid, lo), (lo, hi)), "beyond": ((lo, hi + 1e6),)}[form]


def sql_form(form: str, c: str, lo: float, hi: float, salt: object, tags: list[str]) -> str:
    """Now and then another spelling of a release family's SQL form than ``form`` (each the
    preview must price as the release charges, FINDINGS.md M), drawn from a stream of its own
    so that the main stream (every seed's other queries) stays as it was."""
    x = Draw(zlib.crc32(repr(("sql_form", form, lo, hi, salt)).encode()))
    if not x.chance(1, 2):
        return form
    mid = (lo + hi) / 2
    name = form.split("(")[0]
    other = {
        "DP_CDF": (f"DP_CDF({c}, 4)", f"DP_CDF({c}, 0)", f"DP_CDF({c}, 16)"),
        "DP_QUANTILES": (f"DP_QUANTILES({c}, 0.1, 0.5, 0.9)", f"DP_QUANTILES({c}, 0, 1)",
                         f"DP_QUANTILES({c}, 1.5)", f"DP_QUANTILES({c})"),
        "DP_RANGES": (f"DP_RANGES({c}, ({lo!r}, {hi!r}))",
                      f"DP_RANGES({c}, ({mid!r}, {mid!r}), ({lo!r}, {hi!r}), ({lo!r}, {mid!r}))",
                      f"DP_RANGES({c}, ({hi!r}, {lo!r}))",
                      f"DP_RANGES({c}, ({lo!r}, {hi + 1e6!r}))"),
    }.get(name)
    if other is None:
        return form
    tags.append(f"form_{name.lower()}")
    return x.pick(other)


def filter_pairs(lo: float, hi: float, mid: float, salt: object, tags: list[str]
                   ) -> tuple[tuple[float, float], ...]:
    """The ``COUNT(*) FILTER (WHERE c BETWEEN a AND b)`` pairs: the two halves, or, drawn from
    a stream of their own (the main stream stays as it was), one pair, three overlapping, a
    point, or a reversed pair (refused alike on D and D')."""
    x = Draw(zlib.crc32(repr(("filter", lo, hi, mid, salt)).encode()))
    halves = ((lo, mid), (mid, hi))
    if x.chance(1, 2):
        return halves
    form = x.pick(("one", "overlap", "point", "reversed"))
    tags.append(f"filter_{form}")
    return {"one": ((lo, hi),), "overlap": ((lo, mid), (mid, hi), (lo, hi)),
            "point": ((mid, mid), (lo, hi)), "reversed": ((mid, lo),)}[form]


def lazy_constants(columns: list[tuple[str, str]]) -> list[str]:
    """Atoms over ``columns`` (their SQL reference and type class) whose constants DuckDB
    converts when the first row is compared, not when the statement binds (FINDINGS.md M2,
    M3): an integer column against a 39-digit number beside a decimal (their common type
    DECIMAL(38,1) cannot hold it), against a long fraction (too few integer digits left for
    the column's own values), a DATE or TIMESTAMP column against a text that is no day. The
    grammar puts them behind a guard that only a neighbour's rows pass."""
    out: list[str] = []
    for ref, cls in columns:
        if cls == "int":
            out += [f"{ref} IN (170141183460469231731687303715884105727, -0.0)",
                    f"{ref} IN (1, 0.0000000000000000000001)"]
        elif cls == "temporal":
            out += [f"{ref} IN ('x')", f"{ref} > '2020-02-30'", f"{ref} <> '2020-13-01'"]
    return out
