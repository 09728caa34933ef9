"""Compilation: a plan -> the ONE bounded-aggregate SQL statement of its exact measurements.

The statement is a chain of CTEs built by small passes (:data:`COMPILE_PASSES`), each adding its
part to a :class:`SqlState`: the projection of the columns the query reads, the joins and the
row filter, contribution bounding (groups, then rows per unit), the fixed-point integers of
sums, one aggregate expression per measurement, and the grouping with its public keys. The text
depends only on the plan, the relation names and the per-query secret ``seed``; the exact
values it computes never reach an analyst without noise.

The group keys' SQL (literals, canonical values, key sets, the driver's key fill) lives in
:mod:`dpkit.engine.plan.keys`, DuckDB's native bounding in :mod:`dpkit.engine.plan.bounding`,
the form Spark runs alike in :mod:`dpkit.engine.plan.portable`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dpkit.engine import sql as dsql
from dpkit.engine.plan.bounding import bounding_ctes, dropped_rows_sql
from dpkit.engine.plan.fixed import (
    SHIFT_ZERO,
    clamp_sql,
    double_lit,
    fixed_column_name,
    fixed_column_sql,
    pow2_lit,
    row_exponent,
    unit_rows_column_name,
)
from dpkit.engine.plan.keys import (
    KEY_COL,
    canonical_key_sql,
    key_ctes_sql,
    literal_sql,
)
from dpkit.engine.plan.model import Measure, Plan
from dpkit.engine.plan.portable import (
    bounding_ctes_portable,
    domain_limbs,
    histogram_ctes,
    portable_hash_sql,
    tie_break,
)
from dpkit.engine.tables import quote_ident, type_class

# Declared domains with at least this many keys are read from their hidden key table (when
# there is one); smaller ones are inlined as literals. Measured (benchmarks/
# engine_domains_bench.py --literal, 1M rows, record level): at 10 keys both paths take the
# same time (25 vs 26 ms), at 1000 keys the literals take 57 ms against 17 ms: always the table.
DOMAIN_TABLE_MIN_KEYS = 0


@dataclass
class CompiledSQL:
    """The statement's text and the names of its group and measurement columns."""

    text: str
    group_cols: list[str]
    measure_cols: list[str]
    keys_text: str | None = None  # fill_keys: the declared keys, in output order


@dataclass
class SqlState:
    """What the passes of :func:`compile_sql` build up, in order (see :data:`COMPILE_PASSES`)."""

    plan: Plan
    relations: dict[str, str]
    seed: int
    fixed_columns: frozenset[str] | set[str]
    key_rel: dict[int, str]  # GROUP BY position -> key table relation (declared domains)
    fill_keys: bool
    portable: bool = False  # SQL that Spark runs alike (dpkit.engine.plan.portable)
    value_cols: dict[str, str] = field(default_factory=dict)  # "alias.col" -> __c{j}
    group_cols: list[str] = field(default_factory=list)
    stored: dict[str, str] = field(default_factory=dict)  # "alias.col" -> __x{j}
    proj: list[str] = field(default_factory=list)
    total_name: str | None = None  # the per-unit row total column, when projected as __nt
    ctes: list[str] = field(default_factory=list)
    current: str = "__src"  # the relation the next pass reads
    cls_of: dict[str, str] = field(default_factory=dict)  # "alias.col" -> type class
    fixed: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # -> (v, sum, count)
    aggs: list[str] = field(default_factory=list)
    hists: list[tuple[str, str]] = field(default_factory=list)  # portable: (column, bin per row)
    mcols: list[str] = field(default_factory=list)
    compiled: CompiledSQL | None = None

    @property
    def unit_level(self) -> bool:
        return not self.plan.table.record_level


def column_ref(alias_col: str) -> str:
    """``"alias.col"`` as quoted SQL: ``"alias"."col"``."""
    alias, col = alias_col.split(".", 1)
    return f"{quote_ident(alias)}.{quote_ident(col)}"


