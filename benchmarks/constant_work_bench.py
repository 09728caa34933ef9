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
time whole curator queries (20,000 rows, 20 groups; :data:`QUERIES`) on a project with
``constant_work=True`` against one without, both at ε = 3, δ = 1e-6 (``--only curator``:
those alone, what making constant work the default would cost; 46 bits, 52 for zcdp).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import dpkit as dp
from dpkit import noise

#: the clock of a call: wall time, or with ``--clock cpu`` this process's CPU time (all its
#: threads: DuckDB's too), less moved by other processes on a shared machine
CLOCK: list[Callable[[], float]] = [time.perf_counter]


def _best(f: Callable[[], object], calls: int) -> float:
    best = float("inf")
    clock = CLOCK[0]
    for _ in range(calls):
        t = clock()
        f()
        best = min(best, clock() - t)
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
    for n in (1, 100_000):  # the samplers put on fixed plans after the first table
        cases.append((f"bernoulli p=0.1 n={n} (DP-SGD's masks)", _sampler(noise.bernoulli, 0.1, n),
                      n))
        cases.append((f"gaussian_float sigma=1 n={n} (DP-SGD's noise)",
                      _sampler(noise.gaussian_float, 1.0, n), n))
    cases.append(("uniform_int high=2^63-1 n=1 (a per-query seed)",
                  _sampler(noise.uniform_int, 2**63 - 1, 1), 1))
    cases.append(("uniform_int high=6 n=100000", _sampler(noise.uniform_int, 6, 100_000), 100_000))
    rows = rng.normal(0, 10, (64, 256))
    cases.append(("exponential_rows 64 x 256 (a grouped MEDIAN's shape)",
                  lambda s: dp.mechanisms.exponential_rows(rows, sensitivity=1.0, epsilon=1.0,
                                                           source=s), 64))
    return cases


#: whole queries a user asks (20,000 rows, 20 declared groups; ``k2`` undeclared: private
#: partition selection), with the noise they ask for and the accountant of their project
QUERIES: tuple[tuple[str, str, str], ...] = (
    ("SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k", "laplace", "approx"),
    ("SELECT k, MEDIAN(x) AS m FROM t GROUP BY k", "laplace", "approx"),
    ("SELECT AVG(x) AS a FROM t WHERE x > 20", "laplace", "approx"),
    ("SELECT k2, COUNT(*) AS n FROM t GROUP BY k2", "laplace", "approx"),
    ("SELECT k, COUNT(*) AS n, AVG(x) AS a FROM t GROUP BY k", "gaussian", "zcdp"),
    ("cdf(t, x): a release family (a tree over 256 bins)", "cdf", "approx"),
    ("synthetic(t, [k, x], rows=2000): marginals and records", "synthetic", "approx"),
    ("fit(MLP, SELECT x FROM t, label k): DP-SGD, 1 epoch", "fit", "approx"),
)


def _curator_cases(tmp: str) -> list[Case]:
    """Each query on two projects over the same 20,000 rows, one with constant_work=True, at
    ε = 3, δ = 1e-6 (approx: 46 bits; zcdp: 52 bits, its δ_t from a δ/100 reserve)."""
    import pandas as pd

    rows = pd.DataFrame({"uid": range(20_000), "k": [f"g{i % 20}" for i in range(20_000)],
                         "k2": [f"h{i % 50}" for i in range(20_000)],
                         "x": [float(i % 97) for i in range(20_000)]})
    curs: dict[tuple[str, bool], dp.Curator] = {}
    for accountant in ("approx", "zcdp"):
        for fixed in (False, True):
            cur = dp.Curator.create(f"{tmp}/{accountant}{int(fixed)}.dpkit", epsilon=3.0,
                                    delta=1e-6, accountant=accountant, constant_work=fixed)
            cur.add_table("t", rows, privacy_unit="uid", max_rows_per_unit=1,
                          bounds={"x": (0, 100)}, domains={"k": [f"g{i}" for i in range(20)]})
            curs[accountant, fixed] = cur
    out: list[Case] = []
    for q, kind, accountant in QUERIES:
        if kind == "fit" and importlib.util.find_spec("torch") is None:
            continue
        pair = {fixed: curs[accountant, fixed] for fixed in (False, True)}
        out.append((f"curator {accountant}: {q[7:40] if q.startswith('SELECT') else q[:33]}...",
                    functools.partial(_ask, pair, q, kind), 1))
    return out


def _ask(curs: dict[bool, dp.Curator], query: str, kind: str, fixed: bool) -> object:
    # a tiny ε: hundreds of timed queries fit the typical budget (the work does not depend on it)
    if kind == "cdf":
        return curs[fixed].cdf("t", "x", epsilon=1e-3)
    if kind == "synthetic":
        return curs[fixed].synthetic("t", ["k", "x"], epsilon=1e-3, rows=2000)
    if kind == "fit":  # the [torch] extra; sample rate 0.05: 20 steps of ~1,000 rows
        from dpkit.learn import MLPClassifier

        return curs[fixed].fit(MLPClassifier((), epochs=1, sample_rate=0.05, max_grad_norm=1.0),
                               "SELECT x FROM t", label="k", epsilon=0.01)
    if kind == "gaussian":
        return curs[fixed].sql(query, rho=1e-7, noise="gaussian")
    if "k2" in query:  # partition selection: a small δ share, so hundreds fit in δ = 1e-6
        return curs[fixed].sql(query, epsilon=1e-3, delta=1e-10)
    return curs[fixed].sql(query, epsilon=1e-3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--bits", type=int, default=46)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = ap.parse_args()
    if args.clock == "cpu":
        CLOCK[0] = time.process_time
    print(f"load {os.getloadavg()[0]:.1f}; bits {args.bits}; repeats {args.repeats}; "
          f"clock {args.clock}")
    print(f"{'case':58s} {'today':>10s} {'fixed':>10s} {'ratio':>6s}  spread")
    import tempfile

    tmp = tempfile.mkdtemp()
    curator = [(name, run, n, True) for name, run, n in _curator_cases(tmp)]
    for name, run, n, whole in [(a, b, c, False) for a, b, c in _cases(args.bits)] + curator:
        if args.only not in name:
            continue
        calls = 3 if n >= 100_000 else (1 if "fit(" in name else 4 if whole else 20)
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
