"""Where should DP-SGD's secure noise draw run? Alternatives to dpkit's draw-ahead thread.

    PYTHONPATH=src python benchmarks/dpsgd_draw_placement.py --rounds 8

dpkit draws step t+1's noise (1.8 M Gaussians, ~17 ms of CPU alone) on a thread while step
t+1's forward/backward run on torch's two intra-op threads; on two cores that is a third busy
thread, and the private step costs more CPU than clipping alone plus the draw. The variants,
timed with ``dpsgd_bench.py``'s interleaved blocks (same model, data, blocks of 3 steps, the
last draw of a block waited for inside it; per-round ratios to the non-private step):

* ``dpkit``: today's thread (normal priority);
* ``dpkit_no_noise``: clipping alone (a zero noise vector);
* ``dpkit_inline``: the draw inside ``step()``, when torch is idle (no third thread);
* ``dpkit_steal_idle`` / ``dpkit_steal_nice``: a draw-ahead thread at ``SCHED_IDLE`` / nice 19
  (on Linux both are per-thread: ``os.nice`` in a thread leaves the others at 0), drawing
  chunk by chunk; what it has not drawn when ``step()`` needs the noise, the step draws itself
  (work stealing: never slower than ``dpkit_inline`` by more than the chunks in flight, never
  waiting on a starved low-priority thread). Printed: the share the thread drew ahead.

The variants replace private methods of the optimizer here only (as ``dpkit_no_noise`` does in
``dpsgd_bench.py``); the library is unchanged. Results: docs/learn_torch.md, "Where the draw runs".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dpsgd_bench as bench
from dpkit import noise

_CHUNK = 1 << 17  # as the optimizer's grid pass
_STEALING: list[tuple[str, Any]] = []  # (kind, optimizer): to print the share drawn ahead


def _inline(opt: Any) -> None:
    def nxt() -> np.ndarray:
        z, opt.last_noise_s = opt._draw()
        return z

    opt._next_noise, opt._ahead = nxt, lambda: None


class _Generation:
    def __init__(self, n: int) -> None:
        self.slots: list[np.ndarray | None] = [None] * n
        self.cancel = False


def _steal(opt: Any, policy: str) -> None:
    """A low-priority draw-ahead thread whose unfinished chunks the step draws itself."""
    scale = opt.noise_multiplier * opt.max_grad_norm * 2.0**opt.k
    bounds = [(lo, min(lo + _CHUNK, opt.dim)) for lo in range(0, opt.dim, _CHUNK)]
    state: dict[str, Any] = {"gen": None}
    work = threading.Condition()
    queue: list[_Generation] = []
    opt.ahead_shares = []
    _STEALING.append((policy, opt))

    def chunk(i: int) -> np.ndarray:
        lo, hi = bounds[i]
        a = np.empty(hi - lo)
        return np.rint(noise.gaussian_float(scale, hi - lo, source=opt.source, out=a), out=a)

    def worker() -> None:
        if policy == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        else:
            os.nice(19)
        while True:
            with work:
                while not queue:
                    work.wait()
                gen = queue.pop()
            for i in range(len(bounds)):
                if gen.cancel:
                    break
                a = chunk(i)  # a fresh array: a late result lands in an abandoned generation
                if not gen.cancel:
                    gen.slots[i] = a

    threading.Thread(target=worker, daemon=True).start()

    def take() -> np.ndarray:
        gen = state["gen"] or _Generation(len(bounds))
        gen.cancel = True
        slots = list(gen.slots)
        opt.ahead_shares.append(sum(s is not None for s in slots) / len(bounds))
        if opt._noise is None:
            opt._noise = np.empty(opt.dim)
        for i, ((lo, hi), s) in enumerate(zip(bounds, slots, strict=True)):
            opt._noise[lo:hi] = chunk(i) if s is None else s
        state["gen"] = None
        return opt._noise  # type: ignore[no-any-return]

    def nxt() -> np.ndarray:
        t = time.perf_counter()
        z = state.pop("ready", None)
        z = take() if z is None else z
        opt.last_noise_s = time.perf_counter() - t
        return z  # type: ignore[no-any-return]

    def ahead() -> None:
        state["gen"] = g = _Generation(len(bounds))
        with work:
            queue.append(g)
            work.notify()

    def finish() -> None:  # the bench waits for a block's last draw inside the block
        if state["gen"] is not None and "ready" not in state:
            state["ready"] = take()

    opt._next_noise, opt._ahead, opt.finish_draw = nxt, ahead, finish


_plain_variant, _plain_block = bench._variant, bench._block


def _variant(kind: str) -> Any:
    mine = kind.startswith(("dpkit_inline", "dpkit_steal"))
    setup = _plain_variant("dpkit" if mine else kind)
    if kind == "dpkit_inline":
        _inline(setup[2])
    elif kind.startswith("dpkit_steal"):
        _steal(setup[2], kind.rsplit("_", 1)[1])
    return setup


def _block(setup: tuple, it: list, steps: int, k: str) -> tuple[float, float]:  # type: ignore[type-arg]
    wall, cpu = _plain_block(setup, it, steps, k)
    finish = getattr(setup[2], "finish_draw", None)
    if finish is not None:
        t, c = time.perf_counter(), time.process_time()
        finish()
        wall += (time.perf_counter() - t) / steps
        cpu += (time.process_time() - c) / steps
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--kinds", default="nonprivate,dpkit,dpkit_no_noise,dpkit_inline,"
                                       "dpkit_steal_idle,dpkit_steal_nice")
    a = ap.parse_args()
    bench._variant, bench._block = _variant, _block
    kinds = a.kinds.split(",")
    print(f"load before: {os.getloadavg()}", flush=True)
    res = bench.interleaved(a.rounds, 0, kinds=kinds)
    print(f"load after: {os.getloadavg()}")
    st, cp = res["step_s"], res["cpu_s"]
    for k in kinds:
        w = sorted(st[k][i] / st["nonprivate"][i] for i in range(a.rounds))
        c = sorted(cp[k][i] / cp["nonprivate"][i] for i in range(a.rounds))
        print(f"{k:17s} / non-private: wall {statistics.median(w):.2f}x ({w[0]:.2f}-{w[-1]:.2f})"
              f", CPU {statistics.median(c):.2f}x ({c[0]:.2f}-{c[-1]:.2f}); median step "
              f"{statistics.median(st[k]) * 1e3:.0f} ms wall, {statistics.median(cp[k]) * 1e3:.0f}"
              " ms CPU")
    for policy, opt in _STEALING:
        print(f"dpkit_steal_{policy}: the low-priority thread drew ahead a median "
              f"{statistics.median(opt.ahead_shares):.0%} of the noise")

if __name__ == "__main__":
    main()
