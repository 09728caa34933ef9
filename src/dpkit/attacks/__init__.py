"""Attacks on private (and non-private) releases, and the empirical audit of a mechanism's ε.

- :mod:`dpkit.attacks.audit`: certified lower bounds on ε from samples on neighbouring inputs
  (``empirical_epsilon``, ``audit``).
"""

from __future__ import annotations

from dpkit.attacks.audit import AuditResult, audit, clopper_pearson, empirical_epsilon

__all__ = ["AuditResult", "audit", "clopper_pearson", "empirical_epsilon"]
