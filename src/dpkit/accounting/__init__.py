"""Events → guarantees: pure, approximate (basic/advanced/optimal), zCDP, RDP, μ-GDP, PLD; budgets.

Every accountant reads :mod:`dpkit.events` and returns an **upper bound** on ε (or δ): a number
that may be loose but is never below the truth. The dispatcher picks the tightest method that
supports the event; see ``docs/accounting.md``.

>>> import dpkit.events as ev
>>> from dpkit import accounting
>>> round(accounting.epsilon(ev.SelfComposed(ev.Gaussian(2.0), 100), delta=1e-12), 5)
47.04923
>>> accounting.epsilon(ev.SelfComposed(ev.Laplace(2.0), 30), delta=0.0, method="pure")
15.0

Submodules (``pld``, ``analytic_gaussian``, ``rdp``, …) are imported lazily, on first use, so that
``import dpkit.accounting`` does not pay for scipy.
"""

from __future__ import annotations

import importlib
from typing import Any

from dpkit.accounting._common import UnsupportedEvent

__all__ = [
    "METHODS",
    "Budget",
    "BudgetExceeded",
    "UnsupportedEvent",
    "analytic_gaussian",
    "approx",
    "calibrate",
    "delta",
    "epsilon",
    "gdp",
    "pld",
    "pure",
    "rdp",
    "report",
    "zcdp",
]

_LAZY_MODULES = {
    "analytic_gaussian", "api", "approx", "budget", "calibrate",
    "gdp", "pld", "pure", "rdp", "zcdp",
}
_LAZY_ATTRS = {
    "epsilon": ("dpkit.accounting.api", "epsilon"),
    "delta": ("dpkit.accounting.api", "delta"),
    "report": ("dpkit.accounting.api", "report"),
    "METHODS": ("dpkit.accounting.api", "METHODS"),
    "Budget": ("dpkit.accounting.budget", "Budget"),
    "BudgetExceeded": ("dpkit.accounting.budget", "BudgetExceeded"),
}


def __getattr__(name: str) -> Any:
    # Lazy so that `import dpkit.accounting` stays cheap: analytic_gaussian, pld and rdp pull in
    # scipy (~0.5-1 s); a submodule is imported on first attribute access (then cached).
    if name in _LAZY_ATTRS:
        module, attr = _LAZY_ATTRS[name]
        return getattr(importlib.import_module(module), attr)
    if name in _LAZY_MODULES:
        return importlib.import_module(f"dpkit.accounting.{name}")
    raise AttributeError(f"module 'dpkit.accounting' has no attribute {name!r}")
