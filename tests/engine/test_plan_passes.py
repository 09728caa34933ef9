"""The planner's passes, each on its own (``dpkit.engine.plan``: build and compile as passes).

``build_plan`` and ``compile_sql`` are drivers over :data:`PLAN_PASSES` / :data:`COMPILE_PASSES`;
these tests run single passes on a state and check what each one decides, and that the package's
modules import down their floors only (model, fixed, calibrate, compile, build). All checks are
deterministic (no noise is drawn).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from dpkit.engine import Curator
from dpkit.engine import plan as dplan
from dpkit.engine import sql as dsql
from dpkit.engine.plan import build as pbuild
from dpkit.engine.plan import compile as pcompile

PLAN_DIR = Path(dplan.__file__).parent
FLOORS = ["model", "fixed", "intervals", "calibrate", "portable", "keys", "bounding", "compile",
          "planning", "request", "measures", "build"]


def _state(cur: Curator, query: str, **kw: Any) -> pbuild.Planning:
    catalog = cur.tables()
    params: dict[str, Any] = dict(epsilon=1.0, rho=None, delta=None, noise="laplace",
                                  level=0.95, bounds=None, budget_delta=1e-6,
                                  gaussian_delta=None, weights=None, accountant="approx")
    params.update(kw)
    return pbuild.Planning(spec=dsql.parse_query(query, catalog), catalog=catalog, **params)


def _run_until(st: pbuild.Planning, last: str) -> pbuild.Planning:
    for plan_pass in pbuild.PLAN_PASSES:
        plan_pass(st)
        if plan_pass.__name__ == last:
            return st
    raise AssertionError(f"no pass named {last}")


def test_passes_are_named_and_the_driver_runs_them_all(visits_curator: Curator) -> None:
    names = [p.__name__ for p in pbuild.PLAN_PASSES]
    assert names == ["check_parameters", "group_keys", "query_delta", "privacy_budget",
                     "measurements", "top_k", "diagnostics", "budget_split", "calibration",
                     "query_event"]
    q = "SELECT ward, COUNT(*), AVG(cost) FROM visits GROUP BY ward"
    st = _run_until(_state(visits_curator, q), "query_event")
    plan = dplan.build_plan(st.spec, st.catalog, epsilon=1.0, budget_delta=1e-6,
                            accountant="approx")
    assert plan.event == st.event and plan.split() == [m.describe() for m in st.measures]


def test_group_keys_pass_alone(visits_curator: Curator) -> None:
    st = _state(visits_curator, "SELECT ward, COUNT(*) FROM visits GROUP BY ward")
    pbuild.check_parameters(st)
    pbuild.group_keys(st)
    assert st.group_mode == "public" and st.keys is not None
    assert list(st.keys) == [("A",), ("B",), ("C",), ("D",), ("E",)]
    st = _state(visits_curator, "SELECT age, COUNT(*) FROM visits GROUP BY age")
    pbuild.check_parameters(st)
    pbuild.group_keys(st)
    assert st.group_mode == "select" and st.keys is None


def test_query_delta_pass_alone(visits_curator: Curator) -> None:
    st = _run_until(_state(visits_curator, "SELECT age, COUNT(*) FROM visits GROUP BY age",
                           budget_delta=0.0), "group_keys")
    with pytest.raises(dplan.PlanError, match="needs public group keys or a delta"):
        pbuild.query_delta(st)
    # Gaussian noise under the approx accountant: one delta, half to each use
    st = _run_until(_state(visits_curator, "SELECT age, COUNT(*) FROM visits GROUP BY age",
                           noise="gaussian", delta=1e-7), "query_delta")
    assert st.charge_delta == 1e-7 and st.q_delta == st.conv_delta == 5e-8


def test_measurements_are_shared_between_aggregates(visits_curator: Curator) -> None:
    st = _run_until(_state(visits_curator,
                           "SELECT COUNT(*), AVG(cost), VAR(cost), SUM(cost) FROM visits"),
                    "measurements")
    kinds = [m.kind for m in st.measures]
    # COUNT(*) and AVG's count are separate measurements only when cost may be NULL
    assert kinds.count("csum") == 1 and kinds.count("csq") == 1 and kinds.count("sum") == 1
    assert st.agg_plans[1].measures["csum"] == st.agg_plans[2].measures["csum"]


def test_budget_split_pass_follows_weights(visits_curator: Curator) -> None:
    st = _run_until(_state(visits_curator, "SELECT COUNT(*) AS n, SUM(cost) AS s FROM visits",
                           weights={"s": 3}), "budget_split")
    # the outputs split what the diagnostics (DIAGNOSTICS_SHARE, equal parts) leave
    main = 1.0 - dplan.DIAGNOSTICS_SHARE
    shares = {m.label: m.share for m in st.measures if m.kind not in dplan.DIAG_KINDS}
    assert shares == pytest.approx({"COUNT(*)": 0.25 * main, "SUM(cost)": 0.75 * main})
    diag = [m.share for m in st.measures if m.kind in dplan.DIAG_KINDS]
    assert len(diag) == 3 and sum(diag) == pytest.approx(dplan.DIAGNOSTICS_SHARE)
    assert sum(st.share_eps.values()) == pytest.approx(1.0, rel=1e-12)


def _sql_state(cur: Curator, query: str) -> pcompile.SqlState:
    plan = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise="laplace", level=0.95,
                     bounds=None)
    rel = {n: f"rel_{n}" for n in plan.catalog}
    return pcompile.SqlState(plan=plan, relations=rel, seed=7, fixed_columns=frozenset(),
                             key_rel={}, fill_keys=False)


def test_compile_passes_alone(visits_curator: Curator) -> None:
    names = [p.__name__ for p in pcompile.COMPILE_PASSES]
    assert names == ["project_columns", "source_cte", "bound_contributions",
                     "fixed_point_sums", "measure_aggregates", "group_output"]
    st = _sql_state(visits_curator, "SELECT COUNT(*), SUM(cost) FROM visits WHERE age > 3")
    pcompile.project_columns(st)
    assert st.proj[0].endswith(" AS __u")
    assert st.value_cols == {f"{dsql.PRIVATE_ALIAS}.cost": "__c0"}
    pcompile.source_cte(st)
    assert len(st.ctes) == 1 and st.ctes[0].startswith("__src AS (SELECT ")
    assert "rel_visits" in st.ctes[0] and " WHERE " in st.ctes[0]
    pcompile.bound_contributions(st)  # m = 2 rows per unit: the bounding CTEs, ending in __b
    assert st.current == "__b"
    pcompile.fixed_point_sums(st)
    assert st.mcols == ["__s0", "__n0"] and st.current == "__p"
    pcompile.measure_aggregates(st)
    pcompile.group_output(st)
    assert st.compiled is not None
    whole = dplan.compile_sql(st.plan, relations=st.relations, seed=7)
    assert st.compiled == whole


def test_plan_package_imports_down_its_floors_only() -> None:
    for i, name in enumerate(FLOORS):
        tree = ast.parse((PLAN_DIR / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith("dpkit.engine.plan"):
                target = node.module.removeprefix("dpkit.engine.plan").lstrip(".")
                assert target in FLOORS[:i], f"plan/{name}.py imports {node.module}"
