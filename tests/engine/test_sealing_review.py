"""Red-team review, session 4: channels found while sealing the curator (issue 12).

Each test runs the same query on neighbouring datasets D and D' (one unit, or a crowd of units
sharing one extreme value, added) and requires the same public outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import pytest

from dpkit.engine import Curator

BASE = ("SELECT i AS pid, TIMESTAMP '2020-01-01' + to_days(CAST(i % 3 AS INTEGER)) AS d "
        "FROM range(60) t(i)")


def _keys(cur: Curator, sql: str) -> list[Any]:
    res = cur.sql(sql, epsilon=1.0)
    return [k for k in res.data["d"]]


@pytest.mark.parametrize("extreme", [
    "TIMESTAMP 'infinity'",                 # Python reads it as 9999-12-31 23:59:59.999999
    "TIMESTAMP '294247-01-10 04:00:54'",    # beyond Python's datetime: read as a string
    "TIMESTAMP '-infinity'",
])
def test_temporal_keys_outside_pythons_range_group_as_null(
        project: Callable[..., Curator], extreme: str) -> None:
    """A crowd of units at a timestamp Python cannot hold: selected privately, its key must not
    mangle the released key column (a string among datetimes failed post-processing after the
    charge; 'infinity' collided with 9999-12-31)."""
    d = project(epsilon=100.0, delta=1e-4)
    d.add_table("t", duckdb.sql(BASE), privacy_unit="pid", max_rows_per_unit=1)
    d1 = project(epsilon=100.0, delta=1e-4)
    d1.add_table("t", duckdb.sql(BASE + f" UNION ALL SELECT 1000 + i, {extreme} FROM range(100) "
                                 f"t(i)"), privacy_unit="pid", max_rows_per_unit=1)
    q = "SELECT d, COUNT(*) AS n FROM t GROUP BY d"
    on_d, on_d1 = _keys(d, q), _keys(d1, q)
    assert on_d1[:3] == on_d  # the crowd's group comes last (NULL), in key order
    assert len(on_d1) == 4 and on_d1[3] is None
    assert d.budget().spent == d1.budget().spent


def test_a_real_9999_12_31_key_stays_apart_from_infinity(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=100.0, delta=1e-4)
    cur.add_table("t", duckdb.sql(
        "SELECT i AS pid, CASE WHEN i < 100 THEN TIMESTAMP 'infinity' ELSE "
        "TIMESTAMP '9999-12-31 23:59:59.999999' END AS d FROM range(200) t(i)"),
        privacy_unit="pid", max_rows_per_unit=1)
    keys = _keys(cur, "SELECT d, COUNT(*) AS n FROM t GROUP BY d")
    assert len(keys) == len(set(map(str, keys))) == 2  # two groups, two distinct keys


def test_the_dry_run_is_redone_after_a_table_is_replaced(project: Callable[..., Curator]) -> None:
    """A query that binds against the old schema but not the new one is refused before the
    charge after a reload (the dry-run cache is per tables version)."""
    cur = project(epsilon=100.0)
    cur.add_table("t", duckdb.sql("SELECT i AS x FROM range(10) t(i)"), bounds={"x": (0, 10)})
    q = "SELECT COUNT(*) AS n FROM t WHERE x + 1 > 2"
    cur.sql(q, epsilon=0.1)
    cur.add_table("t", duckdb.sql("SELECT 'a' || i AS x FROM range(10) t(i)"), replace=True)
    spent = cur.budget().spent
    with pytest.raises(Exception, match="nothing charged"):
        cur.sql(q, epsilon=0.1)
    assert cur.budget().spent == spent


def test_a_table_aliased_by_its_own_name(project: Callable[..., Curator]) -> None:
    """``FROM t AS t`` names one table once (it was refused as "alias used twice")."""
    cur = project(epsilon=10.0)
    cur.add_table("t", duckdb.sql("SELECT i AS x FROM range(10) t(i)"), bounds={"x": (0, 10)})
    res = cur.sql("SELECT COUNT(*) AS n FROM t AS t WHERE t.x > 2", epsilon=0.5)
    assert res.columns[0] == "n"
    assert cur.budget().spent == pytest.approx(0.5)


@pytest.mark.parametrize("cast", ["DECIMAL", "DECIMAL(38,20)", "DECIMAL(10, 2)"])
def test_decimal_casts_in_where_are_answered(project: Callable[..., Curator], cast: str) -> None:
    """Casts to a parameterised type ran into "DATATYPEPARAM is not allowed" (FINDINGS E2)."""
    cur = project(epsilon=10.0)
    cur.add_table("t", duckdb.sql("SELECT i AS x FROM range(10) t(i)"), bounds={"x": (0, 10)})
    res = cur.sql(f"SELECT COUNT(*) AS n FROM t WHERE CAST(x AS {cast}) > 1", epsilon=0.5)
    assert res.columns[0] == "n"


def test_group_by_a_name_that_is_a_column_and_an_alias_groups_by_the_column(
        project: Callable[..., Curator]) -> None:
    """As in DuckDB, a table column wins over a SELECT alias of the same name in GROUP BY
    (issue 14: ``SELECT educ AS sex ... GROUP BY sex`` silently grouped by educ)."""
    cur = project(epsilon=10.0)
    cur.add_table("t", duckdb.sql("SELECT i % 3 AS educ, CASE WHEN i % 2 = 0 THEN 'm' ELSE 'f' "
                                  "END AS sex FROM range(30) t(i)"),
                  domains={"sex": ["m", "f"], "educ": [0, 1, 2]})
    with pytest.raises(Exception, match="'educ' is neither aggregated nor in GROUP BY"):
        cur.sql("SELECT educ AS sex, COUNT(*) AS n FROM t GROUP BY sex", epsilon=0.5)
    assert cur.budget().spent == 0
    res = cur.sql("SELECT educ AS e, COUNT(*) AS n FROM t GROUP BY e", epsilon=0.5)
    assert sorted(res.data["e"]) == [0, 1, 2]  # an alias alone still names its column