def key_sql(k: dsql.GroupKey) -> str:
    """A GROUP BY key's value per row: its column, or a derived key's (total) expression."""
    return k.expr if k.expr is not None else column_ref(k.source + "." + k.column)


def project_columns(st: SqlState) -> None:
    """The columns the statement reads: unit, group keys, values, stored integers, totals."""
    plan, spec, table = st.plan, st.plan.spec, st.plan.table
    for mm in plan.measures:
        if mm.column is not None and mm.column not in st.value_cols:
            st.value_cols[mm.column] = f"__c{len(st.value_cols)}"
    if st.unit_level:
        st.proj.append(
            f"{column_ref(dsql.PRIVATE_ALIAS + '.' + str(table.privacy_unit))} AS __u")
    st.group_cols = [f"__g{i}" for i in range(len(spec.group_by))]
    for i, k in enumerate(spec.group_by):
        st.proj.append(f"{canonical_key_sql(key_sql(k), k.type, st.portable)} AS __g{i}")
    for src_col, c in st.value_cols.items():
        derived = plan.derived_sql.get(src_col)  # an aggregate over an expression
        st.proj.append(f"{derived[0] if derived else column_ref(src_col)} AS {c}")
    # materialised fixed-point integers for SUM / AVG (private table, current bounds only)
    for mm in plan.measures:
        if mm.kind in ("sum", "csum") and mm.column is not None and mm.column not in st.stored:
            alias, col = mm.column.split(".", 1)
            name = fixed_column_name(col, mm.lo, mm.hi)
            if alias == dsql.PRIVATE_ALIAS and name in st.fixed_columns:
                st.stored[mm.column] = f"__x{len(st.stored)}"
                st.proj.append(f"{column_ref(alias + '.' + name)} AS {st.stored[mm.column]}")
    # per-unit row totals from load time: only without joins (a join could repeat a row)
    if st.unit_level and not spec.joins and table.privacy_unit is not None:
        total_name = unit_rows_column_name(str(table.privacy_unit))
        if total_name in st.fixed_columns:
            st.proj.append(f"{column_ref(dsql.PRIVATE_ALIAS + '.' + total_name)} AS __nt")
            st.total_name = total_name
    if not st.proj:
        st.proj.append("1 AS __one")


def source_cte(st: SqlState) -> None:
    """``__src``: the projection over the private table, its joins and the row filter."""
    plan, spec, table = st.plan, st.plan.spec, st.plan.table
    frm = f"{st.relations[table.name]} AS {quote_ident(dsql.PRIVATE_ALIAS)}"
    for join in spec.joins:
        on = " AND ".join(
            f"{quote_ident(dsql.PRIVATE_ALIAS)}.{quote_ident(a)} = "
            f"{quote_ident(join.alias)}.{quote_ident(b)}"
            for a, b in join.on
        )
        frm += f" {'LEFT' if join.kind == 'left' else 'INNER'} JOIN " \
               f"{st.relations[join.table]} AS {quote_ident(join.alias)} ON {on}"
    conds: list[str] = []
    w = dsql.where_sql(spec)
    if w is not None:
        conds.append(w)
    for i, (kind, values) in enumerate(plan.key_sources):
        # Rows outside a declared domain are dropped before bounding (so they use up no unit's
        # row cap); at record level the join with the key set (or the key fill) drops them
        # after the aggregate, which costs far less than a filter on every row.
        k = spec.group_by[i]
        if kind == "domain" and not k.exhaustive and (
                not table.record_level or plan.group_mode != "public"):
            if i in st.key_rel:
                conds.append(f"{key_sql(k)} IN (SELECT {KEY_COL} FROM {st.key_rel[i]})")
            else:
                lits = ", ".join(literal_sql(v, k.type) for v in values)
                conds.append(f"{key_sql(k)} IN ({lits})")
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    st.ctes.append(f"__src AS (SELECT {', '.join(st.proj)} FROM {frm}{where})")
    st.current = "__src"


