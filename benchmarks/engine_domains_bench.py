"""Curator benchmark: GROUP BY over large declared key domains, against plain DuckDB.

A demanding user declares the public keys of a column with many values (zip codes, product
ids): ``add_table(..., domains={"g": [...K keys...]})``. Every declared key must appear in the
answer (empty groups as noisy zeros), rows outside the domain are dropped before bounding. This
script times, for each domain size ``K``::

    SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g

* ``plain``: the same GROUP BY in DuckDB on the project's file (read-only attach), no privacy;
* ``dpkit``: ``cur.sql(...)`` end to end (parse, plan, the one pushed-down statement, the
  durable ledger charge, noise for every one of the K groups, the Result);
* ``dpkit literal`` (``--literal``, K <= 100k): the same with the keys written into the
  statement as literals (the path views and older projects take), to show what the hidden key
  table saves and where the two meet for small domains;

at record level and at user level (1 to 8 rows per unit, at most 5 kept), interleaved, best and
median of ``--repeat`` runs, and the median of the per-round ratios dpkit / plain.

    python benchmarks/engine_domains_bench.py                        # 1M rows; 1k, 100k, 1M keys
    python benchmarks/engine_domains_bench.py --keys 10 1000 --literal --repeat 5
    PYTHONPATH=/path/to/old/src python benchmarks/engine_domains_bench.py --label before ...

Results are merged into ``benchmarks/results/engine_domains.json`` under ``--label`` (default
``after``), so a run of an older dpkit (the one that inlined every key) can sit beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_bench
from dpkit.engine import Curator
from engine_bench import timed

QUERY = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM {t} GROUP BY g"
PLAIN = "SELECT g, COUNT(*), SUM(x) FROM {t} GROUP BY g"


def make_data(rows: int, keys: int, seed: int = 7) -> dict[str, np.ndarray]:
    """``rows`` rows: key ``g`` uniform over ``[0, 1.02·keys)`` (about 2% of rows fall outside
    the declared domain and are dropped), value ``x`` in [-10, 110] (clamped to [0, 100]),
    unit ``uid`` with 1 to 8 rows: engine_bench's data with more groups."""
    return engine_bench.make_data(rows, seed, groups=keys + keys // 50)


def _key_module() -> Any:
    """The module whose DOMAIN_TABLE_MIN_KEYS the compiler reads (plan/compile.py; plan.py
    before the planner became a package)."""
    import importlib

    try:
        return importlib.import_module("dpkit.engine.plan.compile")
    except ImportError:
        return importlib.import_module("dpkit.engine.plan")


def _literal_switch(on: bool) -> Any:
    """Force the literal path (keys written into the statement) when this dpkit has a key
    table path; returns the previous setting (None: no key tables in this version)."""
    dplan = _key_module()

    if not hasattr(dplan, "DOMAIN_TABLE_MIN_KEYS"):
        return None
    old = dplan.DOMAIN_TABLE_MIN_KEYS
    dplan.DOMAIN_TABLE_MIN_KEYS = 1 << 62 if on else old
    return old


def bench(rows: int, keys: int, repeat: int, workdir: Path, levels: list[str],
          literal: bool) -> dict[str, Any]:
    dplan = _key_module()

    data = make_data(rows, keys)
    project = workdir / f"dom{keys}.dpkit"
    if project.exists():
        shutil.rmtree(project)
    cur = Curator.create(project, epsilon=1000.0, accountant="pure")
    domain = list(range(keys))
    load: dict[str, float] = {}
    if "record" in levels:
        load["record"] = timed(lambda: cur.add_table(
            "rec", {"g": data["g"], "x": data["x"]}, bounds={"x": (0, 100)},
            domains={"g": domain}))
    if "user" in levels:
        load["user"] = timed(lambda: cur.add_table(
            "usr", data, privacy_unit="uid", max_rows_per_unit=5, bounds={"x": (0, 100)},
            domains={"g": domain}))
    cur.close()
    cur = Curator.open(project)
    con = duckdb.connect()
    con.execute("SET enable_progress_bar=false")
    con.execute(f"ATTACH '{project / 'data.duckdb'}' AS d (READ_ONLY)")

    cases: dict[str, Any] = {}
    tables = {"record": "rec", "user": "usr"}
    for lv in levels:
        t = tables[lv]
        rel = f"d.priv.{cur.tables()[t].stored_name}"  # each load writes a fresh relation
        cases[f"plain {lv}"] = (lambda rel=rel: con.execute(PLAIN.format(t=rel)).fetchall())
        cases[f"dpkit {lv}"] = (lambda t=t: cur.sql(QUERY.format(t=t), epsilon=0.01))
        if literal and hasattr(dplan, "DOMAIN_TABLE_MIN_KEYS"):
            def lit(t: str = t) -> Any:
                old = _literal_switch(True)
                try:
                    return cur.sql(QUERY.format(t=t), epsilon=0.01)
                finally:
                    dplan.DOMAIN_TABLE_MIN_KEYS = old
            cases[f"dpkit literal {lv}"] = lit
    res = cur.sql(QUERY.format(t=tables[levels[0]]), epsilon=0.01)  # warm, and check shape
    groups = len(res)
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            times[name].append(timed(fn))
    out: dict[str, Any] = {"rows": rows, "keys": keys, "groups_returned": groups,
                           "load_s": load, "repeat": repeat, "times_s": {}}
    for name, ts in times.items():
        out["times_s"][name] = {"best": min(ts), "median": statistics.median(ts), "all": ts}
    ratios: dict[str, Any] = {}
    for lv in levels:
        for variant in ("dpkit", "dpkit literal"):
            key = f"{variant} {lv}"
            if key not in times:
                continue
            paired = [a / b for a, b in zip(times[key], times[f"plain {lv}"], strict=True)]
            ratios[key] = {
                "best_over_best": min(times[key]) / min(times[f"plain {lv}"]),
                "median_over_median": (statistics.median(times[key])
                                       / statistics.median(times[f"plain {lv}"])),
                "median_paired": statistics.median(paired),
            }
    out["ratios_vs_plain"] = ratios
    con.close()
    cur.close()
    shutil.rmtree(project, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, nargs="+", default=[1000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--levels", nargs="+", default=["record", "user"],
                    choices=["record", "user"])
    ap.add_argument("--literal", action="store_true",
                    help="also time the literal path (keys inlined), for K <= 100k")
    ap.add_argument("--label", default="after")
    ap.add_argument("--json", type=Path,
                    default=Path(__file__).parent / "results" / "engine_domains.json")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dpkit-dombench-"))
    runs: list[dict[str, Any]] = []
    try:
        for k in args.keys:
            r = bench(args.rows, k, args.repeat, workdir, args.levels,
                      args.literal and k <= 100_000)
            runs.append(r)
            for name, t in r["times_s"].items():
                ratio = r["ratios_vs_plain"].get(name)
                extra = (f"  x{ratio['median_paired']:.2f} plain (paired median)"
                         if ratio else "")
                print(f"K={k:>8}  {name:<22} best {t['best'] * 1e3:9.1f} ms  median "
                      f"{t['median'] * 1e3:9.1f} ms{extra}", flush=True)
            print(f"K={k:>8}  load (s): " + ", ".join(f"{a} {b:.2f}"
                                                     for a, b in r["load_s"].items()),
                  flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    doc: dict[str, Any] = {}
    if args.json.exists():
        try:
            doc = json.loads(args.json.read_text())
        except ValueError:
            doc = {}
    doc.setdefault("query", QUERY)
    doc.setdefault("plain", PLAIN)
    doc.setdefault("runs", {})
    doc["runs"][args.label] = {
        "results": runs,
        "machine": {"python": sys.version.split()[0], "duckdb": duckdb.__version__,
                    "platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average": os.getloadavg()},
        "command": " ".join(sys.argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
