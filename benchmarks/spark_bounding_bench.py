"""The pieces of a user-level query on Spark, timed apart in plain Spark SQL: what the sums'
exact form and the keyed hash that orders a unit's rows cost (docs/scale.md, How it works).

    python benchmarks/spark_bounding_bench.py --rows 2000000 --repeats 3

Same generated rows as ``spark_bench.py`` (Parquet under ``--data``, reused). Each variant is
a grouped COUNT / SUM over ``g``; the bounded ones keep 3 rows per ``uid`` by ``ROW_NUMBER``
in the order of: ``md5_printf`` an early portable hash (MD5 of the row's text, floats
printed with ``printf('%.12e')``), ``md5_floor`` the next one (floats as the integer
``floor(x·2^20)``), ``int_g_x`` / ``int_x_k`` the keyed integer hash that replaced it
(``portable_hash_sql``; ``g`` a string without a domain still goes through an MD5),
``xxhash64`` Spark's own hash (no DuckDB twin: the floor of the cost). ``--variants`` picks
some.
Every variant runs once untimed, then the variants take turns for ``--repeats`` rounds;
medians (min-max) and ratios to ``plain``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from spark_bench import session, write_rows

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
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "dpkit_spark")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    data = args.data / f"rows_{args.rows}.parquet"
    if not data.exists():
        write_rows(data, args.rows)
    spark = session(2, 4)
    spark.read.parquet(str(data)).createOrReplaceTempView("t")
    chosen = {n: VARIANTS[n] for n in args.variants}
    for q in chosen.values():
        spark.sql(q).collect()  # warm-up
    times: dict[str, list[float]] = {n: [] for n in chosen}
    for _ in range(args.repeats):
        for name, q in chosen.items():
            t0 = time.perf_counter()
            spark.sql(q).collect()
            times[name].append(time.perf_counter() - t0)
    spark.stop()
    base = statistics.median(times["plain"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:12s} {med:7.2f} s ({min(ts):.2f}-{max(ts):.2f})  {med / base:5.2f}x plain")


if __name__ == "__main__":
    main()
