"""dpkit.local: the local model — each person randomizes their own data before it leaves them.

Frequency oracles (client ``randomize`` on n users at once, server ``aggregate`` + ``estimate``,
unbiased counts with exact variance): :class:`GeneralizedRR`, :class:`SymmetricUnaryEncoding`,
:class:`OptimizedUnaryEncoding` (bit-packed), :class:`BinaryLocalHashing`,
:class:`OptimizedLocalHashing`, :class:`HadamardResponse`; sketches :class:`Rappor`,
:class:`CountMeanSketch`, :class:`HadamardCountMeanSketch`; numbers :class:`LocalLaplace`;
heavy hitters :class:`PrefixExtension`; ranges :class:`HierarchicalRanges`,
:class:`HaarRanges`; statistical queries :class:`LocalSQOracle`. Reports travel as JSON lines
(:mod:`dpkit.local.reports`).

Every randomizer draws only from :mod:`dpkit.noise`, with exact rational probabilities; the
stated ε of each mechanism is a proven upper bound on the privacy loss of one report, for the
replace-one relation on a user's value (see ``docs/local.md``).

>>> import dpkit.noise as noise
>>> oracle = OptimizedUnaryEncoding(8, epsilon=1.0)
>>> est = oracle.estimate(oracle.randomize([1, 2, 2, 7] * 250, source=noise.seeded(0)))
>>> est.n, est.counts.shape
(1000, (8,))
"""

from __future__ import annotations

from .base import FrequencyEstimate, FrequencyOracle, Reports, Tally
from .grr import GeneralizedRR
from .hadamard import HadamardResponse
from .hashing import BinaryLocalHashing, LocalHashing, OptimizedLocalHashing
from .heavy_hitters import HeavyHitters, PrefixExtension
from .numeric import LocalLaplace, MeanEstimate
from .ranges import HaarRanges, HierarchicalRanges, RangeEstimate
from .rappor import Rappor, RapporClient
from .sketches import CountMeanSketch, HadamardCountMeanSketch
from .sq import LocalSQOracle, NaiveBayes, learn_naive_bayes
from .unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding, UnaryEncoding

__all__ = [
    "BinaryLocalHashing",
    "CountMeanSketch",
    "FrequencyEstimate",
    "FrequencyOracle",
    "GeneralizedRR",
    "HaarRanges",
    "HadamardCountMeanSketch",
    "HadamardResponse",
    "HeavyHitters",
    "HierarchicalRanges",
    "LocalHashing",
    "LocalLaplace",
    "LocalSQOracle",
    "MeanEstimate",
    "NaiveBayes",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "PrefixExtension",
    "RangeEstimate",
    "Rappor",
    "RapporClient",
    "Reports",
    "SymmetricUnaryEncoding",
    "Tally",
    "UnaryEncoding",
    "learn_naive_bayes",
]
