"""Benchmark: dpkit's exact samplers vs numpy's float samplers and OpenDP 0.16's, side by side.

    python benchmarks/noise_bench.py            # full run (~1-2 minutes on 2 cores)
    python benchmarks/noise_bench.py --quick    # smaller sizes, fewer scales (~20 s)
    python benchmarks/noise_bench.py --small-calls              # per-call cost, small vectors
    python benchmarks/noise_bench.py --small-calls --against 4e86c9f   # ... vs a git revision
    python benchmarks/noise_bench.py --words    # secure word streams and the DP-SGD noise draw
    python benchmarks/noise_bench.py --words --against 4e86c9f    # ... the draw vs a revision

``--words`` times the sources themselves: MB/s of words in 1 MiB requests from ``os.urandom``
called directly and from each ``SecureSource`` construction (ChaCha20 and SHAKE-128 keystreams,
``urandom``) next to the seeded PCG64, and the noise draw of one DP-SGD step (1,796,010
Gaussians in 2^17-coordinate chunks, rounded to the grid, as ``DPOptimizer._draw`` does) with
each source, in CPU milliseconds: median and range over ``--rounds`` interleaved rounds.

``--small-calls`` times what a curator query does once per measurement: one
``mechanisms.geometric`` / ``mechanisms.discrete_gaussian`` call on a small integer vector
(1, 10, 256 lanes), in microseconds per call (best of several repeats, CPU time), next to
``np.add`` on the same vector as a floor. ``--against REV`` runs the same cases with the package
of git revision ``REV`` (``git archive`` into a temporary folder, in a subprocess), alternating
runs, and prints the ratio old/new: the machine may be shared, so compare ratios, not times.

Columns: samples per second for dpkit with the secure source (os.urandom, the default), dpkit
with the seeded (insecure) source, OpenDP 0.16 vectorised ``make_laplace`` / ``make_gaussian`` on
``vector_domain(atom_domain(T=int))`` (exact integer samplers; run in their own venv), and
numpy's ``Generator.laplace`` / ``Generator.normal`` (floats, insecure, not exact: a speed
reference only). Ratios are dpkit-secure / other. Results go to ``benchmarks/results/noise.json``.

OpenDP lives in ``benchmarks/.venvs/opendp`` (created once with
``python3 -m venv benchmarks/.venvs/opendp && benchmarks/.venvs/opendp/bin/pip install
'opendp==0.16.*'``); without it the OpenDP column is left empty.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# DPKIT_BENCH_SRC: the package to time instead of this checkout's (used by --against)
sys.path.insert(0, os.environ.get("DPKIT_BENCH_SRC") or str(HERE.parent / "src"))

import dpkit.noise as noise  # noqa: E402

OPENDP_PY = HERE / ".venvs" / "opendp" / "bin" / "python"
RESULTS = HERE / "results" / "noise.json"

OPENDP_SCRIPT = r"""
import json, sys, time
from importlib.metadata import version
import opendp.prelude as dp
dp.enable_features("contrib")
cfg = json.loads(sys.argv[1])
n = cfg["n"]
dom = dp.vector_domain(dp.atom_domain(T=int))
x = [0] * n
out = {"version": version("opendp"), "laplace": {}, "gaussian": {}}
for scale in cfg["scales"]:
    for kind, make, metric in (("laplace", dp.m.make_laplace, dp.l1_distance(T=int)),
                               ("gaussian", dp.m.make_gaussian, dp.l2_distance(T=int))):
        meas = make(dom, metric, scale=float(scale))
        best = float("inf")
        for _ in range(cfg["repeat"]):
            t = time.perf_counter()
            meas(x)
            best = min(best, time.perf_counter() - t)
        out[kind][str(scale)] = n / best
print(json.dumps(out))
"""


def best_rate(f: Callable[[], object], n: int, repeat: int) -> float:
    """Samples per second: n / (best wall time of ``repeat`` runs)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return n / best


