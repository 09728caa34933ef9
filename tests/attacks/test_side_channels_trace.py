"""The fuzzer compares the work each query does (its timing class), not only what it shows.

The work trace (:mod:`dpkit.noise.trace`) records, while the fuzzer runs a query on D and on
D', the engine statements (in order, with their text) and the noise requests (sampler or
mechanism, scales, sizes). Two planted leaks show that the comparison can fail, and that it is
the trace that finds them: an extra statement run only when a group's exact count is odd, and
a noise scale computed from the data. Neither changes anything else the fuzzer compares.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit import noise
from dpkit.attacks import side_channels as sc
from dpkit.engine.tables import Column, TableMeta

SMALL = TableMeta("t", (Column("uid", "BIGINT"), Column("k", "VARCHAR"), Column("x", "DOUBLE")),
                  privacy_unit="uid", bounds={"x": (0, 10)}, domains={"k": ("a", "b")})
# a plant has to be reached: plain counts and sums by a declared key, no filter
_RUN: dict[str, Any] = {"queries": 16, "seed": 3, "neighbours": ("add",),
                        "accountants": ("approx",), "families": ("sql",), "units": 10,
                        "minimise": False}


def _curator(tmp: Path, rows: int, seed: int = 1) -> dp.Curator:
    cur = dp.Curator.create(tmp / f"p{rows}.dpkit", epsilon=50.0, source=noise.seeded(seed))
    df = pd.DataFrame({"uid": range(rows), "k": ["a", "b"] * (rows // 2) + ["a"] * (rows % 2),
                       "x": np.linspace(0, 10, rows)})
    cur.add_table("t", df, privacy_unit="uid", max_rows_per_unit=1, bounds={"x": (0, 10)},
                  domains={"k": ["a", "b"]})
    return cur


# ---------------------------------------------------------------------- the recorder


def test_the_recorder_is_off_by_default_and_sees_a_query(tmp_path: Path) -> None:
    cur = _curator(tmp_path, 20)
    assert noise.trace.active() is None
    with noise.trace.recording() as t:
        cur.sql("SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k", epsilon=1.0)
        with pytest.raises(RuntimeError, match="do not nest"), noise.trace.recording():
            pass
    assert noise.trace.active() is None
    methods = [s[1] for s in t.statements]
    assert "dry_run" in methods and methods.index("dry_run") < len(methods) - 1
    assert methods[-1] in ("run", "run_rows", "run_columns")  # the one read, after the charge
    # the two measures' noise (its scale, one value per declared key), then the diagnostic
    # counts' (one value each: what bounding dropped and clamped)
    dlap = [r for r in t.noise if r[0] == "discrete_laplace"]
    assert [r[2] for r in dlap[:2]] == ["#(2)", "#(2)"], t.noise
    assert len(dlap) > 2 and {r[2] for r in dlap[2:]} == {"#(1)"}, t.noise
    # the per-query seed was drawn from the project's source and embedded in the statement
    assert t.drawn and any(t.drawn[0] in s[2] for s in t.statements)
    assert t.drawn[0] not in t.scrub(t.statements[-1][2])
    # nothing is recorded outside a recording (the hooks find None and return)
    cur.sql("SELECT COUNT(*) AS n FROM t", epsilon=1.0)
    assert len(t.statements) == len(methods)
    cur.close()


def test_a_mechanism_is_one_request_whatever_its_loop(tmp_path: Path) -> None:
    """The exponential mechanism's rejection loop draws a number of proposals that depends on
    the scores; the trace shows the one request (candidates and factor), not the loop."""
    from dpkit import mechanisms

    src = noise.seeded(2)
    for scores in ([0.0, 0.0, 0.0, 0.0], [0.0, -50.0, -80.0, -90.0]):
        with noise.trace.recording() as t:
            mechanisms.exponential(["a", "b", "c", "d"], scores, sensitivity=1.0, epsilon=0.5,
                                   source=src)
        assert [r[0] for r in t.noise] == ["exponential_sample"], t.noise
        assert t.noise[0][1:4] == ("weights", "1/4", "#4"), t.noise


def test_per_query_seeds_are_the_same_on_d_and_d_prime(tmp_path: Path) -> None:
    """Same seeded source, same query sequence: the seeds the compiled SQL embeds agree, so a
    statement that differs after :meth:`Trace.scrub` differs for another reason."""
    drawn = []
    for rows in (20, 21):
        cur = _curator(tmp_path, rows, seed=9)
        with noise.trace.recording() as t:
            for _ in range(3):
                cur.sql("SELECT k, SUM(x) AS s FROM t GROUP BY k", epsilon=1.0)
        drawn.append(t.drawn)
        cur.close()
    assert len(drawn[0]) == 3 and drawn[0] == drawn[1]


def test_compare_flags_work_differences() -> None:
    q = sc.Query("sql", "t", text="SELECT k, COUNT(*) AS n FROM t GROUP BY k")
    a = sc.Outcome(kind="answer", columns=("k", "n"), keys=(("a",),), rows=1, charges=1,
                   statements=(("duckdb", "run", "SELECT 1"),),
                   noise=(("discrete_laplace", "2", "#1"),))
    assert sc.compare(q, a, a) == ()
    extra = dataclasses.replace(a, statements=a.statements * 2)
    assert sc.compare(q, a, extra) == ("statements",)
    scale = dataclasses.replace(a, noise=(("discrete_laplace", "4", "#1"),))
    assert sc.compare(q, a, scale) == ("noise_requests",)
    size = dataclasses.replace(a, noise=(("discrete_laplace", "2", "#2"),))
    assert sc.compare(q, a, size) == ("noise_requests",)
    # under partition selection one noise value per group found: the size may follow the data
    sel_a, sel_size = (dataclasses.replace(o, selected=True) for o in (a, size))
    assert sc.compare(q, sel_a, sel_size) == ()
    assert sc.compare(q, sel_a, dataclasses.replace(scale, selected=True)) == ("noise_requests",)
    # synthetic records: their number is noisy, and the draws that place them follow it; the
    # requests that carry a scale must still agree, in order
    syn = sc.Query("synthetic", "t", columns=("k",))
    rec = sc.Outcome(kind="answer", columns=("k",), rows=1, charges=1, noisy_rows=True,
                     noise=(("discrete_laplace", "2", "#3"), ("permutation", "#1")))
    more = dataclasses.replace(rec, rows=41, noise=(("discrete_laplace", "2", "#3"),
                                                    ("permutation", "#41"), ("permutation", "#41")))
    assert sc.compare(syn, rec, more) == ()
    wider = dataclasses.replace(rec, noise=(("discrete_laplace", "4", "#3"),))
    assert sc.compare(syn, rec, wider) == ("noise_requests",)
    f = sc.Finding("neighbours", ("statements",), q, "add", "approx", a, extra)
    assert f.cause() == "work" and "statement 2 of 1" in f.reproducer()


# ---------------------------------------------------------------------- planted leaks


def _odd_count(exact: Any) -> bool:
    return any(int(v) % 2 == 1 for c in exact.cols.values() for v in c
               if isinstance(v, (int, np.integer)))


def plant_extra_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read runs one more statement when some group's exact count is odd (say, a
    diagnostic looked up only then): nothing shown changes, the work does."""
    from dpkit.engine import query_methods

    real = query_methods.read_exact

    def leaky(backend: Any, prepared: Any) -> Any:
        exact = real(backend, prepared)
        if _odd_count(exact):
            backend.query_public("SELECT 1 AS planted")
        return exact

    monkeypatch.setattr(query_methods, "read_exact", leaky)


