"""Attacks on private (and non-private) releases, and the empirical audit of a mechanism's ε.

- :mod:`~dpkit.attacks.audit`: certified lower bounds on ε from samples on neighbouring inputs
  (``empirical_epsilon``; ``audit.audit`` runs a vectorised sampler first);
  :mod:`~dpkit.attacks.audit_vector` for vector outputs and black-box mechanisms;
  :mod:`~dpkit.attacks.one_run` for the Steinke-Nasr-Jagielski one-run audit bound;
  :mod:`~dpkit.attacks.audit_allocation` audits the joint-DP allocation's prices (imported on
  demand);
- :mod:`~dpkit.attacks.reconstruction`: Dinur-Nissim reconstruction (exhaustive, LP, least
  squares with its predicted success rate);
- :mod:`~dpkit.attacks.oracles`: systems to attack (exact, fresh or sticky noise, suppression,
  the dpkit curator); :mod:`~dpkit.attacks.differencing`: differencing and averaging attacks;
- :mod:`~dpkit.attacks.membership`: membership inference (likelihood ratio, LiRA), ROC curves;
- :mod:`~dpkit.attacks.linkage` (with :mod:`~dpkit.attacks.deidentify`,
  :mod:`~dpkit.attacks.linkage_run`): linkage, homogeneity and background-knowledge attacks on
  k-anonymous / l-diverse / t-close releases and on DP ones (imported on demand: they need
  pandas);
- :mod:`~dpkit.attacks.side_channels`: the neighbouring-datasets fuzzer of the curator (imported
  on demand: ``from dpkit.attacks import side_channels``; it needs the engine and DuckDB).
- attacks on trained models, imported on demand (``from dpkit.attacks import inversion, lira``):
  :mod:`~dpkit.attacks.inversion` (model inversion, white- and black-box),
  :mod:`~dpkit.attacks.lira` (LiRA with shadow models on any classifier, beside the one-run
  audit and the DP bound), :mod:`~dpkit.attacks.model_targets` (MNIST-5k, non-private
  baselines), :mod:`~dpkit.attacks.model_experiments` (the figures of docs/attacks.md).

``dpkit.attacks.audit`` stays the *module* (its function ``audit`` is not re-exported here, so
that ``dpkit.attacks.audit.empirical_epsilon`` keeps working). ``plots`` is imported on
demand: it needs matplotlib. What ``dpkit attack`` runs is in :mod:`dpkit.cli.attack_runs`.
"""

from __future__ import annotations

from dpkit.attacks import (
    audit,
    audit_vector,
    differencing,
    membership,
    one_run,
    oracles,
    reconstruction,
    report,
)
from dpkit.attacks.audit import AuditResult, clopper_pearson, empirical_epsilon
from dpkit.attacks.audit_vector import audit_black_box, empirical_epsilon_vector
from dpkit.attacks.membership import dp_tpr_bound, roc_curve
from dpkit.attacks.one_run import one_run_epsilon

__all__ = [
    "AuditResult",
    "audit",
    "audit_black_box",
    "audit_vector",
    "clopper_pearson",
    "differencing",
    "dp_tpr_bound",
    "empirical_epsilon",
    "empirical_epsilon_vector",
    "membership",
    "one_run",
    "one_run_epsilon",
    "oracles",
    "reconstruction",
    "report",
    "roc_curve",
]
