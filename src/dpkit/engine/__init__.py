"""The curator: a SQL and Python query engine over DuckDB with a durable, enforced budget.

Example (see also the runnable one in :mod:`dpkit.engine.curator`)::

    import dpkit as dp
    cur = dp.Curator.create("clinic.dpkit", budget=dp.Budget(epsilon=3.0, delta=1e-6))
    cur.add_table("visits", "visits.parquet", privacy_unit="patient_id",
                  bounds={"age": (0, 120)}, max_rows_per_unit=5)
    cur.sql("SELECT ward, COUNT(*), AVG(age) FROM visits GROUP BY ward", epsilon=0.5)

See ``docs/curator.md`` (data owner's and analyst's guides) and the modules:
:mod:`~dpkit.engine.curator` (the project), :mod:`~dpkit.engine.ledger` (the hash-chained
budget), :mod:`~dpkit.engine.sql` (validation), :mod:`~dpkit.engine.plan` (bounding, sensitivity,
budget split, the pushed-down SQL), :mod:`~dpkit.engine.noisy` (noise and intervals),
:mod:`~dpkit.engine.results`, :mod:`~dpkit.engine.builder`, :mod:`~dpkit.engine.demo`. The
command line that drives the curator is :mod:`dpkit.cli`.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "BudgetStatus",
    "Curator",
    "Ledger",
    "LedgerError",
    "LedgerTampered",
    "Preview",
    "QueryBuilder",
    "QueryError",
    "Result",
    "read_declaration",
]

_EXPORTS = {
    "BudgetStatus": "dpkit.engine.curator",
    "Curator": "dpkit.engine.curator",
    "Ledger": "dpkit.engine.ledger",
    "LedgerError": "dpkit.engine.ledger",
    "LedgerTampered": "dpkit.engine.ledger",
    "Preview": "dpkit.engine.results",
    "QueryBuilder": "dpkit.engine.builder",
    "QueryError": "dpkit.engine.sql",
    "Result": "dpkit.engine.results",
    "read_declaration": "dpkit.engine.declare",
}


def __getattr__(name: str) -> Any:
    # Lazy: a process that only needs the ledger (or the CLI's --help) does not pay for DuckDB,
    # sqlglot and the mechanisms.
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dpkit.engine' has no attribute {name!r}")
