"""A preview accepts every SQL form a query answers, and prices it as it will run.

Before, ``Curator.preview`` (and ``POST /v1/preview``, the console's Preview button) refused
the ``DP_CDF`` / ``DP_QUANTILES`` / ``DP_RANGES`` / ``DP_MARGINALS`` forms that ``sql()``
answers (*DP_CDF(x) is not allowed in SELECT*), and priced a ``COUNT(*) FILTER (WHERE c
BETWEEN a AND b)`` family as the ordinary aggregates it is not answered by. The test loops
over the forms :mod:`dpkit.engine.families.sql_forms` knows, so a new form without a preview
fails here.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from dpkit.engine import Curator
from dpkit.engine.families.sql_forms import FUNCTIONS, recognise
from dpkit.engine.spec import QueryError

FILTER = "COUNT(*) FILTER (WHERE ... BETWEEN ...)"
# one query per form of the families' SQL grammar (and the ordinary path, for comparison)
FORMS = {
    "DP_CDF": "SELECT DP_CDF(age, 16) FROM people WHERE ward = 'A'",
    "DP_QUANTILES": "SELECT DP_QUANTILES(age, 0.1, 0.5) FROM people",
    "DP_RANGES": "SELECT DP_RANGES(p.age, (0, 9), (90, 100)) FROM people p WHERE p.cost < 500",
    "DP_MARGINALS": "SELECT DP_MARGINALS(ward, age, 1) FROM people",
    FILTER: "SELECT COUNT(*) FILTER (WHERE age BETWEEN 0 AND 17) AS kids, "
            "COUNT(*) FILTER (WHERE age BETWEEN 18 AND 100) AS adults FROM people",
}
PLAIN = "SELECT ward, COUNT(*) AS n, AVG(cost) AS c FROM people GROUP BY ward"


@pytest.fixture
def cur(project: Callable[..., Curator]) -> Curator:
    n = 600
    i = np.arange(n)
    c = project(epsilon=50.0, delta=1e-6, seed=4)
    c.add_table("people", pd.DataFrame({
        "age": (i * 7) % 101, "ward": np.array(["A", "B", "C"])[i % 3],
        "cost": ((i * 13) % 1000).astype(float)}),
        bounds={"age": (0, 100), "cost": (0, 1000)}, domains={"ward": ["A", "B", "C"]})
    return c


def test_every_form_has_an_example_here() -> None:
    assert set(FORMS) == set(FUNCTIONS) | {FILTER}, "a new SQL form needs a preview test"
    for name, query in FORMS.items():
        assert recognise(query) is not None, name  # each goes to the families, not plain SQL
    assert recognise(PLAIN) is None


@pytest.mark.parametrize("form", [*FORMS, "plain"])
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_the_preview_prices_each_form_as_the_query_charges_it(cur: Curator, form: str,
                                                              noise: str) -> None:
    query = FORMS.get(form, PLAIN)
    pv = cur.preview(query, epsilon=0.4, noise=noise)
    assert len(cur.budget().history) == 0  # nothing spent
    assert pv.outputs and pv.affordable
    if form in FORMS:  # a family's figure is in rows, whatever the column's units
        assert "in rows" in pv.outputs[0]["name"], pv.outputs
    res = cur.sql(query, epsilon=0.4, noise=noise)
    assert (pv.cost, pv.delta) == pytest.approx((res.epsilon, res.delta), rel=1e-9, abs=0)
    assert pv.event == res.event


@pytest.mark.parametrize("form", list(FORMS))
def test_accuracy_is_previewed_as_it_is_spent(cur: Curator, form: str) -> None:
    pv = cur.preview(FORMS[form], accuracy=40.0)
    res = cur.sql(FORMS[form], accuracy=40.0)
    assert pv.cost == pytest.approx(res.epsilon, rel=1e-9)


@pytest.mark.parametrize("query", [
    "SELECT DP_CDF(age), ward FROM people",
    "SELECT DP_CDF(age) FROM people GROUP BY ward",
    "SELECT DP_CDF(agee) FROM people",
    "SELECT DP_RANGES(age, (0, 1000)) FROM people",
    "SELECT DP_QUANTILES(age, 1.5) FROM people",
])
def test_a_form_the_query_refuses_the_preview_refuses_with_its_text(cur: Curator,
                                                                    query: str) -> None:
    with pytest.raises(QueryError) as by_sql:
        cur.sql(query, epsilon=0.4)
    with pytest.raises(QueryError) as by_preview:
        cur.preview(query, epsilon=0.4)
    assert str(by_preview.value) == str(by_sql.value)
    assert len(cur.budget().history) == 0
