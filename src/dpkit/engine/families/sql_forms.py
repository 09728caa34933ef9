"""The release families written as SQL (through ``Curator.sql``), mapped to asks.

Recognised forms (anything else goes to the ordinary SQL path untouched)::

    SELECT DP_CDF(age) FROM visits [WHERE ...]                -- or DP_CDF(age, bins)
    SELECT DP_QUANTILES(age, 0.1, 0.5, 0.9) FROM visits [WHERE ...]
    SELECT DP_RANGES(age, (0, 17), (18, 64), (65, 120)) FROM visits [WHERE ...]
    SELECT COUNT(*) FILTER (WHERE age BETWEEN 0 AND 17) AS kids,
           COUNT(*) FILTER (WHERE age BETWEEN 18 AND 64) AS adults FROM visits [WHERE ...]
    SELECT DP_MARGINALS(ward, age) FROM visits         -- all 2-way marginals (k = 2)

Each is answered exactly as the curator's method of the same family (same guarantee, one
charge); the SQL text is what the ledger records. Only the form is read here (no row): a
refusal spends nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import sqlglot
from sqlglot import exp

from dpkit.engine import plan as dplan
from dpkit.engine.families.answer import preview_job
from dpkit.engine.families.finish import (
    finish_cdf,
    finish_marginals,
    finish_quantiles,
    finish_ranges,
)
from dpkit.engine.families.job import (
    Ask,
    CdfAsk,
    Context,
    Job,
    MarginalsAsk,
    RangesAsk,
    Target,
    table_meta,
)
from dpkit.engine.families.plan import plan_with_accuracy
from dpkit.engine.families.run import Finish, run
from dpkit.engine.results import Preview, Result
from dpkit.engine.scope import table_name
from dpkit.engine.spec import QueryError

__all__ = ["FUNCTIONS", "answer_sql", "preview_sql", "recognise"]

FUNCTIONS = frozenset({"DP_CDF", "DP_RANGES", "DP_MARGINALS", "DP_QUANTILES"})

#: a form's arguments (after the column's FROM alias and the fields every ask shares) → its
#: ask and the finisher of its family
FormParser = Callable[[list[exp.Expression], str | None, dict[str, Any]],
                      tuple[Ask, Finish[Result]]]


def recognise(query: object) -> exp.Select | None:
    """The parsed statement when ``query`` is one of the release forms, else None."""
    if not isinstance(query, str):
        return None
    low = query.lower()
    if "dp_" not in low and "filter" not in low:  # the ordinary path pays no extra parse
        return None
    try:
        statements = [s for s in sqlglot.parse(query, read="duckdb") if s is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return None
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        return None
    stmt = statements[0]
    ours = any(isinstance(n, exp.Anonymous) and str(n.name).upper() in FUNCTIONS
               for n in stmt.walk())
    return stmt if ours or _range_family(stmt) else None


def _range_family(stmt: exp.Select) -> bool:
    """Every output ``COUNT(*) FILTER (WHERE col BETWEEN a AND b)`` over one column, and no
    clause but WHERE: the ranges family. Any other FILTER is an ordinary aggregate (the SQL
    path answers it, with or without GROUP BY)."""
    if any(stmt.args.get(k) for k in ("group", "having", "order", "limit", "offset", "joins")):
        return False
    columns: set[str] = set()
    for o in stmt.expressions:
        f = o.unalias()
        if not isinstance(f, exp.Filter) or not isinstance(f.this, exp.Count) or \
                not isinstance(f.this.this, exp.Star):
            return False
        cond = f.expression.this if isinstance(f.expression, exp.Where) else f.expression
        if not isinstance(cond, exp.Between) or not isinstance(cond.this, exp.Column):
            return False
        columns.add(cond.this.name.lower())
    return len(columns) == 1


def answer_sql(ctx: Context, query: str, *, epsilon: float | None, rho: float | None,
               delta: float | None, accuracy: float | Mapping[str, float] | None, noise: str,
               level: float, bounds: Mapping[str, Any] | None,
               diagnostics: bool = True) -> Result | None:
    """Answer ``query`` if it is one of the release forms (module docstring); ``None``
    otherwise, so every other statement takes the ordinary SQL path untouched."""
    made = _job(ctx, query, epsilon=epsilon, rho=rho, delta=delta, accuracy=accuracy,
                noise=noise, level=level, bounds=bounds, diagnostics=diagnostics)
    return None if made is None else run(ctx, made[1], made[2])


def preview_sql(ctx: Context, query: str, *, epsilon: float | None, rho: float | None,
                delta: float | None, accuracy: float | Mapping[str, float] | None,
                noise: str, level: float, bounds: Mapping[str, Any] | None,
                diagnostics: bool = True) -> Preview | None:
    """What :func:`answer_sql` would charge for ``query`` and how accurate it would be, with
    no row read and nothing spent; ``None`` when it is not one of the release forms. The
    same planning as the answer's, so a preview prices the query as it will run (before, the
    DP_ forms were refused by the preview, and a FILTER ... BETWEEN family was priced as the
    ordinary aggregates it is not answered by)."""
    made = _job(ctx, query, epsilon=epsilon, rho=rho, delta=delta, accuracy=accuracy,
                noise=noise, level=level, bounds=bounds, diagnostics=diagnostics)
    return None if made is None else preview_job(ctx, made[1], made[0])


def _job(ctx: Context, query: str, *, epsilon: float | None, rho: float | None,
         delta: float | None, accuracy: float | Mapping[str, float] | None, noise: str,
         level: float, bounds: Mapping[str, Any] | None,
         diagnostics: bool) -> tuple[str, Job, Finish[Result]] | None:
    """The family's kind (``"cdf"``, ``"ranges"`` ...), its planned job and its finisher,
    when ``query`` is one of the release forms; refusals (QueryError) before any row."""
    stmt = recognise(query)
    if stmt is None:
        return None
    _check_shape(stmt)
    table, alias, where = _source(ctx, stmt)
    target = _target(ctx, epsilon=epsilon, rho=rho, delta=delta, noise=noise,
                     accuracy=accuracy)
    outs = [e.unalias() for e in stmt.expressions]
    names = [e.alias_or_name if isinstance(e, exp.Alias) else "" for e in stmt.expressions]
    common: dict[str, Any] = {"table": table, "where": where, "level": level,
                              "bounds": bounds, "query": query, "diagnostics": diagnostics,
                              "where_alias": alias if alias and where is not None else None}
    if all(isinstance(o, exp.Filter) for o in outs):
        column, pairs = _filter_family(outs)
        job = plan_with_accuracy(ctx, RangesAsk(column=column, ranges=pairs, **common),
                                 target, accuracy)
        job.details["names"] = [n or f"range_{i}" for i, n in enumerate(names)]
        return "ranges", job, finish_ranges
    if len(outs) != 1 or not isinstance(outs[0], exp.Anonymous) or str(
            outs[0].name).upper() not in FUNCTIONS:
        raise QueryError(
            "a DP_CDF / DP_QUANTILES / DP_RANGES / DP_MARGINALS call must be the only output "
            "(or every output a COUNT(*) FILTER (WHERE col BETWEEN a AND b)); e.g. "
            "SELECT DP_CDF(age) FROM visits")
    fn = outs[0]
    name = str(fn.name).upper()
    ask, finish = _FORMS[name](list(fn.expressions), alias, common)
    return name.removeprefix("DP_").lower(), plan_with_accuracy(ctx, ask, target,
                                                                accuracy), finish


def _check_shape(stmt: exp.Select) -> None:
    """SELECT outputs FROM one table [WHERE ...], nothing else."""
    allowed = {"expressions", "from", "from_", "where"}
    for key, value in stmt.args.items():
        if key in allowed or value is None or value is False or value == []:
            continue
        raise QueryError(
            f"a range/CDF/marginal family takes no {key.rstrip('_').upper()} clause; write "
            f"SELECT DP_CDF(col) FROM table [WHERE ...] (run one query per group, with the "
            f"group in WHERE)")
    for node in stmt.walk():
        if isinstance(node, exp.Subquery | exp.Exists | exp.Window | exp.Placeholder
                      | exp.Parameter) or (isinstance(node, exp.Select) and node is not stmt):
            raise QueryError(
                "subqueries, window functions and parameters are not allowed in a "
                "range/CDF/marginal family; write SELECT DP_CDF(col) FROM table [WHERE ...]")


def _source(ctx: Context, stmt: exp.Select) -> tuple[str, str | None, str | None]:
    """The registered table read, its alias, and the WHERE condition as DuckDB text."""
    frm = stmt.args.get("from") or stmt.args.get("from_")
    tbl = frm.this if frm is not None else None
    if not isinstance(tbl, exp.Table) or not isinstance(tbl.this, exp.Identifier) or (
        tbl.args.get("db") or tbl.args.get("catalog") or tbl.args.get("sample")
        or tbl.args.get("pivots")  # PIVOT was ignored: the release read the plain table
    ):
        raise QueryError(
            "FROM must name one registered table, e.g. SELECT DP_CDF(age) FROM visits")
    table_name(tbl, ctx.tables())  # what sql() refuses after a table name (AT, ONLY, hints)
    table = table_meta(ctx, tbl.name).name
    where_node = stmt.args.get("where")
    where = where_node.this.sql(dialect="duckdb") if where_node is not None else None
    return table, tbl.alias or None, where


def _target(ctx: Context, *, epsilon: float | None, rho: float | None, delta: float | None,
            noise: str, accuracy: object) -> Target:
    """The privacy target of a SQL form, from ``Curator.sql``'s parameters."""
    kind = str(noise).lower()
    if kind not in (dplan.LAPLACE, dplan.GAUSSIAN):
        raise QueryError(f"noise must be 'laplace' or 'gaussian' (got {noise!r})")
    if rho is not None:
        return Target(rho=rho, delta=delta)
    if kind == dplan.GAUSSIAN:
        cfg = ctx.ledger.config
        if cfg.delta <= 0:
            raise QueryError("Gaussian noise needs a project with delta > 0; use noise='laplace'")
        return Target(epsilon=epsilon if accuracy is None else None,
                      delta=delta if delta is not None
                      else ctx.ledger.delta_for(ctx.analyst) / 10.0)
    return Target(epsilon=epsilon)


