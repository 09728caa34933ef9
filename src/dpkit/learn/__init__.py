"""dpkit.learn: private machine learning on floors F1-F4 (never the curator).

Estimators follow scikit-learn's API (``fit`` / ``predict`` / ``score``, ``get_params``,
``clone``-able) without importing it; each fitted model carries ``event_`` (a
:mod:`dpkit.events` Event for the whole fit) and ``epsilon_``. See ``docs/learn.md``.

- :class:`LogisticRegression`, :class:`LinearRegression` (``linear``), :class:`GaussianNB`
  (``naive_bayes``), :class:`KMeans` (``cluster``)
- :class:`FiniteClassLearner` and the classes :class:`Thresholds`, :class:`Intervals`,
  :class:`Conjunctions` (``pac``): private PAC learning by the exponential mechanism
- :class:`SQLogisticRegression`, :class:`CentralSQOracle` (``sq``): statistical-query learning,
  central or local (``dpkit.local.LocalSQOracle``)
- :class:`MLPClassifier` (``mlp``): DP-SGD on a multi-layer perceptron (the ``[torch]`` extra
  at ``fit``); ``dpkit.learn.torch.make_private`` for your own PyTorch objects
  (``docs/learn_torch.md``)
- :class:`ScatterFeatures` (``features``): fixed, data-independent
  image features that cost no privacy, for a private model to learn from (Tramèr & Boneh 2021)
"""

from __future__ import annotations

from .cluster import KMeans
from .features import ScatterFeatures
from .linear import LinearRegression, LogisticRegression
from .mlp import MLPClassifier
from .naive_bayes import GaussianNB
from .pac import (
    Conjunctions,
    FiniteClassLearner,
    Intervals,
    Thresholds,
    pac_excess_bound,
    threshold_excess,
)
from .sq import CentralSQOracle, LocalVectorSQOracle, SQLogisticRegression

__all__ = [
    "CentralSQOracle",
    "Conjunctions",
    "FiniteClassLearner",
    "GaussianNB",
    "Intervals",
    "KMeans",
    "LinearRegression",
    "LocalVectorSQOracle",
    "LogisticRegression",
    "MLPClassifier",
    "SQLogisticRegression",
    "ScatterFeatures",
    "Thresholds",
    "pac_excess_bound",
    "threshold_excess",
]
