"""Weighted budget split: ``weights={"n": 1, "s": 3}`` per output name instead of equal shares.

A measurement's share of epsilon (or rho) is its weight over the sum of the weights; the
interval half-widths then follow from the exact noise law at that share, which the tests
recompute with :mod:`dpkit.mechanisms.plan` (no hard-coded outputs of our own code).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from dpkit.engine import Curator
from dpkit.engine.plan import DIAGNOSTICS_SHARE
from dpkit.engine.sql import QueryError
from dpkit.mechanisms.plan import discrete_gaussian_plan, discrete_laplace_plan

QUERY = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g"
# the outputs share what the diagnostics (rows read, values clamped) leave: 95% by default
MAIN = 1.0 - DIAGNOSTICS_SHARE


def _main(split: list[dict[str, object]]) -> list[dict[str, object]]:
    return [s for s in split if not str(s["measurement"]).startswith("diagnostics")]


def _add_t(c: Curator) -> Curator:
    c.add_table("t", {"g": np.array(["a", "b"] * 100, dtype=object),
                      "x": np.arange(200.0) % 50},
                bounds={"x": (0, 64)}, domains={"g": ["a", "b"]})
    return c


@pytest.fixture
def cur(project: Callable[..., Curator]) -> Curator:
    return _add_t(project(epsilon=20.0))


@pytest.fixture(scope="module")
def shared_cur(module_project: Callable[..., Curator]) -> Curator:
    """:func:`cur` once for the refusals (tests/engine/conftest.py, module_project)."""
    return _add_t(module_project(epsilon=20.0))


def _halfwidths(pv: object) -> dict[str, float]:
    return {o["name"]: o["halfwidth"] for o in pv.outputs}  # type: ignore[attr-defined]


def test_weights_set_the_shares_and_the_interval_widths(cur: Curator) -> None:
    eps = 1.0
    equal = cur.preview(QUERY, epsilon=eps)
    weighted = cur.preview(QUERY, epsilon=eps, weights={"n": 1, "s": 3})
    shares = {s["measurement"]: s["epsilon"] for s in weighted.split}
    assert shares["COUNT(*)"] == pytest.approx(MAIN * eps / 4)
    assert shares["SUM(x)"] == pytest.approx(MAIN * 3 * eps / 4)
    assert [s["weight"] for s in _main(weighted.split)] == [1.0, 3.0]
    # the CI half-width of COUNT(*) is the exact discrete Laplace quantile at its share (L1 = 1)
    hw = _halfwidths(weighted)
    assert hw["n"] == discrete_laplace_plan(sensitivity=1,
                                            epsilon=MAIN * eps / 4).halfwidth(0.95)
    # stated ratio: n's width goes from share 1/2 to 1/4 (x2), s's from 1/2 to 3/4 (x2/3),
    # up to the integer rounding of the noise quantile (one grid unit)
    h0 = _halfwidths(equal)
    assert hw["n"] / h0["n"] == pytest.approx(2.0, abs=2.0 / h0["n"])
    assert hw["s"] / h0["s"] == pytest.approx(2.0 / 3.0, rel=0.02)
    res = cur.sql(QUERY, epsilon=eps, weights={"n": 1, "s": 3})
    w_n = res["n_ci_high"] - res["n_ci_low"]
    assert np.all(w_n == 2 * hw["n"])
    assert cur.budget().spent == pytest.approx(eps, rel=1e-9)
    entry = cur.ledger.entries("charge")[-1]
    assert entry.view["details"]["weights"] == {"n": 1.0, "s": 3.0}  # recorded with the charge


def test_preview_shows_the_weights(cur: Curator) -> None:
    pv = cur.preview(QUERY, epsilon=1.0, weights={"s": 2})
    assert pv.weights == {"s": 2.0}
    assert "s=2" in repr(pv) or "'s': 2.0" in repr(pv)
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(pv.table())
    assert "budget weights s=2" in " ".join(console.export_text().split())
    assert "split equally" in repr(cur.preview(QUERY, epsilon=1.0).table().caption)


def test_shared_measurements_take_the_largest_weight(cur: Curator) -> None:
    # COUNT(x) is measured once for both outputs: weight max(1, 4) = 4
    pv = cur.preview("SELECT COUNT(x) AS c, AVG(x) AS a FROM t", epsilon=1.0,
                     weights={"a": 4})
    w = {s["measurement"]: s["weight"] for s in _main(pv.split)}
    assert w == {"COUNT(x)": 4.0, "SUM(x - mid)": 4.0}
    pv = cur.preview("SELECT COUNT(*) AS n, SUM(x) / COUNT(*) AS per FROM t", epsilon=1.0,
                     weights={"per": 3})  # an expression output weighs its aggregates
    assert {s["measurement"]: s["weight"] for s in _main(pv.split)} == {"COUNT(*)": 3.0,
                                                                         "SUM(x)": 3.0}


def test_gaussian_weights_split_rho(project: Callable[..., Curator]) -> None:
    c = project(epsilon=20.0, accountant="zcdp")
    c.add_table("t", {"g": np.array(["a", "b"] * 100, dtype=object), "x": np.arange(200.0)},
                bounds={"x": (0, 64)}, domains={"g": ["a", "b"]})
    pv = c.preview(QUERY, rho=0.4, noise="gaussian", weights={"n": 3, "s": 1})
    rho = {s["measurement"]: s["rho"] for s in pv.split}
    assert rho["COUNT(*)"] == pytest.approx(0.3 * MAIN)
    assert rho["SUM(x)"] == pytest.approx(0.1 * MAIN)
    assert _halfwidths(pv)["n"] == discrete_gaussian_plan(sensitivity=1.0,
                                                          rho=0.3 * MAIN).halfwidth()
    c.sql(QUERY, rho=0.4, noise="gaussian", weights={"n": 3, "s": 1})
    assert c.budget().rho_spent == pytest.approx(0.4, rel=1e-9)


def test_builder_and_accuracy_take_weights(cur: Curator) -> None:
    q = cur.table("t").group_by("g").count(alias="n").sum("x", alias="s").weights(s=3)
    pv = q.preview(epsilon=1.0)
    assert {s["measurement"]: s["weight"] for s in _main(pv.split)} == {"COUNT(*)": 1.0,
                                                                         "SUM(x)": 3.0}
    with pytest.raises(QueryError, match="not both"):
        q.run(epsilon=1.0, weights={"n": 2})
    # accuracy= finds the smallest epsilon under the weighted split: n's share is MAIN·eps/4
    target = 20.0
    spent0 = cur.budget().spent
    cur.sql(QUERY, accuracy={"n": target}, weights={"n": 1, "s": 3})
    eps = cur.budget().spent - spent0
    share = MAIN * eps / 4
    assert discrete_laplace_plan(sensitivity=1, epsilon=share).halfwidth() <= target
    assert discrete_laplace_plan(sensitivity=1, epsilon=share * 0.99).halfwidth() > target


@pytest.mark.parametrize(("weights", "match"), [
    ({"nope": 1}, "not an output"),
    ({"g": 2}, "GROUP BY column"),
    ({"n": 0}, "> 0"),
    ({"n": -1}, "> 0"),
    ({"n": float("nan")}, "> 0"),
    ({"n": float("inf")}, "> 0"),
    ({"n": "2"}, "> 0"),
    ({"n": True}, "> 0"),
    ({"top_k": 2}, "not an output"),  # no top-k in this query
    ([("n", 1)], "dict"),
])
def test_bad_weights_are_refused_and_nothing_is_charged(shared_cur: Curator, weights: object,
                                                        match: str) -> None:
    cur = shared_cur
    with pytest.raises(QueryError, match=match):
        cur.sql(QUERY, epsilon=1.0, weights=weights)  # type: ignore[arg-type]
    assert cur.budget().spent == 0.0
