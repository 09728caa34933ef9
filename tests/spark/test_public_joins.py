"""A Spark table JOINed with a public lookup table answers what DuckDB answers.

The public tables are loaded into DuckDB (as any public table); a statement that reads a Spark
table ships the public tables it joins to Spark once (a temporary view of their rows), and the
same portable statement runs there. Generated lookup tables have NULL join keys, duplicate keys
(user level; record level refuses them on both engines), keys the private table lacks and
private keys they lack; the private rows are conftest's (NULL group keys, NaN, heavy units).
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _spark_helpers import assert_exact_parity, exact_aggregates, open_pair

import dpkit as dp

KEYS = [f"k{i:02d}" for i in range(60)]
DECL: dict[str, Any] = {"bounds": {"x": (-100, 100), "k": (-5, 5)},
                        "domains": {"g": KEYS, "h": ["a", "b", "c"]}}

# joined on g: unique keys k00..k44 (k45..k59 and NULL g unmatched), a NULL key, an extra key
# no private row has; region has NULLs; w an integer, f a double
WARDS = {"g": [*KEYS[:45], None, "zz"],
         "region": [["north", "south", "east", None][i % 4] for i in range(45)] + ["west", "x"],
         "w": [i % 7 for i in range(47)],
         "f": [i * 0.25 - 3.0 for i in range(47)]}
# joined on h, duplicate keys (user level only): 'a' twice, 'b' once, NULL, 'd' unmatched
DUPS = {"h": ["a", "a", "b", None, "d"], "tag": ["t1", "t2", "t1", "t3", "t4"]}
# joined on (h, k): a two-column key, unique
PAIRS = {"h": [h for h in "abc" for _ in range(-5, 6)], "k": [k for _ in "abc" for k in
                                                              range(-5, 6)],
         "band": [("lo" if k < 0 else "hi") + h for h in "abc" for k in range(-5, 6)]}

QUERIES = [
    "SELECT COUNT(*) AS n, SUM(x) AS s FROM {t} JOIN wards ON {t}.g = wards.g",
    "SELECT region, COUNT(*) AS n, AVG(x) AS a FROM {t} JOIN wards w ON {t}.g = w.g "
    "GROUP BY region",
    "SELECT region, COUNT(*) AS n, SUM(k) AS s FROM {t} LEFT JOIN wards w ON {t}.g = w.g "
    "GROUP BY region",
    "SELECT w.w, COUNT(x) AS n, VARIANCE(x) AS v FROM {t} LEFT JOIN wards w ON {t}.g = w.g "
    "WHERE w.f > 0 OR w.f IS NULL GROUP BY w.w",
    "SELECT h, COUNT(*) AS n FROM {t} JOIN wards w ON {t}.g = w.g WHERE region = 'north' "
    "GROUP BY h",
    "SELECT band, COUNT(*) AS n, AVG(x) AS a FROM {t} JOIN pairs p ON {t}.h = p.h "
    "AND {t}.k = p.k GROUP BY band",
]
# duplicate join keys (a private row met twice): user level only
DUP_QUERIES = [
    "SELECT tag, COUNT(*) AS n, SUM(x) AS s FROM {t} JOIN dups d ON {t}.h = d.h GROUP BY tag",
    "SELECT tag, COUNT(*) AS n FROM {t} LEFT JOIN dups d ON {t}.h = d.h GROUP BY tag",
]


LOOKUPS = (("wards", WARDS), ("dups", DUPS), ("pairs", PAIRS))

# One small lookup per key type read on the driver besides integers and strings, joined on g
# like wards (k45..k59 and NULL g unmatched): dates (before 1970, leap day, 9999-12-31),
# timestamps (microseconds, before 1970) and doubles (NaN, -0.0 beside 0.5, +-1e300, float
# steps), each with a NULL key and a key that only the extra lookup row 'zz' has (an empty
# group: zeros on both engines).
_DAYS = [dt.date(1969, 12, 31), dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(9999, 12, 31),
         dt.date(2000, 1, 1)]
_STAMPS = [dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 2, 29, 12, 0, 0, 1),
           dt.datetime(1900, 1, 1), dt.datetime(2000, 1, 1, 0, 0, 0, 500000)]
_FLOATS = [math.nan, -0.0, 0.5, 1e300, -1e300, 0.1 + 0.2]
TYPED = (("days", pa.date32(), [_DAYS[i % 5] for i in range(45)] + [None, dt.date(1970, 1, 2)]),
         ("stamps", pa.timestamp("us"), [_STAMPS[i % 4] for i in range(45)]
          + [None, dt.datetime(1970, 1, 1, 0, 0, 1)]),
         ("floats", pa.float64(), [_FLOATS[i % 6] for i in range(45)] + [None, 2.5]))


def _publics(folder: Path) -> Any:
    """Each project gets the lookups loaded into DuckDB, and again as ``s_<name>`` from a
    Parquet file: on Spark in the Spark project (``engine="spark"``), on DuckDB in the other."""
    import pandas as pd

    for name, cols in LOOKUPS:
        pd.DataFrame(cols).to_parquet(folder / f"{name}.parquet")
    for name, type_, values in TYPED:
        pq.write_table(pa.table({"g": pa.array(WARDS["g"], pa.string()),
                                 "v": pa.array(values, type_)}), folder / f"{name}.parquet")

    def setup(cur: Any) -> None:
        on_spark = cur.tables()["rec"].storage == "spark"
        for name, cols in LOOKUPS:
            cur.add_table(name, pd.DataFrame(cols), public=True, engine="duckdb")
            cur.add_public_table(f"s_{name}", str(folder / f"{name}.parquet"),
                                 engine="spark" if on_spark else "duckdb")
        for name, _, _ in TYPED:
            path = str(folder / f"{name}.parquet")
            cur.add_public_table(name, path, engine="duckdb")
            cur.add_public_table(f"s_{name}", path, engine="spark" if on_spark else "duckdb")
    return setup


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, spark: Any, parquet_rows: Path) -> Any:
    folder = tmp_path_factory.mktemp("joins")
    yield from open_pair(folder, spark, parquet_rows, DECL, seed=7, setup=_publics(folder))


_exact = exact_aggregates


@pytest.mark.parametrize(("table", "queries"), [("rec", QUERIES),
                                                ("usr", QUERIES + DUP_QUERIES)])
def test_exact_aggregates_with_public_joins_are_equal(pair: Any, table: str,
                                                      queries: list[str]) -> None:
    assert_exact_parity(*pair, queries, table)


def test_same_seeded_noise_gives_identical_answers(pair: Any) -> None:
    duck, spk = pair
    for query in (QUERIES[2].format(t="usr"), DUP_QUERIES[0].format(t="usr"),
                  QUERIES[1].format(t="rec")):
        a = duck.sql(query, epsilon=0.5).to_pandas()
        b = spk.sql(query, epsilon=0.5).to_pandas()
        assert a.equals(b), query
    assert duck.budget().spent == spk.budget().spent


def test_public_group_keys_are_read_on_the_driver(pair: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A GROUP BY over a lookup's column (shipped or on Spark) reads the lookup's keys once
    per registration, by Spark before the charge, and fills the groups on the driver: the
    statement read after the charge joins no key set (``__keys``) and runs once, also at
    user level with a LEFT JOIN's NULL keys (dropped as the key join dropped them, not a
    fall-back to the join). Above ``PUBLIC_KEYS_MAX`` keys the statement joins them in
    Spark, as before; the answers are DuckDB's either way. (Before the refusals below: a
    refused query may draw its seed on one side only.)"""
    from dpkit import noise
    from dpkit.engine import backend_spark

    duck, spk = pair
    for lookup in ("wards", "s_wards"):
        query = QUERIES[2].replace("wards", lookup).format(t="usr")
        # both projects answer each query in turn: user-level bounding follows the seeds
        _exact(duck, query)
        _exact(spk, query)  # reads the keys (once per registration)
        expected = _exact(duck, query)
        with noise.trace.recording() as t:
            keys, cols = _exact(spk, query)
        reads = [s for s in t.statements if s[0] == "spark" and s[1] == "collect"]
        assert len(reads) == 1 and "__keys" not in reads[0][2], t.statements
        # a public table's keys may drop groups (NULL): the dropped rows' total is a window
        assert "OVER ()" in reads[0][2], reads
        assert (keys, cols) == expected and None not in [k[0] for k in keys]
    monkeypatch.setattr(backend_spark, "PUBLIC_KEYS_MAX", 2)  # wards has 5 regions
    spk._preparer._public_keys_cache.clear()
    with noise.trace.recording() as t:
        assert_exact_parity(duck, spk, [QUERIES[2]], "usr")
    reads = [s[2] for s in t.statements if s[0] == "spark" and s[1] == "collect"]
    assert len(reads) == 2 and "LIMIT 3" in reads[0] and "__keys" in reads[1], reads
    spk._preparer._public_keys_cache.clear()  # the later tests read the keys again


