"""The portable form of the compiled statement: the same SQL text on DuckDB and on Spark.

:func:`dpkit.engine.plan.compile_sql` writes DuckDB SQL. With ``portable=True`` it writes,
for the few places where DuckDB's own functions have no exact Spark twin, SQL whose value is
the same in both engines (the text is then transpiled to Spark by sqlglot in
:mod:`dpkit.engine.backend_spark`; DuckDB runs it as written):

* **the keyed hash** that orders a unit's rows for contribution bounding. DuckDB's ``hash``
  is not Spark's (Murmur3, 32 bits), so the portable hash is integer arithmetic both engines
  compute bit for bit (:func:`portable_hash_sql`): each column a limb (numbers, floats through
  the exact ``floor(x·2^20)``, booleans, dates, a string key's position in its declared
  domain), the other columns one limb from the MD5 of their text, mixed with keys derived
  from the per-query secret seed modulo the prime ``2^31 - 1`` (no product reaches 2^63).
  Rows whose hashes coincide are ordered by their values next (NULLS LAST, identical in
  both engines), so the rows kept are the same in both. The unit itself is not hashed.
* **bounding** keeps a unit's ``m`` first rows in that order with one ``ROW_NUMBER`` window
  (both engines have it) instead of DuckDB's top-m list aggregate: Spark sorts the rows once
  and shuffles them at most once (not at all on a copy bucketed by the unit). The rows
  dropped by the cap (a diagnostic) are counted on the way, in the same pass (a count window
  over each unit's first ``2m`` rows).
* **quantile histograms**: DuckDB's ``histogram()`` aggregate (a map bin -> rows per group)
  has no Spark twin; the portable statement counts rows per ``(group, bin)`` in the same
  aggregation as the group's other aggregates (``GROUPING SETS``, one pass over the bounded
  rows) and folds the counts into the same map with ``map_from_entries(list(...))`` (Spark:
  ``collect_list``) (:func:`histogram_ctes`). The maps are equal as values (entry order
  aside, which no reader uses).
* **sums**: every SUM in a compiled statement adds integers (fixed-point values, counts).
  DuckDB sums BIGINT into HUGEINT; Spark into BIGINT, which wraps, so the Spark backend sums
  them as two BIGINT halves joined as ``DECIMAL(38, 0)`` per group (exact;
  :func:`dpkit.engine.backend_spark.exact_sums`), and rounds the fixed-point integers with
  ``floor`` rather than Spark's slow ``round`` (:func:`~dpkit.engine.backend_spark.exact_rounds`).

The privacy argument is unchanged: which rows a unit keeps depends only on its own rows and
the secret seed (a stable transformation: one unit changes at most ``m`` rows of the output).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlglot
from sqlglot import exp

from dpkit import noise
from dpkit.engine.tables import type_class

__all__ = ["MAX_DOMAIN_LIMB", "P31", "bounding_ctes_portable", "domain_limb_sql", "domain_limbs",
           "hash_keys",
           "hash_limb_sql", "hash_text_sql", "histogram_ctes", "portable_hash_sql", "tie_break"]

# floats enter the hash as floor(x * 2^20) below 2^40 in magnitude (an exact integer < 2^60)
_SCALE = "CAST(1048576.0 AS DOUBLE)"
_BIG = "CAST(1099511627776.0 AS DOUBLE)"
_SEP = "chr(31)"  # unit separator: joins the column texts
P31 = 2**31 - 1  # the Mersenne prime the keyed hash works modulo
_ROUNDS = 2  # finishing rounds after the last column (so the last column mixes too)
# fixed integers for what has no floor: NULL, NaN, beyond +-2^40 (outside +-2^60: no clash)
_NULL, _NAN, _POS, _NEG = 2**61 + 1, 2**61 + 2, 2**61 + 3, -(2**61 + 3)
# integer types whose values enter as v + 2^31 (in [0, 2^32)), and those reduced mod P31
_INT32 = ("TINYINT", "SMALLINT", "INTEGER", "INT", "INT1", "INT2", "INT4", "UTINYINT",
          "USMALLINT", "SHORT", "SIGNED")
_INT64 = ("BIGINT", "INT8", "LONG", "UINTEGER")
MAX_DOMAIN_LIMB = 256  # longest declared domain written as a CASE limb (else: its MD5)


def hash_text_sql(col: str, type_: str) -> str:
    """One column's canonical text (the same string in DuckDB and Spark; NULL as ``'~'``), for
    the columns the integer hash cannot take (strings, decimals, timestamps, ...).

    A float is written as the integer ``floor(x·2^20)`` (exact in both engines: scaling by a
    power of two and ``floor`` are exact in IEEE arithmetic, and the integer stays below
    2^60); values beyond ±2^40 share a text per sign. Texts are not injective: rows whose hash
    coincides are ordered by their values next (:func:`tie_break`), the same in both
    engines."""
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


def hash_limb_sql(col: str, type_: str) -> str | None:
    """One column as a BIGINT in ``[0, 2^32)`` (a *limb* of the integer hash), computed alike
    by both engines with integer arithmetic only; None for a column that goes through the
    text (strings, decimals, timestamps, 64-bit unsigned and wider integers).

    Integers up to 32 bits enter as ``v + 2^31`` (injective); 64-bit ones and floats (as the
    exact ``floor(x·2^20)``, fixed integers for NaN, ±infinity, beyond ±2^40) as
    ``v % P31 + P31`` (``%`` truncates toward zero in both engines, so this lies in
    ``(0, 2·P31)``); dates as days since 1970 plus 2^31. NULL is a fixed value (it may
    coincide with one real value: the value order then decides, :func:`tie_break`)."""
    cls = type_class(type_)
    base = type_.upper().split("(")[0].strip()
    if cls == "float":
        x = f"CAST({col} AS DOUBLE)"
        code = (f"(CASE WHEN {x} IS NULL THEN {_NULL} WHEN isnan({x}) THEN {_NAN} "
                f"WHEN abs({x}) < {_BIG} THEN CAST(floor({x} * {_SCALE}) AS BIGINT) "
                f"WHEN {x} > 0 THEN {_POS} ELSE {_NEG} END)")
        return f"({code} % {P31} + {P31})"
    if cls == "bool":
        return f"(CASE WHEN {col} IS NULL THEN 3 WHEN {col} THEN 1 ELSE 2 END)"
    if base in _INT32:
        return f"coalesce(CAST({col} AS BIGINT) + {2**31}, 0)"
    if base in _INT64:
        return f"(coalesce(CAST({col} AS BIGINT), {_NULL}) % {P31} + {P31})"
    if base == "DATE":
        return f"coalesce(date_diff('day', DATE '1970-01-01', {col}) + {2**31}, 0)"
    return None


def hash_keys(seed: int, n: int) -> list[int]:
    """``n`` multipliers in ``[2, P31 - 1]`` derived from the secret ``seed`` (BLAKE2b of the
    seed and the position: deterministic, no randomness drawn here)."""
    out = []
    for i in range(n):
        digest = hashlib.blake2b(f"dpkit.portable:{int(seed)}:{i}".encode(),
                                 digest_size=8).digest()
        out.append(2 + int.from_bytes(digest, "big") % (P31 - 2))
    noise.trace.derived(out)  # a work trace blanks them as it blanks the seed (FINDINGS K4)
    return out


def portable_hash_sql(cols: Sequence[tuple[str, str]], seed: int,
                      limbs: Mapping[str, str] | None = None) -> str:
    """The keyed hash of ``cols`` (``(sql, type)`` pairs) under the secret ``seed``: a BIGINT
    in ``[0, P31)`` that DuckDB and Spark compute bit for bit.

    Each column becomes a limb ``x`` in ``[0, 2^32)`` (:func:`hash_limb_sql`); the columns
    without one (strings, ...) share one limb, the first 32 bits of the MD5 of their texts
    and the seed (:func:`hash_text_sql`; written ``CAST('0x' || hex AS BIGINT)``, which the
    Spark backend spells with ``conv``). Limb ``i`` becomes ``((x XOR a_i) * b_i) % P31``
    with keys ``a_i, b_i`` of its own, the terms are added (a balanced sum: shallow SQL) and
    reduced mod ``P31``, then ``h <- ((h XOR k) * k') % P31`` twice more. Every product is
    below ``2^32 · 2^31 = 2^63`` and the sum below ``columns · 2^31``: no BIGINT overflows
    (Spark's ANSI mode and DuckDB would raise). XOR (bits) and the product modulo a prime
    (arithmetic) do not commute, so rows differing in one low bit land far apart.

    Privacy does not rest on this hash being cryptographic: the rows a unit keeps are a
    function of that unit's rows and the seed only (a stable transformation, whatever the
    function). The key keeps the choice unpredictable to the analyst; the mixing keeps the
    kept rows a fair sample (not, say, a unit's smallest values)."""
    given = limbs or {}
    parts, texts = [], []
    for c, t in cols:
        limb = given.get(c) or hash_limb_sql(c, t)
        if limb is None:
            texts.append(hash_text_sql(c, t))
        else:
            parts.append(limb)
    if texts or not parts:
        md5 = f"md5(concat_ws({_SEP}, {', '.join([*texts, repr(str(int(seed)))])}))"
        parts.append(f"CAST(('0x' || substr({md5}, 1, 8)) AS BIGINT)")
    keys = hash_keys(seed, 2 * len(parts) + 2 * _ROUNDS)
    terms = [f"((xor(CAST({keys[2 * i]} AS BIGINT), {x})) * {keys[2 * i + 1]}) % {P31}"
             for i, x in enumerate(parts)]
    h = f"({_balanced_sum(terms)}) % {P31}"
    for r in range(_ROUNDS):
        k, k2 = keys[2 * len(parts) + 2 * r], keys[2 * len(parts) + 2 * r + 1]
        h = f"((xor({h}, {k})) * {k2}) % {P31}"
    return h


def _balanced_sum(terms: Sequence[str]) -> str:
    """``terms`` added as a balanced tree of parentheses: a statement's nesting grows with
    log(columns), not with columns (sqlglot parses a long chain recursively)."""
    if len(terms) == 1:
        return terms[0]
    half = len(terms) // 2
    return f"({_balanced_sum(terms[:half])} + {_balanced_sum(terms[half:])})"


def domain_limbs(keys: Sequence[tuple[str, str]], sources: Sequence[tuple[str, Any]],
                 literal: Callable[[Any, str], str]) -> dict[str, str]:
    """Limbs for the string group keys (``(column, type)``, with the plan's key sources) that
    have a declared domain: the key's position in it (rows outside it were filtered out
    before bounding), not an MD5. ``literal(value, type)``: a key as an SQL literal."""
    out = {}
    for (c, t), (kind, values) in zip(keys, sources, strict=True):
        limb = (domain_limb_sql(c, [literal(v, t) for v in values])
                if kind == "domain" and type_class(t) == "string" else None)
        if limb is not None:
            out[c] = limb
    return out


def domain_limb_sql(col: str, literals: Sequence[str]) -> str | None:
    """A limb for a column whose values lie in a public list (a group key's declared domain,
    as SQL literals): the value's position in the list (0 for NULL or a value outside it), a
    few string comparisons in place of an MD5 per row. None for a list too long to inline."""
    if not literals or len(literals) > MAX_DOMAIN_LIMB:
        return None
    whens = " ".join(f"WHEN {lit} THEN {i + 1}" for i, lit in enumerate(literals))
    return f"CAST((CASE {col} {whens} ELSE 0 END) AS BIGINT)"


def tie_break(cols: Sequence[tuple[str, str]]) -> str:
    """ORDER BY items after the hash: every hashed column by value (NULLS LAST), so rows
    whose hashes coincide are ordered alike in both engines (numbers, dates and booleans in
    their order, strings by their bytes; NaN after every number in both)."""
    return "".join(f", {c} NULLS LAST" for c, _ in cols)


def bounding_ctes_portable(source: str, cols: Sequence[tuple[str, str]],
                           derived: Sequence[str], *, m: int, seed: int,
                           drop: str | None = None,
                           limbs: Mapping[str, str] | None = None) -> tuple[list[str], str]:
    """CTEs keeping at most ``m`` rows per unit of ``source`` (unit column ``__u``): the
    portable twin of :func:`dpkit.engine.plan.bounding_ctes` (same rows kept, bounded relation
    ``__b``).

    ``cols``: ``(column, type)`` of the columns the query reads (``__u`` first), hashed;
    ``derived``: columns computed from them, carried along; ``limbs``: cheaper limbs for some
    columns (:func:`portable_hash_sql`). Each unit keeps its first ``m`` rows in keyed-hash
    order (``ROW_NUMBER`` over one window partitioned by the unit and ordered by the hash):
    one shuffle of the rows by unit (none on a table bucketed by unit) and one sort, and
    Spark limits each unit to ``m`` rows already before its shuffle (its window group limit).
    A unit with at most ``m`` rows keeps them all, whatever their order.

    ``drop``: also carry ``__d``, the diagnostics' count of rows the cap dropped (clipped at
    ``m`` per unit), on the kept rows, so that it is a sum in the main aggregation pass (no
    second pass over the rows). ``drop="__n"`` (no earlier cap): the unit's rows ranked up to
    ``2m`` are counted (``__n2 = min(n, 2m)``, a count window over the rows the ranking
    window's filter kept) and its first kept row carries ``__n2 - min(__n2, m)``, that is
    ``min(m, max(0, n - m))`` for a unit of ``n`` rows. (The ranking window is kept alone so
    that Spark cuts each unit to ``2m`` rows before it, its window group limit; a ``LEAD``
    beside ``ROW_NUMBER``, the former form, stopped that.) Otherwise ``drop`` names the column
    counting the unit's rows before an earlier cap (the groups cap): the unit's rows are
    counted (``__n``) and it carries ``min(m, drop - min(__n, m))`` on its first kept row.
    Each unit's ``__d`` total depends on its own rows only and lies in ``[0, m]``.
    """
    names = [c for c, _ in cols]
    sel = ", ".join([*names, *derived])
    # the unit is the same on every row of a window partition: hashing it orders nothing
    window = (f"PARTITION BY __u ORDER BY {portable_hash_sql(cols[1:], seed, limbs)}"
              f"{tie_break(cols[1:])}")
    rank = f"__r AS (SELECT {sel}, ROW_NUMBER() OVER ({window}) AS __rn FROM {source})"
    if drop is None:
        return [rank, f"__b AS (SELECT {sel} FROM __r WHERE __rn <= {m})"], "__b"
    if drop == "__n":
        # the ranking window stays alone (Spark's window group limit, here 2m, applies only
        # to a window of rank functions alone); the unit's rows up to 2m are counted after it
        # (the same partitioning and order: no second sort)
        return [
            rank,
            f"__r2 AS (SELECT {sel}, __rn, COUNT(*) OVER (PARTITION BY __u) AS __n2 FROM __r "
            f"WHERE __rn <= {2 * m})",
            f"__b AS (SELECT {sel}, CASE WHEN __rn = 1 THEN __n2 - LEAST(__n2, {m}) ELSE 0 END "
            f"AS __d FROM __r2 WHERE __rn <= {m})",
        ], "__b"
    return [
        f"__w AS (SELECT {sel}, {drop}, COUNT(*) OVER (PARTITION BY __u) AS __n FROM {source})",
        f"__r AS (SELECT {sel}, {drop}, __n, ROW_NUMBER() OVER ({window}) AS __rn FROM __w)",
        f"__b AS (SELECT {sel}, CASE WHEN __rn = 1 THEN LEAST({drop} - LEAST(__n, {m}), {m}) "
        f"ELSE 0 END AS __d FROM __r WHERE __rn <= {m})",
    ], "__b"


def histogram_ctes(source: str, group_cols: Sequence[str], aggs: Sequence[str],
                   hists: Sequence[tuple[str, str]]) -> list[str]:
    """CTEs ending in ``__agg``: per group of ``source`` (one row without ``group_cols``) the
    aggregates ``aggs`` (``"<expr> AS <name>"``) and, for each ``(name, bin)`` of ``hists``, a
    column ``name`` holding the map ``bin -> rows``: what DuckDB's ``histogram(bin)`` gives
    (NULL bins skipped; NULL for a group, or a table, with no non-NULL bin).

    **One pass over** ``source`` (the bounded rows, whose per-unit window is the costly part
    on Spark): one aggregation ``GROUP BY GROUPING SETS ((g), (g, bin_0), (g, bin_1), ...)``
    computes the group's aggregates (set ``(g)``) and its rows per bin (sets ``(g, bin_j)``),
    told apart by ``GROUPING(bin_j)``; a second aggregation over that small result (a row per
    group and bin) folds it by group: each aggregate from the group's ``(g)`` row, each map
    from its ``(g, bin_j)`` rows. An aggregate under a window (the diagnostics' total over the
    groups, ``SUM(SUM(__d)) OVER ()``) is split: the inner aggregate in the first pass, the
    window over the folded groups (a window over the grouping-set rows would add the bins'
    rows too). Spark gives no row for the empty grouping set on an empty input where DuckDB
    gives one; without ``group_cols`` the fold has no GROUP BY (always one row) and a COUNT
    folds to 0 when the row is missing, what both engines' COUNT of no row is (a SUM stays
    NULL, as it is)."""
    names = [f"__hb{j}" for j in range(len(hists))]
    bins = ", ".join(f"{bin_} AS {b}" for (_, bin_), b in zip(hists, names, strict=True))
    g = ", ".join(group_cols)
    sets = ", ".join([f"({g})", *(f"({', '.join([*group_cols, b])})" for b in names)])
    flags = ", ".join(f"GROUPING({b}) AS __q{j}" for j, b in enumerate(names))
    base = " AND ".join(f"__q{j} = 1" for j in range(len(names)))
    inner, fold = [], []
    for agg in aggs:
        expr, _, name = agg.rpartition(" AS ")
        node = sqlglot.parse_one(expr, read="duckdb")
        window = node if isinstance(node, exp.Window) else None
        if window is not None:  # the aggregate inside the window, in the first pass
            expr = window.this.this.sql(dialect="duckdb")
        inner.append(f"{expr} AS {name}")
        col = f"MAX(CASE WHEN {base} THEN {name} END)"
        if window is not None:
            window.this.set("this", sqlglot.parse_one(col, read="duckdb"))
            col = window.sql(dialect="duckdb")
        elif not group_cols and isinstance(node, exp.Count):
            col = f"COALESCE({col}, 0)"
        fold.append(f"{col} AS {name}")
    for j, ((name, _), b) in enumerate(zip(hists, names, strict=True)):
        cond = f"FILTER (WHERE __q{j} = 0 AND {b} IS NOT NULL)"
        # COUNT(*) > 0: no bin gives NULL in both engines (Spark's collect_list gives an empty
        # list where DuckDB's list gives NULL)
        fold.append(f"CASE WHEN COUNT(*) {cond} > 0 THEN map_from_entries(list(struct_pack("
                    f"k := {b}, v := __bc)) {cond}) END AS {name}")
    gsel, by = (f"{g}, ", f" GROUP BY {g}") if g else ("", "")
    return [
        f"__hp AS (SELECT *, {bins} FROM {source})",
        f"__gs AS (SELECT {gsel}{', '.join(names)}, {flags}, "
        f"{''.join(i + ', ' for i in inner)}COUNT(*) AS __bc FROM __hp "
        f"GROUP BY GROUPING SETS ({sets}))",
        f"__agg AS (SELECT {gsel}{', '.join(fold)} FROM __gs{by})",
    ]
