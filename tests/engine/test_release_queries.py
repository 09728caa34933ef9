"""The curator's range/CDF/quantile/marginal families and synthetic data (dpkit.release inside
the engine): correctness within the stated intervals, one ledger charge with the planned event,
refusals that spend nothing, user-level contribution bounding, SQL forms and bad input.

Statistical checks: every interval is requested at a level chosen so that the union bound over
the intervals checked in one test stays <= 1e-6 (stated per test); the noise source is seeded,
so each run is reproducible, and the bounds say how often a fresh seed could fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.accounting import BudgetExceeded
from dpkit.engine import Curator
from dpkit.engine.families import CdfAsk, Target, histogram
from dpkit.engine.families.plan import plan
from dpkit.engine.sql import QueryError
from dpkit.release import mwem_event, plan_workload, workloads

AGES = (0, 100)


def _record_table(n: int = 2000, seed: int = 11) -> pd.DataFrame:
    src = dp.noise.seeded(seed)
    age = dp.noise.uniform_int(101, n, source=src)
    # a skewed shape so that CDF errors are not symmetric around a uniform guess
    age = np.minimum(age, dp.noise.uniform_int(101, n, source=src)).astype(np.int64)
    ward = np.array(["A", "B", "C"], dtype=object)[dp.noise.uniform_int(3, n, source=src)]
    cost = np.round(dp.noise.uniform_float01(n, source=src) * 1000.0, 3)
    return pd.DataFrame({"age": age, "ward": ward, "cost": cost,
                         "note": np.array(["x"] * n, dtype=object)})


def _add_people(cur: Curator) -> tuple[Curator, pd.DataFrame]:
    df = _record_table()
    cur.add_table("people", df, bounds={"age": AGES, "cost": (0, 1000)},
                  domains={"ward": ["A", "B", "C"]})
    return cur, df


@pytest.fixture
def rec(project: Callable[..., Curator]) -> tuple[Curator, pd.DataFrame]:
    """Record-level table: the exact counts are known to the test."""
    return _add_people(project(epsilon=500.0, delta=1e-6, seed=3))


@pytest.fixture(scope="module")
def shared_rec(tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[tuple[Curator, pd.DataFrame]]:
    """:func:`rec` built once for the parametrized refusals: each asserts that no charge was
    ever made, so a wrong charge fails it (and every later one) as on a fresh project."""
    cur = Curator.create(tmp_path_factory.mktemp("rec") / "p1.dpkit", epsilon=500.0,
                         delta=1e-6, accountant=None, source=dp.noise.seeded(3))
    yield _add_people(cur)
    cur.close()


def _charges(cur: Curator) -> int:
    return len(cur.budget().history)


# ------------------------------------------------------------------------------ ranges


def test_ranges_cover_exact_counts_and_charge_once(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    pairs = [(0, 9), (10, 29), (30, 100), (5, 60), (42, 42)]
    level = 1 - 2e-7  # 5 intervals: union bound 1e-6
    before = _charges(cur)
    res = cur.ranges("people", "age", pairs, epsilon=1.0, level=level)
    assert _charges(cur) == before + 1
    exact = np.array([((df.age >= a) & (df.age <= b)).sum() for a, b in pairs])
    lo, hi = res.ci("count")
    assert np.all((lo <= exact) & (exact <= hi)), (lo, exact, hi)
    assert res["low"].tolist() == [a for a, _ in pairs]
    assert res["high"].tolist() == [b for _, b in pairs]
    # the charged event is the planned one: pure epsilon exactly 1, one ledger row
    last = cur.budget().history[-1]
    assert last.event == res.event
    assert dp.accounting.epsilon(res.event, delta=0.0, method="pure") <= 1.0 + 1e-12
    assert res.epsilon == pytest.approx(1.0)
    assert "DP_RANGES(age" in last.query
    assert res.split[0]["expected_rmse"] > 0 and res.split[0]["strategy"]
    assert res.ledger_seq == last.seq


def test_ranges_event_is_the_plan_for_the_reduced_workload(
        rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = rec
    res = cur.ranges("people", "age", [(0, 9), (10, 19)], epsilon=0.5, strategy="identity",
                     diagnostics=False)  # the family's own event, without the diagnostics'
    # two adjacent ranges reduce to two segments measured by the identity: sensitivity 1
    expected = plan_workload(workloads.ranges([(0, 0), (1, 1)], 2), "identity",
                             epsilon=0.5).event
    assert res.event == expected


def test_binned_ranges_are_snapped_and_say_so(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.ranges("people", "cost", [(0, 250), (100.3, 700)], epsilon=1.0, bins=100,
                     level=1 - 5e-7)
    assert res["low"].tolist() == [0.0, 100.0]
    assert res["high"].tolist() == [250.0, 700.0]
    assert any("snapped" in n for n in res.notes)
    exact = np.array([((df.cost >= 0) & (df.cost < 250)).sum(),
                      ((df.cost >= 100) & (df.cost < 700)).sum()])
    lo, hi = res.ci("count")
    assert np.all((lo <= exact) & (exact <= hi))


def test_level_is_respected(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = rec
    narrow = cur.ranges("people", "age", [(0, 50)], epsilon=1.0, level=0.5)
    wide = cur.ranges("people", "age", [(0, 50)], epsilon=1.0, level=0.999)
    w1 = float(np.diff(np.array(narrow.ci("count")).ravel())[0])
    w2 = float(np.diff(np.array(wide.ci("count")).ravel())[0])
    assert narrow.level == 0.5 and wide.level == 0.999
    assert 0 < w1 < w2


# ------------------------------------------------------------------------------ CDF


def test_cdf_band_is_simultaneous_and_covers(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.cdf("people", "age", epsilon=1.0, level=1 - 1e-6)  # one simultaneous band
    exact = np.array([(df.age <= v).sum() for v in range(101)])
    lo, hi = res.ci("count")
    assert len(res) == 101 and res["edge"].tolist() == list(range(101))
    assert np.all((lo <= exact) & (exact <= hi))
    assert np.all(np.diff(res["count"]) >= 0)
    flo, fhi = res.ci("fraction")
    frac = exact / exact[-1]
    assert np.all((flo <= frac + 1e-12) & (frac <= fhi + 1e-12))


def test_cdf_with_where_covers_the_subset(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.cdf("people", "age", where="ward = 'B' AND cost < 500", epsilon=2.0,
                  level=1 - 1e-6)
    sub = df[(df.ward == "B") & (df.cost < 500)]
    exact = np.array([(sub.age <= v).sum() for v in range(101)])
    lo, hi = res.ci("count")
    assert np.all((lo <= exact) & (exact <= hi))
    assert "WHERE ward = 'B'" in cur.budget().history[-1].query


def test_optimised_cdf_beats_identity_in_measured_error(
        project: Callable[..., Curator]) -> None:
    """Measured over 100 releases each on 401 cells. The exact expected MSEs (from the plans)
    differ by a factor above 5; we require the measured difference of the mean MSEs to exceed
    6 standard errors of that difference (z = 6: a fresh seed fails with probability ~1e-9
    under the normal approximation of 100-run means)."""
    cur = project(epsilon=1000.0, delta=0.0, seed=9)
    df = _record_table(n=800, seed=4)
    cur.add_table("people", df, bounds={"age": (0, 400)})
    exact = np.array([(df.age <= v).sum() for v in range(401)], dtype=float)
    errs: dict[str, list[float]] = {"auto": [], "identity": []}
    for _ in range(100):
        for name, strat in (("auto", None), ("identity", "identity")):
            r = cur.cdf("people", "age", epsilon=1.0, strategy=strat)
            errs[name].append(float(np.mean((r["count"] - exact) ** 2)))
    a, b = np.array(errs["auto"]), np.array(errs["identity"])
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    assert b.mean() - a.mean() > 6 * se, (a.mean(), b.mean(), se)


def test_gaussian_cdf_band_covers(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.cdf("people", "age", epsilon=1.0, delta=1e-7, level=1 - 1e-6)
    assert isinstance(res.event, dp.events.ZCDP)
    exact = np.array([(df.age <= v).sum() for v in range(101)])
    lo, hi = res.ci("count")
    assert np.all((lo <= exact) & (exact <= hi))
    assert res.epsilon <= 1.0 + 1e-9  # (1, 1e-7) charged as its own delta share
    pv = cur.preview_release("quantiles", "people", "age", [0.5], rho=0.1)
    assert pv.cost > 0 and len(cur.budget().history) == 1


def test_quantiles_cover_the_truth(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    probs = [0.1, 0.5, 0.9]
    res = cur.quantiles("people", "age", probs, epsilon=1.0, level=1 - 1e-6)
    lo, hi = res.ci("quantile")
    ages = np.sort(df.age.to_numpy())
    for i, p in enumerate(probs):
        true = ages[max(0, math.ceil(p * ages.size) - 1)]
        # an integer column: the interval's ends are ages (inclusive, inside the declared
        # bounds 0-100), and the estimate is an age between them
        assert lo[i] <= true <= hi[i], (p, lo[i], true, hi[i])
        assert 0 <= lo[i] <= res["quantile"][i] <= hi[i] <= 100
        assert all(float(v).is_integer() for v in (lo[i], hi[i], res["quantile"][i]))


# ------------------------------------------------------------------------------ marginals


def test_marginals_cover_exact_tables(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    # ward (3 keys) x age (101 integers -> 11 cells of 10): 3 + 11 + 33 = 47 intervals
    res = cur.marginals("people", [("ward",), ("age",), ("ward", "age")], epsilon=1.0,
                        level=1 - 1e-6 / 47)
    out = res.to_pandas()
    assert set(out.marginal) == {"ward", "age", "ward x age"}
    cell = df.age // 10
    labels = [f"[{10 * i}, {min(10 * i + 9, 100)}]" for i in range(11)]
    for _, row in out.iterrows():
        mask = np.ones(len(df), dtype=bool)
        if not pd.isna(row.ward):
            mask &= (df.ward == row.ward).to_numpy()
        if not pd.isna(row.age):
            mask &= (cell == labels.index(row.age)).to_numpy()
        assert row.count_ci_low <= mask.sum() <= row.count_ci_high
    assert _charges(cur) == 1
    assert any("expected RMSE" in n for n in res.notes)


def test_marginals_need_declared_domains(project: Callable[..., Curator]) -> None:
    cur = project()
    cur.add_table("t", _record_table(n=50), bounds={"age": AGES})
    with pytest.raises(QueryError, match="no declared domain"):
        cur.marginals("t", ["note", "age"], epsilon=1.0)
    with pytest.raises(QueryError, match="at most 4096"):
        cur.marginals("t", ["age", "cost"], epsilon=1.0, bins=100,
                      bounds={"cost": (0, 1000)})
    assert _charges(cur) == 0


# ------------------------------------------------------------------------------ synthetic


@pytest.mark.parametrize("method", ["mwem", "factorization"])
def test_synthetic_shape_domain_and_charge(rec: tuple[Curator, pd.DataFrame], method: str,
                                           tmp_path: Path) -> None:
    cur, _ = rec
    # diagnostics off: the charged event is exactly the family's (compared below)
    syn = cur.synthetic("people", ["ward", "age"], epsilon=1.0, method=method, rows=500,
                        diagnostics=False)
    frame = syn.to_pandas()
    assert len(syn) == 500 and list(frame.columns) == ["ward", "age"]
    assert set(frame.ward) <= {"A", "B", "C"}
    assert frame.age.between(0, 100).all()
    hist = cur.budget().history
    assert len(hist) == 1 and hist[-1].event == syn.event and syn.ledger_seq == hist[-1].seq
    assert syn.epsilon == pytest.approx(1.0)
    if method == "mwem":
        W = workloads.marginals((3, 11), 2)
        assert syn.event == mwem_event(W, epsilon=1.0, rounds=20)
    syn.to_parquet(tmp_path / "s.parquet")
    back = pd.read_parquet(tmp_path / "s.parquet")
    assert back.shape == (500, 2)


def test_synthetic_export_needs_no_pandas(rec: tuple[Curator, pd.DataFrame], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """pandas is not a core dependency: a release charged to the ledger must never fail
    afterwards for want of it (the answer would be lost with its budget spent)."""
    import sys

    cur, _ = rec
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    syn = cur.synthetic("people", ["ward", "age"], epsilon=0.5, rows=50)
    syn.write(tmp_path / "s.csv")
    syn.to_parquet(tmp_path / "s.parquet")
    monkeypatch.undo()
    assert (tmp_path / "s.csv").read_text().splitlines()[0] == "ward,age"
    assert pd.read_parquet(tmp_path / "s.parquet").shape == (50, 2)


# ------------------------------------------------------------------------------ user level


def test_user_level_bounding_moves_histogram_by_at_most_m(
        project: Callable[..., Curator]) -> None:
    """A unit with 300 rows spread over many cells changes the bounded histogram by <= m."""
    base = pd.DataFrame({"pid": np.arange(200) % 80, "age": (np.arange(200) * 7) % 101})
    heavy = pd.DataFrame({"pid": np.full(300, 999), "age": np.arange(300) % 101})
    m = 3
    hists = []
    for i, frame in enumerate((base, pd.concat([base, heavy], ignore_index=True))):
        cur = project(seed=20 + i)
        cur.add_table("v", frame, privacy_unit="pid", max_rows_per_unit=m,
                      bounds={"age": AGES})
        ctx = cur._families()
        job = plan(ctx, CdfAsk(table="v", column="age"), Target(epsilon=1.0))
        assert job.contributions == m
        hists.append(histogram.read(ctx, job))
        assert _charges(cur) == 0  # planning and the exact histogram alone spend nothing
    diff = np.abs(hists[1] - hists[0])
    assert 0 < diff.sum() <= m
    # and the sensitivity the noise was calibrated to accounts for m
    cur = project(seed=30)
    cur.add_table("v", base, privacy_unit="pid", max_rows_per_unit=m, bounds={"age": AGES})
    res = cur.ranges("v", "age", [(0, 50)], epsilon=1.0, strategy="identity")
    assert res.split[0]["sensitivity"] == m


# ------------------------------------------------------------------------------ refusals


def test_refusal_spends_nothing_and_reads_nothing(project: Callable[..., Curator],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cur = project(epsilon=1.0, delta=0.0)
    cur.add_table("t", _record_table(n=100), bounds={"age": AGES})
    cur.ranges("t", "age", [(0, 10)], epsilon=0.6)

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("data read before the budget check")

    monkeypatch.setattr(histogram, "read", boom)
    with pytest.raises(BudgetExceeded):
        cur.cdf("t", "age", epsilon=0.6)
    with pytest.raises(BudgetExceeded):
        cur.sql("SELECT DP_CDF(age) FROM t", epsilon=0.6)
    assert _charges(cur) == 1
    assert cur.budget().spent == pytest.approx(0.6)


def test_analyst_budget_applies(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = rec
    # changed with roles: bob acts through his token, not a caller-chosen analyst=
    bob = Curator.open(cur.path, token=cur.add_analyst("bob", epsilon=0.5))
    with pytest.raises(BudgetExceeded, match="bob"):
        bob.cdf("people", "age", epsilon=1.0)
    res = bob.cdf("people", "age", epsilon=0.4)
    assert cur.budget("bob").history[-1].seq == res.ledger_seq
    assert _charges(cur) == 1


def test_pure_project_refuses_gaussian_clearly(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=5.0, delta=0.0)
    cur.add_table("t", _record_table(n=100), bounds={"age": AGES})
    with pytest.raises(QueryError, match="cannot pay"):
        cur.cdf("t", "age", rho=0.1)
    assert _charges(cur) == 0


def test_gaussian_on_approx_project(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    res = cur.ranges("people", "age", [(0, 20), (21, 100)], rho=0.5, level=1 - 5e-7)
    assert isinstance(res.event, dp.events.ZCDP)
    exact = np.array([(df.age <= 20).sum(), (df.age > 20).sum()])
    lo, hi = res.ci("count")
    assert np.all((lo <= exact) & (exact <= hi))
    assert cur.budget().delta_spent > 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda c: c.cdf("people", "agee", epsilon=1.0), "no column 'agee'"),
        (lambda c: c.cdf("people", "note", epsilon=1.0), "numeric column"),
        (lambda c: c.cdf("nobody", "age", epsilon=1.0), "unknown table"),
        (lambda c: c.cdf("people", "age", epsilon=0.0), "epsilon must be > 0"),
        (lambda c: c.cdf("people", "age", epsilon=-1.0), "epsilon must be > 0"),
        (lambda c: c.cdf("people", "age"), "give the budget"),
        (lambda c: c.ranges("people", "age", [(-5, 10)], epsilon=1.0), "beyond the bounds"),
        (lambda c: c.ranges("people", "age", [(10, 5)], epsilon=1.0), "low > high"),
        (lambda c: c.ranges("people", "age", [(1.2, 1.8)], epsilon=1.0), "no integer"),
        (lambda c: c.ranges("people", "age", [], epsilon=1.0), "between 1 and"),
        (lambda c: c.cdf("people", "age", epsilon=1.0, where="age IN (SELECT 1)"),
         "subqueries"),
        (lambda c: c.cdf("people", "age", epsilon=1.0, where="1=1 GROUP BY ward"),
         "one condition"),
        (lambda c: c.cdf("people", "age", epsilon=1.0, level=1.5), "level"),
        (lambda c: c.cdf("people", "age", epsilon=1.0, bins=0), "bins"),
        (lambda c: c.synthetic("people", ["ward"], epsilon=1.0, method="gan"), "method"),
        (lambda c: c.marginals("people", ["ward"], k=3, epsilon=1.0), "k must"),
    ],
)
def test_bad_input_is_refused_and_charges_nothing(shared_rec: tuple[Curator, pd.DataFrame],
                                                  call: Callable[[Curator], object],
                                                  match: str) -> None:
    cur, _ = shared_rec
    with pytest.raises(QueryError, match=match):
        call(cur)
    assert _charges(cur) == 0


def test_null_and_nan_are_not_counted(project: Callable[..., Curator]) -> None:
    cur = project(epsilon=50.0)
    df = pd.DataFrame({"score": [1.5, float("nan"), 3.0, None] * 50,
                       "flag": [True, False, True, None] * 50})
    cur.add_table("t", df, bounds={"score": (0, 5)}, domains={"flag": [True, False]})
    res = cur.ranges("t", "score", [(0, 2), (2, 5)], epsilon=2.0, level=1 - 5e-7)
    lo, hi = res.ci("count")
    assert np.all((lo <= [50, 50]) & (np.array([50, 50]) <= hi))  # only 1.5 and 3.0 count
    m = cur.marginals("t", ["flag"], epsilon=2.0, level=1 - 5e-7)
    lo, hi = m.ci("count")
    assert np.all((lo <= [100, 50]) & (np.array([100, 50]) <= hi))  # NULL flag not counted


def test_no_bounds_declared(project: Callable[..., Curator]) -> None:
    cur = project()
    cur.add_table("t", _record_table(n=50))
    with pytest.raises(QueryError, match="no declared bounds"):
        cur.cdf("t", "age", epsilon=1.0)
    res = cur.cdf("t", "age", epsilon=1.0, bounds={"age": (0, 10)})  # per-query bounds
    assert len(res) == 11
    assert _charges(cur) == 1


# ------------------------------------------------------------------------------ SQL forms


def test_only_a_filter_with_between_visits_the_families(
        rec: tuple[Curator, pd.DataFrame], monkeypatch: pytest.MonkeyPatch) -> None:
    """A rate (a FILTER without BETWEEN) cannot be a ranges family, so it skips the families
    and their import of scipy (0.5 s on each CLI query that had the word FILTER); a FILTER with
    BETWEEN and a DP_ call still go there."""
    import dpkit.engine.families as fam

    asked: list[str] = []
    monkeypatch.setattr(fam, "answer_sql", lambda ctx, q, **kw: asked.append(q))  # -> None
    cur, _ = rec
    cur.sql("SELECT COUNT(*) FILTER (WHERE age > 60) / COUNT(*) AS old FROM people",
            epsilon=0.1)
    assert asked == []
    between = ("SELECT COUNT(*) FILTER (WHERE age BETWEEN 0 AND 17) AS kids,\n"
               "COUNT(*) FILTER (WHERE age BETWEEN 18 AND 100) AS adults FROM people")
    cur.sql(between, epsilon=0.1)  # answered by the SQL path: the fake family said None
    with pytest.raises(QueryError):  # DP_CDF is no SQL function: only the families know it
        cur.sql("SELECT DP_CDF(age) FROM people", epsilon=0.1)
    assert len(asked) == 2


def test_sql_forms(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, df = rec
    lvl = 1 - 2.5e-7  # 4 intervals below: union bound 1e-6
    cdf = cur.sql("SELECT DP_CDF(age) FROM people WHERE ward = 'A'", epsilon=1.0)
    assert len(cdf) == 101 and "edge" in cdf.columns
    fam = cur.sql(
        "SELECT COUNT(*) FILTER (WHERE age BETWEEN 0 AND 17) AS kids, "
        "COUNT(*) FILTER (WHERE age BETWEEN 18 AND 100) AS adults FROM people",
        epsilon=1.0, level=lvl)
    assert fam["name"].tolist() == ["kids", "adults"]
    exact = np.array([(df.age <= 17).sum(), (df.age >= 18).sum()])
    lo, hi = fam.ci("count")
    assert np.all((lo <= exact) & (exact <= hi))
    rng = cur.sql("SELECT DP_RANGES(p.age, (0, 9), (90, 100)) FROM people p WHERE p.cost < 500",
                  epsilon=1.0, level=lvl)
    sub = df[df.cost < 500]
    exact = np.array([(sub.age <= 9).sum(), (sub.age >= 90).sum()])
    lo, hi = rng.ci("count")
    assert np.all((lo <= exact) & (exact <= hi))
    mar = cur.sql("SELECT DP_MARGINALS(ward, age, 1) FROM people", epsilon=1.0)
    assert set(mar["marginal"]) == {"ward", "age"}
    q = cur.sql("SELECT DP_QUANTILES(age, 0.5) FROM people", epsilon=1.0)
    assert q.columns[:2] == ["probability", "quantile"]
    assert _charges(cur) == 5
    # ordinary SQL is untouched
    plain = cur.sql("SELECT COUNT(*) AS n FROM people", epsilon=0.5)
    assert plain.columns == ["n", "n_ci_low", "n_ci_high"]
    hist = cur.budget().history
    assert hist[0].query.startswith("SELECT DP_CDF(age)") and len(hist) == 6


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("SELECT DP_CDF(age), ward FROM people", "only output"),
        ("SELECT DP_CDF(age) FROM people GROUP BY ward", "GROUP"),
        ("SELECT DP_CDF(age) FROM people LIMIT 3", "LIMIT"),
        ("SELECT DP_CDF(age) FROM people WHERE age IN (SELECT age FROM people)", "subqueries"),
        ("SELECT DP_CDF(agee) FROM people", "no column 'agee'"),
        ("SELECT DP_CDF(age) FROM read_csv('x.csv')", "FROM must name"),
        ("SELECT DP_CDF(age) FROM nobody", "unknown table"),
        ("SELECT DP_CDF('age') FROM people", "DP_CDF\\(column\\)"),
        ("SELECT DP_RANGES(age, 3) FROM people", "pair"),
        ("SELECT DP_RANGES(age, (0, 'a')) FROM people", "number"),
        ("SELECT DP_RANGES(age, (0, 1000)) FROM people", "beyond the bounds"),
        # other FILTER forms are ordinary aggregates now (issue 14, tests/engine/test_aggexpr.py)
        ("SELECT DP_CDF(age) FROM people p JOIN people q ON p.age = q.age", "JOINS"),
    ],
)
def test_hostile_sql_forms_are_refused(shared_rec: tuple[Curator, pd.DataFrame], query: str,
                                       match: str) -> None:
    cur, _ = shared_rec
    with pytest.raises(QueryError, match=match):
        cur.sql(query, epsilon=1.0)
    assert _charges(cur) == 0


def test_preview_release_spends_nothing(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = rec
    pv = cur.preview_release("ranges", "people", "age", [(0, 10), (11, 50)], epsilon=0.7)
    assert pv.cost == pytest.approx(0.7) and _charges(cur) == 0
    assert pv.outputs[0]["halfwidth"] > 0
    res = cur.ranges("people", "age", [(0, 10), (11, 50)], epsilon=0.7)
    assert res.event == pv.event
    half = (res.ci("count")[1] - res.ci("count")[0]) / 2
    assert float(np.max(half)) == pytest.approx(pv.outputs[0]["halfwidth"])


def test_accuracy_picks_the_smallest_epsilon(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = rec
    res = cur.ranges("people", "age", [(0, 9), (10, 100)], accuracy=20.0)
    half = (res.ci("count")[1] - res.ci("count")[0]) / 2
    assert float(np.max(half)) <= 20.0
    # 1% less epsilon would miss the target (the search stops within 0.1%)
    pv = cur.preview_release("ranges", "people", "age", [(0, 9), (10, 100)],
                             epsilon=res.epsilon * 0.99)
    assert pv.outputs[0]["halfwidth"] > 20.0
    cdf = cur.sql("SELECT DP_CDF(age) FROM people", accuracy=80.0)
    assert float(np.max(cdf["count_ci_high"] - cdf["count_ci_low"])) / 2 <= 80.0
    with pytest.raises(QueryError, match="not both"):
        cur.cdf("people", "age", epsilon=1.0, accuracy=5.0)
    assert _charges(cur) == 2


# ------------------------------------------------------------------------------ CLI


def test_cli_commands(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dpkit.cli import _FriendlyGroup
    from dpkit.cli import release as release_commands

    group = _FriendlyGroup()
    for c in release_commands.commands:
        group.add_command(c)
    path = tmp_path / "p.dpkit"
    cur = Curator.create(path, epsilon=10.0, delta=1e-6)
    cur.add_table("people", _record_table(n=300), bounds={"age": AGES},
                  domains={"ward": ["A", "B", "C"]})
    cur.close()
    runner = CliRunner()
    p = str(path)
    ok = [
        ["cdf", p, "people", "age", "--epsilon", "0.5"],
        ["cdf", p, "people", "age", "--epsilon", "0.5", "--preview"],
        ["ranges", p, "people", "age", "-r", "0:17", "-r", "18:100", "--epsilon", "0.5",
         "--output", str(tmp_path / "r.csv")],
        ["quantiles", p, "people", "age", "-p", "0.5", "--epsilon", "0.5"],
        ["marginals", p, "people", "--columns", "ward,age", "--epsilon", "0.5"],
        ["synthetic", p, "people", "--columns", "ward,age", "--epsilon", "1", "--rows", "50",
         "--output", str(tmp_path / "s.parquet")],
    ]
    for args in ok:
        out = runner.invoke(group, args)
        assert out.exit_code == 0, (args, out.output, out.exception)
    assert pd.read_csv(tmp_path / "r.csv").shape == (2, 5)
    assert pd.read_parquet(tmp_path / "s.parquet").shape == (50, 2)
    bad = runner.invoke(group, ["cdf", p, "people", "agee", "--epsilon", "0.5"])
    assert bad.exit_code == 2 and "no column 'agee'" in bad.output
    over = runner.invoke(group, ["cdf", p, "people", "age", "--epsilon", "50"])
    assert over.exit_code == 2 and "exceeded" in over.output
    with Curator.open(path) as cur2:
        assert len(cur2.budget().history) == 5  # preview and refusals spent nothing
        assert cur2.budget().spent == pytest.approx(3.0)


def test_preview_cdf_bounds_the_band(rec: tuple[Curator, pd.DataFrame]) -> None:
    cur, _ = rec
    pv = cur.preview_release("cdf", "people", "age", epsilon=0.5)
    res = cur.cdf("people", "age", epsilon=0.5)
    band = (res["count_ci_high"] - res["count_ci_low"]) / 2
    assert float(np.max(band)) <= pv.outputs[0]["halfwidth"] * (1 + 1e-9)
    assert res.event == pv.event