@pytest.mark.parametrize("lookup", [name for name, _, _ in TYPED])
def test_date_timestamp_and_float_keys_are_read_on_the_driver(pair: Any, lookup: str) -> None:
    """A GROUP BY over a lookup's DATE, TIMESTAMP or DOUBLE column (shipped, and on Spark)
    reads its keys on the driver like integer and string keys: the read after the charge has
    no key join and runs once; the keys (their order, NaN as one key, -0.0 as 0.0, the empty
    group of a key no private row reaches) and the exact aggregates are DuckDB's, with an
    INNER and a LEFT JOIN (whose NULL keys are dropped as the key join drops them), at record
    and user level."""
    from dpkit import noise

    duck, spk = pair
    # the shipped lookup at record level, the one on Spark at user level (the other pairs
    # take the same path: time kept short on the Spark tests' one worker)
    for name, join, table in ((lookup, "JOIN", "rec"), (f"s_{lookup}", "LEFT JOIN", "usr")):
        query = (f"SELECT v, COUNT(*) AS n, SUM(x) AS s FROM {table} {join} {name} l "
                 f"ON {table}.g = l.g GROUP BY v")
        expected = _exact(duck, query)
        with noise.trace.recording() as t:
            keys, cols = _exact(spk, query)
        # besides the public look-ups (the keys, read once per registration), one read
        reads = [s[2] for s in t.statements if s[:2] == ("spark", "collect")
                 and "__agg" in s[2]]
        assert len(reads) == 1 and "__keys" not in reads[0], t.statements
        assert _same_floats(keys, expected[0]), (keys, expected[0])
        assert cols == expected[1], query
        assert len(keys) == len({_nan_free(k) for k in keys}) >= 4, keys
        assert None not in [k[0] for k in keys], keys


