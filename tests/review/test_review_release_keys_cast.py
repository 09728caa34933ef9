"""Red-team review: a release family must not fail (for free) depending on one row's value.

Marginals / synthetic data over a column with a declared domain put each row in its key's cell
with ``CASE col WHEN <key> ...``. The keys were written as untyped literals: with a VARCHAR
column whose declared keys are numbers (``domains={"code": [1, 2]}``, accepted at load because
they cast to VARCHAR), DuckDB compares by casting the *column* to INTEGER, which raises on a row
holding ``"x"``. The curator turns that into "failed while reading the data (nothing was
charged)". So ``WHERE uid = 'carol'`` fails and charges nothing exactly when carol's code is not
a number, while ``WHERE uid = 'alice'`` succeeds: one bit about one person per query, at no
cost, repeatable. Deterministic check: both probes must behave the same (answered and charged).
"""

from __future__ import annotations

import pandas as pd
import pytest

import dpkit as dp


@pytest.fixture
def cur(tmp_path):
    df = pd.DataFrame({"uid": ["alice", "bob", "carol", "dave"],
                       "code": ["1", "2", "x", "2"], "age": [30, 40, 50, 60]})
    c = dp.Curator.create(tmp_path / "keys.dpkit", epsilon=100.0, delta=1e-5,
                          source=dp.noise.seeded(7))
    c.add_table("t", df, privacy_unit="uid", max_rows_per_unit=1, bounds={"age": (0, 100)},
                domains={"code": [1, 2]})
    return c


@pytest.mark.parametrize("form", ["python", "sql", "synthetic"])
def test_keyed_release_does_not_depend_on_one_rows_value(cur, form):
    spent = []
    for who in ("alice", "carol"):  # alice's code is "1", carol's is "x"
        before = cur.budget().spent
        if form == "python":
            cur.marginals("t", ["code"], where=f"uid = '{who}'", epsilon=1.0)
        elif form == "sql":
            cur.sql(f"SELECT DP_MARGINALS(code) FROM t WHERE uid = '{who}'", epsilon=1.0)
        else:
            cur.synthetic("t", ["code"], where=f"uid = '{who}'", epsilon=1.0)
        spent.append(cur.budget().spent - before)
    assert spent[0] == pytest.approx(1.0) and spent[1] == pytest.approx(1.0), spent


def test_keyed_cells_count_by_the_column_type(cur):
    """The typed keys give the same cells as the key's text in the column (``"1"`` is key 1)."""
    res = cur.marginals("t", ["code"], epsilon=50.0)
    df = res.to_pandas()
    assert list(df["code"]) == [1, 2]
    # true counts: code "1" -> 1 row, "2" -> 2 rows ("x" is outside the domain)
    assert abs(float(df["count"][0]) - 1) <= float(df["count_ci_high"][0] - df["count"][0])
    assert abs(float(df["count"][1]) - 2) <= float(df["count_ci_high"][1] - df["count"][1])
