"""A project's folder and total budget: making it, opening it as the owner or an analyst.

``Curator.create`` takes ``budget=dp.Budget(...)`` or ``epsilon=``/``delta=``/``accountant=``;
:func:`budget_parameters` checks them (before any file is written) and settles the accountant:
``pure`` when delta is 0, else ``approx`` (both valid privacy filters for adaptively chosen
queries). The curator's neighbouring relation is add/remove one unit.

The ledger is ``ledger.sqlite`` in the folder, or, given ``ledger="postgresql://..."`` (or
``$DPKIT_LEDGER_DSN`` at creation), a schema in PostgreSQL that ``ledger.pg`` names
(:mod:`dpkit.engine.ledger_postgres`); the owner key stays in the folder either way.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

from dpkit.engine.backend_duckdb import init_database
from dpkit.engine.ledger import Ledger, head_path, key_path
from dpkit.engine.ledger_postgres import DSN_ENV, is_dsn
from dpkit.engine.ledger_rows import resolve_constant_work
from dpkit.engine.roles import OWNER, TOKEN_ENV, identify

__all__ = ["DATA_FILE", "LEDGER_FILE", "LOAD_LOCK", "MAX_BUDGET_EPSILON", "PG_LEDGER_FILE",
           "budget_parameters", "ledger_dsn", "ledger_file", "make_project", "open_project"]

MAX_BUDGET_EPSILON = 1000.0
LEDGER_FILE = "ledger.sqlite"
PG_LEDGER_FILE = "ledger.pg"  # names the PostgreSQL database and schema that hold the ledger
DATA_FILE = "data.duckdb"
LOAD_LOCK = ".load.lock"  # held across a table load, its ledger row and the orphan cleanup


def ledger_dsn(ledger: str | None) -> str | None:
    """The PostgreSQL DSN a new project's ledger goes to (None: SQLite in the folder):
    ``ledger`` if given, else ``$DPKIT_LEDGER_DSN``; anything else is refused."""
    if ledger is None:
        ledger = os.environ.get(DSN_ENV) or None
        if ledger is None:
            return None
    if ledger == "sqlite":
        return None
    if not isinstance(ledger, str) or not is_dsn(ledger):
        raise ValueError(
            f"the ledger is 'sqlite' (the default: a file in the project folder) or a "
            f"PostgreSQL DSN such as 'postgresql://user@host:5432/dbname' (got {ledger!r})")
    return ledger


def ledger_file(path: Path) -> Path | None:
    """The project's ledger file (``ledger.sqlite``, or ``ledger.pg`` naming a PostgreSQL
    ledger), or None when the folder holds neither."""
    for name in (LEDGER_FILE, PG_LEDGER_FILE):
        if (path / name).exists():
            return path / name
    return None


def make_project(path: Path, *, epsilon: float, delta: float, accountant: str, orders: Any,
                 noise_seed: int | None, dsn: str | None = None,
                 constant_work: bool | None = None) -> Ledger:
    """Create the folder's ledger (with its owner key) and data file; on any failure remove
    what was made, so a failed create leaves no half project. ``dsn``: the ledger's rows go
    to a new schema in that PostgreSQL database (:func:`ledger_dsn`). ``constant_work``:
    None is on where the budget can pay for it (:func:`resolve_constant_work`); the resolved
    value is what the genesis row records, and what every later opening reads."""
    cw, _ = resolve_constant_work(constant_work, epsilon=epsilon, delta=delta,
                                  accountant=accountant)
    if path.exists() and any(path.iterdir()):
        raise FileExistsError(
            f"{path} already exists and is not empty; open it with Curator.open({str(path)!r})"
        )
    path.mkdir(parents=True, exist_ok=True)
    try:
        ledger = Ledger.create(path / (LEDGER_FILE if dsn is None else PG_LEDGER_FILE),
                               epsilon=epsilon, delta=delta, accountant=accountant,
                               orders=orders, analyst=OWNER, noise_seed=noise_seed, dsn=dsn,
                               constant_work=cw)
        init_database(path / DATA_FILE)
    except BaseException:
        made = (LEDGER_FILE, LEDGER_FILE + "-wal", LEDGER_FILE + "-shm", DATA_FILE,
                PG_LEDGER_FILE, key_path(LEDGER_FILE).name, head_path(LEDGER_FILE).name)
        for f in made:
            with contextlib.suppress(OSError):
                (path / f).unlink()
        with contextlib.suppress(OSError):
            path.rmdir()
        raise
    return ledger


def open_project(path: Path, token: str | None, *,
                 expected_head: tuple[int, str] | None = None) -> tuple[Ledger, str]:
    """The verified ledger and who acts: the analyst ``token`` (or ``$DPKIT_TOKEN``) names,
    else the owner. Unknown, revoked or malformed tokens are refused."""
    found = ledger_file(path)
    if found is None:
        raise FileNotFoundError(
            f"{path} is not a dpkit project (no {LEDGER_FILE}); create one with "
            f"Curator.create({str(path)!r}, budget=...) or `dpkit init`"
        )
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    ledger = Ledger.open(found, expected_head=expected_head)
    try:
        return ledger, OWNER if token is None else identify(ledger, token)
    except BaseException:
        ledger.close()
        raise


def budget_parameters(budget: Any, *, epsilon: float | None, delta: float,
                      accountant: str | None) -> tuple[float, float, str, Any]:
    """``(epsilon, delta, accountant, rdp orders)`` of a new project, checked."""
    orders = None
    if budget is not None:
        if epsilon is not None or accountant is not None:
            raise ValueError("give budget= or epsilon=/delta=/accountant=, not both")
        epsilon, delta = float(budget.epsilon), float(budget.delta)
        accountant = str(budget.accountant)
        if str(getattr(budget, "neighboring", "add_remove")) != "add_remove":
            raise ValueError("the curator's neighbouring relation is add/remove one unit")
        orders = getattr(budget, "orders", None)
        if accountant == "approx" and delta == 0.0:
            accountant = "pure"
    elif epsilon is None:
        raise ValueError("give the total budget: epsilon=3.0 (and delta=1e-6)")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (
        math.isfinite(epsilon) and epsilon > 0
    ):
        raise ValueError(f"epsilon must be a finite number > 0 (got {epsilon!r})")
    if epsilon > MAX_BUDGET_EPSILON:
        raise ValueError(
            f"a total epsilon of {epsilon:g} offers no meaningful privacy; the curator accepts "
            f"at most {MAX_BUDGET_EPSILON:g} (typical budgets are 1 to 10)"
        )
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (
        0.0 <= delta < 0.01
    ):
        raise ValueError(
            f"delta must lie in [0, 0.01) (got {delta!r}); it should be far below 1/n, e.g. "
            f"1e-6"
        )
    if accountant is None:
        accountant = "pure" if delta == 0 else "approx"
    return float(epsilon), float(delta), accountant, orders