def plant_data_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """A smooth-sensitivity-style mistake: the noise is redrawn at a scale computed from the
    data (twice as wide when the exact total is odd) while the event stays the planned one."""
    from dpkit import mechanisms

    real = mechanisms.geometric

    def leaky(exact: np.ndarray, *, sensitivity: int, epsilon: float, **kw: Any) -> Any:
        rel = real(exact, sensitivity=sensitivity, epsilon=epsilon, **kw)
        width = 2.0 if int(np.sum(exact)) % 2 else 1.0
        z = noise.discrete_laplace(width * sensitivity / epsilon, exact.shape,
                                   source=kw.get("source"))
        return dataclasses.replace(rel, value=exact + z)

    monkeypatch.setattr(mechanisms, "geometric", leaky)


@pytest.mark.parametrize(("plant", "field"), [(plant_extra_statement, "statements"),
                                              (plant_data_scale, "noise_requests")])
def test_a_planted_work_leak_is_found_by_the_trace_only(
        monkeypatch: pytest.MonkeyPatch, plant: Any, field: str) -> None:
    plant(monkeypatch)
    blind = sc.fuzz(SMALL, trace=False, **_RUN)
    assert blind.ok, blind.summary()  # what is shown does not change: only the trace sees it
    rep = sc.fuzz(SMALL, max_findings=1, **_RUN)
    causes = rep.by_cause()
    assert "work" in causes, rep.summary()
    f = causes["work"][0]
    assert f.fields == (field,), rep.summary()
    assert f.on_d1 is not None and f.on_d.kind == f.on_d1.kind == "answer"
    if field == "statements":
        assert "planted" in str(f.on_d.statements + f.on_d1.statements)
    assert "planted" in f.reproducer() or field == "noise_requests"


