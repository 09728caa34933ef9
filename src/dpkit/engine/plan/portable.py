"""The portable form of the compiled statement: the same SQL text on DuckDB and on Spark.

:func:`dpkit.engine.plan.compile_sql` writes DuckDB SQL. With ``portable=True`` it writes,
for the few places where DuckDB's own functions have no exact Spark twin, SQL whose value is
the same in both engines (the text is then transpiled to Spark by sqlglot in
:mod:`dpkit.engine.backend_spark`; DuckDB runs it as written):

* **the keyed hash** that orders a unit's rows for contribution bounding. DuckDB's ``hash``
  is not Spark's (Murmur3, 32 bits), so the portable hash is the MD5 of a canonical text of the
  hashed columns and the per-query secret seed, which both engines compute byte for byte:
  integers, decimals, strings, booleans, dates and timestamps cast to text (identical in both),
  floats as the integer ``floor(x·2^20)`` (exact in both; beyond ±2^40, NaN and infinities get
  fixed texts). Rows whose texts coincide without being equal are ordered by their values
  next (numeric order, NULLS LAST, identical in both engines), so the rows kept are the same
  in both. The unit itself is not hashed (it is the same on every row of its partition).
* **bounding** keeps a unit's ``m`` first rows in that order with ``ROW_NUMBER`` (a window
  both engines have) instead of DuckDB's top-m list aggregate. Both windows (the unit's row
  count, then the row number) partition by the unit alone, so Spark shuffles the rows once;
  the hash is computed only for units above the cap. The rows dropped by the cap (a
  diagnostic) are counted on the way, in the same pass.
* **quantile histograms**: DuckDB's ``histogram()`` aggregate (a map bin -> rows per group)
  has no Spark twin; the portable statement counts rows per ``(group, bin)`` with ``GROUP BY``
  and folds the counts into the same map with ``map_from_entries(list(...))`` (Spark:
  ``collect_list``), joined to the group's other aggregates (:func:`histogram_ctes`). The
  maps are equal as values (entry order aside, which no reader uses).
* **sums**: every SUM in a compiled statement adds integers (fixed-point values, counts).
  DuckDB sums BIGINT into HUGEINT; Spark into BIGINT, which wraps, so the Spark backend sums
  them as two BIGINT halves joined as ``DECIMAL(38, 0)`` per group (exact;
  :func:`dpkit.engine.backend_spark.exact_sums`), and rounds the fixed-point integers with
  ``floor`` rather than Spark's slow ``round`` (:func:`~dpkit.engine.backend_spark.exact_rounds`).

The privacy argument is unchanged: which rows a unit keeps depends only on its own rows and
the secret seed (a stable transformation: one unit changes at most ``m`` rows of the output).
"""

from __future__ import annotations

from collections.abc import Sequence

from dpkit.engine.tables import type_class

__all__ = ["bounding_ctes_portable", "hash_text_sql", "histogram_ctes", "portable_hash_sql",
           "tie_break"]

# floats are hashed as floor(x * 2^20) below 2^40 in magnitude (an exact integer < 2^60)
_SCALE = "CAST(1048576.0 AS DOUBLE)"
_BIG = "CAST(1099511627776.0 AS DOUBLE)"
_SEP = "chr(31)"  # unit separator: joins the column texts


def hash_text_sql(col: str, type_: str) -> str:
    """One column's canonical text (the same string in DuckDB and Spark; NULL as ``'~'``).

    A float is hashed through ``floor(x·2^20)`` as an integer text (exact in both engines:
    scaling by a power of two and ``floor`` are exact in IEEE arithmetic, and the integer
    stays below 2^60); values beyond ±2^40 share a text per sign. The text is not injective:
    rows whose texts coincide are ordered by their values next (:func:`tie_break`), the same
    in both engines. (A ``printf`` of the digits, the former text, cost about a quarter of the
    bounded query's time on Spark: docs/scale.md.)"""
    cls = type_class(type_)
    if cls == "float":
        x = f"CAST({col} AS DOUBLE)"
        text = (f"(CASE WHEN {x} IS NULL THEN NULL WHEN isnan({x}) THEN 'nan' "
                f"WHEN abs({x}) < {_BIG} THEN CAST(CAST(floor({x} * {_SCALE}) AS BIGINT) AS "
                f"VARCHAR) WHEN {x} > 0 THEN 'big' ELSE '-big' END)")
    elif cls == "bool":
        text = f"(CASE WHEN {col} THEN 't' ELSE 'f' END)"
    else:
        text = f"CAST({col} AS VARCHAR)"
    return f"coalesce({text}, '~')"


def portable_hash_sql(cols: Sequence[tuple[str, str]], seed: int) -> str:
    """The keyed hash of ``cols`` (``(sql, type)`` pairs) and ``seed``: a 32-digit hex text,
    ordered as text (equal-length hex: text order is numeric order)."""
    parts = [hash_text_sql(c, t) for c, t in cols] + [f"'{int(seed)}'"]
    return f"md5(concat_ws({_SEP}, {', '.join(parts)}))"