def run_opendp(scales: list[float], n: int, repeat: int) -> dict | None:
    if not OPENDP_PY.exists():
        print(f"[opendp] {OPENDP_PY} not found: skipping the OpenDP column (see module docstring)")
        return None
    cfg = json.dumps({"scales": scales, "n": n, "repeat": repeat})
    try:
        res = subprocess.run(
            [str(OPENDP_PY), "-c", OPENDP_SCRIPT, cfg],
            capture_output=True,
            text=True,
            timeout=600,
            check=True,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"[opendp] failed: {exc}")
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


SMALL_SIZES = (1, 10, 256)


def small_call_cases() -> list[tuple[str, dict]]:
    """(mechanism, keyword arguments) of the --small-calls mode."""
    return [
        ("geometric", {"sensitivity": 1, "epsilon": 0.0033}),
        ("geometric", {"sensitivity": 800, "epsilon": 0.0033}),
        ("geometric", {"sensitivity": 1, "epsilon": 1.0}),
        ("discrete_gaussian", {"sensitivity": 1, "sigma2": 1e6}),
        ("discrete_gaussian", {"sensitivity": 3, "rho": 0.01}),
    ]


def time_small_calls(number: int, repeat: int) -> dict[str, float]:
    """Microseconds per call (best of ``repeat`` CPU-time runs of ``number`` calls) per case."""
    import timeit

    import dpkit.mechanisms as mech

    out: dict[str, float] = {}
    for secure in (False, True):
        for size in SMALL_SIZES:
            x = np.arange(size, dtype=np.int64) * 7
            src = None if secure else noise.seeded(0)
            out[f"np.add n={size}"] = min(
                timeit.Timer(lambda x=x: np.add(x, x), timer=time.process_time).repeat(
                    repeat, number)) / number * 1e6
            for name, kw in small_call_cases():
                if secure and size != 10:
                    continue
                f = getattr(mech, name)

                def call(f=f, x=x, kw=kw, src=src) -> object:
                    return f(x, source=src, **kw)

                call()  # caches and buffers warm
                args = ",".join(f"{k}={v:g}" for k, v in kw.items())
                key = f"{name}({args}) n={size}{' secure' if secure else ''}"
                t = timeit.Timer(call, timer=time.process_time)
                out[key] = min(t.repeat(repeat, number)) / number * 1e6
    return out


def run_small_calls(against: str | None, rounds: int) -> int:
    """The --small-calls mode (see the module docstring)."""
    if os.environ.get("DPKIT_BENCH_JSON"):  # child of --against: print the numbers only
        print(json.dumps(time_small_calls(200, 5)))
        return 0
    if against is None:
        res = time_small_calls(300, 7)
        print(f"{'case (per call, CPU time)':<62}{'us':>9}")
        for k, v in res.items():
            print(f"{k:<62}{v:>9.1f}")
        return 0
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tar = subprocess.run(["git", "-C", str(HERE.parent), "archive", against, "src/dpkit"],
                             capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
        runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for _ in range(rounds):  # alternate, so that machine load hits both alike
            for which, src in (("old", str(Path(tmp) / "src")), ("new", str(HERE.parent / "src"))):
                env = {**os.environ, "DPKIT_BENCH_SRC": src, "DPKIT_BENCH_JSON": "1"}
                done = subprocess.run([sys.executable, __file__, "--small-calls"], env=env,
                                      capture_output=True, text=True, check=True)
                runs[which].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{'case (per call, CPU time, best of ' + str(rounds) + ' rounds)':<62}"
          f"{against[:10]:>11}{'now':>9}{'old/new':>9}")
    for k in runs["new"][0]:
        old = min(r[k] for r in runs["old"])
        new = min(r[k] for r in runs["new"])
        print(f"{k:<62}{old:>9.1f}us{new:>7.1f}us{old / new:>8.2f}x")
    return 0


WORD_MB = 16  # MiB of words per timing (16 requests of 1 MiB)
DRAW_DIM, DRAW_CHUNK = 1_796_010, 1 << 17  # the 784-1000-1000-10 MLP of dpsgd_bench.py


