"""Red-team review: reading group keys back must not fail (for free) depending on one row.

Group keys leave DuckDB before the charge (private partition selection needs them). Since the
columnar read (Arrow ``to_pylist``), a DATE or TIMESTAMP key that Python's ``datetime`` cannot
hold (``'infinity'``, year 10000; DuckDB accepts both) raised ``OverflowError``/``ValueError``
before anything was charged, while the row read it replaced gives DuckDB's own conversion. With
``WHERE uid = 'carol' GROUP BY d`` the query failed exactly when carol's date was such a value:
one bit about one person per query, free and repeatable. TIMESTAMP WITH TIME ZONE keys need the
``pytz`` module in DuckDB's Python conversion: without it, whether the query fails depends on
whether the selected rows hold a non-NULL time; such GROUP BYs must be refused up front (from
the declarations and the environment, the same for every row). Deterministic, no sampling.
"""

from __future__ import annotations

import importlib.util

import pytest

import dpkit as dp
from dpkit.engine.sql import QueryError


@pytest.fixture(params=["infinity", "10000-01-01"])
def cur(request, tmp_path):
    import duckdb

    src = tmp_path / "src.duckdb"
    con = duckdb.connect(str(src))
    con.execute("CREATE TABLE t (uid VARCHAR, d DATE, ts TIMESTAMP, tz TIMESTAMPTZ, "
                "iv INTERVAL)")
    con.execute("INSERT INTO t VALUES ('alice', '2020-01-01', '2020-01-01 10:00', NULL, "
                "INTERVAL 1 DAY), ('bob', '2020-01-02', '2020-01-01 11:00', NULL, NULL), "
                "('carol', ?::DATE, ?::TIMESTAMP, '2020-01-01 10:00+00', "
                "INTERVAL 1000000000 DAY), "
                "('dave', '2020-01-02', '2020-01-01 12:00', NULL, NULL)",
                [request.param, request.param])
    con.close()
    c = dp.Curator.create(tmp_path / "keys.dpkit", epsilon=1000.0, delta=1e-5,
                          source=dp.noise.seeded(5))
    c.add_table("t", f"{src}::t", privacy_unit="uid", max_rows_per_unit=1)
    return c


def _outcome(cur: dp.Curator, query: str) -> tuple[str, float]:
    before = cur.budget().spent
    try:
        cur.sql(query, epsilon=1.0)
        return "answered", cur.budget().spent - before
    except QueryError:
        return "refused", cur.budget().spent - before


@pytest.mark.parametrize("col", ["d", "ts"])
def test_temporal_keys_do_not_decide_failure(cur, col):
    types = {c.name: c.type for c in cur.tables()["t"].columns}
    assert types[col] in ("DATE", "TIMESTAMP")
    q = f"SELECT {col}, COUNT(*) AS n FROM t WHERE uid = '{{w}}' GROUP BY {col}"
    alice, carol = (_outcome(cur, q.format(w=w)) for w in ("alice", "carol"))
    assert alice == carol == ("answered", pytest.approx(1.0)), (alice, carol)


def test_timezone_keys_without_pytz_are_refused_for_everyone(cur):
    q = "SELECT tz, COUNT(*) AS n FROM t WHERE uid = '{w}' GROUP BY tz"
    alice, carol = (_outcome(cur, q.format(w=w)) for w in ("alice", "carol"))  # NULL vs a time
    assert alice[0] == carol[0], (alice, carol)
    if importlib.util.find_spec("pytz") is None:
        assert alice == ("refused", 0.0)


def test_interval_keys_do_not_decide_failure(cur):
    """INTERVAL 1000000000 DAY overflows Python's timedelta in either read."""
    q = "SELECT iv, COUNT(*) AS n FROM t WHERE uid = '{w}' GROUP BY iv"
    alice, carol = (_outcome(cur, q.format(w=w)) for w in ("alice", "carol"))
    assert alice[0] == carol[0], (alice, carol)
