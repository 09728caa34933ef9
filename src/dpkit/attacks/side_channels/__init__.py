"""A neighbouring-datasets fuzzer for the curator's side channels (issue 12).

The curator promises that anything it shows besides the noisy values (outcome kind, error
class and text, columns, released keys and their order, number of rows, the budget charged) is
a function of public things only: the query, the declared schema, bounds and domains, the
budget. :func:`fuzz` tests that promise adversarially: it generates queries from a grammar over
a table's declarations (:class:`Grammar`), builds neighbouring datasets D and D' (one unit
added, removed, or given extreme values: :class:`Scratch`), runs every query on a project over
each with the same seed, and reports every public difference (:class:`Finding`), including
the work each query did (its engine statements and noise requests: a timing-class proxy).

>>> import dpkit as dp
>>> from dpkit.attacks import side_channels as sc
>>> report = sc.fuzz(meta, queries=200, seed=1)          # doctest: +SKIP
>>> print(report.summary())                              # doctest: +SKIP
"""

from __future__ import annotations

from dpkit.attacks.side_channels.draw import Draw
from dpkit.attacks.side_channels.grammar import Grammar
from dpkit.attacks.side_channels.neighbours import NEIGHBOURS, Scratch, extreme_literals
from dpkit.attacks.side_channels.outcome import Outcome, compare, observe, self_check
from dpkit.attacks.side_channels.query import Query
from dpkit.attacks.side_channels.runner import ACCOUNTANTS, Finding, Report, fuzz, make_project
from dpkit.attacks.side_channels.spark import spark_factory

__all__ = [
    "ACCOUNTANTS",
    "NEIGHBOURS",
    "Draw",
    "Finding",
    "Grammar",
    "Outcome",
    "Query",
    "Report",
    "Scratch",
    "compare",
    "extreme_literals",
    "fuzz",
    "make_project",
    "observe",
    "self_check",
    "spark_factory",
]
