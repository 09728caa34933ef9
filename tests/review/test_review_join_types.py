"""Red-team review: a join must not fail (for free) depending on one private row's value.

``JOIN p ON t.code = p.pcode`` with a VARCHAR private column and an INTEGER public column makes
DuckDB cast the private column to INTEGER while reading rows; a row holding ``'x'`` raises, and
the curator answers "failed while reading the data (nothing was charged)". With ``WHERE t.uid =
'carol'`` that refusal happens exactly when carol's code is not a number: one bit about one
person per query, free and repeatable. Join keys whose types cannot be compared without a cast
that may fail must be refused from the declarations alone (before any row is read), the same for
every row. Deterministic check, no sampling.
"""

from __future__ import annotations

import pandas as pd
import pytest

import dpkit as dp
from dpkit.engine.sql import QueryError

JOIN = ("SELECT p.name, COUNT(*) AS n FROM t {kind} JOIN p ON t.code = p.pcode "
        "WHERE t.uid = '{who}' GROUP BY p.name")


@pytest.fixture
def cur(tmp_path):
    df = pd.DataFrame({"uid": ["alice", "bob", "carol", "dave"],
                       "code": ["1", "2", "x", "2"], "n2": [1, 2, 3, 2]})
    c = dp.Curator.create(tmp_path / "join.dpkit", epsilon=100.0, delta=1e-5,
                          source=dp.noise.seeded(3))
    c.add_table("t", df, privacy_unit="uid", max_rows_per_unit=1)
    c.add_public_table("p", pd.DataFrame({"pcode": [1, 2], "name": ["one", "two"],
                                          "scode": ["1", "2"]}))
    return c


@pytest.mark.parametrize("kind", ["", "LEFT"])
def test_join_outcome_does_not_depend_on_one_rows_value(cur, kind):
    outcomes = []
    for who in ("alice", "carol"):  # alice's code is "1", carol's is "x"
        before = cur.budget().spent
        try:
            cur.sql(JOIN.format(kind=kind, who=who), epsilon=1.0)
            outcomes.append(("answered", cur.budget().spent - before))
        except QueryError as exc:
            outcomes.append(("refused", cur.budget().spent - before, "reading the data" in
                             str(exc)))
    assert outcomes[0][0] == outcomes[1][0], outcomes
    assert all(o[0] == "answered" or not o[2] for o in outcomes), outcomes


def test_joins_on_comparable_types_still_work(cur):
    res = cur.sql("SELECT p.name, COUNT(*) AS n FROM t JOIN p ON t.code = p.scode "
                  "GROUP BY p.name", epsilon=1.0)
    assert sorted(res["name"]) == ["one", "two"]
    res = cur.sql("SELECT p.name, COUNT(*) AS n FROM t JOIN p ON t.n2 = p.pcode "
                  "GROUP BY p.name", epsilon=1.0)
    assert sorted(res["name"]) == ["one", "two"]
