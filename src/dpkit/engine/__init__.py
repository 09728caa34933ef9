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
:mod:`~dpkit.engine.results`, :mod:`~dpkit.engine.builder`, :mod:`~dpkit.engine.demo`,
:mod:`~dpkit.engine.commands` (what the CLI calls).
"""

from __future__ import annotations

from dpkit.engine.builder import QueryBuilder
from dpkit.engine.curator import BudgetStatus, Curator
from dpkit.engine.ledger import Ledger, LedgerError, LedgerTampered
from dpkit.engine.results import Preview, Result
from dpkit.engine.sql import QueryError

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
]