def bound_contributions(st: SqlState) -> None:
    """User level: at most ``g`` groups per unit (keyed hash rank), then at most ``m`` rows."""
    if not st.unit_level:
        return
    plan = st.plan
    seed_lit = f"CAST({int(st.seed)} AS UBIGINT)"
    drop = "__n" if st.portable and any(mm.kind == "ddrop" for mm in plan.measures) else None
    # the portable hash's cheap limbs for declared string keys (DuckDB's native form: unused)
    limbs = domain_limbs([(c, k.type) for c, k in zip(st.group_cols, plan.spec.group_by,
                                                       strict=True)], plan.key_sources,
                         literal_sql) if st.portable else None
    if plan.spec.group_by and plan.g < plan.m:
        gk = ", ".join(st.group_cols)
        typed = typed_columns(st)[:1 + len(st.group_cols)]
        order = (f"{portable_hash_sql(typed, st.seed, limbs)}{tie_break(typed)}"
                 if st.portable else f"hash(__u, {gk}, {seed_lit})")
        # portable diagnostics: the unit's rows before the groups cap, for its dropped rows
        # (same partitioning as the rank: no extra shuffle)
        total = "" if drop is None else ", COUNT(*) OVER (PARTITION BY __u) AS __ns"
        drop = drop and "__ns"
        st.ctes.append(
            f"__gb AS (SELECT *{total} FROM {st.current} QUALIFY DENSE_RANK() OVER "
            f"(PARTITION BY __u ORDER BY {order}, {gk}) <= {plan.g})"
        )
        st.current = "__gb"
    if st.portable:
        bound, st.current = bounding_ctes_portable(st.current, typed_columns(st),
                                                   list(st.stored.values()), m=plan.m,
                                                   seed=st.seed, drop=drop, limbs=limbs)
        st.ctes.extend(bound)
        return
    cols = ["__u", *st.group_cols, *st.value_cols.values()]
    bound, st.current = bounding_ctes(st.current, cols, list(st.stored.values()), m=plan.m,
                                      seed_lit=seed_lit,
                                      total_col="__nt" if st.total_name is not None else None)
    st.ctes.extend(bound)


def typed_columns(st: SqlState) -> list[tuple[str, str]]:
    """``(column, type)`` of the unit, group and value columns of ``__src``, in that order."""
    plan = st.plan
    out = [("__u", plan.table.column(str(plan.table.privacy_unit)).type)]
    out += [(c, k.type) for c, k in zip(st.group_cols, plan.spec.group_by, strict=True)]
    out += [(c, column_type(plan, src)) for src, c in st.value_cols.items()]
    return out


def fixed_point_sums(st: SqlState) -> None:
    """One fixed-point integer per row and summed column (``__p``), with its SUM and COUNT.

    Projected once; ``COUNT(v)`` (non-missing rows) and ``SUM(v)`` then serve every
    measurement on that column (SUM, and the centred sum of AVG / VAR).
    """
    st.cls_of = {c: type_class(column_type(st.plan, c)) for c in st.value_cols}
    proj_v: list[str] = []
    for mm in st.plan.measures:
        if mm.kind in ("sum", "csum") and mm.column not in st.fixed:
            assert mm.column is not None
            j = len(st.fixed)
            c = st.value_cols[mm.column]
            if mm.column in st.stored:
                big_v = st.stored[mm.column]
            else:
                big_v = fixed_column_sql(c, mm.lo, mm.hi, st.cls_of[mm.column])
            d = row_exponent(mm.lo, mm.hi) - mm.f
            if d <= 0:
                v = big_v
            elif d >= SHIFT_ZERO:
                v = f"({big_v} * 0)"  # |v| <= 2^32: every row rounds to 0 (NULL stays NULL)
            else:
                v = f"(({big_v} + {1 << (d - 1)}) >> {d})"
            proj_v.append(f"{v} AS __v{j}")
            st.fixed[mm.column] = (f"__v{j}", f"__s{j}", f"__n{j}")
            st.aggs.append(f"SUM(__v{j}) AS __s{j}")
            st.aggs.append(f"COUNT(__v{j}) AS __n{j}")
            st.mcols.extend([f"__s{j}", f"__n{j}"])
    if proj_v:
        st.ctes.append(f"__p AS (SELECT *, {', '.join(proj_v)} FROM {st.current})")
        st.current = "__p"