def _word_sources() -> dict[str, Callable[[], object] | noise.Source]:
    """name -> each source this package offers (and a function calling os.urandom directly)."""
    srcs: dict[str, Callable[[], object] | noise.Source] = {
        "os.urandom (raw call)": lambda: os.urandom(1 << 20)}
    for c in getattr(noise.sources, "CONSTRUCTIONS", ()):
        try:
            srcs[f"SecureSource({c!r})"] = noise.SecureSource(c)
        except ImportError:  # chacha20 without the cryptography package
            continue
    if len(srcs) == 1:  # a revision before the keystream: its secure() is os.urandom
        srcs["secure() (os.urandom)"] = noise.secure()
    srcs["seeded(0) (PCG64, INSECURE)"] = noise.seeded(0)
    return srcs


def _draw_once(src: noise.Source) -> None:
    """One DP-SGD step's noise in grid units, as DPOptimizer._draw does it."""
    z = np.empty(DRAW_DIM)
    for lo in range(0, DRAW_DIM, DRAW_CHUNK):
        m = min(DRAW_CHUNK, DRAW_DIM - lo)
        try:
            g = noise.gaussian_float(2.0**31, m, source=src, out=z[lo : lo + m])
        except TypeError:  # a revision without out=
            g = noise.gaussian_float(2.0**31, m, source=src)
        np.rint(g, out=z[lo : lo + m])


