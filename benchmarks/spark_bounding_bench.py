"""The pieces of a user-level query on Spark, timed apart in plain Spark SQL: what the sums'
exact form and the keyed hash that orders a unit's rows cost (docs/scale.md, How it works).

    python benchmarks/spark_bounding_bench.py --rows 2000000 --repeats 3

Same generated rows as ``spark_bench.py`` (Parquet under ``--data``, reused). Each variant is
a grouped COUNT / SUM over ``g``; the bounded ones keep 3 rows per ``uid`` by ``ROW_NUMBER``
in the order of: ``md5_printf`` an early portable hash (MD5 of the row's text, floats
printed with ``printf('%.12e')``), ``md5_floor`` the next one (floats as the integer
``floor(x·2^20)``), ``int_g_x`` / ``int_x_k`` the keyed integer hash that replaced it
(``portable_hash_sql``; ``g`` a string without a domain still goes through an MD5),
``xxhash64`` Spark's own hash (no DuckDB twin: the floor of the cost). ``collect_x_k``
caps without a window or a sort of the rows: a hash aggregation by ``uid`` collects each
unit's rows as structs led by ``int_x_k``'s order (``collect_list``), sorts that small
array and keeps its first 3 (``array_sort``, ``slice``, ``inline``);
``collect_x_k_hash`` is the same with the object hash aggregate's fall-back to a sort
(above 128 groups per task, by default) set out of reach. ``--variants`` picks some
(``plain`` always runs: the ratios' base); ``--bucketed`` reads dpkit's copy bucketed by
``uid`` (as its queries do; written once beside the rows), ``--check A B`` counts the rows
one variant keeps and the other does not.

    python benchmarks/spark_bounding_bench.py --rows 2000000 --repeats 5 --bucketed \
        --variants int_x_k collect_x_k collect_x_k_hash --check int_x_k collect_x_k

Every variant runs once untimed, then the variants take turns for ``--repeats`` rounds (the
order rotating each round); medians (min-max) of the wall clock and of the JVM's CPU time,
and ratios to ``plain`` (median and per round), with the 1-minute load.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from spark_bench import print_clock_tables, session, write_rows

PRINTF = "(CASE WHEN x IS NULL THEN NULL WHEN isnan(x) THEN 'nan' ELSE printf('%.12e', x) END)"
FLOOR = ("(CASE WHEN x IS NULL THEN NULL WHEN isnan(x) THEN 'nan' WHEN abs(x) < "
         "CAST(1099511627776.0 AS DOUBLE) THEN CAST(CAST(floor(x * CAST(1048576.0 AS DOUBLE)) "
         "AS BIGINT) AS STRING) WHEN x > 0 THEN 'big' ELSE '-big' END)")
FIXED = "CAST(round(x * 33554432.0) AS BIGINT)"
AGG = f"SELECT g, COUNT(*), SUM({FIXED}), COUNT(x) FROM {{src}} GROUP BY g"


def _md5(text: str) -> str:
    return f"md5(concat_ws(chr(31), coalesce(g, '~'), coalesce({text}, '~'), '12345'))"


def _capped(order: str) -> str:
    return AGG.format(src=f"(SELECT *, ROW_NUMBER() OVER (PARTITION BY uid ORDER BY {order}, "
                          f"x) AS rn FROM t) WHERE rn <= 3")


def _keyed(cols: list[tuple[str, str]]) -> str:
    """The portable keyed integer hash (dpkit.engine.plan.portable) of ``cols``, as Spark
    runs it (the tie-break by value follows in ``_capped``)."""
    from dpkit.engine.backend_spark import to_spark_sql
    from dpkit.engine.plan.portable import portable_hash_sql

    text = to_spark_sql(f"SELECT {portable_hash_sql(cols, 12345)} FROM t")
    return text[len("SELECT "):text.rindex(" FROM t")]


def _collected(order: list[str]) -> str:
    """The same cap without a window: a hash aggregation by ``uid`` collecting each unit's
    rows as structs led by their sort keys (``order``), sorted as arrays and cut to 3 (Spark's
    struct order is field by field, NULLs first: a NULL-free ``order`` here)."""
    fields = ", ".join([*(f"{o} AS o{i}" for i, o in enumerate(order)), "g", "x"])
    return AGG.format(src=f"(SELECT r.g AS g, r.x AS x FROM (SELECT inline(slice(array_sort("
                          f"collect_list(struct({fields}))), 1, 3)) FROM t GROUP BY uid) AS r)")


VARIANTS = {
    "plain": "SELECT g, COUNT(*), SUM(x), AVG(x) FROM t GROUP BY g",
    "bigint_sum": AGG.format(src="t"),  # wraps beyond 2^63: not exact in general
    "hilo_sum": f"SELECT g, COUNT(*), CAST(SUM(SHIFTRIGHT({FIXED}, 31)) AS DECIMAL(38,0)) * "
                f"2147483648 + CAST(SUM({FIXED} & 2147483647) AS DECIMAL(38,0)), COUNT(x) "
                f"FROM t GROUP BY g",
    "decimal_sum": f"SELECT g, COUNT(*), SUM(CAST({FIXED} AS DECIMAL(38,0))), COUNT(x) FROM t "
                   f"GROUP BY g",
    "md5_printf": _capped(_md5(PRINTF)),
    "md5_floor": _capped(_md5(FLOOR)),
    "int_g_x": _capped(_keyed([("g", "VARCHAR"), ("x", "DOUBLE")]) + ", g"),
    "int_x_k": _capped(_keyed([("x", "DOUBLE"), ("k", "BIGINT")]) + ", k"),
    "xxhash64": _capped("xxhash64(g, x, 12345)"),
    # the sort-free cap (docs/scale.md): the same keyed hash and ties as int_x_k
    "collect_x_k": _collected([_keyed([("x", "DOUBLE"), ("k", "BIGINT")]), "k", "x"]),
}
# variants run with a session setting (set before each answer, reset after): the object hash
# aggregate (collect_list) falls back to a sort above 128 groups per task by default
SETTINGS = {"collect_x_k_hash": ("collect_x_k",
                                 {"spark.sql.objectHashAggregate.sortBased.fallbackThreshold":
                                  "100000000"})}


def _bucketed(spark: Any, data: Path, rows: int) -> None:
    """``t`` as dpkit's copy bucketed by ``uid`` (written once under ``data``'s folder)."""
    from dpkit.engine.spark_load import read_copy, write_bucketed

    target = data.with_name(f"rows_{rows}_by_uid")
    if not target.exists():
        write_bucketed(spark, spark.read.parquet(str(data)), target, "uid", "bench")
    read_copy(spark, str(target), "t")


def _answer(spark: Any, name: str) -> Any:
    variant, settings = SETTINGS.get(name, (name, {}))
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        return spark.sql(VARIANTS[variant]).collect()
    finally:
        for k in settings:
            spark.conf.unset(k)


def _same_rows(spark: Any, a: str, b: str) -> int:
    """Rows one variant keeps and the other does not (0: the same rows), from the texts' kept
    rows (their aggregation taken off)."""
    def kept(name: str) -> str:
        text = VARIANTS[SETTINGS.get(name, (name, {}))[0]]
        return text[text.index(" FROM ") + len(" FROM "):text.rindex(" GROUP BY g")]
    return int(spark.sql(f"SELECT COUNT(*) FROM ((SELECT g, x FROM {kept(a)}) EXCEPT ALL "
                         f"(SELECT g, x FROM {kept(b)}))").collect()[0][0])


def _jvm_cpu(spark: Any) -> float:
    """User + system seconds of the JVM (Linux ``/proc``; local mode: the executors too): on a
    shared machine the wall clock also counts the waits for a core."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "dpkit_spark")
    names = [*VARIANTS, *SETTINGS]
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=names)
    ap.add_argument("--bucketed", action="store_true",
                    help="read dpkit's copy bucketed by uid (no shuffle for the cap)")
    ap.add_argument("--check", nargs=2, metavar=("A", "B"), choices=names,
                    help="also count the rows variant A keeps and B does not")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    data = args.data / f"rows_{args.rows}.parquet"
    if not data.exists():
        write_rows(data, args.rows)
    spark = session(2, 4)
    if args.bucketed:
        _bucketed(spark, data, args.rows)
    else:
        spark.read.parquet(str(data)).createOrReplaceTempView("t")
    chosen = list(dict.fromkeys(["plain", *args.variants]))
    for name in chosen:
        _answer(spark, name)  # warm-up
    times: dict[str, list[float]] = {n: [] for n in chosen}
    cpus: dict[str, list[float]] = {n: [] for n in chosen}
    loads = []
    for r in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for name in chosen[r % len(chosen):] + chosen[:r % len(chosen)]:  # rotating order
            c0, t0 = _jvm_cpu(spark), time.perf_counter()
            _answer(spark, name)
            times[name].append(time.perf_counter() - t0)
            cpus[name].append(_jvm_cpu(spark) - c0)
    if args.check:
        print(f"rows {args.check[0]} keeps and {args.check[1]} does not: "
              f"{_same_rows(spark, *args.check)}, and the reverse: "
              f"{_same_rows(spark, *reversed(args.check))}")
    spark.stop()
    print(f"1-min load {min(loads):.1f}-{max(loads):.1f}")
    print_clock_tables({"wall": times, "JVM CPU": cpus}, "plain")

if __name__ == "__main__":
    main()
