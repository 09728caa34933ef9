"""Speed targets of issue 6 (slow: timing on a shared machine; run with ``-m slow``).

Uses the benchmark's own code path (``benchmarks/local_bench.py``) on 200,000 users at
d = 1024: GRR and Hadamard response >= 1e6 users/s (randomize + aggregate + estimate), packed
unary-encoding aggregation >= 1e6 users/s. Measured ~3-10x above these on the 2-core machine
under load; the comparison with pure-ldp needs its venv and is in the benchmark itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "local_bench.py"


@pytest.mark.slow
def test_throughput_targets() -> None:
    spec = importlib.util.spec_from_file_location("local_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.run_dpkit(1024, 1.0, 200_000, 2)
    assert res["grr"]["users_per_s"] >= 1e6
    assert res["hr"]["users_per_s"] >= 1e6
    assert res["oue_aggregate"]["users_per_s"] >= 1e6