def _filter_family(outs: list[exp.Expression]) -> tuple[str, list[tuple[float, float]]]:
    column: str | None = None
    pairs: list[tuple[float, float]] = []
    hint = ("write every output as COUNT(*) FILTER (WHERE col BETWEEN low AND high) over the "
            "same column, with numbers for low and high")
    for o in outs:
        agg, cond = o.this, o.expression
        cond = cond.this if isinstance(cond, exp.Where) else cond
        if not isinstance(agg, exp.Count) or not isinstance(agg.this, exp.Star):
            raise QueryError(f"only COUNT(*) may carry FILTER here; {hint}")
        if not isinstance(cond, exp.Between) or not isinstance(cond.this, exp.Column):
            raise QueryError(f"FILTER (WHERE {cond.sql(dialect='duckdb')[:40]}): {hint}")
        name = cond.this.name
        if column is not None and name.lower() != column.lower():
            raise QueryError(
                f"a FILTER family counts ranges of one column (got {column!r} and "
                f"{name!r}); send one query per column")
        column = name
        pairs.append((_number_of(cond.args["low"], "BETWEEN low"),
                      _number_of(cond.args["high"], "BETWEEN high")))
    assert column is not None
    return column, pairs


def _cdf_form(args: list[exp.Expression], alias: str | None,
              common: dict[str, Any]) -> tuple[Ask, Finish[Result]]:
    if len(args) not in (1, 2) or not isinstance(args[0], exp.Column):
        raise QueryError("write DP_CDF(column) or DP_CDF(column, bins), e.g. DP_CDF(age)")
    bins = int(_number_of(args[1], "DP_CDF bins")) if len(args) == 2 else None
    return CdfAsk(column=_col_name(args[0], alias), bins=bins, **common), finish_cdf