def measure_aggregates(st: SqlState) -> None:
    """Each measurement's column: a fixed-point sum's, or one aggregate (shared when equal)."""
    seen_sql: dict[str, str] = {}
    for mm in st.plan.measures:
        if mm.kind == "topk":  # scores are another measurement's exact column
            continue
        if mm.kind in ("sum", "csum"):
            assert mm.column is not None
            _, scol, ncol = st.fixed[mm.column]
            mm.sql_col = scol
            if mm.kind == "csum":
                mm.count_col = ncol
            continue
        if mm.kind == "nonnull" and mm.column in st.fixed:
            mm.sql_col = st.fixed[mm.column][2]
            continue
        expr = measure_expr(st, mm)
        if expr in seen_sql:
            mm.sql_col = seen_sql[expr]
            continue
        seen_sql[expr] = mm.key
        mm.sql_col = mm.key
        if st.portable and mm.kind == "quant":  # bins counted by group_output's CTEs
            st.hists.append((mm.key, expr))
        else:
            st.aggs.append(f"{expr} AS {mm.key}")
        st.mcols.append(mm.key)


def measure_expr(st: SqlState, mm: Measure) -> str:
    """The aggregate expression of a count, distinct-unit count, squared sum or quantile."""
    if mm.kind in ("rows", "dkept"):
        return "COUNT(*)"
    if mm.kind == "ddrop":
        if st.portable:
            return dropped_rows_portable(st, mm)
        mm.per_group = False  # a plan compiled both ways (tests): the form last compiled
        return dropped_rows_sql(st.plan.m, groups_capped=bool(st.plan.spec.group_by)
                                and st.plan.g < st.plan.m)
    if mm.kind in ("units", "select"):
        return "COUNT(DISTINCT __u)" if st.unit_level and st.plan.m > 1 else "COUNT(*)"
    assert mm.column is not None
    c = st.value_cols[mm.column]
    if mm.kind == "distinct":
        return f"COUNT(DISTINCT {c})"
    cls = st.cls_of[mm.column]
    if mm.kind == "nonnull":  # a column without a fixed-point projection
        if cls == "float":
            return f"COUNT(CASE WHEN NOT isnan(CAST({c} AS DOUBLE)) THEN 1 END)"
        return f"COUNT({c})"
    if mm.kind == "dclamp":
        v = f"CAST({c} AS DOUBLE)"
        out = f"({v} < {double_lit(mm.lo)} OR {v} > {double_lit(mm.hi)})"
        if cls == "float":  # NaN is missing (as in the sums), not a clamped value
            out = f"(NOT isnan({v}) AND {out})"
        return f"COUNT(CASE WHEN {out} THEN 1 END)"
    x = clamp_sql(c, mm.lo, mm.hi, cls)
    if mm.kind == "csq":
        # centred where the centred sum is, so that Var = Q/n - (S/n)^2 holds
        csum = next(o for o in st.plan.measures if o.kind == "csum" and o.column == mm.column)
        mid = math.ldexp(float(csum.center), -csum.f)
        return (f"SUM(LEAST(CAST(round(({x} - {double_lit(mid)}) * ({x} - {double_lit(mid)}) "
                f"* {pow2_lit(mm.f)}) AS BIGINT), {mm.bound}))")
    if mm.kind == "quant":
        # portable: the bin alone; DuckDB's histogram() aggregate has no Spark twin, so
        # group_output counts rows per (group, bin) instead (portable.histogram_ctes)
        bin_ = quantile_bin_sql(mm, x, cls, portable=st.portable)
        return bin_ if st.portable else f"histogram({bin_})"
    raise AssertionError(mm.kind)  # pragma: no cover