def _nan_free(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in key)


def _same_floats(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    """Equal keys, NaN equal to NaN (Python's == is not)."""
    return [_nan_free(k) for k in a] == [_nan_free(k) for k in b]


def _on_spark(query: str) -> str:
    """The query joining the lookups loaded with ``engine="spark"`` instead."""
    for name, _ in LOOKUPS:
        query = query.replace(f"JOIN {name}", f"JOIN s_{name}").replace(f"{name}.", f"s_{name}.")
    return query


@pytest.mark.parametrize(("table", "queries"), [
    ("rec", [QUERIES[0], QUERIES[3]]),
    ("usr", [QUERIES[1], QUERIES[2], QUERIES[5], DUP_QUERIES[1]]),
])
def test_spark_public_tables_join_like_duckdb_ones(pair: Any, table: str, queries: list[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Public tables loaded on Spark: INNER/LEFT, one and two key columns, NULL, duplicate and
    unmatched keys, their columns as group keys and in WHERE, equal to DuckDB's; nothing is
    shipped (the shipping limit set to 1 row would refuse it)."""
    from dpkit.engine import backend_spark

    # runs before the refusals below: a refused query may draw its seed on one side only,
    # and user-level bounding depends on the seed
    monkeypatch.setattr(backend_spark, "PUBLIC_MAX_ROWS", 1)
    assert_exact_parity(*pair, [_on_spark(q) for q in queries], table)
    if table == "usr":
        duck, spk = pair
        query = _on_spark(QUERIES[2]).format(t="usr")
        assert duck.sql(query, epsilon=0.5).to_pandas().equals(
            spk.sql(query, epsilon=0.5).to_pandas())


def test_refusals_come_before_the_charge(pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A public table above the shipping limit, duplicate keys at record level, and a join
    between two private tables (refused by DuckDB too) spend nothing."""
    import pandas as pd

    from dpkit.engine import backend_spark

    _, spk = pair
    spk.add_table("big", pd.DataFrame({"g": KEYS, "z": range(60)}), public=True,
                  engine="duckdb")
    spent = spk.budget().spent
    monkeypatch.setattr(backend_spark, "PUBLIC_MAX_ROWS", 59)
    with pytest.raises(dp.engine.QueryError, match=r"has 60 rows.*at most 59"):
        spk.sql("SELECT z, COUNT(*) AS n FROM usr JOIN big ON usr.g = big.g GROUP BY z",
                epsilon=0.5)
    with pytest.raises(dp.engine.QueryError, match="repeated join keys"):
        spk.sql("SELECT COUNT(*) AS n FROM rec JOIN dups ON rec.h = dups.h", epsilon=0.5)
    with pytest.raises(dp.engine.QueryError, match="joins between private tables"):
        spk.sql("SELECT COUNT(*) AS n FROM usr JOIN rec ON usr.uid = rec.uid", epsilon=0.5)
    assert spk.budget().spent == spent


def test_spark_public_tables_are_checked_before_the_charge(pair: Any) -> None:
    """Checks on a Spark public table refuse with nothing charged: the record-level key
    uniqueness (read on Spark: its DuckDB twin is empty), the key types, a DuckDB private table
    joined with it; loads that cannot be kept on Spark are refused."""
    import pandas as pd

    _, spk = pair
    spk.add_table("tiny", pd.DataFrame({"g": KEYS[:3]}), engine="duckdb")
    spent = spk.budget().spent
    with pytest.raises(dp.engine.QueryError, match="repeated join keys"):
        spk.sql("SELECT COUNT(*) AS n FROM rec JOIN s_dups d ON rec.h = d.h", epsilon=0.5)
    with pytest.raises(dp.engine.QueryError, match="type"):
        spk.sql("SELECT COUNT(*) AS n FROM usr JOIN s_wards w ON usr.k = w.g", epsilon=0.5)
    mixed = "SELECT COUNT(*) AS n FROM tiny JOIN s_wards w ON tiny.g = w.g"
    with pytest.raises(dp.engine.QueryError, match="'s_wards' is on Spark and 'tiny' on DuckDB"):
        spk.sql(mixed, epsilon=0.5)
    with pytest.raises(dp.engine.QueryError, match="'s_wards' is on Spark"):
        spk.preview(mixed, epsilon=0.5)  # the preview refuses what the query refuses
    assert spk.budget().spent == spent
    with pytest.raises(ValueError, match="engine='duckdb'"):
        spk.add_public_table("s_frame", pd.DataFrame(WARDS), engine="spark")
    with pytest.raises(ValueError, match="copy=False"):
        spk.add_public_table("s_view", "wards.parquet", copy=False, engine="spark")
    assert "s_frame" not in spk.tables() and "s_view" not in spk.tables()


def test_lookups_are_the_broadcast_side(pair: Any) -> None:
    """Spark knows a shipped lookup's size (cached and counted when shipped) and a Spark
    public table's (its Parquet files), so the JOIN broadcasts the lookup, never the private
    rows (before: a shipped lookup had no size, and Spark broadcast the private side)."""
    _, spk = pair
    backend = spk._backend
    for lookup, view in (("wards", "dpkit_pub_wards"), ("s_wards", "dpkit_spub_s_wards")):
        _exact(spk, f"SELECT region, COUNT(*) AS n FROM rec JOIN {lookup} w ON rec.g = w.g "
                    f"GROUP BY region")
        text = next(t for t in reversed(backend._texts.values()) if view in t)
        plan = backend.session().sql(text)._jdf.queryExecution().executedPlan().toString()
        joins = [ln for ln in plan.splitlines() if "BroadcastHashJoin" in ln]
        assert joins and all("BuildRight" in ln for ln in joins), (lookup, plan)


