"""Neighbouring datasets: a base table D and D' = D with one privacy unit added, removed or
changed to extreme values, written as DuckDB files that the curator loads with their types.

The extreme values are those that made a query fail, or change shape, on some rows only
(issue 12): numeric bounds far exceeded, ±inf, NaN, -0.0, NULL, the largest INTEGER / BIGINT /
HUGEINT / DECIMAL(38,20), empty and odd strings (``'true'``, ``'x'``, ``'1e400'``, unicode),
extreme dates and timestamps, and one unit with many rows. Two more (FINDINGS.md M):
``add_duplicates``, a unit whose few distinct rows are each repeated many times, far beyond
``max_rows_per_unit`` (the cap keeps the rows of smallest keyed hash, and identical rows hash
alike: the tie at the threshold is broken by its own rule), and ``add_nulls``, a unit whose
every value is NULL (where the declarations allow it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb

from dpkit.attacks.side_channels.draw import Draw
from dpkit.engine.tables import Column, TableMeta, quote_ident

__all__ = ["NEIGHBOURS", "Scratch", "extreme_literals"]

NEIGHBOURS = ("add", "remove", "add_extreme", "change_extreme", "add_many", "add_duplicates",
              "add_nulls")

_INT_EXTREMES = {
    "TINYINT": ("127", "-128"), "SMALLINT": ("32767", "-32768"),
    "INTEGER": ("2147483647", "-2147483648"),
    "BIGINT": ("9223372036854775807", "-9223372036854775808"),
    "HUGEINT": ("170141183460469231731687303715884105727",
                "-170141183460469231731687303715884105727"),
    "UTINYINT": ("255",), "USMALLINT": ("65535",), "UINTEGER": ("4294967295",),
    "UBIGINT": ("18446744073709551615",),
}
_FLOAT_EXTREMES = ("'inf'", "'-inf'", "'nan'", "'-0.0'", "'1e308'", "'-1e308'", "'5e-324'")
_STR_EXTREMES = ("''", "'true'", "'x'", "'1e400'", "'Ω≈ç√'", "' 1 '", "'-0'", "'NaN'",
                 "'2020-13-45'", "'99999999999999999999999'", "''''",
                 "'a\\b('")  # a bad LIKE pattern (its escape) and regex on Spark: FINDINGS H1
_DATE_EXTREMES = ("'infinity'", "'-infinity'", "'0001-01-01'", "'9999-12-31'",
                  "'5877641-06-24'")
_TS_EXTREMES = ("'infinity'", "'-infinity'", "'0001-01-01 00:00:00'", "'294246-12-31 23:59:59'")
# the ends of the calendar that every engine holds (Spark's dates and timestamps stop at
# 0001-01-01 and 9999-12-31, DuckDB's go further: the extremes above): in D as well as in D'
_DATE_ENDS = ("'0001-01-01'", "'9999-12-31'", "NULL")
_TS_ENDS = ("'0001-01-01 00:00:00'", "'9999-12-31 23:59:59.999999'", "NULL")
# base vocabularies of text columns: each castable to something, so that one odd value in D'
# makes an implicit cast fail where it succeeded on D
_TEXT_FLAVOURS = (("'true'", "'false'", "'1'", "'0'"), ("'1'", "'2'", "'3'", "'10'"),
                  ("'a'", "'b'", "'c'"), ("'2020-01-01'", "'2021-06-30'"))


def _lit(v: object) -> str:
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    return repr(v)


def extreme_literals(table: TableMeta, col: Column) -> tuple[str, ...]:
    """SQL literals of extreme values for ``col`` (cast to its type by the caller with
    TRY_CAST, so values that do not fit become NULL). NULL and NaN are left out for columns
    declared ``not_null`` (the load would refuse them)."""
    base = col.type.upper().split("(")[0].strip()
    cls = col.cls
    out: list[str] = []
    b = table.bounds.get(col.name)
    if cls in ("int", "decimal", "float") and b is not None:
        out += [repr(b[0] - 1e6), repr(b[1] + 1e6)]
    if cls == "int":
        out += [*_INT_EXTREMES.get(base, ()), "0"]
    elif cls == "decimal":
        out += ["999999999999999999.99999999999999999999",
                "-999999999999999999.99999999999999999999", "0.00000000000000000001"]
    elif cls == "float":
        out += list(_FLOAT_EXTREMES)
    elif cls == "string":
        out += list(_STR_EXTREMES)
    elif cls == "bool":
        out += ["TRUE", "FALSE"]
    elif cls == "temporal":
        out += list(_TS_EXTREMES if "TIMESTAMP" in base else _DATE_EXTREMES)
    dom = table.domains.get(col.name)
    if dom:
        out.append("'zz_not_declared'" if cls == "string" else repr(-123456789))
    if col.name in table.not_null:
        out = [v for v in out if "nan" not in v.lower()]
    else:
        out.append("NULL")
    return tuple(out)


def _base_literal(table: TableMeta, col: Column, i: int, flavour: int,
                  row: int | None = None) -> str:
    dom = table.domains.get(col.name)
    if dom:
        return _lit(dom[i % len(dom)])
    cls = col.cls
    b = table.bounds.get(col.name)
    if cls == "float" and row is not None and (row in (3, 7, 11) or row % 8 == 7) and (
            col.name not in table.not_null):
        return ("'-0.0'", "'nan'", "'inf'", "'-inf'")[row // 4 % 4]  # D holds odd floats too
    if cls in ("int", "decimal", "float"):
        lo, hi = b if b is not None else (0.0, 9.0)
        v = lo + (hi - lo) * ((i * 3) % 9) / 8
        return repr(int(v)) if cls == "int" else repr(float(v))
    if cls == "bool":
        return "TRUE" if i % 3 else "FALSE"
    if cls == "temporal":
        if row is not None and row % 8 == 5:  # D holds the calendar's ends and NULL too
            ends: tuple[str, ...] = _TS_ENDS if "TIMESTAMP" in col.type.upper() else _DATE_ENDS
            if col.name in table.not_null:
                ends = ends[:2]
            return ends[row // 8 % len(ends)]
        return f"'2020-01-{1 + i % 28:02d}'"
    vocab = _TEXT_FLAVOURS[flavour % len(_TEXT_FLAVOURS)]
    return vocab[i % len(vocab)]


class Scratch:
    """An in-memory DuckDB holding D (``d0``) and the public tables; writes D and each D' to
    its own DuckDB file under ``folder`` for the curator to load (types kept exactly)."""

    def __init__(self, folder: Path, table: TableMeta, public: Sequence[TableMeta]) -> None:
        self.folder = Path(folder)
        self.table = table
        self.public = list(public)
        self.con = duckdb.connect()
        self.cols = [c for c in table.columns if not c.name.startswith("__")]
        cols = ", ".join(f"{quote_ident(c.name)} {c.type}" for c in self.cols)
        self.con.execute(f"CREATE TABLE d0 ({cols})")
        self._next_unit = 0

    # ------------------------------------------------------------------ base data

    def generate(self, d: Draw, *, units: int = 12) -> None:
        """Fill D with ``units`` units of ordinary values (1 to max_rows_per_unit rows each)."""
        flavours = {c.name: d.below(len(_TEXT_FLAVOURS)) for c in self.cols}
        rows = []
        i = 0
        for u in range(units):
            for _ in range(1 + d.below(max(1, self.table.max_rows_per_unit))):
                rows.append([self._unit_literal(u) if c.name == self.table.privacy_unit
                             else _base_literal(self.table, c, i + d.below(5), flavours[c.name],
                                                row=i)
                             for c in self.cols])
                i += 1
        self._next_unit = units
        self._insert("d0", rows)

    def load_rows(self, select_sql: str) -> None:
        """Fill D from a query over an attached source (a sample of a project's table)."""
        names = ", ".join(quote_ident(c.name) for c in self.cols)
        self.con.execute(f"INSERT INTO d0 SELECT {names} FROM ({select_sql})")
        self._next_unit = 10**6

    def add_public(self, meta: TableMeta, select_sql: str | None, d: Draw) -> None:
        """A public table: copied from ``select_sql`` or generated from its declarations."""
        name = "p_" + meta.name
        cols = ", ".join(f"{quote_ident(c.name)} {c.type}" for c in meta.columns)
        self.con.execute(f"CREATE TABLE {quote_ident(name)} ({cols})")
        if select_sql is not None:
            self.con.execute(f"INSERT INTO {quote_ident(name)} SELECT * FROM ({select_sql})")
            return
        rows = [[_base_literal(meta, c, i, j) for j, c in enumerate(meta.columns)]
                for i in range(6)]
        self._insert(name, rows, meta.columns)

    def _unit_literal(self, u: int) -> str:
        unit = self.table.privacy_unit
        if unit is None:
            return str(u)
        col = self.table.column(unit)
        return str(u + 1) if col.numeric else f"'u{u + 1}'"

    def _insert(self, name: str, rows: list[list[str]],
                cols: Sequence[Column] | None = None) -> None:
        cols = list(cols or self.cols)
        for r in rows:
            vals = ", ".join(f"TRY_CAST({v} AS {c.type})" for v, c in zip(r, cols, strict=True))
            self.con.execute(f"INSERT INTO {quote_ident(name)} VALUES ({vals})")

    # ------------------------------------------------------------------ neighbours

    def neighbour(self, kind: str, d: Draw) -> str:
        """Create D' of ``kind`` (one of :data:`NEIGHBOURS`) as a table; returns its name."""
        if kind not in NEIGHBOURS:
            raise ValueError(f"unknown neighbour kind {kind!r}; choose from {NEIGHBOURS}")
        name = "n_" + kind
        self.con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM d0")
        unit = self.table.privacy_unit
        new = self._unit_literal(self._next_unit + 1000)
        if kind == "remove":
            if unit is None:
                self.con.execute(f"DELETE FROM {name} WHERE rowid = (SELECT MIN(rowid) FROM "
                                 f"{name})")
            else:
                q = quote_ident(unit)
                victim = self.con.execute(
                    f"SELECT {q} FROM d0 GROUP BY {q} ORDER BY {q} LIMIT 1 OFFSET "
                    f"{d.below(4)}").fetchall()
                if victim:
                    self.con.execute(f"DELETE FROM {name} WHERE {q} = ?", [victim[0][0]])
            return name
        if kind == "change_extreme":
            self._change(name, d)
            return name
        if kind in ("add_duplicates", "add_nulls"):
            self._insert(name, self._repeated(kind, new, d))
            return name
        count = 1 if kind != "add_many" else 5 * self.table.max_rows_per_unit + 20
        rows = []
        for i in range(count):
            row = []
            for c in self.cols:
                if c.name == unit:
                    row.append(new)
                elif kind == "add_extreme":
                    row.append(d.pick(extreme_literals(self.table, c)))
                else:
                    row.append(_base_literal(self.table, c, d.below(50) + i, d.below(4)))
            rows.append(row)
        self._insert(name, rows)
        return name

    def _repeated(self, kind: str, unit_value: str, d: Draw) -> list[list[str]]:
        """The rows of a new unit made of repeated rows: ``add_nulls``, one row of NULLs (a
        ``not_null`` column keeps an ordinary value) ``max_rows_per_unit + 1`` times;
        ``add_duplicates``, one to three distinct rows (ordinary or extreme values), each
        ``10 · max_rows_per_unit + 7`` times, so that the cap's threshold hash falls inside a
        run of identical rows."""
        cap = max(1, self.table.max_rows_per_unit)
        unit = self.table.privacy_unit

        def row(extreme: bool) -> list[str]:
            out = []
            for c in self.cols:
                if c.name == unit:
                    out.append(unit_value)
                elif kind == "add_nulls":
                    out.append(_base_literal(self.table, c, d.below(50), d.below(4))
                               if c.name in self.table.not_null else "NULL")
                elif extreme:
                    out.append(d.pick(extreme_literals(self.table, c)))
                else:
                    out.append(_base_literal(self.table, c, d.below(50), d.below(4)))
            return out

        if kind == "add_nulls":
            return [row(False)] * (cap + 1)
        distinct = [row(d.chance(1, 3)) for _ in range(1 + d.below(3))]
        return [r for r in distinct for _ in range(10 * cap + 7)]

    def _change(self, name: str, d: Draw) -> None:
        unit = self.table.privacy_unit
        sets = []
        for c in self.cols:
            if c.name != unit and d.chance(2, 3):
                v = d.pick(extreme_literals(self.table, c))
                sets.append(f"{quote_ident(c.name)} = TRY_CAST({v} AS {c.type})")
        if not sets:
            return
        if unit is None:
            cond = f"rowid = (SELECT MIN(rowid) FROM {name})"
        else:
            q = quote_ident(unit)
            cond = f"{q} = (SELECT MIN({q}) FROM {name})"
        self.con.execute(f"UPDATE {name} SET {', '.join(sets)} WHERE {cond}")

    def write(self, table: str, file: Path) -> Path:
        """Write ``table`` (as the private table's name) and the public tables to ``file``."""
        file = Path(file)
        self.con.execute(f"ATTACH '{file}' AS out")
        try:
            self.con.execute(f"CREATE TABLE out.{quote_ident(self.table.name)} AS "
                             f"SELECT * FROM {table}")
            for p in self.public:
                self.con.execute(f"CREATE TABLE out.{quote_ident(p.name)} AS "
                                 f"SELECT * FROM {quote_ident('p_' + p.name)}")
        finally:
            self.con.execute("DETACH out")
        return file

    def close(self) -> None:
        self.con.close()
