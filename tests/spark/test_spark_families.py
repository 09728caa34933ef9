"""QUANTILE/MEDIAN, the release families, ``fit`` and ``max_rows_per_unit="auto"`` on Spark:
the same exact (pre-noise) aggregates as DuckDB's, the same answers under the same seeded
noise, and the charge rules (refused before it, kept after it).

Both projects load conftest's generated table (NULLs and NaN, duplicates, +-1e300 and -0.0,
61 groups, heavy units); the DuckDB project compiles the portable form (``Preparer.portable``,
``Context.portable``) so that bounding keeps the same rows. Spark queries cost seconds on a
shared machine: each test reads a few statements only.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _spark_helpers import DeadSession, exact_aggregates, open_pair

import dpkit as dp
from dpkit.engine import QueryError
from dpkit.engine.backend_duckdb import table_relation
from dpkit.engine.backend_spark import SparkBackend
from dpkit.engine.charge import ChargedQueryError
from dpkit.engine.families import histogram
from dpkit.engine.families.fit import plan_encoding, statement
from dpkit.engine.families.job import CdfAsk, MarginalsAsk, RangesAsk, Target
from dpkit.engine.families.plan import plan

KEYS = [f"k{i:02d}" for i in range(60)]
DECL: dict[str, Any] = {"bounds": {"x": (-100, 100), "k": (-5, 5)},
                        "domains": {"g": KEYS, "h": ["a", "b", "c"]}}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, spark: Any,
         parquet_rows: Path) -> Iterator[tuple[Any, Any]]:
    yield from open_pair(tmp_path_factory.mktemp("families"), spark, parquet_rows, DECL,
                         seed=5)


_exact_sql = exact_aggregates


@pytest.mark.parametrize(("table", "queries"), [
    ("rec", ["SELECT g, MEDIAN(k) AS m, QUANTILE(x, 0.9) AS q, COUNT(*) AS n FROM {t} "
             "GROUP BY g",
             "SELECT MEDIAN(x) AS m FROM {t} WHERE k > 100"]),  # no row: NULL histogram
    ("usr", ["SELECT h, MEDIAN(x) AS m, AVG(x) AS a FROM {t} GROUP BY h",
             "SELECT k, QUANTILE(x, 0.25) AS q FROM {t} GROUP BY k",  # private selection
             # the one-pass fold: sums beside two quantiles, and (no row, no GROUP BY) the
             # empty grouping set, which Spark drops and DuckDB keeps
             "SELECT g, SUM(k) AS s, AVG(x) AS a, MEDIAN(x) AS m, QUANTILE(k, 0.9) AS q "
             "FROM {t} GROUP BY g",
             "SELECT COUNT(*) AS n, SUM(x) AS s, MEDIAN(k) AS m FROM {t} WHERE k > 100"]),
])
def test_quantile_histograms_are_equal(pair: Any, table: str, queries: list[str]) -> None:
    """QUANTILE's bin counts per group (DuckDB's histogram(), portably a GROUP BY count)."""
    duck, spk = pair
    for q in queries:
        query = q.format(t=table)
        d, s = _exact_sql(duck, query), _exact_sql(spk, query)
        assert s == d, query
        maps = [v for col in d[1].values() for v in col if isinstance(v, dict)]
        assert maps or "k > 100" in query, query  # the histograms were compared
        if "k > 100" in query:  # no row: counts 0, sums and maps NULL on both
            assert [v for col in d[1].values() for v in col if v not in (0, None)] == []


def test_portable_quantiles_equal_duckdb_native_ones(tmp_path: Path, parquet_rows: Path) -> None:
    """At record level nothing is hashed: the portable bin counts equal DuckDB's histogram()
    (NULL for a group whose values are all NULL or NaN, and for no row at all)."""
    cur = dp.Curator.create(tmp_path / "native.dpkit", epsilon=1000, delta=1e-3,
                            source=dp.noise.seeded(1))
    cur.add_table("rec", str(parquet_rows), **DECL)
    for query in ("SELECT g, MEDIAN(k) AS m, QUANTILE(x, 0.9) AS q FROM rec GROUP BY g",
                  "SELECT k, MEDIAN(x) AS m, COUNT(*) AS n FROM rec GROUP BY k",
                  "SELECT MEDIAN(x) AS m FROM rec WHERE k > 100"):
        cur._preparer.portable = True
        portable = _exact_sql(cur, query)
        cur._preparer.portable = False
        assert portable == _exact_sql(cur, query), query
    cur.close()


ASKS = [CdfAsk(table="usr", column="x"),
        RangesAsk(table="rec", column="k", ranges=[(-5, 0), (1, 5)], where="g <> 'k01'"),
        MarginalsAsk(table="usr", columns=["h", "k", "g"], k=2, where="x > 0")]


def test_family_histograms_and_diagnostics_are_equal(pair: Any) -> None:
    """The exact grid histogram and the diagnostic counts (rows read, dropped by the cap,
    outside the bounds) of a CDF, ranges and 2-way marginals, one seed for both engines."""
    outs: list[list[Any]] = [[], []]
    for i, cur in enumerate(pair):
        ctx = cur._families()
        for ask in ASKS:
            job = plan(ctx, ask, Target(epsilon=1.0))
            text = histogram.statement(ctx.backend, job, table_relation(job.meta), seed=99,
                                       portable=histogram.is_portable(ctx, job))
            diag = histogram.diagnostics_statement(ctx.backend, job, table_relation(job.meta))
            histogram.check_spark(ctx, job, [text, diag])
            x = histogram.read(ctx, job, text)
            outs[i].append((x.tolist(), histogram.read_diagnostics(ctx, diag, x, sparse=False)))
    assert outs[1] == outs[0]
    cdf_diag = outs[0][0][1]
    assert cdf_diag["rows_dropped"] > 0 and cdf_diag["rows_outside"] > 0  # both exercised


def test_same_seeded_noise_gives_identical_releases(pair: Any) -> None:
    """Every family through the curator, MEDIAN through SQL and suggest_bounds (equal and
    log-scale cells): the same released tables, the same budget spent."""
    duck, spk = pair

    def releases(cur: Any) -> list[Any]:
        return [
            cur.quantiles("usr", "x", [0.1, 0.5], epsilon=0.5).to_pandas(),
            cur.marginals("usr", ["h", "g"], epsilon=0.5).to_pandas(),
            cur.synthetic("usr", ["h", "k", "g"], epsilon=0.5, rows=40,
                          method="mst").to_pandas(),
            cur.sql("SELECT DP_RANGES(k, (-5, 0), (1, 5)) FROM rec", epsilon=0.5).to_pandas(),
            cur.sql("SELECT h, MEDIAN(x) AS m FROM usr GROUP BY h", epsilon=0.5).to_pandas(),
            cur.suggest_bounds("rec", "x", epsilon=0.5)["bounds"],
            # log-scale cells: Spark's SIGN and LN against DuckDB's, on the same rows
            cur.suggest_bounds("rec", "x", epsilon=0.5, grid="log")["bounds"],
        ]

    for a, b in zip(releases(duck), releases(spk), strict=True):
        assert a.equals(b) if hasattr(a, "equals") else a == b
    assert duck.budget().spent == spk.budget().spent


def test_fit_reads_the_same_rows_and_trains_the_same_model(pair: Any) -> None:
    """fit's bounded, encoded rows (what the model trains on, read to the driver) are equal
    and in the same order; a seeded logistic regression then has the same coefficients."""
    duck, spk = pair
    rows = []
    for cur in pair:
        ctx = cur._families()
        meta = ctx.tables()["usr"]
        enc = plan_encoding(meta, ["x", "k", "g"], "h")
        text = statement(meta, enc, "x > -50", table_relation(meta), seed=7, portable=True)
        if isinstance(ctx.backend, SparkBackend):
            ctx.backend.check(text, {"usr": meta})
        rows.append(ctx.backend.run_numpy(text))
    assert list(rows[0]) == list(rows[1]) and len(rows[0]["__y"]) > 1000
    for c in rows[0]:
        assert np.array_equal(np.asarray(rows[0][c], dtype=float),
                              np.asarray(rows[1][c], dtype=float)), c
    from dpkit.learn import LogisticRegression

    models = [cur.fit(LogisticRegression(epsilon=1.0), "SELECT x, k, g, h "
                      "FROM usr WHERE x > -50", label="h").model for cur in pair]
    assert np.array_equal(models[0].coef_, models[1].coef_)
    assert duck.budget().spent == spk.budget().spent


def test_auto_rows_per_unit_on_spark(pair: Any, parquet_rows: Path) -> None:
    """``max_rows_per_unit="auto"``: the same exact rows-per-unit histogram, the same seeded
    choice and the same charge on both engines."""
    duck, spk = pair
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        metas = [cur.add_table("auto", str(parquet_rows), privacy_unit="uid",
                               max_rows_per_unit="auto", rows_epsilon=1.0, **DECL)
                 for cur in pair]
    assert metas[0].max_rows_per_unit == metas[1].max_rows_per_unit
    assert metas[1].storage == "spark"
    assert duck.budget().spent == spk.budget().spent




def test_a_dead_session_refuses_families_and_fit_before_the_charge(pair: Any) -> None:
    _, spk = pair
    with dp.Curator.open(spk.path, spark=DeadSession()) as cur:
        spent = cur.budget().spent
        for call in (lambda: cur.cdf("usr", "x", epsilon=0.5),
                     lambda: cur.sql("SELECT MEDIAN(x) AS m FROM usr", epsilon=0.5),
                     lambda: cur.fit(_Recorder(), "SELECT x, h FROM usr", label="h")):
            with pytest.raises(QueryError, match="Spark session has been stopped"):
                call()
        assert cur.budget().spent == spent


def test_zz_a_session_dying_after_the_charge_keeps_it(pair: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark analysed the statement, the ledger was charged, then the session dies before the
    rows are read: the charge stays and nothing is released (runs last: the pair's budgets
    part here)."""
    _, spk = pair

    def dead(self: SparkBackend, text: str) -> Any:
        raise ConnectionError("Py4JNetworkError: answer from Java side is empty")

    monkeypatch.setattr(SparkBackend, "_collect", dead)
    monkeypatch.setattr(SparkBackend, "run_numpy", lambda self, text: dead(self, text))
    for call in (lambda: spk.cdf("usr", "x", epsilon=0.5),
                 lambda: spk.sql("SELECT MEDIAN(x) AS m FROM usr", epsilon=0.5),
                 lambda: spk.fit(_Recorder(), "SELECT x, h FROM usr", label="h")):
        spent = spk.budget().spent
        with pytest.raises(ChargedQueryError):
            call()
        assert spk.budget().spent == pytest.approx(spent + 0.5)


class _Recorder:
    """A model double for fit: costs PureDP(0.5), keeps nothing."""

    epsilon = 0.5

    def set_params(self, **params: Any) -> _Recorder:
        return self

    def privacy_event(self, n_features: int, contributions: int) -> Any:
        return dp.events.PureDP(0.5)

    def fit(self, X: Any, y: Any, units: Any = None) -> _Recorder:
        return self
