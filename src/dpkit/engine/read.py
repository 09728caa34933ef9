"""Reading the rows, after the charge: one compiled statement, run once.

:func:`read_exact` runs the statement :mod:`dpkit.engine.prepare` made and dry-ran before the
charge; its row conditions are total (:mod:`dpkit.engine.totality`), so it fails only for
reasons outside the data (memory, disk), and :mod:`dpkit.engine.charge` keeps the charge then.
The exact values (:class:`Exact`) never leave the engine: only :mod:`dpkit.engine.noisy` reads
them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import DuckBackend
from dpkit.engine.tables import type_class

__all__ = ["Exact", "Prepared", "fill_declared_keys", "key_matcher", "read_exact"]


class Exact:
    """Exact aggregates straight from the backend (they never leave the engine).

    Built from rows (``keys``: one tuple of group values per group; ``cols``: one list per
    measurement column, NULL as None, as DuckDB's ``fetchall`` gives them) or from columns
    (``key_columns``: one object array of the same Python values per group column;
    ``columns``: int64 arrays with NULL read as 0, their NULL masks in ``nulls``, or lists).
    Either view is available from both; the release reads the columnar one (no Python object
    per group and measurement), ``keys``/``cols`` are built on first use.
    """

    def __init__(self, keys: list[tuple[Any, ...]] | None = None,
                 cols: dict[str, list[Any]] | None = None, *, rows: int | None = None,
                 key_columns: list[np.ndarray] | None = None,
                 columns: dict[str, Any] | None = None,
                 nulls: dict[str, np.ndarray | None] | None = None) -> None:
        if key_columns is None or columns is None:
            if keys is None or cols is None:
                raise ValueError("Exact needs keys and cols, or key_columns and columns")
            self._keys: list[tuple[Any, ...]] | None = keys
            self._cols: dict[str, list[Any]] | None = cols
            self.n_groups = len(keys)
            self._key_columns: list[np.ndarray] | None = None
            self._columns: dict[str, Any] = dict(cols)
            self._nulls: dict[str, np.ndarray | None] = {}
        else:
            self._keys = self._cols = None
            self.n_groups = int(rows if rows is not None else
                                (len(key_columns[0]) if key_columns else 1))
            self._key_columns = key_columns
            self._columns = columns
            self._nulls = dict(nulls or {})

    @property
    def keys(self) -> list[tuple[Any, ...]]:
        if self._keys is None:
            assert self._key_columns is not None
            if self._key_columns:
                self._keys = list(zip(*(c.tolist() for c in self._key_columns), strict=True))
            else:
                self._keys = [() for _ in range(self.n_groups)]
        return self._keys

    @property
    def cols(self) -> dict[str, list[Any]]:
        if self._cols is None:
            out: dict[str, list[Any]] = {}
            for name, col in self._columns.items():
                if isinstance(col, np.ndarray):
                    vals: list[Any] = col.tolist()
                    mask = self._nulls.get(name)
                    if mask is not None:
                        for i in np.flatnonzero(mask).tolist():
                            vals[i] = None
                    out[name] = vals
                else:
                    out[name] = list(col)
            self._cols = out
        return self._cols

    def key_column(self, index: int) -> np.ndarray:
        """Group column ``index`` as an object array of Python values."""
        if self._key_columns is not None:
            return self._key_columns[index]
        arr = np.empty(self.n_groups, dtype=object)
        arr[:] = [k[index] for k in self.keys]
        return arr

    def column(self, name: str) -> Any:
        """Measurement column ``name``: an int64 array (NULL as 0) or a list (NULL as None)."""
        return self._columns[name]


@dataclass(frozen=True)
class Prepared:
    """A query ready to read: its statement (and the join form it falls back to when Python
    cannot match DuckDB's key equality), the declared keys to fill, and how to fetch."""

    plan: dplan.Plan
    compiled: dplan.CompiledSQL
    fallback: Callable[[], dplan.CompiledSQL] | None
    declared: list[tuple[Any, ...]] | None
    columnar: bool
    # GROUP BY positions whose keys are a public table's column (never NULL there)
    open_keys: tuple[int, ...] = ()


def read_exact(backend: DuckBackend, r: Prepared) -> Exact:
    """The exact aggregates (after the charge; the statement is total)."""
    plan, compiled = r.plan, r.compiled
    if r.declared is not None:
        ng, open_keys = len(compiled.group_cols), r.open_keys
        match = key_matcher([k.type for k in plan.spec.group_by])
        wanted = set(r.declared) if match is None else {match(k) for k in r.declared}
        # a group NULL in a public table's key: one the key join drops, as the fill does
        rows, unmatched = backend.run_rows(
            compiled.text, keep=lambda row: (tuple(row[:ng]) if match is None else
                                             match(row[:ng])) in wanted
            or any(row[i] is None for i in open_keys))
        # at user level DuckDB kept only rows with declared keys: a group Python cannot
        # match means DuckDB's equality is not Python's (a collation it was not told of);
        # dropping it would hinge a whole group on one row's spelling, so use the join
        if not unmatched or plan.table.record_level:
            filled, lists = fill_declared_keys(r.declared, rows, len(compiled.measure_cols),
                                               match=match)
            return Exact(keys=filled,
                         cols=dict(zip(compiled.measure_cols, lists, strict=True)))
        assert r.fallback is not None
        compiled = r.fallback()
    if r.columnar:  # column by column (Arrow): no Python object per group and value
        try:
            n, key_cols, cols_np, nulls = backend.run_columns(
                compiled.text, compiled.group_cols, compiled.measure_cols)
            return Exact(rows=n, key_columns=key_cols, columns=cols_np, nulls=nulls)
        except (OverflowError, ValueError):
            # a key Python's date/datetime cannot hold (DATE 'infinity', year 10000)
            # fails the Arrow conversion; the row read converts it as DuckDB does, so
            # whether the query fails never depends on one row's value
            pass
    keys, cols = backend.run(compiled.text, compiled.group_cols, compiled.measure_cols)
    return Exact(keys=keys, cols=cols)


def fill_declared_keys(keys: Sequence[tuple[Any, ...]], rows: Iterable[tuple[Any, ...]],
                       n_measures: int, *,
                       match: Callable[[Sequence[Any]], tuple[Any, ...]] | None = None,
                       ) -> tuple[list[tuple[Any, ...]], list[list[Any]]]:
    """Every declared key (in ``keys``' order) with its group's measurements from ``rows``
    (``(*key, *measurements)`` per group present in the data); absent keys get NULL (None)
    measurements, groups outside the keys are dropped: what ``keys LEFT JOIN groups`` gives.
    ``match``: a key as it is compared (:func:`key_matcher`: NaN matched to NaN, as the
    engines' ``=`` does); the released keys are ``keys`` themselves."""
    ng = len(keys[0]) if keys else 0
    as_key: Callable[[Sequence[Any]], tuple[Any, ...]] = tuple if match is None else match
    found: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in rows:
        found[as_key(r[:ng])] = r
    empty = (None,) * (ng + n_measures)
    cols: list[list[Any]] = [[] for _ in range(n_measures)]
    for key in keys:
        r = found.get(as_key(key), empty)
        for j in range(n_measures):
            cols[j].append(r[ng + j])
    return list(keys), cols


_NAN = object()  # a float key's NaN, as the fill matches it (NaN != NaN in Python)


def key_matcher(types: Sequence[str]) -> Callable[[Sequence[Any]], tuple[Any, ...]] | None:
    """How the key fill compares keys of these column types: None (as Python's tuples) when
    none is a float, else a key with each NaN replaced by one marker: DuckDB's and Spark's
    ``=`` (the key join this fill replaces) match NaN to NaN, Python's does not. -0.0 needs
    nothing (``-0.0 == 0.0`` and their hashes agree, as in the engines)."""
    floats = [i for i, t in enumerate(types) if type_class(t) == "float"]
    if not floats:
        return None

    def match(key: Sequence[Any]) -> tuple[Any, ...]:
        out = list(key)
        for i in floats:
            v = out[i]
            if isinstance(v, float) and v != v:
                out[i] = _NAN
        return tuple(out)
    return match
