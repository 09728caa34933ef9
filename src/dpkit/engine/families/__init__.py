"""Release families on tables: whole families of counting queries answered at once.

Ranges (``COUNT(*) WHERE x BETWEEN a AND b`` for many ``(a, b)``), the CDF of a column with a
simultaneous band and quantiles read off it, k-way marginal tables and synthetic records, each
through :mod:`dpkit.release` (the factorization mechanism with an optimised or hierarchical
strategy, or MWEM) and charged to the ledger once. The curator's methods and its ``sql()`` (the
``DP_*`` and ``COUNT(*) FILTER`` forms) delegate here with a :class:`Context`.

* :mod:`.axes`: :class:`Axis`, the public grid of one column, and the grid builders;
* :mod:`.job`: what a family asks (:class:`RangesAsk` …), the privacy :class:`Target`, the
  :class:`Job` planned from them, the :class:`Context` the curator gives, privacy resolution;
* :mod:`.plan`: ask + target → job (workload, strategy, event), the ``accuracy=`` search;
* :mod:`.histogram`: the exact histogram's statement, its dry run and its read;
* :mod:`.run`: the one sequence, cost check → dry run → ``charged_read``;
* :mod:`.finish`: noisy histogram → Result (ranges, cdf, quantiles, marginals);
* :mod:`.synthetic_data`: :class:`SyntheticData` and its finisher;
* :mod:`.sql_forms`: the SQL forms → asks;
* :mod:`.answer`: the entry points the curator calls.

Names load lazily: importing this package does not load :mod:`dpkit.release` (and scipy)
until a family is first used, so opening a project or the CLI's ``--help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpkit.engine.families.answer import (
        cdf,
        marginals,
        preview,
        quantiles,
        ranges,
        synthetic,
    )
    from dpkit.engine.families.axes import Axis
    from dpkit.engine.families.job import (
        CdfAsk,
        Context,
        Job,
        MarginalsAsk,
        RangesAsk,
        SyntheticAsk,
        Target,
    )
    from dpkit.engine.families.sql_forms import answer_sql, preview_sql
    from dpkit.engine.families.synthetic_data import SyntheticData

__all__ = [
    "Axis",
    "CdfAsk",
    "Context",
    "Job",
    "MarginalsAsk",
    "RangesAsk",
    "SyntheticAsk",
    "SyntheticData",
    "Target",
    "answer_sql",
    "cdf",
    "marginals",
    "preview",
    "preview_sql",
    "quantiles",
    "ranges",
    "synthetic",
]

_EXPORTS = {
    "Axis": "axes",
    "CdfAsk": "job",
    "Context": "job",
    "Job": "job",
    "MarginalsAsk": "job",
    "RangesAsk": "job",
    "SyntheticAsk": "job",
    "Target": "job",
    "SyntheticData": "synthetic_data",
    "answer_sql": "sql_forms",
    "preview_sql": "sql_forms",
    "cdf": "answer",
    "marginals": "answer",
    "preview": "answer",
    "quantiles": "answer",
    "ranges": "answer",
    "synthetic": "answer",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
