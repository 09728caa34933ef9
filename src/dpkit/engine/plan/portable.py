"""The portable form of the compiled statement: the same SQL text on DuckDB and on Spark.

:func:`dpkit.engine.plan.compile_sql` writes DuckDB SQL. With ``portable=True`` it writes,
for the few places where DuckDB's own functions have no exact Spark twin, SQL whose value is
the same in both engines (the text is then transpiled to Spark by sqlglot in
:mod:`dpkit.engine.backend_spark`; DuckDB runs it as written):

* **the keyed hash** that orders a unit's rows for contribution bounding. DuckDB's ``hash``
  is not Spark's (Murmur3, 32 bits), so the portable hash is the MD5 of a canonical text of the
  hashed columns and the per-query secret seed, which both engines compute byte for byte:
  integers, decimals, strings, booleans, dates and timestamps cast to text (identical in both),
  floats printed with 13 significant digits (``printf('%.12e')``: C and Java agree to that
  precision for normal numbers; subnormals, NaN and infinities get fixed texts). Rows whose
  texts coincide without being equal are ordered by their values next (numeric order, NULLS
  LAST, identical in both engines), so the rows kept are the same in both.
* **bounding** keeps a unit's ``m`` first rows in that order with ``ROW_NUMBER`` (a window
  both engines have) instead of DuckDB's top-m list aggregate. It keeps the same rows.
* **quantile histograms**: DuckDB's ``histogram()`` aggregate (a map bin -> rows per group)
  has no Spark twin; the portable statement counts rows per ``(group, bin)`` with ``GROUP BY``
  and folds the counts into the same map with ``map_from_entries(list(...))`` (Spark:
  ``collect_list``), joined to the group's other aggregates (:func:`histogram_ctes`). The
  maps are equal as values (entry order aside, which no reader uses).
* **sums**: every SUM in a compiled statement adds integers (fixed-point values, counts).
  DuckDB sums BIGINT into HUGEINT; Spark into BIGINT, which wraps, so the Spark backend sums
  them as ``DECIMAL(38, 0)`` (exact; :func:`dpkit.engine.backend_spark.exact_sums`).

The privacy argument is unchanged: which rows a unit keeps depends only on its own rows and
the secret seed (a stable transformation: one unit changes at most ``m`` rows of the output).
"""

from __future__ import annotations

from collections.abc import Sequence

from dpkit.engine.tables import type_class

__all__ = ["bounding_ctes_portable", "hash_text_sql", "histogram_ctes", "portable_hash_sql",
           "tie_break"]

# the smallest normal double: below it C's printf and Java's Formatter print different digits
_MIN_NORMAL = "CAST(2.2250738585072014e-308 AS DOUBLE)"
_SEP = "chr(31)"  # unit separator: joins the column texts


def hash_text_sql(col: str, type_: str) -> str:
    """One column's canonical text (the same string in DuckDB and Spark; NULL as ``'~'``)."""
    cls = type_class(type_)
    if cls == "float":
        x = f"CAST({col} AS DOUBLE)"
        # NULL first: Spark's printf formats NULL as the text 'null'
        text = (f"(CASE WHEN {x} IS NULL THEN NULL WHEN isnan({x}) THEN 'nan' "
                f"WHEN {x} > CAST(1.7976931348623157e308 AS DOUBLE) THEN 'inf' "
                f"WHEN {x} < CAST(-1.7976931348623157e308 AS DOUBLE) THEN '-inf' "
                f"WHEN abs({x}) < {_MIN_NORMAL} THEN 'sub' ELSE printf('%.12e', {x}) END)")
    elif cls == "bool":
        text = f"(CASE WHEN {col} THEN 't' ELSE 'f' END)"
    else:
        text = f"CAST({col} AS VARCHAR)"
    return f"coalesce({text}, '~')"


def portable_hash_sql(cols: Sequence[tuple[str, str]], seed: int) -> str:
    """The keyed hash of ``cols`` (``(sql, type)`` pairs) and ``seed``: a 32-digit hex text,
    ordered as text (equal-length hex: text order is numeric order)."""
    parts = [hash_text_sql(c, t) for c, t in cols]
    return f"md5(concat_ws({_SEP}, {', '.join(parts)}, '{int(seed)}'))"


def tie_break(cols: Sequence[tuple[str, str]]) -> str:
    """The columns whose hash text may coincide for different values (floats), as ORDER BY
    items after the hash."""
    floats = [c for c, t in cols if type_class(t) == "float"]
    return "".join(f", {c} NULLS LAST" for c in floats)


def bounding_ctes_portable(source: str, cols: Sequence[tuple[str, str]],
                           derived: Sequence[str], *, m: int, seed: int) -> tuple[list[str], str]:
    """CTEs keeping at most ``m`` rows per unit of ``source`` (unit column ``__u``): the
    portable twin of :func:`dpkit.engine.plan.bounding_ctes` (same rows kept, same ``__l``
    relation of the units above the cap with their row counts ``__c``, same ``__b``).

    ``cols``: ``(column, type)`` of the columns the query reads (``__u`` first), hashed;
    ``derived``: columns computed from them, carried along. Units with at most ``m`` rows keep
    every row without being hashed (the hash is computed for the others only).
    """
    names = [c for c, _ in cols]
    sel = ", ".join([*names, *derived])
    order = portable_hash_sql(cols, seed) + tie_break(cols)
    return [
        f"__w AS (SELECT {sel}, COUNT(*) OVER (PARTITION BY __u) AS __n FROM {source})",
        f"__l AS (SELECT __u, MAX(__n) AS __c FROM __w WHERE __n > {m} GROUP BY __u)",
        f"__r AS (SELECT {sel}, ROW_NUMBER() OVER (PARTITION BY __u ORDER BY {order}) AS __rn "
        f"FROM __w WHERE __n > {m})",
        f"__b AS (SELECT {sel} FROM __r WHERE __rn <= {m} UNION ALL SELECT {sel} FROM __w "
        f"WHERE __n <= {m})",
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
