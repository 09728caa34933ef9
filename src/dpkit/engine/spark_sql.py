"""Spark SQL text of a portable statement: sqlglot's transpilation from DuckDB's dialect,
plus the rewrites where Spark spells the same value differently (or slowly).

The portable statement (:mod:`dpkit.engine.plan.portable`) is written once and run by either
engine; these rewrites keep its values identical on Spark, bit for bit (tests/spark): the
exact integer sums (Spark's BIGINT ``SUM`` wraps where DuckDB's goes to HUGEINT), the hex
casts of the keyed hash's MD5 limb, and the fixed-point rounding without Spark's slow
``round``. Pure functions of the text: no session, no rows.
"""

from __future__ import annotations

from typing import Any

import sqlglot
from sqlglot import exp

__all__ = ["exact_rounds", "exact_sums", "hex_casts", "to_spark_sql"]


def to_spark_sql(text: str | Any) -> str:
    """A portable statement (DuckDB SQL, or its parsed tree, which is changed) as Spark SQL:
    sqlglot's transpilation plus the rewrites where Spark's spelling of the same value
    differs (:func:`hex_casts`, :func:`exact_rounds`, :func:`exact_sums`)."""
    tree = sqlglot.parse_one(text, read="duckdb") if isinstance(text, str) else text
    return exact_sums(exact_rounds(hex_casts(tree))).sql(dialect="spark")


def exact_sums(tree: Any) -> Any:
    """Every SUM of a compiled statement adds integers (fixed-point values, counts); DuckDB
    adds them into HUGEINT, Spark into a BIGINT that wraps. Each BIGINT ``v`` is split as
    ``hi * 2^31 + lo`` (``hi = v >> 31``, ``0 <= lo < 2^31``): both parts are summed as BIGINT
    (exact below 2^32 rows per group; a per-row DECIMAL(38, 0) sum is several times slower in
    Spark) and joined as DECIMAL(38, 0) once per group (read back as Python ints, as DuckDB's
    HUGEINT is)."""
    dec = exp.DataType.build("DECIMAL(38, 0)")
    for node in list(tree.find_all(exp.Sum)):
        if isinstance(node.parent, exp.Window):
            continue  # a total over the groups' (already exact, DECIMAL) sums: few rows
        v = node.this
        hi = exp.cast(exp.Sum(this=exp.BitwiseRightShift(this=v.copy(),
                                                         expression=exp.Literal.number(31))),
                      dec)
        lo = exp.cast(exp.Sum(this=exp.BitwiseAnd(this=v.copy(),
                                                  expression=exp.Literal.number(2**31 - 1))),
                      dec)
        node.replace(exp.paren(exp.Add(this=exp.Mul(this=hi, expression=exp.Literal.number(
            2**31)), expression=lo)))
    return tree


def hex_casts(tree: Any) -> Any:
    """``CAST('0x' || h AS BIGINT)`` (DuckDB reads a hex text as an integer; the portable keyed
    hash uses it on 8 hex digits of an MD5) as ``CAST(conv(h, 16, 10) AS BIGINT)``: Spark's
    cast of a ``0x`` text is NULL. Same value: ``h`` is at most 8 hex digits (< 2^32)."""
    for node in list(tree.find_all(exp.Cast)):
        inner = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
        if (isinstance(inner, exp.DPipe) and isinstance(inner.this, exp.Literal)
                and inner.this.is_string and inner.this.this == "0x"
                and node.to.is_type(exp.DataType.Type.BIGINT)):
            node.set("this", exp.Anonymous(this="conv", expressions=[
                inner.expression.copy(), exp.Literal.number(16), exp.Literal.number(10)]))
    return tree


def exact_rounds(tree: Any) -> Any:
    """``CAST(round(y) AS BIGINT)`` (the fixed-point integers) without Spark's ``round``,
    which rounds a double through ``java.math.BigDecimal`` (its decimal text): measured at
    10M rows, most of the record-level statement's time. ``round`` half away from zero is
    written with ``floor``, exactly (``y - floor(y)`` is exact for ``|y| < 2^52``, and beyond
    that ``y`` is an integer): the integer DuckDB's ``round`` gives, and Spark's."""
    for node in list(tree.find_all(exp.Round)):
        cast = node.parent
        if (node.args.get("decimals") is not None or not isinstance(cast, exp.Cast)
                or not cast.to.is_type(exp.DataType.Type.BIGINT)):
            continue
        y = node.this
        neg = exp.Neg(this=exp.paren(y.copy()))
        node.replace(exp.paren(exp.case().when(
            exp.GTE(this=y.copy(), expression=exp.Literal.number(0)),
            _round_up(exp.paren(y.copy()))).else_(exp.Neg(this=exp.paren(_round_up(neg))))))
    return tree


def _round_up(v: exp.Expression) -> exp.Expression:
    """``floor(v) + (v - floor(v) >= 0.5)`` for ``v >= 0``: ``v`` rounded, halves up."""
    fl = exp.Floor(this=v.copy())
    frac = exp.Sub(this=v.copy(), expression=fl.copy())
    return exp.Add(this=fl, expression=exp.case().when(
        exp.GTE(this=frac, expression=exp.Literal.number(0.5)), exp.Literal.number(1)).else_(
        exp.Literal.number(0)))