def time_words(rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per source: MB/s (CPU and wall) of 1 MiB requests and the draw's CPU/wall ms, per round."""
    srcs = _word_sources()
    res: dict[str, dict[str, list[float]]] = {
        k: {"mb_s_cpu": [], "mb_s_wall": [], "draw_ms_cpu": [], "draw_ms_wall": []}
        for k in srcs}
    for f in srcs.values():  # warm up (imports, buffers)
        if isinstance(f, noise.Source):
            f.uint64(1 << 17)
            _draw_once(f)
        else:
            f()
    for _ in range(rounds):  # interleaved, so that machine load hits every source alike
        for k, f in srcs.items():
            get = (lambda f=f: f.uint64(1 << 17)) if isinstance(f, noise.Source) else f
            c, w = time.process_time(), time.perf_counter()
            for _ in range(WORD_MB):
                get()
            c, w = time.process_time() - c, time.perf_counter() - w
            res[k]["mb_s_cpu"].append(WORD_MB * 1.048576 / c)
            res[k]["mb_s_wall"].append(WORD_MB * 1.048576 / w)
            if isinstance(f, noise.Source):
                c, w = time.process_time(), time.perf_counter()
                _draw_once(f)
                res[k]["draw_ms_cpu"].append((time.process_time() - c) * 1e3)
                res[k]["draw_ms_wall"].append((time.perf_counter() - w) * 1e3)
    return res


def _med_range(v: list[float], fmt: str) -> str:
    if not v:
        return "-"
    v = sorted(v)
    return f"{format(statistics.median(v), fmt)} ({format(v[0], fmt)}-{format(v[-1], fmt)})"


def run_words(against: str | None, rounds: int) -> int:
    """The --words mode (see the module docstring)."""
    if os.environ.get("DPKIT_BENCH_JSON"):  # child of --against: print the numbers only
        print(json.dumps(time_words(rounds)))
        return 0
    tables = {"now": time_words(rounds)}
    if against is not None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            tar = subprocess.run(["git", "-C", str(HERE.parent), "archive", against,
                                  "src/dpkit"], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
            env = {**os.environ, "DPKIT_BENCH_SRC": str(Path(tmp) / "src"),
                   "DPKIT_BENCH_JSON": "1"}
            done = subprocess.run([sys.executable, __file__, "--words", "--rounds",
                                   str(rounds)], env=env, capture_output=True, text=True,
                                  check=True)
            tables[against[:10]] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"words: {WORD_MB} x 1 MiB requests; draw: {DRAW_DIM:,} Gaussians in 2^17 chunks, "
          f"rounded (median (range) of {rounds} rounds; load {os.getloadavg()[0]:.1f})")
    print(f"{'code':<11}{'source':<30}{'MB/s (CPU)':>22}{'MB/s (wall)':>22}"
          f"{'draw ms CPU':>20}{'draw ms wall':>20}")
    for code, res in tables.items():
        for k, r in res.items():
            print(f"{code:<11}{k:<30}{_med_range(r['mb_s_cpu'], '.0f'):>22}"
                  f"{_med_range(r['mb_s_wall'], '.0f'):>22}"
                  f"{_med_range(r['draw_ms_cpu'], '.1f'):>20}"
                  f"{_med_range(r['draw_ms_wall'], '.1f'):>20}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer scales")
    ap.add_argument("--no-opendp", action="store_true", help="skip the OpenDP column")
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON output path")
    ap.add_argument("--small-calls", action="store_true",
                    help="per-call microseconds of the integer mechanisms on small vectors")
    ap.add_argument("--against", metavar="REV", default=None,
                    help="with --small-calls: also time git revision REV and print old/new")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds for --against")
    ap.add_argument("--words", action="store_true",
                    help="MB/s of the secure word streams and the DP-SGD noise draw's time")
    args = ap.parse_args(argv)
    if args.small_calls:
        return run_small_calls(args.against, args.rounds)
    if args.words:
        return run_words(args.against, args.rounds)

    scales = [1.0, 1e3, 1e6] if args.quick else [1.0, 10.0, 1e3, 1e6]
    n = 200_000 if args.quick else 1_000_000
    n_opendp = 20_000 if args.quick else 100_000
    repeat = 2 if args.quick else 3

    opendp = None if args.no_opendp else run_opendp(scales, n_opendp, 1 if args.quick else 2)
    rng = np.random.default_rng(0)
    secure, seeded = noise.secure(), noise.seeded(0)
    noise.discrete_laplace(3, 1000, source=secure)  # warm up buffers and tables

    rows = []
    for kind in ("laplace", "gaussian"):
        for scale in scales:
            if kind == "laplace":

                def dp_secure(s: float = scale) -> object:
                    return noise.discrete_laplace(s, n, source=secure)

                def dp_seeded(s: float = scale) -> object:
                    return noise.discrete_laplace(s, n, source=seeded)

                def np_float(s: float = scale) -> object:
                    return rng.laplace(0.0, s, n)
            else:

                def dp_secure(s: float = scale) -> object:
                    return noise.discrete_gaussian(s * s, n, source=secure)

                def dp_seeded(s: float = scale) -> object:
                    return noise.discrete_gaussian(s * s, n, source=seeded)

                def np_float(s: float = scale) -> object:
                    return rng.normal(0.0, s, n)

            r_sec = best_rate(dp_secure, n, repeat)
            r_seed = best_rate(dp_seeded, n, repeat)
            r_np = best_rate(np_float, n, repeat)
            r_odp = opendp[kind][str(scale)] if opendp else None
            rows.append(
                {
                    "sampler": "discrete_laplace" if kind == "laplace" else "discrete_gaussian",
                    "scale": scale,
                    "param": f"scale={scale:g}" if kind == "laplace" else f"sigma={scale:g}",
                    "dpkit_secure_per_s": r_sec,
                    "dpkit_seeded_per_s": r_seed,
                    "opendp_per_s": r_odp,
                    "ratio_vs_opendp": r_sec / r_odp if r_odp else None,
                    "numpy_float_per_s": r_np,
                    "ratio_vs_numpy": r_sec / r_np,
                }
            )

    hdr = (
        f"{'sampler':<18}{'param':<14}{'dpkit secure/s':>15}{'dpkit seeded/s':>15}"
        f"{'opendp/s':>11}{'x opendp':>9}{'numpy float/s':>15}{'x numpy':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        odp = f"{r['opendp_per_s']:>11,.0f}" if r["opendp_per_s"] else f"{'-':>11}"
        rat = f"{r['ratio_vs_opendp']:>9.1f}" if r["ratio_vs_opendp"] else f"{'-':>9}"
        print(
            f"{r['sampler']:<18}{r['param']:<14}{r['dpkit_secure_per_s']:>15,.0f}"
            f"{r['dpkit_seeded_per_s']:>15,.0f}{odp}{rat}"
            f"{r['numpy_float_per_s']:>15,.0f}{r['ratio_vs_numpy']:>8.2f}"
        )

    meta = {
        "command": "python benchmarks/noise_bench.py" + (" --quick" if args.quick else ""),
        "n_dpkit": n,
        "n_opendp": n_opendp,
        "repeat": repeat,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "opendp": opendp["version"] if opendp else None,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
