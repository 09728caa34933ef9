"""How long `dpkit budget` takes to build its report on a long ledger, per accountant.

    PYTHONPATH=src python benchmarks/budget_report_bench.py [--charges 200] [--repeats 5]

Writes N charges (three analysts, alternating Laplace and Gaussian events) straight through
``Ledger.charge`` (no query runs), then times ``Curator.open(path).budget()`` (project view,
with each analyst's running spend replayed under the accountant) and ``.budget("a0")``, each in
a fresh Python process as `dpkit budget` runs (so no in-process memo helps; the time includes
~0.5 s of imports). Prints the median and the spread (min-max) over the repeats. Run it with
``PYTHONPATH=<another checkout>/src`` to compare versions on the same machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpkit import events as ev
from dpkit.engine import Curator


def _project(tmp: Path, accountant: str, charges: int) -> Path:
    cur = Curator.create(tmp / f"{accountant}.dpkit", epsilon=1000.0, delta=1e-6,
                         accountant=accountant)
    names = [cur.add_analyst(f"a{i}") and f"a{i}" for i in range(3)]
    for i in range(charges):
        event = ev.Laplace(200.0 + i % 7) if i % 2 else ev.Gaussian(100.0 + i % 5)
        share = 1e-9 if accountant == "approx" and i % 2 == 0 else None
        cur.ledger.charge(event, analyst=names[i % 3], query=f"q{i}", delta_share=share)
    cur.close()
    return cur.path


def _time(fn: object, repeats: int) -> tuple[float, float, float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return statistics.median(out), min(out), max(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--charges", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--accountants", default="approx,zcdp,rdp,pld")
    args = ap.parse_args()
    print(f"{args.charges} charges, 3 analysts; seconds: median (min-max) of {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        for accountant in args.accountants.split(","):
            path = _project(Path(tmp), accountant, args.charges)
            cells = []
            for who in (None, "a0"):
                code = (f"from dpkit.engine import Curator\n"
                        f"with Curator.open({str(path)!r}) as c: c.budget({who!r}).table()")

                def run(code: str = code) -> None:
                    subprocess.run([sys.executable, "-c", code], check=True)

                m, lo, hi = _time(run, args.repeats)
                cells.append(f"{m:.3f} ({lo:.3f}-{hi:.3f})")
            print(f"{accountant:7s} project {cells[0]:24s} analyst a0 {cells[1]}")


if __name__ == "__main__":
    main()
