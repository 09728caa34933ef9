"""Shared by the Spark tests (a module name no other test folder uses)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class DeadSession:
    """What a SparkSession looks like once its JVM is gone: every call into it fails."""

    def newSession(self) -> DeadSession:
        return self

    @property
    def conf(self) -> Any:
        return self

    def set(self, *_: Any) -> None:
        pass

    @property
    def sparkContext(self) -> Any:
        raise ConnectionError("Py4JNetworkError: answer from Java side is empty")


def curator_pair(tmp: Path, spark: Any, parquet: Path, decl: dict[str, Any], *, seed: int,
                 setup: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
    """Two projects over the same Parquet rows, a DuckDB one (asked for its portable
    statements) and a Spark one, each with table ``rec`` (record level) and ``usr`` (unit
    ``uid``, 3 rows and 2 groups per unit), the same seeded noise, then ``setup(cur)``."""
    import dpkit as dp

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for engine in ("duckdb", "spark"):
            cur = dp.Curator.create(tmp / f"{engine}.dpkit", epsilon=1000, delta=1e-3,
                                    source=dp.noise.seeded(seed), engine=engine,
                                    spark=spark if engine == "spark" else None)
            cur.add_table("rec", str(parquet), **decl)
            cur.add_table("usr", str(parquet), privacy_unit="uid", max_rows_per_unit=3,
                          max_groups_per_unit=2, **decl)
            if setup is not None:
                setup(cur)
            out.append(cur)
    out[0]._preparer.portable = True
    return out[0], out[1]


def exact_aggregates(cur: Any, query: str) -> tuple[list[Any], dict[str, list[Any]]]:
    """The released keys and the exact (pre-noise) aggregates of ``query``."""
    from dpkit.engine import plan as dplan

    p = cur._plan(query, epsilon=1.0, rho=None, delta=None, noise=dplan.LAPLACE, level=0.95,
                  bounds=None)
    ex = cur._execute(p)
    return ex.keys, ex.cols


def assert_exact_parity(duck: Any, spk: Any, queries: list[str], table: str) -> None:
    """Each query (``{t}`` = ``table``) releases the same keys and exact aggregates on both."""
    for q in queries:
        query = q.format(t=table)
        d_keys, d_cols = exact_aggregates(duck, query)
        s_keys, s_cols = exact_aggregates(spk, query)
        assert s_keys == d_keys, query
        assert s_cols == d_cols, query
        assert d_keys or d_cols, query  # something was measured


def open_pair(tmp: Path, spark: Any, parquet: Path, decl: dict[str, Any], *, seed: int,
              setup: Callable[[Any], None] | None = None) -> Iterator[tuple[Any, Any]]:
    """:func:`curator_pair` for a fixture: yields the pair, closes both projects after."""
    duck, spk = curator_pair(tmp, spark, parquet, decl, seed=seed, setup=setup)
    try:
        yield duck, spk
    finally:
        duck.close()
        spk.close()
