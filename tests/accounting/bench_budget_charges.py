"""Issue 12 item 6: what a curator query costs the budget (check, charge, spent), 200 times.

Run from the worktree root (not collected by pytest):

    PYTHONPATH=$PWD/src python tests/accounting/bench_budget_charges.py

Each "query" does what the curator does with undeclared keys: ``cost()`` (the check), then
``charge()``, then reads ``spent``, for the same event under an approx and a pld budget.
"""

from __future__ import annotations

import time
import warnings

from dpkit import events as ev
from dpkit.accounting.budget import Budget

EVENT = ev.Composed((ev.SelfComposed(ev.Exponential(0.1), 10), ev.ApproxDP(0.1, 1e-8)))
QUERIES = 200


def run(accountant: str) -> tuple[float, float, float]:
    """(ms per query over all 200, ms of the first query, ms of the last 20 on average)."""
    if accountant == "approx":
        b = Budget(epsilon=1e6, delta=1e-2, accountant="approx")
        kw: dict[str, float] = {"delta": 1e-7}
    else:
        b = Budget(epsilon=1e6, delta=1e-4, accountant="pld")  # > 200 x 1e-8
        kw = {}
    times = []
    for _ in range(QUERIES):
        start = time.perf_counter()
        b.cost(EVENT, **kw)
        b.charge(EVENT, **kw)
        _ = b.spent
        times.append(time.perf_counter() - start)
    return 1e3 * sum(times) / len(times), 1e3 * times[0], 1e3 * sum(times[-20:]) / 20


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    for acc in ("approx", "pld"):
        total, first, last = run(acc)
        print(f"{acc:7s} {QUERIES} queries: {total:8.2f} ms/query "
              f"(first {first:.1f} ms, last 20 {last:.2f} ms/query)")
