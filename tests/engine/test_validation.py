"""Bad input: refused with a message that says what to do, and nothing charged, nothing lost."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.accounting import BudgetExceeded
from dpkit.engine import Curator, QueryError


def _unchanged(cur: Curator, before: tuple[int, str]) -> None:
    assert cur.ledger.head() == before, "a refused query must not write to the ledger"
    assert cur.verify() == before[0]


@pytest.mark.parametrize(
    ("sql", "hint"),
    [
        ("SELECT * FROM visits", "SELECT \\* would reveal rows"),
        ("SELECT age FROM visits", "neither aggregated nor in GROUP BY"),
        ("SELECT age, COUNT(*) FROM visits", "neither aggregated nor in GROUP BY"),
        # SELECT DISTINCT <keys> is answered now (issue 14); DISTINCT with aggregates is not
        ("SELECT DISTINCT ward, COUNT(*) FROM visits GROUP BY ward", "GROUP BY"),
        ("SELECT COUNT(*) FROM visits; DROP TABLE visits", "exactly one SELECT"),
        ("DELETE FROM visits", "only SELECT"),
        ("SELECT COUNT(*) FROM (SELECT * FROM visits) s", "subqueries are not allowed"),
        ("SELECT COUNT(*) FROM visits WHERE age IN (SELECT age FROM visits)", "subqueries"),
        ("WITH x AS (SELECT * FROM visits) SELECT COUNT(*) FROM x", "WITH"),
        ("SELECT COUNT(*) FROM visits UNION SELECT COUNT(*) FROM visits", "UNION"),
        ("SELECT ROW_NUMBER() OVER () FROM visits", "window functions"),
        ("SELECT COUNT(*) FROM read_csv('/etc/passwd')", "registered table"),
        ("SELECT COUNT(*) FROM nosuch", "unknown table 'nosuch'"),
        ("SELECT COUNT(*) FROM visits WHERE nosuch > 1", "no column 'nosuch'"),
        ("SELECT SUM(agee) FROM visits", "Did you mean age"),
        ("SELECT SUM(ward) FROM visits", "not a number"),
        ("SELECT SUM(pid) FROM visits", "needs bounds for column 'pid'"),
        # aggregates over expressions are answered now (issue 14); what cannot be bounded is not
        ("SELECT SUM(age / cost) FROM visits", "divisor \"cost\" may be 0"),
        ("SELECT SUM(pid * 2) FROM visits", "'pid' has no bounds"),
        ("SELECT MAX(ward || 'x') FROM visits", "no interval rule"),
        ("SELECT COUNT(*) FROM visits WHERE read_text('x') = ''", "not allowed in WHERE"),
        ("SELECT COUNT(*) FROM visits WHERE SUM(age) > 3", "HAVING"),
        ("SELECT COUNT(*) FROM visits WHERE age > ?", "parameters"),
        ("SELECT approx_count_distinct(age) FROM visits", "not supported"),
        ("SELECT COUNT(*) FROM visits TABLESAMPLE 10%", "sampling"),
        ("SELECT pid, COUNT(*) FROM visits GROUP BY pid", "one group per person"),
        # a SELECT of group keys alone is answered now (issue 14); one of constants is not
        ("SELECT 1 + 1 AS two FROM visits", "no aggregate"),
        ("SELECT QUANTILE(age, 1.5) FROM visits", "in \\[0, 1\\]"),
        ("SELECT COUNT(*) FROM visits ORDER BY age", "neither aggregated"),
        ("SELECT ward, COUNT(*) AS n FROM visits GROUP BY ward ORDER BY n DESC LIMIT 0",
         "LIMIT 0 asks for no rows"),
        ("", "empty"),
        ("SELEC COUNT(*) FROM visits", "only SELECT|cannot parse"),
    ],
)
def test_refused_queries_say_what_to_write(shared_visits_curator: Curator, sql: str,
                                          hint: str) -> None:
    before = shared_visits_curator.ledger.head()
    with pytest.raises(QueryError, match=hint):
        shared_visits_curator.sql(sql, epsilon=0.1)
    _unchanged(shared_visits_curator, before)


@pytest.mark.parametrize("epsilon", [0, -1.0, math.nan, math.inf, 1e9, "1", None, True])
def test_bad_epsilon(shared_visits_curator: Curator, epsilon: Any) -> None:
    before = shared_visits_curator.ledger.head()
    with pytest.raises(ValueError, match="epsilon"):
        shared_visits_curator.sql("SELECT COUNT(*) FROM visits", epsilon=epsilon)
    _unchanged(shared_visits_curator, before)


def test_over_budget_spends_nothing(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=1.0)
    cur.add_table("t", {"x": np.arange(10.0)}, bounds={"x": (0, 10)})
    cur.sql("SELECT COUNT(*) FROM t", epsilon=0.7)
    before = cur.ledger.head()
    with pytest.raises(BudgetExceeded) as info:
        cur.sql("SELECT COUNT(*) FROM t", epsilon=0.5)
    assert info.value.missing.epsilon == pytest.approx(0.2)
    _unchanged(cur, before)
    assert cur.budget().remaining == pytest.approx(0.3)


@pytest.mark.parametrize(
    "name",
    ['visits"; DROP TABLE x; --', "a b", "1abc", "", "__dpkit", "x" * 80, "t'", "ward)"],
)
def test_hostile_table_names_refused(project: Callable[..., Curator], name: str) -> None:
    cur = project()
    with pytest.raises(ValueError, match="name"):
        cur.add_table(name, {"x": [1.0]})
    assert cur.tables() == {}


def test_hostile_column_names_are_only_ever_identifiers(project: Callable[..., Curator]) -> None:
    """Columns may have any name; they are quoted everywhere, so they cannot inject SQL."""
    cur = project()
    evil = 'x"); DROP TABLE priv.t; --'
    cur.add_table("t", {evil: np.arange(20.0), "g": np.array(["a", "b"] * 10, dtype=object)},
                  bounds={evil: (0, 20)}, domains={"g": ["a", "b", "c'); --"]})
    quoted = '"' + evil.replace('"', '""') + '"'
    res = cur.sql(f"SELECT g, COUNT(*), SUM({quoted}) FROM t GROUP BY g", epsilon=1.0)
    assert sorted(res["g"]) == ["a", "b", "c'); --"]
    res2 = cur.sql(f"SELECT COUNT(*) FROM t WHERE {quoted} > 3", epsilon=1.0)
    assert len(res2) == 1
    assert "t" in cur.tables()
    # the builder quotes too
    res3 = cur.table("t").sum(evil, alias="s").run(epsilon=0.5)
    assert res3.columns[0] == "s"


@pytest.mark.parametrize(
    ("bounds", "error"),
    [
        ({"x": (5, 1)}, "low < high.*swapped"),
        ({"x": (1, 1)}, "low < high"),
        ({"x": (0, math.nan)}, "finite"),
        ({"x": (-math.inf, 1)}, "finite"),
        ({"x": (0,)}, "pair"),
        ({"x": ("a", "b")}, "number"),
        ({"nosuch": (0, 1)}, "no column 'nosuch'"),
        ({"s": (0, 1)}, "not a number"),
    ],
)
def test_bad_bounds_refused(project: Callable[..., Curator], bounds: Any, error: str) -> None:
    cur = project()
    with pytest.raises((ValueError, TypeError), match=error):
        cur.add_table("t", {"x": np.arange(5.0), "s": np.array(list("abcde"), dtype=object)},
                      bounds=bounds)
    assert cur.tables() == {}


def test_bad_query_bounds_refused(project: Callable[..., Curator]) -> None:
    cur = project()
    cur.add_table("t", {"x": np.arange(5.0)})
    before = cur.ledger.head()
    with pytest.raises(ValueError, match="low < high"):
        cur.sql("SELECT SUM(x) FROM t", epsilon=0.5, bounds={"x": (3, 1)})
    _unchanged(cur, before)


def test_other_bad_declarations(project: Callable[..., Curator], tmp_path: Path) -> None:
    cur = project()
    data = {"x": np.arange(5.0), "u": np.arange(5)}
    with pytest.raises(ValueError, match="no column 'who'"):
        cur.add_table("t", data, privacy_unit="who", max_rows_per_unit=1)
    with pytest.raises(ValueError, match="max_rows_per_unit must be >= 1"):
        cur.add_table("t", data, privacy_unit="u", max_rows_per_unit=0)
    with pytest.raises(TypeError, match="max_rows_per_unit"):
        cur.add_table("t", data, privacy_unit="u", max_rows_per_unit=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no rows"):
        cur.add_table("t", {"x": np.zeros(0)})
    with pytest.raises(ValueError, match="domain of 'u'"):
        cur.add_table("t", data, domains={"u": []})
    with pytest.raises(FileNotFoundError):
        cur.add_table("t", tmp_path / "missing.csv")
    with pytest.raises(TypeError, match="cannot load"):
        cur.add_table("t", object())
    assert cur.tables() == {}
    cur.add_table("t", data)
    with pytest.raises(ValueError, match="already exists"):
        cur.add_table("t", data)


def test_bad_budgets(tmp_path: Path) -> None:
    for kw, msg in [({"epsilon": 0}, "epsilon"), ({"epsilon": math.nan}, "epsilon"),
                    ({"epsilon": 1e6}, "no meaningful privacy"),
                    ({"epsilon": 1.0, "delta": 0.5}, "delta"),
                    ({"epsilon": 1.0, "delta": 1e-6, "accountant": "magic"}, "accountant")]:
        with pytest.raises(ValueError, match=msg):
            Curator.create(tmp_path / "x", **kw)  # type: ignore[arg-type]
        assert not (tmp_path / "x").exists()
    Curator.create(tmp_path / "ok", epsilon=1.0).close()
    with pytest.raises(FileExistsError):
        Curator.create(tmp_path / "ok", epsilon=1.0)
    with pytest.raises(FileNotFoundError, match="not a dpkit project"):
        Curator.open(tmp_path / "nothing")


def test_data_errors_never_surface(project: Callable[..., Curator]) -> None:
    """A WHERE that would fail on some rows (casts, overflow) cannot tell anyone which rows:
    it is evaluated with TRY, failing rows are simply not selected, and the query is answered."""
    cur = project()
    cur.add_table("t", {"s": np.array(["1", "2", "x", "4"], dtype=object),
                        "i": np.array([1, 2, 3, 2**62], dtype=np.int64)})
    res = cur.sql("SELECT COUNT(*) FROM t WHERE CAST(s AS INTEGER) > 0", epsilon=1.0)
    assert len(res) == 1
    res = cur.sql("SELECT COUNT(*) FROM t WHERE s IN (1, 2)", epsilon=1.0)
    assert len(res) == 1
    res = cur.sql("SELECT COUNT(*) FROM t WHERE i * 4 > 0", epsilon=1.0)
    assert len(res) == 1
    res = cur.sql("SELECT COUNT(*) FROM t WHERE 1 / (i - 3) > 0", epsilon=1.0)
    assert len(res) == 1


def test_partition_selection_needs_delta(project: Callable[..., Curator]) -> None:
    cur = project(delta=0.0)
    cur.add_table("t", {"g": np.array(["a", "b"] * 5, dtype=object)})
    before = cur.ledger.head()
    with pytest.raises(QueryError, match="declare the domain"):
        cur.sql("SELECT g, COUNT(*) FROM t GROUP BY g", epsilon=1.0)
    _unchanged(cur, before)


def test_query_delta_above_project_delta(visits_curator: Curator) -> None:
    with pytest.raises(ValueError, match="exceeds the project's total delta"):
        visits_curator.sql("SELECT age, COUNT(*) FROM visits GROUP BY age", epsilon=1.0,
                           delta=1e-3)


def test_private_join_refused(project: Callable[..., Curator]) -> None:
    cur = project()
    cur.add_table("a", {"k": np.arange(5), "x": np.arange(5.0)})
    cur.add_table("b", {"k": np.arange(5), "y": np.arange(5.0)})
    with pytest.raises(QueryError, match="joins between private tables"):
        cur.sql("SELECT COUNT(*) FROM a JOIN b ON a.k = b.k", epsilon=1.0)


def test_seeded_results_say_insecure(visits_curator: Curator) -> None:
    res = visits_curator.sql("SELECT COUNT(*) FROM visits", epsilon=0.5)
    assert res.insecure and "INSECURE" in repr(res)
    assert not dp.noise.secure().insecure
