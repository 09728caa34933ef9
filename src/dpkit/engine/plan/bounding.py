"""Contribution bounding in DuckDB's native SQL: at most ``m`` rows per privacy unit, chosen
by a keyed hash, and the rows the caps dropped (the answer diagnostics).

The portable form that Spark runs alike is :mod:`dpkit.engine.plan.portable`; both keep rows
that depend only on the unit's own rows and the per-query secret seed (a stable
transformation: one unit changes at most ``m`` rows of the bounded table).
"""

from __future__ import annotations

__all__ = ["bounding_ctes", "dropped_rows_sql"]


def dropped_rows_sql(m: int, *, groups_capped: bool) -> str:
    """Rows the per-unit caps dropped, each unit's count clipped at ``m`` (an uncorrelated
    scalar subquery: the same whole-query total on every output row).

    Each unit's term depends on its own rows only and lies in ``[0, m]``, so one unit moves the
    total by at most ``m``. With only the row cap (``g >= m``) the units above it are those of
    ``__l`` (their rows counted in ``__c``): ``min(max(__c - m, 0), m)``. With a groups cap the
    rows before (``__src``) and after (``__b``) bounding are counted per unit.
    """
    if groups_capped:
        return (f"(SELECT COALESCE(SUM(LEAST(__a.__c - COALESCE(__z.__c, 0), {m})), 0) FROM "
                f"(SELECT __u, COUNT(*) AS __c FROM __src GROUP BY __u) AS __a LEFT JOIN "
                f"(SELECT __u, COUNT(*) AS __c FROM __b GROUP BY __u) AS __z "
                f"ON __a.__u = __z.__u)")
    return f"(SELECT COALESCE(SUM(LEAST(GREATEST(__c - {m}, 0), {m})), 0) FROM __l)"


def bounding_ctes(source: str, cols: list[str], derived: list[str], *, m: int,
                  seed_lit: str, total_col: str | None = None) -> tuple[list[str], str]:
    """CTEs keeping at most ``m`` rows per unit of ``source`` (unit column ``__u``).

    ``cols``: the columns the query reads (``__u`` first); ``derived``: columns that are
    functions of ``cols`` (carried along, not hashed). Returns the CTE texts and the name of
    the bounded relation. The rows kept depend only on the unit's own rows and the secret
    ``seed_lit``, so this is a stable transformation: one unit's presence changes at most ``m``
    rows of the output. ``total_col``: a column of ``source`` bounding each unit's row count in
    ``source`` from above (its rows in the table, when ``source`` only filtered them); rows of
    units with ``total_col <= m`` are kept without per-unit work, which leaves the output
    unchanged (such a unit has at most ``m`` rows here) and skips the window for them.
    """
    # Only units with more than m rows need a choice. Count each unit's rows (a window
    # without ORDER BY: a hash partition, no sort); for a unit above the cap find t, the
    # m-th smallest keyed hash of its rows (a top-m aggregate over one integer, no sort), and
    # keep its rows hashing below t plus exactly as many rows hashing to t as are needed
    # to make m. Rows sharing a hash are identical in every column the query reads (the
    # hash covers them), so which of them is kept cannot change the answer; the count kept
    # is exactly m even if two different rows collided.
    sel = ", ".join([*cols, *derived])
    hashed = ", ".join([*cols, seed_lit])
    if total_col is not None:
        # Units whose table total is <= m keep every row, untouched. The others ("heavy")
        # go through one hash aggregate: their (up to) m smallest keyed hashes, the largest of
        # which is the threshold t (a unit with fewer than m rows here gets all its hashes, so
        # t is its largest and it keeps everything); then a join keeps rows hashing below t
        # and as many hashing to t as complete the list. No window, no sort of the rows.
        return [
            f"__r AS (SELECT {sel}, hash({hashed}) AS __h FROM {source} "
            f"WHERE {total_col} > {m})",
            f"__l AS (SELECT __u, list_sort(min(__h, {m})) AS __hl, COUNT(*) AS __c FROM __r "
            f"GROUP BY __u)",
            "__t AS (SELECT __u, __hl[-1] AS __th, len(__hl) + 1 - "
            "list_position(__hl, __hl[-1]) AS __k FROM __l)",
            "__j AS (SELECT __r.*, __th, __k FROM __r JOIN __t ON __r.__u = __t.__u "
            "WHERE __h <= __th)",
            f"__b AS (SELECT {sel} FROM __j WHERE __h < __th UNION ALL SELECT {sel} FROM "
            f"(SELECT * FROM __j WHERE __h = __th QUALIFY ROW_NUMBER() OVER (PARTITION BY __u) "
            f"<= __k) UNION ALL SELECT {sel} FROM {source} WHERE {total_col} <= {m})",
        ], "__b"
    return [
        f"__w AS (SELECT {sel}, COUNT(*) OVER (PARTITION BY __u) AS __n FROM {source})",
        f"__r AS (SELECT {sel}, hash({hashed}) AS __h FROM __w WHERE __n > {m})",
        f"__l AS (SELECT __u, list_sort(min(__h, {m})) AS __hl, COUNT(*) AS __c FROM __r "
        f"GROUP BY __u)",
        f"__t AS (SELECT __u, __hl[{m}] AS __th, {m} + 1 - "
        f"list_position(__hl, __hl[{m}]) AS __k FROM __l)",
        "__j AS (SELECT __r.*, __th, __k FROM __r JOIN __t ON __r.__u = __t.__u "
        "WHERE __h <= __th)",
        f"__b AS (SELECT {sel} FROM __j WHERE __h < __th UNION ALL SELECT {sel} FROM "
        f"(SELECT * FROM __j WHERE __h = __th QUALIFY ROW_NUMBER() OVER (PARTITION BY __u) "
        f"<= __k) UNION ALL SELECT {sel} FROM __w WHERE __n <= {m})",
    ], "__b"
