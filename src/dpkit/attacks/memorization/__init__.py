"""Unintended memorization: canaries, exposure and extraction (Carlini et al. 2019).

Insert random secrets ("my code is 281-264") into a corpus 1, 4, 16, 64 times, train a small
character-level language model on it with and without dpkit's DP-SGD, and measure how far each
model ranks each secret above the other candidates (exposure, exact over the whole candidate
space) and whether decoding from the prefix recovers it (extraction). See ``docs/attacks.md``.

This package imports without torch: :mod:`.canaries` (formats, the seeded grammar corpus).
The parts that train or query a model need the ``[torch]`` extra and are imported by name:
``from dpkit.attacks.memorization import experiment`` (``experiment.run``), ``.model``
(``train``), ``.exposure`` (``rank_enumerate``, ``rank_pruned``, ``extract``).
"""

from __future__ import annotations

from .canaries import (
    ALPHABET,
    MAX_CANDIDATES,
    CanaryFormat,
    deal_writers,
    grammar_corpus,
    insert_canaries,
    plant,
)

__all__ = ["ALPHABET", "MAX_CANDIDATES", "CanaryFormat", "deal_writers", "grammar_corpus",
           "insert_canaries", "plant"]
