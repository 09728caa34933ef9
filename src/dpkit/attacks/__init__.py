"""Attacks on private (and non-private) releases, and the empirical audit of a mechanism's ε.

- :mod:`dpkit.attacks.audit`: certified lower bounds on ε from samples on neighbouring inputs
  (``empirical_epsilon``; ``audit.audit`` runs a vectorised sampler first).

``dpkit.attacks.audit`` stays the *module* (its function ``audit`` is not re-exported here, so
that ``dpkit.attacks.audit.empirical_epsilon`` keeps working).
"""

from __future__ import annotations

from dpkit.attacks import audit
from dpkit.attacks.audit import AuditResult, clopper_pearson, empirical_epsilon

__all__ = ["AuditResult", "audit", "clopper_pearson", "empirical_epsilon"]
