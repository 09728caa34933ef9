"""dpkit.local: the local model — each person randomizes their own data before it leaves them.

Frequency oracles (client ``randomize`` on n users at once, server ``aggregate`` + ``estimate``):
:class:`GeneralizedRR`, :class:`SymmetricUnaryEncoding`, :class:`OptimizedUnaryEncoding`,
:class:`BinaryLocalHashing`, :class:`OptimizedLocalHashing`, :class:`HadamardResponse`.
Every randomizer draws only from :mod:`dpkit.noise`, with exact rational probabilities; the
stated ε of each oracle is a proven upper bound on the privacy loss of one report (see
``docs/local.md``).
"""

from __future__ import annotations

from .base import FrequencyEstimate, FrequencyOracle, Reports, Tally
from .grr import GeneralizedRR
from .hadamard import HadamardResponse
from .hashing import BinaryLocalHashing, LocalHashing, OptimizedLocalHashing
from .unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding, UnaryEncoding

__all__ = [
    "BinaryLocalHashing",
    "FrequencyEstimate",
    "FrequencyOracle",
    "GeneralizedRR",
    "HadamardResponse",
    "LocalHashing",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "Reports",
    "SymmetricUnaryEncoding",
    "Tally",
    "UnaryEncoding",
]
