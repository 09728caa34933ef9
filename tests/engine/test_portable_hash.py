"""The portable keyed hash (dpkit.engine.plan.portable) without Spark: DuckDB computes the
formula its docstring states (checked against a Python model of it, on edge values that
would overflow a careless BIGINT product), and the rows a unit keeps are a fair sample
(not, say, its smallest values). tests/spark/test_spark_hash.py checks Spark's values."""

from __future__ import annotations

import math
from typing import Any

import duckdb
import numpy as np
import pytest

from dpkit.engine.plan.portable import (
    P31,
    domain_limb_sql,
    hash_keys,
    portable_hash_sql,
)

BIG = [0, 1, -1, 2**62, -(2**62), 2**63 - 1, -(2**63), 2**31 - 1, -(2**31), None]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.1, 2.0**62, -(2.0**62), 2.0**40, 2.0**40 - 2.0**-20,
          math.nan, math.inf, -math.inf, 1e-300, None]


def _mix(limbs: list[int], seed: int) -> int:
    """The docstring's formula: sum of ((x XOR a_i) * b_i) % P31, mod P31, two rounds."""
    n = len(limbs)
    k = hash_keys(seed, 2 * n + 4)
    h = sum(((k[2 * i] ^ x) * k[2 * i + 1]) % P31 for i, x in enumerate(limbs)) % P31
    for r in range(2):
        h = ((h ^ k[2 * n + 2 * r]) * k[2 * n + 2 * r + 1]) % P31
    return h


def _trunc_mod(v: int) -> int:
    """SQL's ``v % P31`` (truncated toward zero, as in both engines), plus P31."""
    return int(math.copysign(abs(v) % P31, v)) + P31


def _float_limb(x: float | None) -> int:
    if x is None:
        code = 2**61 + 1
    elif math.isnan(x):
        code = 2**61 + 2
    elif abs(x) < 2.0**40:
        code = math.floor(x * 2.0**20)
    else:
        code = 2**61 + 3 if x > 0 else -(2**61 + 3)
    return _trunc_mod(code)


def _duck(expr: str, values: list[Any], type_: str) -> list[int]:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (i INTEGER, v {type_})")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(values)))
    return [r[0] for r in con.execute(f"SELECT {expr} FROM t ORDER BY i").fetchall()]


@pytest.mark.parametrize("seed", [1, 2**63 - 2])
def test_duckdb_computes_the_stated_formula(seed: int) -> None:
    got = _duck(portable_hash_sql([("v", "BIGINT")], seed), BIG, "BIGINT")
    assert got == [_mix([_trunc_mod(2**61 + 1 if v is None else v)], seed) for v in BIG]
    got = _duck(portable_hash_sql([("v", "DOUBLE")], seed), FLOATS, "DOUBLE")
    assert got == [_mix([_float_limb(v)], seed) for v in FLOATS]
    ints = [0, 1, -1, 2**31 - 1, -(2**31), None]
    got = _duck(portable_hash_sql([("v", "INTEGER")], seed), ints, "INTEGER")
    assert got == [_mix([0 if v is None else v + 2**31], seed) for v in ints]
    assert all(0 <= h < P31 for h in got)


def test_a_declared_domain_is_hashed_by_position_and_other_strings_by_md5() -> None:
    sql = portable_hash_sql([("v", "VARCHAR")], 5, {"v": domain_limb_sql("v", ["'a'", "'b'"])})
    got = _duck(sql, ["a", "b", None, "zz"], "VARCHAR")
    assert got == [_mix([x], 5) for x in (1, 2, 0, 0)]
    assert "md5" not in sql
    assert "md5" in portable_hash_sql([("v", "VARCHAR")], 5)
    assert domain_limb_sql("v", ["'a'"] * 10_000) is None  # too long to inline: MD5


def test_the_kept_rows_are_a_fair_sample() -> None:
    """Units of ten rows whose values are 0..9 (the worst case for a weak mix: values one
    apart), three rows kept by the smallest hash, over 3000 seeds. Each value is kept with
    probability 0.3 (sd 0.0084 over 3000 seeds) and each pair with 1/15 (sd 0.0046); the
    thresholds are 5 sd (false-failure probability below 1e-5 for the 10 + 45 checks, were
    the seeds random; they are fixed, so the test is deterministic). A hash monotone in the
    value, or one that ignored it, would keep 0, 1, 2 every time."""
    for limbs in ([[v + 2**31] for v in range(10)],
                  [[_float_limb(v / 1000)] for v in range(10)]):
        kept = np.zeros(10)
        pairs = np.zeros((10, 10))
        seeds = 3000
        for s in range(seeds):
            order = np.argsort([_mix(x, 7919 * s + 1) for x in limbs], kind="stable")[:3]
            kept[order] += 1
            pairs[np.ix_(order, order)] += 1
        assert np.all(np.abs(kept / seeds - 0.3) < 5 * 0.0084), kept / seeds
        off = (pairs / seeds)[~np.eye(10, dtype=bool)]
        assert np.all(np.abs(off - 1 / 15) < 5 * 0.0046), off
