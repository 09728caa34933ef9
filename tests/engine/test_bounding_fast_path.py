"""The per-unit row totals stored at load give the same bounded rows as the per-query window.

A query without joins keeps every row of a unit whose total row count in the table is at most
``m`` without per-unit work (its rows after WHERE are a subset). These tests check, on data with
units far above the cap, that the compiled SQL with the stored totals and the SQL without them
compute *identical* exact aggregates for the same hash seed (so the fast path changes nothing the
privacy analysis depends on), that no unit keeps more than ``m`` rows, and that a query with a
join never uses the totals (a join may repeat a unit's rows). Deterministic: no noise involved.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpkit.engine import Curator
from dpkit.engine import plan as dplan
from dpkit.engine.backend_duckdb import table_relation

M = 3


def _table() -> pd.DataFrame:
    # unit u has (u % 9) + 1 rows: units with 1..9 rows, so many exceed M = 3
    rows = []
    for u in range(300):
        for j in range(u % 9 + 1):
            rows.append({"uid": u, "g": (u + j) % 4, "x": float((u * 7 + j * 13) % 50)})
    return pd.DataFrame(rows)


@pytest.fixture()
def cur(tmp_path: Path) -> Curator:
    c = Curator.create(tmp_path / "p.dpkit", epsilon=1000.0)
    c.add_table("t", _table(), privacy_unit="uid", max_rows_per_unit=M,
                bounds={"x": (0, 50)}, domains={"g": [0, 1, 2, 3]})
    c.add_public_table("lookup", pd.DataFrame({"g": [0, 1, 2, 3], "name": list("abcd")}))
    return c


def _run(cur: Curator, query: str, *, with_totals: bool, seed: int) -> dict[str, list]:
    plan = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise="laplace", level=0.95,
                     bounds=None)
    fixed = cur._backend.fixed_columns(cur.tables()["t"].stored_name)
    if not with_totals:
        fixed = frozenset(f for f in fixed if f != dplan.unit_rows_column_name("uid"))
    relations = {n: table_relation(meta) for n, meta in cur.tables().items()}
    compiled = dplan.compile_sql(plan, relations=relations, seed=seed, fixed_columns=fixed)
    keys, cols = cur._backend.run(compiled.text, compiled.group_cols, compiled.measure_cols)
    return {"keys": keys, "sql": [compiled.text], **cols}


@pytest.mark.parametrize("query", [
    "SELECT COUNT(*), SUM(x) FROM t",
    "SELECT g, COUNT(*), SUM(x), AVG(x) FROM t GROUP BY g",
    "SELECT g, COUNT(*) FROM t WHERE x > 20 GROUP BY g",
])
@pytest.mark.parametrize("seed", [1, 2])
def test_fast_path_computes_the_same_bounded_aggregates(cur: Curator, query: str,
                                                       seed: int) -> None:
    fast = _run(cur, query, with_totals=True, seed=seed)
    slow = _run(cur, query, with_totals=False, seed=seed)
    assert "__nt" in fast["sql"][0] and "__nt" not in slow["sql"][0]
    fast.pop("sql"), slow.pop("sql")
    assert fast == slow


def test_bounded_count_is_at_most_m_rows_per_unit(cur: Curator) -> None:
    out = _run(cur, "SELECT COUNT(*) FROM t", with_totals=True, seed=5)
    counts = np.array([u % 9 + 1 for u in range(300)])
    expected = int(np.minimum(counts, M).sum())
    rows = [v for k, v in out.items() if k not in ("keys", "sql")]
    assert expected in [int(v[0]) for v in rows]


def test_join_queries_do_not_use_the_totals(cur: Curator) -> None:
    q = ("SELECT l.name, COUNT(*) FROM t JOIN lookup AS l ON t.g = l.g GROUP BY l.name")
    out = _run(cur, q, with_totals=True, seed=3)
    assert "__nt" not in out["sql"][0]
