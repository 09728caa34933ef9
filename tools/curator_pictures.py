"""Draw the pictures of docs/curator.md ("Outputs, pictures and reports").

    PYTHONPATH=src python tools/curator_pictures.py [--out docs/img]

A seeded (INSECURE, reproducible) project on the demo's generated hospital visits, the owner
and one analyst spending a little, then ``Result.plot`` (bars, and a line over a declared
ordered key) and ``BudgetStatus.plot``. Needs matplotlib (``pip install 'dpkit[plots]'``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import dpkit as dp
from dpkit.engine import Curator
from dpkit.engine.demo import WARDS, make_hospital_visits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    out = ap.parse_args().out
    with tempfile.TemporaryDirectory() as tmp:
        cur = Curator.create(Path(tmp) / "clinic.dpkit", epsilon=3.0, delta=1e-6,
                             source=dp.noise.seeded(7))
        cur.add_table("visits", make_hospital_visits(60_000, seed=1), privacy_unit="patient_id",
                      max_rows_per_unit=5, bounds={"age": (0, 100), "length_of_stay": (0, 30)},
                      domains={"ward": list(WARDS), "age": list(range(101))})
        token = cur.add_analyst("alice", epsilon=1.5)
        wards = cur.sql("SELECT ward, COUNT(*) AS n, AVG(length_of_stay) AS stay FROM visits "
                        "GROUP BY ward", epsilon=0.4)
        wards.plot(out / "curator_query_wards.png")
        with Curator.open(cur.path, token=token) as alice:
            ages = alice.sql("SELECT age, COUNT(*) AS n FROM visits GROUP BY age", epsilon=0.3)
            ages.plot(out / "curator_query_ages.png")
            for eps in (0.2, 0.3):
                alice.sql("SELECT COUNT(*) FROM visits WHERE readmitted", epsilon=eps)
        cur.sql("SELECT AVG(age) FROM visits", epsilon=0.25)
        cur.budget().plot(out / "curator_budget.png")
        cur.close()
    print(f"wrote {out}/curator_query_wards.png, curator_query_ages.png, curator_budget.png")


if __name__ == "__main__":
    main()
