"""Materialised fixed-point columns: same integers as clamping per query, never stale bounds.

The curator stores ``round(clamp(x)·2^F)`` for each declared bound when a table is loaded, and a
query shifts it to its own grid. These tests recompute every row's integer independently in
Python (exact rational arithmetic) and check (1) the exact sums the engine computes equal the sum
of those integers, through the stored column and through per-query clamping alike; (2) every
row's integer lies in the interval the sensitivity is computed from; (3) reloading with other
bounds recomputes the hidden column and the answers follow the new bounds (OpenDP #2949 was a
stale truncation bound). No randomness is involved in the exact values: the tests are
deterministic.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine import plan as dplan
from dpkit.engine import sql as dsql
from dpkit.engine.backend_duckdb import load_table


def _data(n: int = 400) -> dict[str, np.ndarray]:
    src = dp.noise.seeded(11)
    x = np.round(dp.noise.uniform_float01(n, source=src) * 300.0 - 100.0, 4)
    x[::37] = np.nan
    x[5] = np.inf
    x[6] = -np.inf
    x[7] = 1e300
    g = dp.noise.uniform_int(3, n, source=src).astype(np.int64)
    uid = dp.noise.uniform_int(n // 3, n, source=src).astype(np.int64)
    return {"uid": uid, "g": g, "x": x}


def _row_int(x: float, lo: float, hi: float, f: int) -> int | None:
    """The integer one row contributes, from the definitions (no engine code but the helpers
    whose own properties are tested below)."""
    if math.isnan(x):
        return None
    c = min(max(x, lo), hi)
    big = dplan.row_exponent(lo, hi)
    v = dplan.round_half_away(Fraction(c) * Fraction(2) ** big)
    return dplan.shift_round(v, big - f)


def _exact(cur: Curator, sql: str, epsilon: float, bounds: Any = None) -> tuple[Any, Any]:
    plan = cur._plan(sql, epsilon=epsilon, rho=None, delta=None, noise="laplace", level=0.95,
                     bounds=bounds)
    return plan, cur._execute(plan)


def test_shift_round_is_monotone_and_rounds_half_up() -> None:
    vals = list(range(-5000, 5001))
    for d in (0, 1, 2, 5, 12):
        out = [dplan.shift_round(v, d) for v in vals]
        assert all(a <= b for a, b in itertools.pairwise(out))
        for v, w in zip(vals, out, strict=True):
            assert w == math.floor(Fraction(v, 2**d) + Fraction(1, 2))
    assert dplan.shift_round(2**32, 34) == 0 and dplan.shift_round(-(2**32), 34) == 0
    assert dplan.shift_round(2**32, 33) == 1 and dplan.shift_round(-(2**32), 33) == 0


def test_row_exponent_keeps_rows_within_32_bits() -> None:
    for lo, hi in [(0, 100), (-1e6, 3), (0.001, 0.002), (-2.0**60, 2.0**60), (0, 1)]:
        big = dplan.row_exponent(lo, hi)
        assert max(abs(lo), abs(hi)) * 2.0**big <= 2.0**32
        assert max(abs(lo), abs(hi)) * 2.0 ** (big + 1) > 2.0**32


@pytest.mark.parametrize("epsilon", [50.0, 1.0, 1e-3, 1e-7])
@pytest.mark.parametrize("unit", [None, "uid"])
def test_stored_and_per_query_integers_agree_with_the_definition(
        tmp_path: Path, epsilon: float, unit: str | None) -> None:
    data = _data()
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table(data), path)
    cur = Curator.create(tmp_path / "p.dpkit", epsilon=1000.0, source=dp.noise.seeded(3))
    kw: dict[str, Any] = {"privacy_unit": unit, "max_rows_per_unit": 50 if unit else None,
                          "bounds": {"x": (-20.5, 70.25)}, "domains": {"g": [0, 1, 2]}}
    cur.add_table("stored", data, **kw)
    cur.add_table("view", str(path), **kw)
    # one fixed-point column, plus each row's unit total when there is a unit
    stored = cur.tables()["stored"].stored_name  # the relation of this load
    assert len(cur._backend.fixed_columns(stored)) == 1 + (unit is not None)
    # as a project loaded before they existed
    cur._backend._fixed[cur.tables()["view"].stored_name] = frozenset()
    q = "SELECT g, SUM(x), AVG(x) FROM {} GROUP BY g"
    p1, e1 = _exact(cur, q.format("stored"), epsilon)
    _p2, e2 = _exact(cur, q.format("view"), epsilon)  # clamps and converts every row
    assert "__x0" in dplan.compile_sql(p1, relations={"stored": "r"}, seed=1,
                                       fixed_columns=cur._backend.fixed_columns(stored)).text
    sm = next(m for m in p1.measures if m.kind == "sum")
    assert e1.keys == e2.keys
    assert e1.cols[sm.sql_col] == e2.cols[sm.sql_col]
    # the oracle: per-row integers from the definition (no row is capped: <= 50 rows a unit)
    ints = [_row_int(float(x), -20.5, 70.25, sm.f) for x in data["x"]]
    for (gk,), s in zip(e1.keys, e1.cols[sm.sql_col], strict=True):
        want = sum(v for v, g in zip(ints, data["g"], strict=True) if v is not None and g == gk)
        assert s == want
    # every row's integer lies where the sensitivity says
    lo_g = _row_int(-20.5, -20.5, 70.25, sm.f)
    hi_g = _row_int(70.25, -20.5, 70.25, sm.f)
    assert lo_g is not None and hi_g is not None
    assert all(lo_g <= v <= hi_g for v in ints if v is not None)
    assert sm.bound == max(abs(lo_g), abs(hi_g), 1)
    assert sm.l1 == p1.m * sm.bound
    cs = next(m for m in p1.measures if m.kind == "csum")
    assert cs.bound == max(abs(lo_g - cs.center), abs(hi_g - cs.center), 1)
    cur.close()


def test_new_bounds_recompute_the_stored_integers(tmp_path: Path) -> None:
    data = _data()
    cur = Curator.create(tmp_path / "p.dpkit", epsilon=1000.0, source=dp.noise.seeded(3))
    cur.add_table("t", data, bounds={"x": (0, 100)})
    old = cur._backend.fixed_columns(cur.tables()["t"].stored_name)
    assert old == {dplan.fixed_column_name("x", 0.0, 100.0)}
    cur.add_table("t", data, bounds={"x": (0, 10)}, replace=True)
    new = cur._backend.fixed_columns(cur.tables()["t"].stored_name)
    assert new == {dplan.fixed_column_name("x", 0.0, 10.0)} and not (new & old)
    plan, exact = _exact(cur, "SELECT SUM(x) FROM t", 1.0)
    sm = next(m for m in plan.measures if m.kind == "sum")
    want = sum(v for v in (_row_int(float(x), 0.0, 10.0, sm.f) for x in data["x"])
               if v is not None)
    assert exact.cols[sm.sql_col][0] == want
    # a per-query bound that differs from the declared one clamps at query time
    plan, exact = _exact(cur, "SELECT SUM(x) FROM t", 1.0, bounds={"x": (0, 5)})
    sm = next(m for m in plan.measures if m.kind == "sum")
    text = dplan.compile_sql(plan, relations={"t": "r"}, seed=1, fixed_columns=new).text
    assert dplan.FIXED_PREFIX not in text
    want = sum(v for v in (_row_int(float(x), 0.0, 5.0, sm.f) for x in data["x"])
               if v is not None)
    assert exact.cols[sm.sql_col][0] == want
    cur.close()


def test_hidden_columns_are_not_queryable_and_their_prefix_is_reserved(tmp_path: Path) -> None:
    cur = Curator.create(tmp_path / "p.dpkit", epsilon=10.0, source=dp.noise.seeded(3))
    cur.add_table("t", _data(), bounds={"x": (0, 100)})
    name = dplan.fixed_column_name("x", 0.0, 100.0)
    assert all(c.name != name for c in cur.tables()["t"].columns)
    with pytest.raises(dsql.QueryError):
        cur.sql(f'SELECT SUM("{name}") FROM t', epsilon=1.0)
    assert cur.budget().spent == 0.0
    with pytest.raises(ValueError, match="reserved"):
        cur.add_table("u", {"__dpfx_a": np.arange(3.0)})
    cur.close()


def test_load_table_without_fixed_callback_adds_nothing(tmp_path: Path) -> None:
    db = tmp_path / "d.duckdb"
    seen: list[Callable[..., Any]] = []
    cols, storage, _ = load_table(db, "t", {"a": np.arange(4.0)}, public=False, copy=True,
                                  source_table=None, validate=lambda c, r: seen.append(print))
    assert [c.name for c in cols] == ["a"] and storage == "copy" and len(seen) == 1


@pytest.mark.parametrize("epsilon", [1.0, 1e-4])
def test_one_unit_moves_each_stored_sum_by_at_most_its_sensitivity(
        tmp_path: Path, epsilon: float) -> None:
    # neighbours: the same table with and without unit 0, which has 9 rows (cap 3) of extreme
    # values, including values that round up to the bound on the grid
    data = _data(300)
    extra = np.array([1e9, -1e9, 70.25, 70.2499999, -20.5, np.nan, 69.9, 70.25, 1e-9])
    with_u = {"uid": np.concatenate([np.zeros(9, dtype=np.int64), data["uid"] + 1]),
              "g": np.concatenate([np.zeros(9, dtype=np.int64), data["g"]]),
              "x": np.concatenate([extra, data["x"]])}
    without = {k: v[9:] for k, v in with_u.items()}
    kw: dict[str, Any] = {"privacy_unit": "uid", "max_rows_per_unit": 3,
                          "bounds": {"x": (-20.5, 70.25)}, "domains": {"g": [0, 1, 2]}}
    sums = []
    for i, d in enumerate((with_u, without)):
        cur = Curator.create(tmp_path / f"p{i}.dpkit", epsilon=1000.0, source=dp.noise.seeded(3))
        cur.add_table("t", d, **kw)
        plan, exact = _exact(cur, "SELECT g, SUM(x), AVG(x) FROM t GROUP BY g", epsilon)
        sm = next(m for m in plan.measures if m.kind == "sum")
        cs = next(m for m in plan.measures if m.kind == "csum")
        csum = [s - n * cs.center for s, n in zip(exact.cols[sm.sql_col],
                                                   exact.cols[cs.count_col], strict=True)]
        sums.append((exact.cols[sm.sql_col], csum, sm.l1, cs.l1))
        cur.close()
    (s1, c1, l1, cl1), (s2, c2, _, _) = sums
    assert sum(abs(a - b) for a, b in zip(s1, s2, strict=True)) <= l1
    assert sum(abs(a - b) for a, b in zip(c1, c2, strict=True)) <= cl1
    assert s1 != s2  # the unit does count
