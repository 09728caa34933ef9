"""What a fit asked over HTTP (``POST /v1/fit``) costs beside ``cur.fit`` in the analyst's own
process, on the same project, same model, same rows.

    python benchmarks/fit_service_bench.py [--rows 200000] [--repeats 5]

The service side runs in-process (FastAPI's TestClient: the ASGI app, no sockets), so the
difference is the service's own work: authentication, the catalog's checks, the analyst's
curator from the pool, the answer as JSON. The two forms are interleaved; per model it prints
the median [min-max] seconds of each and the median of the per-pair ratios (served /
in-process), and the ``uptime`` load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import dpkit as dp

ASKS: dict[str, tuple[str, dict[str, Any]]] = {
    "logistic_regression": ("sick", {}),
    "gaussian_nb": ("sick", {}),
    "linear_regression": ("age", {}),
}


def _frame(n: int) -> pd.DataFrame:
    src = dp.noise.seeded(1)
    age = dp.noise.uniform_float01(n, source=src) * 100
    return pd.DataFrame({"uid": np.arange(n) // 3, "age": age,
                         "ward": np.array(["A", "B"])[dp.noise.uniform_int(2, n, source=src)],
                         "stay": dp.noise.uniform_float01(n, source=src) * 30,
                         "sick": np.where(age > 50, "yes", "no")})


def _stats(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def main() -> None:
    from fastapi.testclient import TestClient

    from dpkit.learn import catalog
    from dpkit.server.app import create_app

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.dpkit"
        with dp.Curator.create(path, epsilon=1000.0, delta=1e-3) as cur:
            cur.add_table("t", _frame(args.rows), privacy_unit="uid", max_rows_per_unit=3,
                          bounds={"age": (0, 100), "stay": (0, 30)},
                          domains={"ward": ["A", "B"], "sick": ["no", "yes"]})
            token = cur.add_analyst("bob")
        app = create_app(path, rate=1e6, burst=10**6, timeout=600.0)
        client = TestClient(app)
        headers = {"Authorization": f"Bearer {token}"}
        local = dp.Curator.open(path, token=token)
        try:
            for model, (label, options) in ASKS.items():
                sql = "SELECT age, stay, ward FROM t" if label != "age" else \
                    "SELECT stay, ward FROM t"
                delta = 1e-6 if model != "gaussian_nb" else None  # pure: takes no delta
                body = {"model": model, "options": options, "sql": sql, "label": label,
                        "epsilon": 0.5, "delta": delta}
                served, inproc = [], []
                for _ in range(args.repeats):
                    t = time.perf_counter()
                    r = client.post("/v1/fit", json=body, headers=headers)
                    served.append(time.perf_counter() - t)
                    assert r.status_code == 200, r.text
                    t = time.perf_counter()
                    local.fit(catalog.build(model, options), sql, label=label, epsilon=0.5,
                              delta=delta)
                    inproc.append(time.perf_counter() - t)
                ratios = [s / i for s, i in zip(served, inproc, strict=True)]
                print(f"{model}: served {_stats(served)} s, in-process {_stats(inproc)} s, "
                      f"ratio median {statistics.median(ratios):.2f} "
                      f"[{min(ratios):.2f}-{max(ratios):.2f}]")
        finally:
            local.close()
            client.close()
            app.state.service.close()
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
