"""Plans are cached per (query, parameters, table version): a plan depends on public inputs
only, so the same inputs may reuse it, and any change of them must not."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from dpkit.engine import Curator


def _plan(cur: Curator, query: str, **kw: object) -> object:
    args: dict[str, object] = {"epsilon": 1.0, "rho": None, "delta": None, "noise": "laplace",
                               "level": 0.95, "bounds": None}
    args.update(kw)
    return cur._plan(query, **args)  # type: ignore[arg-type]


def test_same_inputs_reuse_the_plan_and_any_change_does_not(
        project: Callable[..., Curator]) -> None:
    cur = project(epsilon=100.0)
    df = pd.DataFrame({"g": np.arange(20) % 3, "x": np.arange(20, dtype=np.float64)})
    cur.add_table("t", df, bounds={"x": (0, 20)}, domains={"g": [0, 1, 2]})
    q = "SELECT g, COUNT(*) AS n, AVG(x) AS a FROM t GROUP BY g"
    p = _plan(cur, q)
    assert _plan(cur, q) is p
    for change in ({"epsilon": 2.0}, {"epsilon": 1}, {"level": 0.9}, {"bounds": {"x": (0, 10)}},
                   {"weights": {"n": 2.0}}):
        other = _plan(cur, q, **change)
        assert other is not p
        assert _plan(cur, q, **change) is other  # and is cached in turn
    assert _plan(cur, q + " ") is not p
    # registering the table again (new bounds) invalidates every plan over it
    cur.add_table("t", df, bounds={"x": (0, 5)}, domains={"g": [0, 1, 2]}, replace=True)
    p2 = _plan(cur, q)
    assert p2 is not p
    assert p2.measures != p.measures  # type: ignore[attr-defined]


def test_a_cached_plan_answers_like_a_fresh_one(project: Callable[..., Curator]) -> None:
    """The same seeded noise through a cached plan and through fresh curators (fresh plans)."""
    df = pd.DataFrame({"g": np.arange(300) % 4, "x": np.arange(300, dtype=np.float64) % 50})
    q = "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM t GROUP BY g"
    cached = project(epsilon=100.0, seed=5)
    cached.add_table("t", df, bounds={"x": (0, 50)}, domains={"g": [0, 1, 2, 3]})
    first = cached.sql(q, epsilon=1.0)
    second = cached.sql(q, epsilon=1.0)  # plan from the cache, noise continues the stream
    fresh = project(epsilon=100.0, seed=5)
    fresh.add_table("t", df, bounds={"x": (0, 50)}, domains={"g": [0, 1, 2, 3]})
    fresh.sql(q, epsilon=1.0)
    fresh._planner.clear()
    again = fresh.sql(q, epsilon=1.0)
    assert list(second.rows()) == list(again.rows())
    assert list(first.rows()) != list(second.rows())  # fresh noise each time