def dropped_rows_portable(st: SqlState, mm: Measure) -> str:
    """The portable dropped-rows count: each unit's clipped drops ride on its first kept row
    (``__d``, see :func:`~dpkit.engine.plan.portable.bounding_ctes_portable`), summed per
    group in the aggregation pass, and totalled over the groups on the driver
    (``mm.per_group``: :func:`dpkit.engine.diagnose.exact_total`) where every group of
    ``__agg`` reaches it: no GROUP BY, selected groups, or keys from declared domains (at
    user level the rows outside them are dropped before bounding, so every group is a
    key). A public table's keys may leave groups out (a LEFT JOIN's NULL key, dropped with
    the key join or the key fill), so there a window totals them in the statement, the
    same total on every output row, as the native scalar subquery gives. (The window is a
    shuffle of the groups to one partition: one more Spark job per query.)"""
    mm.per_group = not any(kind == "public" for kind, _ in st.plan.key_sources)
    return "SUM(__d)" if mm.per_group else "SUM(SUM(__d)) OVER ()"


def quantile_bin_sql(mm: Measure, x: str, cls: str, *, portable: bool = False) -> str:
    """The candidate bin of each clamped value ``x`` (the quantile's scores count rows per bin).

    ``portable``: ``round`` before the cast (Spark's cast truncates, DuckDB's rounds half to
    even); the bins are the same either way, since only a clamped bound can be a non-integer
    value of an integer column and both ends clamp to the first or last bin."""
    assert mm.candidates is not None
    cands = mm.candidates
    if cls in ("int", "bool") and len(cands) > 1 and cands[1] - cands[0] == 1.0:
        idx = f"CAST({f'round({x})' if portable else x} AS BIGINT) - {int(cands[0])}"
        top = len(cands) - 1
    else:
        nb = len(cands) - 1
        width = (mm.hi - mm.lo) / nb
        idx = f"CAST(floor(({x} - {double_lit(mm.lo)}) / {double_lit(width)}) AS BIGINT)"
        top = nb - 1
    return f"LEAST(GREATEST({idx}, 0), {top})"


def group_output(st: SqlState) -> None:
    """The final SELECT: one row, selected groups in key order, or every public key."""
    plan, spec = st.plan, st.plan.spec
    gsel = ", ".join(st.group_cols)
    aggs, mcols, ctes = ", ".join(st.aggs), ", ".join(st.mcols), st.ctes
    if st.hists:  # portable quantiles: __agg joins their bin counts to the other aggregates
        ctes.extend(histogram_ctes(st.current, st.group_cols, st.aggs, st.hists))
    if not spec.group_by:
        final = f"SELECT {mcols} FROM __agg" if st.hists else f"SELECT {aggs} FROM {st.current}"
        st.compiled = CompiledSQL("WITH " + ", ".join(ctes) + " " + final, [], st.mcols)
        return
    if not st.hists:
        ctes.append(f"__agg AS (SELECT {gsel}, {aggs} FROM {st.current} GROUP BY {gsel})")
    if plan.group_mode == "select":
        # groups in key order: DuckDB's aggregation order depends on the rows (one unit's row
        # can move a group), and released rows must be ordered by a public rule
        text = "WITH " + ", ".join(ctes) + f" SELECT {gsel}, {mcols} FROM __agg ORDER BY {gsel}"
        st.compiled = CompiledSQL(text, st.group_cols, st.mcols)
        return
    # public keys: every key appears, empty groups as zeros
    n = len(st.group_cols)
    key_ctes = key_ctes_sql(plan, st.key_rel, st.relations)
    order = ", ".join(f"__keys.__g{i}" for i in range(n))
    if st.fill_keys:
        text = "WITH " + ", ".join(ctes) + f" SELECT {gsel}, {mcols} FROM __agg"
        keys_text = "WITH " + ", ".join(key_ctes) + f" SELECT * FROM __keys ORDER BY {order}"
        st.compiled = CompiledSQL(text, st.group_cols, st.mcols, keys_text=keys_text)
        return
    ctes.extend(key_ctes)
    # a CASE without ELSE has the public key NULL: matched as a value, not as SQL's unknown
    eq = " IS NOT DISTINCT FROM " if any(
        kind == "domain" and None in values for kind, values in plan.key_sources) else " = "
    on = " AND ".join(f"__keys.__g{i}{eq}__agg.__g{i}" for i in range(n))
    sel = ", ".join([*(f"__keys.__g{i}" for i in range(n)), *(f"__agg.{c}" for c in st.mcols)])
    text = ("WITH " + ", ".join(ctes) + f" SELECT {sel} FROM __keys LEFT JOIN __agg ON {on} "
            f"ORDER BY {order}")
    st.compiled = CompiledSQL(text, st.group_cols, st.mcols)