def _quantiles_form(args: list[exp.Expression], alias: str | None,
                    common: dict[str, Any]) -> tuple[Ask, Finish[Result]]:
    if len(args) < 2 or not isinstance(args[0], exp.Column):
        raise QueryError(
            "write DP_QUANTILES(column, p1, p2, ...), e.g. DP_QUANTILES(age, 0.5, 0.9)")
    probs = [_number_of(a, "a quantile probability") for a in args[1:]]
    return (CdfAsk(column=_col_name(args[0], alias), probabilities=probs, **common),
            finish_quantiles)


def _ranges_form(args: list[exp.Expression], alias: str | None,
                 common: dict[str, Any]) -> tuple[Ask, Finish[Result]]:
    if len(args) < 2 or not isinstance(args[0], exp.Column):
        raise QueryError(
            "write DP_RANGES(column, (low, high), ...), e.g. DP_RANGES(age, (0, 17), (18, 64))")
    pairs = []
    for a in args[1:]:
        if not isinstance(a, exp.Tuple) or len(a.expressions) != 2:
            raise QueryError(
                f"each range of DP_RANGES is a pair (low, high) of numbers (got "
                f"{a.sql(dialect='duckdb')[:40]})")
        pairs.append((_number_of(a.expressions[0], "a range end"),
                      _number_of(a.expressions[1], "a range end")))
    return RangesAsk(column=_col_name(args[0], alias), ranges=pairs, **common), finish_ranges


