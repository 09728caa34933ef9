"""Run one peer library on the curator benchmark's data; called by engine_bench.py --peers.

Runs inside the peer's own virtual environment (it imports neither dpkit nor the other peer)::

    benchmarks/.venvs/opendp/bin/python benchmarks/engine_peer_run.py opendp record data.parquet 3

Prints one JSON object: the peer's version, the times of ``repeat`` runs (seconds) and the shape
of the last answer. Each peer is set up as its users would: OpenDP's ``Context`` and SmartNoise's
reader are built once (not timed) and reused by every query; timed is building the private query
and releasing it, from a DataFrame already in memory (reading the Parquet file is not timed, as
the curator's table is loaded beforehand).
The query: per group ``g`` (10 groups, keys 0-9), COUNT(*), SUM(x), AVG(x) with x clamped to
[0, 100], epsilon 1.0 in total. ``record``: one row per privacy unit; ``user``: at most 5 rows per
unit ``uid``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

BOUNDS = (0.0, 100.0)
CAP = 5
EPSILON = 1.0


def run_opendp(level: str, path: str, repeat: int) -> dict[str, Any]:
    from importlib.metadata import version

    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    df = pl.read_parquet(path).with_columns(pl.col("x").fill_nan(None))
    lf = df.lazy()
    n = df.height
    keys = pl.DataFrame({"g": list(range(10))}, schema={"g": df.schema["g"]})

    # one Context for the whole run, as OpenDP's users keep it: each query gets EPSILON
    if level == "record":
        unit = dp.unit_of(contributions=1)
    else:
        unit = dp.unit_of(contributions=CAP, identifier="uid")
    ctx = dp.Context.compositor(
        data=lf,
        privacy_unit=unit,
        privacy_loss=dp.loss_of(epsilon=EPSILON * repeat),
        split_evenly_over=repeat,
        margins=[dp.polars.Margin(by=["g"], invariant="keys", max_length=n),
                 dp.polars.Margin(by=[], max_length=n)],
    )

    def once() -> Any:
        q = ctx.query()
        if level == "user":
            q = q.truncate_per_group(CAP)
        x = pl.col("x").fill_null(0.0)
        q = q.group_by("g").agg(
            dp.len(),
            x.dp.sum(BOUNDS).alias("s"),
            x.dp.mean(BOUNDS).alias("a"),
        ).with_keys(keys)
        return q.release().collect()

    times, out = _timed(once, repeat)
    return {"peer": "opendp", "version": version("opendp"), "polars": pl.__version__,
            "times_s": times, "rows_out": out.height, "columns": out.columns}


def run_smartnoise(level: str, path: str, repeat: int) -> dict[str, Any]:
    import pandas as pd
    import snsql
    from snsql import Privacy

    df = pd.read_parquet(path)
    n = len(df)
    meta = {
        "bench": {
            "t": {
                "t": {
                    "rows": n,
                    "row_privacy": level == "record",
                    "max_ids": 1 if level == "record" else CAP,
                    "sample_max_ids": True,
                    "censor_dims": False,
                    "uid": {"type": "int", "private_id": level == "user"},
                    "g": {"type": "int"},
                    "x": {"type": "float", "lower": BOUNDS[0], "upper": BOUNDS[1],
                          "nullable": True},
                }
            }
        }
    }
    if level == "record":
        del meta["bench"]["t"]["t"]["uid"]
        df = df.drop(columns=["uid"])

    # one reader for the whole run, as SmartNoise's users keep it (each query spends EPSILON)
    reader = snsql.from_df(df, privacy=Privacy(epsilon=EPSILON, delta=1e-6), metadata=meta)

    def once() -> Any:
        return reader.execute("SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM t.t "
                              "GROUP BY g")

    times, out = _timed(once, repeat)
    from importlib.metadata import version

    return {"peer": "smartnoise-sql", "version": version("smartnoise-sql"),
            "opendp": version("opendp"), "times_s": times, "rows_out": len(out) - 1,
            "columns": [str(c) for c in out[0]]}


def _timed(fn: Any, repeat: int) -> tuple[list[float], Any]:
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return times, out


def main() -> None:
    peer, level, path, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    fn = {"opendp": run_opendp, "smartnoise": run_smartnoise}[peer]
    print(json.dumps(fn(level, path, repeat)))


if __name__ == "__main__":
    main()
