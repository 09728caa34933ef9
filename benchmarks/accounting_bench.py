"""Benchmark: privacy accountants side by side on the DP-SGD references (ε and seconds).

    python benchmarks/accounting_bench.py            # ~30-60 s on 2 cores
    python benchmarks/accounting_bench.py --quick    # one repeat, no dp_accounting PLD at 1e-4

Rows (each event at δ = 1e-5; seconds = best of ``--repeat`` runs, cold caches for dpkit):

* dpkit PLD          ``dpkit.accounting.pld.epsilon``: the bracket [lower, upper]; upper is the
                     guarantee, the bracket's width bounds its remaining slack;
* dp_accounting PLD  ``PLDAccountant`` at value_discretization_interval 1e-4 and 1e-3
                     (pessimistic estimate = an upper bound, no lower end);
* dpkit RDP          ``dpkit.accounting.rdp.epsilon`` (row skipped if the module is absent);
* dp_accounting RDP  ``RdpAccountant`` with its default orders.

Events (REFERENCES.md): DP-SGD q = 256/60000, noise 1.1, 14,062 steps (true ε 2.3816) and
q = 0.01, noise 1.0, 10,000 steps (6.1877); plus 100 x Gaussian(2.0) at δ = 1e-18 (55.70932),
where dp_accounting's PLD returns inf; then curator-scale discrete Laplace / Gaussian calls
(fixed-point sensitivities ~1e10). Results go to ``benchmarks/results/accounting.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

import dpkit.events as ev  # noqa: E402
from dpkit.accounting import pld  # noqa: E402

RESULTS = HERE / "results" / "accounting.json"

CASES: list[dict[str, Any]] = [
    {"name": "DP-SGD q=256/60000 noise=1.1 T=14062", "q": 256 / 60000, "noise": 1.1,
     "steps": 14062, "delta": 1e-5, "truth": 2.3816},
    {"name": "DP-SGD q=0.01 noise=1.0 T=10000", "q": 0.01, "noise": 1.0, "steps": 10000,
     "delta": 1e-5, "truth": 6.1877},
    {"name": "100 x Gaussian(2.0)", "q": None, "noise": 2.0, "steps": 100, "delta": 1e-18,
     "truth": 55.70932},
]


def _dpkit_event(case: dict[str, Any]) -> ev.Event:
    leaf: ev.Event = ev.Gaussian(case["noise"])
    if case["q"] is not None:
        leaf = ev.PoissonSampled(case["q"], leaf)
    return ev.SelfComposed(leaf, case["steps"])


def _dpa_event(dpa: Any, case: dict[str, Any]) -> Any:
    leaf = dpa.GaussianDpEvent(case["noise"])
    if case["q"] is not None:
        leaf = dpa.PoissonSampledDpEvent(case["q"], leaf)
    return dpa.SelfComposedDpEvent(leaf, case["steps"])


def _best_of(fn: Callable[[], Any], repeat: int, before: Callable[[], None] | None = None
             ) -> tuple[Any, float]:
    best, value = math.inf, None
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return value, best


def _clear_pld_caches() -> None:
    pld._pmf.cache_clear()
    pld._coarse.cache_clear()


def _rows(case: dict[str, Any], repeat: int, quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    e = _dpkit_event(case)
    delta = case["delta"]
    (lo, up), sec = _best_of(lambda: pld.epsilon(e, delta), repeat, _clear_pld_caches)
    rows.append({"accountant": "dpkit PLD (auto grid)", "epsilon": up, "lower": lo,
                 "seconds": sec})
    try:
        from dpkit.accounting import rdp
    except ImportError:
        rdp = None  # type: ignore[assignment]
    if rdp is not None:
        def clear_rdp() -> None:  # its curves are cached: time a cold call
            for name in dir(rdp):
                fn = getattr(rdp, name)
                if callable(getattr(fn, "cache_clear", None)):
                    fn.cache_clear()

        value, sec = _best_of(lambda: rdp.epsilon(e, delta), repeat, clear_rdp)
        rows.append({"accountant": "dpkit RDP", "epsilon": value, "lower": None, "seconds": sec})
    try:
        import dp_accounting as dpa
    except ImportError:
        return rows
    grids = (1e-3,) if quick else (1e-4, 1e-3)
    for h in grids:
        def run(h: float = h) -> float:
            acc = dpa.pld.PLDAccountant(value_discretization_interval=h)
            acc.compose(_dpa_event(dpa, case))
            return float(acc.get_epsilon(delta))

        value, sec = _best_of(run, repeat)
        rows.append({"accountant": f"dp_accounting PLD ({h:g})", "epsilon": value,
                     "lower": None, "seconds": sec})

    def run_rdp() -> float:
        acc = dpa.rdp.RdpAccountant()
        acc.compose(_dpa_event(dpa, case))
        return float(acc.get_epsilon(delta))

    value, sec = _best_of(run_rdp, repeat)
    rows.append({"accountant": "dp_accounting RDP", "epsilon": value, "lower": None,
                 "seconds": sec})
    return rows


def _curator_rows(repeat: int) -> list[dict[str, Any]]:
    """Curator-scale integer-noise events (fixed-point sums): dpkit PLD bracket and seconds,
    cold caches (a fresh law object each run, so the discrete Gaussian table is rebuilt)."""
    dlap = ev.DiscreteLaplace(3e10, 10**10)
    calls: list[tuple[str, Callable[[], tuple[float, float]]]] = [
        ("delta(DiscreteLaplace(3e10, 1e10), eps=0.3)", lambda: pld.delta(dlap, 0.3)),
        ("epsilon(DiscreteLaplace(3e10, 1e10), 1e-6)", lambda: pld.epsilon(dlap, 1e-6)),
        ("delta(DiscreteGaussian(6.96e6, 1025), eps=1.0)",
         lambda: pld.delta(ev.DiscreteGaussian(6.96e6, 1025), 1.0)),
        ("epsilon(DiscreteGaussian(9.9e9, 3), 1e-6)",
         lambda: pld.epsilon(ev.DiscreteGaussian(9.9e9, 3), 1e-6)),
        ("epsilon(20 x DiscreteLaplace(3e10, 1e10) + Gaussian(5), 1e-6)",
         lambda: pld.epsilon(ev.Composed((ev.SelfComposed(dlap, 20), ev.Gaussian(5.0))), 1e-6)),
    ]
    rows = []
    for name, fn in calls:
        (lo, up), sec = _best_of(fn, repeat, _clear_pld_caches)
        rows.append({"call": name, "lower": lo, "upper": up, "seconds": sec})
    return rows


def _finite(obj: Any) -> Any:
    """JSON has no inf/nan: write them as the strings "inf" / "nan"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="timing repeats (best is kept)")
    ap.add_argument("--quick", action="store_true", help="one repeat, skip the 1e-4 grid")
    ap.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    out: list[dict[str, Any]] = []
    for case in CASES:
        rows = _rows(case, repeat, args.quick)
        print(f"\n{case['name']}, delta = {case['delta']:g} (true eps {case['truth']})")
        print(f"  {'accountant':<26} {'epsilon':>10} {'bracket':>22} {'seconds':>9}")
        for r in rows:
            bracket = f"[{r['lower']:.5f}, {r['epsilon']:.5f}]" if r["lower"] is not None else ""
            print(f"  {r['accountant']:<26} {r['epsilon']:>10.5f} {bracket:>22} "
                  f"{r['seconds']:>9.3f}")
        out.append({"event": case["name"], "delta": case["delta"], "true_epsilon": case["truth"],
                    "rows": rows})
    curator = _curator_rows(repeat)
    print("\ncurator-scale integer noise (dpkit PLD)")
    for r in curator:
        print(f"  {r['call']:<62} [{r['lower']:.6g}, {r['upper']:.6g}] {r['seconds']:>7.3f}")
    meta = {
        "command": "python benchmarks/accounting_bench.py" + (" --quick" if args.quick else ""),
        "repeat": repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        from importlib.metadata import version

        meta["dp_accounting"] = version("dp-accounting")
    except Exception:  # optional
        pass
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(_finite({"meta": meta, "cases": out, "curator": curator}),
                                   indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
