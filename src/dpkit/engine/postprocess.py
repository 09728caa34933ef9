"""Post-processing: the SELECT list, HAVING, ORDER BY, LIMIT and expressions, on noisy values.

Runs after the noise, on the noisy table only (group keys, noisy aggregates and their interval
ends), so nothing here can spend privacy or reveal more than the noisy values do. The rows it
receives are in a public order (declared keys, or keys sorted when selected privately), so
LIMIT without ORDER BY and ties in ORDER BY cut by public rules too. DuckDB evaluates the
clauses on the backend's own in-memory database (the query connection), not a second one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import duckdb
import numpy as np

from dpkit.engine import sql as dsql
from dpkit.engine.backend_duckdb import arrow_result, columnar_type
from dpkit.engine.plan import Plan
from dpkit.engine.tables import quote_ident

__all__ = ["Scratch", "project"]

Scratch = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]
#: noisy tables of at most this many rows are loaded and read as Python values, not Arrow
#: (measured: faster up to ~256 rows, and no pandas import; cf. prepare.py's few groups)
FEW_ROWS = 256


@contextlib.contextmanager
def _fresh_connection() -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar=false")
        con.execute("SET error_on_division_by_zero=false")
        yield con
    finally:
        con.close()


def project(plan: Plan, table: dict[str, np.ndarray], *,
            scratch: Scratch | None = None) -> tuple[list[str], dict[str, np.ndarray],
                                                      dict[str, str]]:
    """The released columns of the noisy table: the SELECT list, then HAVING / ORDER BY /
    LIMIT / expressions when the query has them (evaluated by DuckDB on ``scratch``, a
    connection of the backend's own in-memory database; a fresh one when None)."""
    spec = plan.spec
    if spec.postprocess:
        if scratch is None:
            with _fresh_connection() as fresh:
                return _postprocess(plan, table, fresh)
        with scratch() as con:
            return _postprocess(plan, table, con)
    columns: list[str] = []
    data: dict[str, np.ndarray] = {}
    kinds: dict[str, str] = {}
    for o in spec.outputs:
        if o.kind == "group":
            columns.append(o.name)
            data[o.name] = table[f"__g{o.index}"]
            kinds[o.name] = "group"
        else:
            for suffix, src, kind in (("", "", "value"), ("_ci_low", "_lo", "ci_low"),
                                      ("_ci_high", "_hi", "ci_high")):
                name = o.name + suffix
                columns.append(name)
                data[name] = table[f"__a{o.index}{src}"]
                kinds[name] = kind
    return columns, data, kinds


def _postprocess(plan: Plan, table: dict[str, np.ndarray], con: duckdb.DuckDBPyConnection,
                 ) -> tuple[list[str], dict[str, np.ndarray], dict[str, str]]:
    """HAVING / ORDER BY / LIMIT / expressions on the noisy table ``__noisy`` (dropped after)."""
    spec = plan.spec
    try:
        names = list(table)
        types: list[str] = []
        for n in names:
            if n.startswith("__g"):
                gi = int(n[3:])
                types.append(spec.group_by[gi].type)
            else:
                arr = table[n]
                types.append("BIGINT" if np.asarray(arr).dtype.kind in "iu" else "DOUBLE")
        nrows = len(next(iter(table.values()))) if table else 0
        # key types whose values travel through Arrow unchanged: load and read column-wise,
        # unless the table is small: then one INSERT of bound values, no Arrow (building an
        # Arrow array imports pandas, ~0.5 s on a process's first ORDER BY or ratio)
        columnar = nrows > FEW_ROWS and all(columnar_type(k.type) for k in spec.group_by)
        if not (columnar and _load_columns(con, names, types, table)):
            _insert_rows(con, names, types, table, nrows)
        sel: list[str] = []
        out_kinds: dict[str, str] = {}
        order_cols: list[str] = []
        for oi, o in enumerate(spec.outputs):
            if o.kind == "group":
                sel.append(f"__g{o.index} AS {quote_ident(o.name)}")
                out_kinds[o.name] = "group"
            elif o.kind == "agg":
                sel.append(f"__a{o.index} AS {quote_ident(o.name)}")
                sel.append(f"__a{o.index}_lo AS {quote_ident(o.name + '_ci_low')}")
                sel.append(f"__a{o.index}_hi AS {quote_ident(o.name + '_ci_high')}")
                out_kinds[o.name] = "value"
                out_kinds[o.name + "_ci_low"] = "ci_low"
                out_kinds[o.name + "_ci_high"] = "ci_high"
            else:
                assert o.expr is not None
                sel.append(f"{o.expr.sql(dialect='duckdb')} AS {quote_ident(o.name)}")
                out_kinds[o.name] = "expr"
                if f"__o{oi}_lo" in table:  # its interval (engine/noisy.py, union bound)
                    sel.append(f"__o{oi}_lo AS {quote_ident(o.name + '_ci_low')}")
                    sel.append(f"__o{oi}_hi AS {quote_ident(o.name + '_ci_high')}")
                    out_kinds[o.name + "_ci_low"] = "ci_low"
                    out_kinds[o.name + "_ci_high"] = "ci_high"
        for e, desc in spec.order:
            order_cols.append(e.sql(dialect="duckdb") + (" DESC" if desc else " ASC"))
        text = f"SELECT {', '.join(sel)} FROM __noisy"
        if spec.having is not None:
            text += f" WHERE {spec.having.sql(dialect='duckdb')}"
        if order_cols:
            text += " ORDER BY " + ", ".join(order_cols)
        if spec.limit is not None:
            text += f" LIMIT {spec.limit}"
        if spec.offset is not None:
            text += f" OFFSET {spec.offset}"
        data: dict[str, np.ndarray] = {}
        try:
            if columnar:
                got = arrow_result(con, text)
                cols = list(got.column_names)
                for j, c in enumerate(cols):
                    data[c] = _column_values(got.column(j), out_kinds.get(c, "expr"))
            else:
                cur = con.execute(text)
                cols = [d[0] for d in cur.description]
                fetched = cur.fetchall()
                for j, c in enumerate(cols):
                    data[c] = _values([r[j] for r in fetched], out_kinds.get(c, "expr"))
        except duckdb.Error as exc:
            raise dsql.QueryError(
                f"HAVING/ORDER BY/expressions could not be evaluated on the noisy results: "
                f"{str(exc).splitlines()[0]}"
            ) from None
    finally:
        con.execute("DROP TABLE IF EXISTS __noisy")
    return cols, data, {c: out_kinds.get(c, "expr") for c in cols}


def _insert_rows(con: duckdb.DuckDBPyConnection, names: list[str], types: list[str],
                 table: dict[str, np.ndarray], nrows: int) -> None:
    """Create ``__noisy`` and insert ``table`` row by row as bound parameters: one
    multi-row INSERT up to :data:`FEW_ROWS` rows (a few ms), ``executemany`` beyond (~0.5 ms
    a row; only key types that cannot travel through Arrow get here with many rows)."""
    con.execute("CREATE TABLE __noisy (" + ", ".join(
        f"{n} {t}" for n, t in zip(names, types, strict=True)) + ")")
    if not nrows:
        return
    one = f"({', '.join('?' for _ in names)})"
    if nrows <= FEW_ROWS:
        flat = [_cell(table[n][i]) for i in range(nrows) for n in names]
        con.execute(f"INSERT INTO __noisy VALUES {', '.join([one] * nrows)}", flat)
        return
    rows = [tuple(_cell(table[n][i]) for n in names) for i in range(nrows)]
    con.executemany(f"INSERT INTO __noisy VALUES {one}", rows)


def _values(vals: list[Any], kind: str) -> np.ndarray:
    """A post-processed column from its Python values: group keys as objects, all-int value
    columns as int64, anything else as float64 (NULL as NaN)."""
    if kind == "group":
        out = np.empty(len(vals), dtype=object)
        out[:] = vals
        return out
    if vals and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return np.array(vals, dtype=np.int64)
    return np.array([np.nan if v is None else v for v in vals], dtype=np.float64)


def _column_values(col: Any, kind: str) -> np.ndarray:
    """:func:`_values` of an Arrow column, without a Python object per cell where the result
    is the same: int64 without NULLs stays int64, integers with NULLs and floats become
    float64 (NULL as NaN); other types go through their Python values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if kind != "group":
        signed = pa.types.is_signed_integer(t) or (pa.types.is_unsigned_integer(t)
                                                   and t.bit_width < 64)
        if signed and len(col) and col.null_count == 0:
            return col.to_numpy().astype(np.int64)
        if signed or pa.types.is_floating(t):
            flt = pc.cast(col, pa.float64(), safe=False)
            return pc.fill_null(flt, float("nan")).to_numpy().astype(np.float64)
    return _values(col.to_pylist(), kind)


def _load_columns(con: Any, names: list[str], types: list[str],
                  table: dict[str, np.ndarray]) -> bool:
    """Create ``__noisy`` from ``table`` column by column (through Arrow), each cast to its
    type; False (nothing created) when a column cannot travel that way."""
    import pyarrow as pa

    try:
        arrays = {}
        for n in names:
            arr = table[n]
            arrays[n] = pa.array(arr.tolist() if arr.dtype == object else arr)
        src = pa.table(arrays)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return False
    con.register("__noisy_src", src)
    try:
        con.execute("CREATE TABLE __noisy AS SELECT " + ", ".join(
            f"CAST({n} AS {t}) AS {n}" for n, t in zip(names, types, strict=True))
            + " FROM __noisy_src")
    except duckdb.Error:
        con.execute("DROP TABLE IF EXISTS __noisy")
        return False
    finally:
        con.unregister("__noisy_src")
    return True


def _cell(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v