def _marginals_form(args: list[exp.Expression], alias: str | None,
                    common: dict[str, Any]) -> tuple[Ask, Finish[Result]]:
    """DP_MARGINALS(col, col, ... [, k])."""
    cols: list[str] = []
    k: int | None = None
    for i, a in enumerate(args):
        if isinstance(a, exp.Column):
            cols.append(_col_name(a, alias))
        elif i == len(args) - 1 and cols:
            k = int(_number_of(a, "k"))
        else:
            raise QueryError(
                "write DP_MARGINALS(col1, col2, ... [, k]), e.g. DP_MARGINALS(ward, age)")
    if not cols:
        raise QueryError("write DP_MARGINALS(col1, col2, ... [, k])")
    return MarginalsAsk(columns=cols, k=k, **common), finish_marginals


_FORMS: dict[str, FormParser] = {"DP_CDF": _cdf_form, "DP_QUANTILES": _quantiles_form,
                                 "DP_RANGES": _ranges_form, "DP_MARGINALS": _marginals_form}


def _number_of(node: exp.Expression, what: str) -> float:
    neg = False
    while isinstance(node, exp.Neg | exp.Paren):
        if isinstance(node, exp.Neg):
            neg = not neg
        node = node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        raise QueryError(
            f"{what} must be a number written inline (got {node.sql(dialect='duckdb')[:40]})")
    try:
        value = float(node.this)
    except ValueError:
        raise QueryError(f"{what} must be a number (got {node.this!r})") from None
    if not math.isfinite(value):
        raise QueryError(f"{what} must be finite (got {node.this!r})")
    return -value if neg else value


def _col_name(node: exp.Column, alias: str | None) -> str:
    """The column's name; a qualifier must be the FROM table's alias (or its name)."""
    qual = node.table
    if qual and alias and qual.lower() != alias.lower():
        raise QueryError(f"unknown table or alias {qual!r} in {node.sql()}; the query "
                         f"reads {alias!r}")
    return str(node.name)
