"""Benchmark: what constant-work sampling costs (``dpkit.noise.ConstantWork``) against today's
exact samplers, per draw, at several sizes and scales, and for the exponential mechanism.

    PYTHONPATH=$PWD/src python benchmarks/constant_work_bench.py            # ~1-2 min
    PYTHONPATH=$PWD/src python benchmarks/constant_work_bench.py --repeats 9 --only curator

Each case is timed ``--repeats`` times for both modes, interleaved (the order alternates per
repeat, so load drift favours neither), with the same seeded words source underneath; a repeat
is the best of a few calls (``timeit``-style) to drop scheduler hiccups. Prints per case the
median time per call of each mode, the ratio of medians and the spread of the per-repeat ratios
(min-max), and the 1-minute load average (the machine may be shared). ``--bits`` is the failure
exponent per request (a curator at ε = 3 with its default timing δ uses 46). The last cases
time whole curator queries (20,000 rows, 20 groups) on a project with ``constant_work=True``
(ε = 20: 70 bits) against one without.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import dpkit as dp
from dpkit import noise


def _best(f: Callable[[], object], calls: int) -> float:
    best = float("inf")
    for _ in range(calls):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def _sampler(f: Callable[..., object], param: float, n: int) -> Callable[[noise.Source], object]:
    return lambda s: f(param, n, source=s)


def _select(scores: np.ndarray) -> Callable[[noise.Source], object]:
    return lambda s: dp.mechanisms.exponential(range(scores.size), scores, sensitivity=1.0,
                                               epsilon=1.0, source=s)


Case = tuple[str, Callable[[Any], object], int]


def _cases(bits: int) -> list[Case]:
    rng = np.random.default_rng(0)  # scores for the selections (not noise)
    cases: list[Case] = []
    for scale in (3.0, 1e3, 1 / 0.3):
        for n in (1, 100, 100_000):
            cases.append((f"discrete_laplace scale={scale:.4g} n={n}",
                          _sampler(noise.discrete_laplace, scale, n), n))
    for sigma2 in (10.0, 1e6):
        for n in (1, 100, 100_000):
            cases.append((f"discrete_gaussian sigma2={sigma2:g} n={n}",
                          _sampler(noise.discrete_gaussian, sigma2, n), n))
    for cands in (16, 256, 4096):
        scores = rng.normal(0, 10, cands)
        cases.append((f"exponential mechanism, {cands} candidates", _select(scores), 1))
    rows = rng.normal(0, 10, (64, 256))
    cases.append(("exponential_rows 64 x 256 (a grouped MEDIAN's shape)",
                  lambda s: dp.mechanisms.exponential_rows(rows, sensitivity=1.0, epsilon=1.0,
                                                           source=s), 64))
    return cases


def _curator_cases(tmp: str) -> list[Case]:
    """The same query on two projects over the same 20,000 rows, one with constant_work=True."""
    import pandas as pd

    rows = pd.DataFrame({"uid": range(20_000), "k": [f"g{i % 20}" for i in range(20_000)],
                         "x": [float(i % 97) for i in range(20_000)]})
    curs = {}
    for fixed in (False, True):
        cur = dp.Curator.create(f"{tmp}/p{int(fixed)}.dpkit", epsilon=1e3 if not fixed else 20.0,
                                delta=1e-3, constant_work=fixed)
        cur.add_table("t", rows, privacy_unit="uid", max_rows_per_unit=1,
                      bounds={"x": (0, 100)}, domains={"k": [f"g{i}" for i in range(20)]})
        curs[fixed] = cur
    out: list[Case] = []
    for q in ("SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k",
              "SELECT k, MEDIAN(x) AS m FROM t GROUP BY k"):
        out.append((f"curator: {q[7:32]}...", functools.partial(_ask, curs, q), 1))
    return out


def _ask(curs: dict[bool, dp.Curator], query: str, fixed: bool) -> object:
    return curs[fixed].sql(query, epsilon=0.01)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--bits", type=int, default=46)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}; bits {args.bits}; repeats {args.repeats}")
    print(f"{'case':58s} {'today':>10s} {'fixed':>10s} {'ratio':>6s}  spread")
    import tempfile

    tmp = tempfile.mkdtemp()
    curator = [(name, run, n, True) for name, run, n in _curator_cases(tmp)]
    for name, run, n, whole in [(a, b, c, False) for a, b, c in _cases(args.bits)] + curator:
        if args.only not in name:
            continue
        calls = 3 if n >= 100_000 else 20
        times: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.repeats):
            for fixed in ((False, True) if r % 2 == 0 else (True, False)):
                src: noise.Source | bool = noise.seeded(r)
                if whole:  # a curator query: the project's own source and setting
                    src = fixed
                elif fixed:
                    src = noise.ConstantWork(noise.seeded(r), bits=args.bits)
                run(src)  # warm: caches of the scale's setup
                times[fixed].append(_best(functools.partial(run, src), calls))
        ratios = [f / t for f, t in zip(times[True], times[False], strict=True)]
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name:58s} {med[False] * 1e6:8.0f}us {med[True] * 1e6:8.0f}us "
              f"{med[True] / med[False]:6.2f}  {min(ratios):.2f}-{max(ratios):.2f}")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