def test_no_work_difference_without_a_plant() -> None:
    rep = sc.fuzz(SMALL, **_RUN)
    assert rep.comparisons == _RUN["queries"] and rep.ok, rep.summary()


# ---------------------------------------------------------------------- selection (FINDINGS K1)


def _selection_pair(tmp: Path, seed: int, keys: str = "a", n: int = 20) -> list[dp.Curator]:
    """D = ``n`` units spread over the groups ``keys``, D' = D plus one more unit in group 'a':
    each group is selected (private partition selection, ε = 1) or not by the noise drawn."""
    rows = [pd.DataFrame({"uid": range(m), "g": [keys[i % len(keys)] for i in range(m - 1)]
                          + [keys[(m - 1) % len(keys)] if m == n else "a"], "x": [5.0] * m})
            for m in (n, n + 1)]
    curs = []
    for i, df in enumerate(rows):
        cur = dp.Curator.create(tmp / f"sel{seed}_{i}.dpkit", source=noise.seeded(seed),
                                budget=dp.Budget(epsilon=25.0, delta=1e-3))
        cur.add_table("t", df, privacy_unit="uid", max_rows_per_unit=1, bounds={"x": (0, 10)})
        curs.append(cur)
    return curs


def test_no_group_selected_does_the_work_of_one(tmp_path: Path) -> None:
    """MAX's exponential mechanisms ran once per selected group, so when the selection chose
    none they made no request at all (seed 17: none on D, 'a' on D'); the work followed a DP
    output (not a leak) but broke the engine's rule that an empty answer is built as a
    non-empty one, and the quantile note said ``±nan`` rows. Now one dummy lane, as counts."""
    q = sc.Query("sql", "t", text="SELECT g, COUNT(*) AS n, MAX(x) AS m FROM t{where} GROUP BY g",
                 epsilon=1.0)
    d, d1 = _selection_pair(tmp_path, 17)
    a, b = sc.observe(d, q, trace=True), sc.observe(d1, q, trace=True)
    assert (a.rows, b.rows) == (0, 1)  # the case: no group selected on D, one on D'
    assert "exponential_rows_sample" in {r[0] for r in a.noise}, a.noise
    assert sc.compare(q, a, b) == ()
    d, d1 = _selection_pair(tmp_path, 23)
    res = [c.sql(q.sql(), epsilon=1.0) for c in (d, d1)]
    assert [len(r.data["g"]) for r in res] == [0, 1]
    assert res[0].notes == res[1].notes and "nan" not in str(res[0].notes)
    for c in (d, d1):
        c.close()


def test_top_k_work_does_not_follow_the_number_of_selected_groups(tmp_path: Path) -> None:
    """Top-k by noisy max among the selected groups ran min(k, candidates) rounds and skipped
    the last candidate's: one group selected on D, two on D' (seed 3) made 0 and 1 requests.
    The rounds follow a DP output (not a leak); the peeling is now one request (one charged
    event), its candidates a size, as a mechanism's rejection loop is."""
    q = sc.Query("sql", "t", text="SELECT g, COUNT(*) AS n FROM t{where} GROUP BY g "
                 "ORDER BY n DESC LIMIT 1", epsilon=1.0, noisy_rows=True, noisy_order=True)
    d, d1 = _selection_pair(tmp_path, 3, keys="ab", n=40)
    a, b = sc.observe(d, q, trace=True), sc.observe(d1, q, trace=True)
    assert a.rows == b.rows == 1 and a.selected and b.selected
    assert sc.compare(q, a, b) == (), (a.noise, b.noise)
    for c in (d, d1):
        c.close()


def test_a_portable_hash_is_blanked_like_the_seed_it_comes_from() -> None:
    """FINDINGS.md K4: on Spark, the row cap's keyed hash writes multipliers derived from the
    per-query seed into the statement; where D's and D' sources stood at different positions
    (a rejection loop drew a data-dependent number of words earlier: no constant work) the
    seeds differed, which the trace blanks, and so did the multipliers, which it did not."""
    from dpkit.engine.plan.portable import portable_hash_sql

    texts = []
    for k in (1, 2):
        with noise.trace.recording() as t:
            seed = int(noise.uniform_int(2**62, 1, source=noise.seeded(k))[0])
            text = portable_hash_sql([("__u", "BIGINT"), ("x", "DOUBLE"), ("s", "VARCHAR")], seed)
        assert str(seed) in text
        texts.append(t.scrub(text))
    assert texts[0] == texts[1], texts
    with noise.trace.recording() as t:  # a number that merely contains a multiplier stays
        key = re.findall(r"\* ([0-9]+)\)", portable_hash_sql([("x", "DOUBLE")], 1234567))[0]
        assert t.scrub(f"{key} 1{key}9") == f"<derived#1> 1{key}9"