COMPILE_PASSES: tuple[Callable[[SqlState], None], ...] = (
    project_columns,
    source_cte,
    bound_contributions,
    fixed_point_sums,
    measure_aggregates,
    group_output,
)


def compile_sql(plan: Plan, *, relations: dict[str, str], seed: int,
                fixed_columns: frozenset[str] | set[str] = frozenset(),
                key_tables: Mapping[str, str] | None = None,
                fill_keys: bool = False, portable: bool = False) -> CompiledSQL:
    """The ONE statement that computes every exact measurement (never returned to analysts).

    ``fixed_columns``: hidden columns of the private table (named by :func:`fixed_column_name`)
    that hold ``round(clamp(x)·2^F)`` computed at load time; a SUM/AVG over a column whose current
    bounds name one of them reads it instead of clamping and converting every row again (same
    integers either way).

    ``key_tables``: per private column, the relation of the hidden key table holding its
    declared domain (stored at load time, named by a hash of the keys:
    :func:`dpkit.engine.tables.domain_table_name`). A GROUP BY over a declared domain then reads
    the keys from it: the row filter is a semi-join (``col IN (SELECT k FROM keys)``) and every
    key is joined from it into the output. Without one (views, older projects) or for domains
    of fewer than ``DOMAIN_TABLE_MIN_KEYS`` keys, the keys are written into the statement as
    typed literals. Both give the same keys of the same type, so the same rows and groups.

    ``fill_keys`` (public keys that are all declared domains; see :func:`can_fill_keys`): the
    statement returns only the groups present in the data, and ``keys_text`` the declared keys
    in output order; the caller fills every key (absent groups as NULL measurements, as the
    LEFT JOIN gives them) with :func:`dpkit.engine.read.fill_declared_keys`. Same exact
    aggregates, one join less.

    ``portable``: the statement Spark runs alike (:mod:`dpkit.engine.plan.portable`): the same
    exact values on DuckDB and Spark, the same rows kept by bounding.
    """
    st = SqlState(plan=plan, relations=relations, seed=seed, fixed_columns=fixed_columns,
                  key_rel=key_relations(plan, key_tables), fill_keys=fill_keys,
                  portable=portable)
    for compile_pass in COMPILE_PASSES:
        compile_pass(st)
    assert st.compiled is not None
    return st.compiled


def key_relations(plan: Plan, key_tables: Mapping[str, str] | None) -> dict[int, str]:
    """GROUP BY position -> key table relation, for declared domains read from key tables."""
    out: dict[int, str] = {}
    if not key_tables:
        return out
    for i, (kind, values) in enumerate(plan.key_sources):
        k = plan.spec.group_by[i]
        if (kind == "domain" and k.source == dsql.PRIVATE_ALIAS and k.column in key_tables
                and k.expr is None and k.domain is None
                and len(values) >= DOMAIN_TABLE_MIN_KEYS):
            out[i] = key_tables[k.column]
    return out


def column_type(plan: Plan, alias_col: str) -> str:
    if alias_col in plan.derived_sql:
        return plan.derived_sql[alias_col][1]
    alias, col = alias_col.split(".", 1)
    if alias == dsql.PRIVATE_ALIAS:
        return plan.table.column(col).type
    join = next(j for j in plan.spec.joins if j.alias == alias)
    return plan.catalog[join.table].column(col).type
