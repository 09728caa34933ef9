"""Bundled example data and the demo: hospital visits behind a curator.

:func:`make_hospital_visits` generates a deterministic table of visits (several per patient) from
:func:`dpkit.noise.seeded` — the only source of randomness in dpkit — so the same seed gives the
same table on every machine. It needs only numpy (a dict of columns; ``to_pandas`` style
conversion is up to the caller). :func:`run_demo` builds a project in a temporary folder, registers
the table with the patient as privacy unit, answers a handful of queries and prints them with
their confidence intervals and the budget.

The data are synthetic: no real person is in them.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import noise

__all__ = ["WARDS", "make_hospital_visits", "run_demo"]

# what the demo's budget resolves constant work to (the default: on where the budget can pay)
_CW = {True: "constant work on: timing-safe sampling, the default", False: "constant work off"}

WARDS = (
    "Cardiology", "Emergency", "Geriatrics", "Maternity",
    "Oncology", "Orthopedics", "Pediatrics", "Surgery",
)
_MEAN_STAY = np.array([4.0, 1.2, 7.5, 2.5, 6.0, 4.5, 2.0, 5.0])
_DAILY_COST = np.array([2100.0, 1400.0, 900.0, 1100.0, 2600.0, 1700.0, 1000.0, 2400.0])


def make_hospital_visits(n: int = 300_000, *, seed: int = 2024) -> dict[str, np.ndarray]:
    """``n`` synthetic hospital visits as a dict of numpy columns (deterministic in ``seed``).

    Columns: ``visit_id`` (int), ``patient_id`` (int; about n/3 patients, most with 1-5 visits and
    a few frequent visitors with dozens), ``ward`` (one of :data:`WARDS`), ``age`` (years, 0-100,
    fixed per patient), ``sex`` ('F'/'M'), ``length_of_stay`` (days, int), ``cost`` (float,
    currency units), ``readmitted`` (bool), ``visit_date`` (2023-2024).

    >>> d = make_hospital_visits(1000, seed=1)
    >>> sorted(d)[:3], len(d["visit_id"])
    (['age', 'cost', 'length_of_stay'], 1000)
    >>> bool((make_hospital_visits(1000, seed=1)["cost"] == d["cost"]).all())
    True
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int (got {n!r})")
    src = noise.seeded(seed)
    n_patients = max(1, n // 3)

    # patients: age (three-uniform mix skewed to the old), sex
    u = noise.uniform_float01((n_patients, 3), source=src)
    age_p = np.floor(100 * np.maximum(u[:, 0], (u[:, 1] + u[:, 2]) / 2)).astype(np.int64)
    sex_p = np.where(noise.bernoulli(0.52, n_patients, source=src), "F", "M")

    # visits: 85% spread over all patients, 15% from 1% "frequent visitors"
    frequent = max(1, n_patients // 100)
    pick = noise.uniform_int(n_patients, n, source=src)
    heavy = noise.bernoulli(0.15, n, source=src)
    pick = np.where(heavy, noise.uniform_int(frequent, n, source=src), pick)
    patient = pick.astype(np.int64)
    age = age_p[patient]
    sex = sex_p[patient]

    # ward: depends on age and sex
    w = noise.uniform_float01((n, 2), source=src)
    ward = np.floor(w[:, 0] * 8).astype(np.int64)
    ward = np.where((age < 16) & (w[:, 1] < 0.7), 6, ward)
    ward = np.where((age >= 70) & (w[:, 1] < 0.35), 2, ward)
    ward = np.where((sex == "F") & (age >= 18) & (age <= 45) & (w[:, 1] < 0.3), 3, ward)
    ward = np.where((ward == 3) & ((sex == "M") | (age < 16) | (age > 50)), 1, ward)
    ward = np.where((ward == 6) & (age >= 18), 1, ward)

    # length of stay: exponential-ish by ward, longer with age
    e = noise.uniform_float01(n, source=src)
    mean = _MEAN_STAY[ward] * (1.0 + age / 150.0)
    stay = np.floor(-np.log1p(-np.minimum(e, 1 - 1e-12)) * mean).astype(np.int64)
    stay = np.minimum(stay, 90)
    c = noise.uniform_float01(n, source=src)
    cost = np.round(350.0 + _DAILY_COST[ward] * (stay + 0.5) * (0.75 + 0.5 * c), 2)
    readmit_p = np.clip(0.04 + age / 800.0 + stay / 200.0, 0, 0.6)
    readmitted = noise.uniform_float01(n, source=src) < readmit_p
    day = noise.uniform_int(731, n, source=src)
    visit_date = np.datetime64("2023-01-01") + day.astype("timedelta64[D]")
    order = np.lexsort((day, patient))
    return {
        "visit_id": np.arange(1, n + 1, dtype=np.int64),
        "patient_id": (100_000 + patient[order]).astype(np.int64),
        "ward": np.array(WARDS, dtype=object)[ward[order]],
        "age": age[order],
        "sex": sex[order].astype(object),
        "length_of_stay": stay[order],
        "cost": cost[order],
        "readmitted": readmitted[order],
        "visit_date": visit_date[order].astype("datetime64[us]"),
    }


DEMO_QUERIES: tuple[tuple[str, str, float], ...] = (
    ("How many visits per ward, and how old are the patients?",
     "SELECT ward, COUNT(*) AS visits, AVG(age) AS mean_age FROM visits GROUP BY ward "
     "ORDER BY visits DESC", 0.5),
    ("How many patients (not visits) were readmitted?",
     "SELECT COUNT(DISTINCT patient_id) AS patients FROM visits WHERE readmitted", 0.2),
    ("Length of stay and cost for patients over 65",
     "SELECT AVG(length_of_stay) AS mean_stay, STDDEV(length_of_stay) AS sd_stay, "
     "SUM(cost) AS total_cost, MEDIAN(cost) AS median_cost FROM visits WHERE age > 65", 0.6),
    ("Top 3 wards by total cost (chosen by noisy max, then measured)",
     "SELECT ward, SUM(cost) AS total_cost FROM visits GROUP BY ward ORDER BY total_cost DESC "
     "LIMIT 3", 0.3),
    ("Visits per age band: five overlapping bands answered together (correlated noise)",
     "SELECT DP_RANGES(age, (0, 17), (18, 64), (65, 100), (0, 64), (18, 100)) FROM visits", 0.3),
    ("Visits and cost per age group (GROUP BY a CASE: every group is released, even if empty)",
     "SELECT CASE WHEN age < 18 THEN 'child' WHEN age < 65 THEN 'adult' ELSE 'senior' END "
     "AS age_group, COUNT(*) AS visits, AVG(cost) AS mean_cost FROM visits GROUP BY age_group",
     0.2),
    ("Readmission rate per decade of age (derived bins; a ratio with its interval)",
     "SELECT floor(age / 10) * 10 AS decade, COUNT(*) FILTER (WHERE readmitted) / COUNT(*) "
     "AS readmit_rate FROM visits GROUP BY decade", 0.2),
)

#: a question asked with a clamp that is far too tight: the answer says so
WARNING_QUERY = ("Mean cost, clamped to [0, 1000] (a bound set too low: the answer warns)",
                 "SELECT AVG(cost) AS mean_cost FROM visits", 0.1, {"cost": (0, 1000)})


def _ask_all(con: Any, cur: Any) -> list[Any]:
    """Alice's questions, each with its answer, notes and budget split."""
    from rich.panel import Panel

    from dpkit.engine.results import split_table

    results = []
    asks = [(q, sql, eps, None) for q, sql, eps in DEMO_QUERIES] + [WARNING_QUERY]
    for question, sql, eps, bounds in asks:
        t = time.perf_counter()
        res = cur.sql(sql, epsilon=eps, bounds=bounds)
        dt = time.perf_counter() - t
        results.append(res)
        con.print(Panel.fit(f"[bold]{question}[/]\n[cyan]{sql}[/]  [dim](epsilon {eps})[/]"))
        con.print(res.table())
        for warning in getattr(res, "warnings", []):
            con.print(f"[bold yellow]warning:[/] {warning}")
        for note in res.notes:
            con.print(f"[dim]note: {note}[/]")
        con.print(f"[dim]answered in {dt * 1000:.0f} ms; budget split:[/]")
        con.print(split_table(res.split, title=""))
        con.print()
    return results


def _picture(con: Any, res: Any, folder: Path) -> None:
    """The age-group answer as a bar chart with its intervals (when matplotlib is there)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        con.print("[dim](pip install 'dpkit\\[plots]' to draw the answers: Result.plot())[/]\n")
        return
    path = folder / "dpkit-demo-age-groups.png"
    res.plot(path)
    con.print(f"The age-group answer as a picture, intervals as whiskers: [bold]{path}[/] "
              f"([dim]Result.plot(), dpkit query ... --plot out.png[/])\n")


def _refusals(con: Any, cur: Any) -> None:
    """What the curator refuses an analyst, each before anything is read or spent."""
    from dpkit.accounting import BudgetExceeded
    from dpkit.engine.sql import QueryError

    attempts = (
        ("asks for more than her cap leaves",
         lambda: cur.sql("SELECT ward, COUNT(*) FROM visits GROUP BY ward", epsilon=1.0),
         BudgetExceeded),
        ("asks for raw rows",
         lambda: cur.sql("SELECT patient_id, age FROM visits", epsilon=0.1), QueryError),
        ("tries to register a table of her own",
         lambda: cur.add_table("mine", {"x": [1, 2]}), PermissionError),
    )
    for what, attempt, kind in attempts:
        con.print(f"[bold]Alice {what}:[/]")
        try:
            attempt()
        except kind as exc:
            con.print(f"[red]refused:[/] {exc}\n")


def run_demo(path: str | Path | None = None, console: Any = None, *, rows: int = 300_000,
             seed: int = 2024, picture_dir: str | Path | None = None) -> Any:
    """Build a project on generated hospital visits, run a few queries, print everything.

    ``path``: keep the project there (default: a temporary folder, removed afterwards);
    ``picture_dir``: where the demo's chart goes (default: the project's folder when ``path``
    is given, else the current directory). Returns the list of results (the project is closed).
    """
    from rich.console import Console

    from dpkit.accounting import Budget
    from dpkit.engine.curator import Curator

    con = console or Console()
    tmp: str | None = None
    if path is None:
        tmp = tempfile.mkdtemp(prefix="dpkit-demo-")
        project = Path(tmp) / "hospital.dpkit"
    else:
        project = Path(path)
        picture_dir = picture_dir if picture_dir is not None else project
    picture_dir = Path(picture_dir) if picture_dir is not None else None
    results = []
    try:
        con.rule("[bold]dpkit demo: a hospital's visits behind a private curator")
        t0 = time.perf_counter()
        with con.status(f"generating {rows:,} synthetic visits (seeded, deterministic)..."):
            data = make_hospital_visits(rows, seed=seed)
        cur = Curator.create(project, budget=Budget(epsilon=3.0, delta=1e-6))
        with con.status("loading them into the project's DuckDB file..."):
            meta = cur.add_table(
                "visits", data, privacy_unit="patient_id", max_rows_per_unit=5,
                bounds={"age": (0, 100), "length_of_stay": (0, 30), "cost": (0, 50_000)},
                domains={"ward": list(WARDS)}, not_null=["age", "length_of_stay", "cost"],
            )
        con.print(
            f"The data owner created [bold]{project}[/] with a budget of epsilon 3.0, delta 1e-6 "
            f"(accountant {cur.ledger.config.accountant}, "
            f"{_CW[cur.ledger.config.constant_work is not None]}) and registered table "
            f"[bold]visits[/] "
            f"({len(data['visit_id']):,} rows, {len(meta.columns)} columns; "
            f"{meta.summary()}). [dim]({time.perf_counter() - t0:.1f} s)[/]"
        )
        con.print("[dim]Each patient is one privacy unit: every answer below is differentially "
                  "private for adding or removing one patient with all their visits; at most 5 "
                  "visits per patient count towards any answer.[/]\n")
        token = cur.add_analyst("alice", epsilon=2.8)
        con.print(f"The owner gives analyst [bold]alice[/] a token (shown once, stored hashed) "
                  f"and a cap of epsilon 2.8: [dim]{token[:14]}...[/]\n")
        alice = Curator.open(project, token=token)
        results.extend(_ask_all(con, alice))
        _picture(con, results[len(DEMO_QUERIES) - 2], picture_dir or Path.cwd())
        _refusals(con, alice)
        alice.close()
        con.print(cur.budget().table())
        cur.close()
        reopened = Curator.open(project)
        b = reopened.budget()
        con.print(f"\nReopened from disk: spent epsilon {b.spent:.4g}, remaining "
                  f"{b.remaining:.4g}; the ledger's hash chain of {b.head[0]} rows verifies.")
        reopened.close()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return results