def tie_break(cols: Sequence[tuple[str, str]]) -> str:
    """The columns whose hash text may coincide for different values (floats), as ORDER BY
    items after the hash."""
    floats = [c for c, t in cols if type_class(t) == "float"]
    return "".join(f", {c} NULLS LAST" for c in floats)


def bounding_ctes_portable(source: str, cols: Sequence[tuple[str, str]],
                           derived: Sequence[str], *, m: int, seed: int,
                           drop: str | None = None) -> tuple[list[str], str]:
    """CTEs keeping at most ``m`` rows per unit of ``source`` (unit column ``__u``): the
    portable twin of :func:`dpkit.engine.plan.bounding_ctes` (same rows kept, bounded relation
    ``__b``).

    ``cols``: ``(column, type)`` of the columns the query reads (``__u`` first), hashed;
    ``derived``: columns computed from them, carried along. One partitioning by unit serves
    both windows (the unit's row count ``__n``, then ``ROW_NUMBER`` in keyed-hash order), so
    Spark shuffles the rows once and reads the source once; the hash is computed only for the
    rows of units above the cap (a unit with at most ``m`` rows keeps every row, in any order).

    ``drop``: also carry ``__d``, the unit's dropped rows clipped at ``m``, on its first kept
    row (0 elsewhere): the diagnostics' dropped-rows count is then a sum in the main
    aggregation pass (no second pass over the rows). ``drop`` names the column counting the
    unit's rows before any earlier cap (``"__n"`` when there was none): the unit dropped
    ``drop - min(__n, m)`` rows. Each unit's ``__d`` depends on its own rows only and lies in
    ``[0, m]``.
    """
    names = [c for c, _ in cols]
    sel = ", ".join([*names, *derived])
    carry = "" if drop is None or drop == "__n" else f", {drop}"
    # the unit is the same on every row of a window partition: hashing it orders nothing
    order = (f"CASE WHEN __n > {m} THEN {portable_hash_sql(cols[1:], seed)} END"
             f"{tie_break(cols)}")
    dropped = ("" if drop is None else
               f", CASE WHEN __rn = 1 THEN LEAST({drop} - LEAST(__n, {m}), {m}) ELSE 0 END AS __d")
    return [
        f"__w AS (SELECT {sel}{carry}, COUNT(*) OVER (PARTITION BY __u) AS __n FROM {source})",
        f"__r AS (SELECT {sel}{carry}, __n, ROW_NUMBER() OVER (PARTITION BY __u ORDER BY "
        f"{order}) AS __rn FROM __w)",
        f"__b AS (SELECT {sel}{dropped} FROM __r WHERE __rn <= {m})",
    ], "__b"


def histogram_ctes(source: str, group_cols: Sequence[str], aggs: Sequence[str],
                   hists: Sequence[tuple[str, str]]) -> list[str]:
    """CTEs ending in ``__agg``: per group of ``source`` (one row without ``group_cols``) the
    aggregates ``aggs`` and, for each ``(name, bin)`` of ``hists``, a column ``name`` holding
    the map ``bin -> rows``: what DuckDB's ``histogram(bin)`` gives (NULL bins skipped; NULL
    for a group, or a table, with no non-NULL bin), as a ``GROUP BY`` count both engines run.

    Group keys are matched with ``IS NOT DISTINCT FROM`` (a NULL key is a group)."""
    g = ", ".join(group_cols)
    gsel, by = (f"{g}, ", f" GROUP BY {g}") if g else ("", "")
    ctes = [f"__ag0 AS (SELECT {gsel}{', '.join(aggs) or 'COUNT(*) AS __one'} "
            f"FROM {source}{by})"]
    sel, joins = ["__ag0.*"], ""
    for j, (name, bin_) in enumerate(hists):
        ctes.append(f"__hb{j} AS (SELECT {gsel}__bin, COUNT(*) AS __bc FROM (SELECT {gsel}"
                    f"{bin_} AS __bin FROM {source}) AS __hs WHERE __bin IS NOT NULL "
                    f"GROUP BY {gsel}__bin)")
        # COUNT(*) > 0: an empty input gives NULL in both engines (Spark's collect_list
        # gives an empty list where DuckDB's list gives NULL)
        ctes.append(f"__hm{j} AS (SELECT {gsel}CASE WHEN COUNT(*) > 0 THEN map_from_entries("
                    f"list(struct_pack(k := __bin, v := __bc))) END AS {name} FROM __hb{j}{by})")
        on = " AND ".join(f"__ag0.{c} IS NOT DISTINCT FROM __hm{j}.{c}" for c in group_cols)
        joins += f" LEFT JOIN __hm{j} ON {on or 'TRUE'}"
        sel.append(f"__hm{j}.{name}")
    ctes.append(f"__agg AS (SELECT {', '.join(sel)} FROM __ag0{joins})")
    return ctes
