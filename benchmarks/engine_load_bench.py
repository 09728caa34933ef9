"""How long ``Curator.add_table`` takes on a large file, optionally against another commit.

``python benchmarks/engine_load_bench.py [--rows 1000000] [--repeat 5] [--before REF]``:
writes ``engine_bench.make_data(rows)`` (unit ``uid``, key ``g``, value ``x``) to one Parquet
file, then loads it into a fresh project per run, user level with bounds, a declared domain and
``not_null`` (so every step of a load runs: copy, checks, hidden columns, key table). With
``--before REF`` the ``src/`` of that commit (``git archive``) is timed too, runs interleaved
(before, after, after, before, ...), each in its own process, so both meet the same machine load;
it prints each side's median and best, the ratio of medians, the median and range of the
per-pair ratios (the steadiest figure on a shared machine), and the ratio of bests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import sys, time
from pathlib import Path
import dpkit as dp
data, folder = Path(sys.argv[1]), Path(sys.argv[2])
cur = dp.Curator.create(folder / "p.dpkit", epsilon=10.0)
t = time.perf_counter()
cur.add_table("t", str(data), privacy_unit="uid", max_rows_per_unit=4,
              bounds={"x": (0, 100)}, domains={"g": list(range(10))}, not_null=["g"])
print(time.perf_counter() - t)
cur.close()
"""


def _one(src: Path, data: Path, scratch: Path) -> float:
    folder = Path(tempfile.mkdtemp(dir=scratch))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(data), str(folder)],
                         env={**os.environ, "PYTHONPATH": str(src)},
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--before", default=None, help="a git commit to time against (e.g. main)")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="dpkit-loadbench-"))
    try:
        _compare(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # a 1M-row file and a project per run


def _compare(args: argparse.Namespace, scratch: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine_bench import make_data

    data = scratch / "rows.parquet"
    pq.write_table(pa.table(make_data(args.rows)), data)
    trees = {"after": ROOT / "src"}
    if args.before:
        old = scratch / "before"
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "src"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        trees = {"before": old / "src", **trees}
    times: dict[str, list[float]] = {k: [] for k in trees}
    for r in range(args.repeat):
        order = list(trees.items())
        for name, src in order if r % 2 == 0 else order[::-1]:  # neither side always first
            times[name].append(_one(src, data, scratch))
    print(f"{args.rows:,} rows, {args.repeat} runs each, interleaved")
    for name, ts in times.items():
        print(f"  {name:>6}: median {statistics.median(ts):.3f} s, best {min(ts):.3f} s "
              f"({', '.join(f'{t:.2f}' for t in ts)})")
    if "before" in times:
        ratios = sorted(a / b for a, b in zip(times["after"], times["before"], strict=True))
        ratio = statistics.median(times["after"]) / statistics.median(times["before"])
        best = min(times["after"]) / min(times["before"])
        print(f"  after/before: medians {ratio:.3f}; per-pair ratios median "
              f"{statistics.median(ratios):.3f}, range {ratios[0]:.3f} .. {ratios[-1]:.3f}; "
              f"bests {best:.3f}")


if __name__ == "__main__":
    main()
