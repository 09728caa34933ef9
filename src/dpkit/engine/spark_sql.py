"""Spark SQL text of a portable statement: sqlglot's transpilation from DuckDB's dialect,
plus the rewrites where Spark spells the same value differently (or slowly).

The portable statement (:mod:`dpkit.engine.plan.portable`) is written once and run by either
engine; these rewrites keep its values identical on Spark, bit for bit (tests/spark): the
exact integer sums (Spark's BIGINT ``SUM`` wraps where DuckDB's goes to HUGEINT), the hex
casts of the keyed hash's MD5 limb, and the fixed-point rounding without Spark's slow
``round``. Pure functions of the text: no session, no rows.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from sqlglot import exp

from dpkit.engine.spec import QueryError

__all__ = ["exact_rounds", "exact_sums", "hex_casts", "like_regex", "linear_patterns",
           "regex_patterns", "to_spark_sql", "total_intervals"]


def to_spark_sql(text: str | Any) -> str:
    """A portable statement (DuckDB SQL, or its parsed tree, which is changed) as Spark SQL:
    sqlglot's transpilation plus the rewrites where Spark's spelling of the same value
    differs (:func:`hex_casts`, :func:`exact_rounds`, :func:`exact_sums`), interval
    arithmetic that cannot raise (:func:`total_intervals`), and the pattern
    matches made linear in a row's text (:func:`linear_patterns`: a ``QueryError`` for a
    pattern Spark would match in time that follows the rows)."""
    tree = sqlglot.parse_one(text, read="duckdb") if isinstance(text, str) else text
    tree = linear_patterns(total_intervals(exact_sums(exact_rounds(hex_casts(tree)))))
    return str(tree.sql(dialect="spark"))


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


_TRY_OPS = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply"}


def total_intervals(tree: Any) -> Any:
    """Every ``+``, ``-`` and ``*`` over an interval as Spark's ``try_add`` /
    ``try_subtract`` / ``try_multiply`` (NULL on overflow). Spark's datetime and interval
    arithmetic throws on overflow whatever its ANSI setting (``long overflow``), and sqlglot
    drops DuckDB's ``TRY`` on the way to Spark: ``WHERE ts + INTERVAL 290000 YEAR > ...``
    answered on D and failed after the charge on D' = D plus a unit at 9999-12-31
    (FINDINGS.md H3). DuckDB evaluates the same expression under TRY (NULL), so both engines
    now agree. An operator whose operands hold no interval is left as it is."""
    for node in list(tree.find_all(*_TRY_OPS)):
        if type(node) in _TRY_OPS and node.find(exp.Interval) is not None:
            node.replace(exp.Anonymous(this=_TRY_OPS[type(node)],
                                       expressions=[node.this, node.expression]))
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



# ---------------------------------------------------------------------- pattern matching
# Spark matches LIKE, ILIKE and RLIKE with java.util.regex, a backtracking engine: a pattern
# with k wildcards takes time ~n^k on a value of n characters that almost matches (measured
# on Spark 4.3, local[2]: `s LIKE '%a%a%a%b'` on one 400-character value of a's, 14 s, 0.9 s
# on 100), and a pattern read from a row can fail there (`s LIKE s` on a value 'a\b': an
# escape error) or be any regular expression. Either way the query's time or outcome would
# say what one row holds, after the charge (FINDINGS.md H1). DuckDB matches LIKE linearly and
# regular expressions with RE2 (linear), so only the Spark text is rewritten or refused.

_PATTERN_FIX = ("use a constant pattern (a string literal), or compare with =, STARTS_WITH, "
                "CONTAINS or ENDS_WITH (nothing charged)")


def linear_patterns(tree: Any) -> Any:
    """Every LIKE / ILIKE of ``tree`` with a constant pattern as an RLIKE that cannot
    backtrack (:func:`like_regex`; ILIKE on both sides lowered, as Spark's ILIKE does);
    every RLIKE checked by :func:`regex_patterns`. A pattern that is not a constant is refused
    (``QueryError``): a row would choose the regular expression Spark runs."""
    regex_patterns(tree)  # the analyst's own; the ones written here are linear by construction
    for node in list(tree.find_all(exp.Like, exp.ILike)):
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise QueryError(f"on Spark, LIKE takes a constant pattern (got "
                             f"{pattern.sql(dialect='duckdb')[:60]}): Spark runs it as a "
                             f"regular expression, so a row's value would be one; "
                             f"{_PATTERN_FIX}")
        value, this = pattern.this, node.this.copy()
        if isinstance(node, exp.ILike):
            value, this = value.lower(), exp.Lower(this=this)
        node.replace(exp.RegexpLike(this=this, expression=exp.Literal.string(like_regex(value))))
    return tree


def like_regex(pattern: str) -> str:
    """A LIKE pattern (DuckDB's: ``%`` any text, ``_`` one character, no escape character) as
    a Java regular expression that matches the same values without backtracking.

    The pattern is split at ``%`` into segments of fixed length; the first must start the
    value, the last end it, and each middle one is placed at its leftmost occurrence after
    the previous one inside an atomic group ``(?>.*?seg)``, which never gives its place back.
    Leftmost placement is exact: if the segments fit at some places, the leftmost place of
    each leaves at least as much of the value for the rest. Each group scans the value once
    (time ~ n x len(seg)) and the final ``.*last$`` too, so the match is linear in the value's
    length for a fixed pattern."""
    segments = [_literal(seg) for seg in pattern.split("%")]
    if len(segments) == 1:
        return f"(?s)^{segments[0]}$"
    middle = "".join(f"(?>.*?{seg})" for seg in segments[1:-1] if seg)
    return f"(?s)^{segments[0]}{middle}.*{segments[-1]}$"


def _literal(segment: str) -> str:
    """One LIKE segment as regex: ``_`` any one character, every other character itself
    (letters and digits as they are, the rest as ``\\x{hex}``: no regex syntax survives)."""
    return "".join("." if c == "_" else c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}"
                   for c in segment)


# a quantifier whose count varies (*, +, ?, {m,}, {m,n}); a fixed {n} matches n times
_QUANT = re.compile(r"[*+?]|\{\d*,\d*\}")


def regex_patterns(tree: Any) -> None:
    """Refuse an RLIKE (``regexp_matches``) whose pattern is not a constant, or could
    backtrack: more than one quantifier whose count varies or alternative (``|``) in all
    (two quantifiers give ~n^3 steps on a value of n characters, ``(a|aa)+`` ~1.6^n; one
    quantifier alone ~n^2, a millisecond at the longest text a table keeps), or a
    backreference. Spark's own syntax errors are found before the charge by
    :meth:`SparkBackend.check`."""
    for node in tree.find_all(exp.RegexpLike):
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise QueryError(f"on Spark, regexp_matches takes a constant pattern (got "
                             f"{pattern.sql(dialect='duckdb')[:60]}): a row's value would be "
                             f"the regular expression; {_PATTERN_FIX}")
        if _variable_quantifiers(pattern.this) > 1:
            raise QueryError(f"on Spark, regexp_matches({pattern.sql(dialect='duckdb')[:60]}) "
                             f"may use at most one repetition (*, +, ?, {{m,n}}) or "
                             f"alternative (|), and no backreference: Spark's regex engine "
                             f"backtracks, so a pattern with more takes time that depends "
                             f"on the rows' text (it would tell whether some row almost "
                             f"matches). Split it into several "
                             f"conditions joined with AND / OR, or use LIKE (nothing charged)")


def _variable_quantifiers(pattern: str) -> int:
    """How many quantifiers with a varying count and alternatives ``|`` ``pattern`` has,
    outside character classes and escapes (``\\*`` is a star); a backreference (``\\1``,
    ``\\k<name>``) counts as two."""
    count, i, in_class = 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if (nxt.isdigit() and nxt != "0") or nxt == "k":
                count += 2
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            # a ']' right after '[' is read as the class's end (a quantifier after it then
            # counts: more refusals, never fewer)
            in_class, i = True, i + (2 if pattern[i + 1:i + 2] == "^" else 1)
            continue
        elif c == "(" and pattern[i + 1:i + 2] == "?":
            i += 2  # a group's flag, not a quantifier
            continue
        else:
            m = _QUANT.match(pattern, i)
            count += c == "|"
            if m:
                count += 1
                i = m.end()
                if pattern[i:i + 1] in ("?", "+"):  # lazy or possessive: one quantifier
                    i += 1
                continue
        i += 1
    return count
