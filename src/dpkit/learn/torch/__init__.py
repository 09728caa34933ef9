"""DP-SGD for PyTorch (needs the ``[torch]`` extra): ``make_private`` on your own objects.

>>> from dpkit.learn.torch import make_private   # doctest: +SKIP

See ``docs/learn_torch.md``: ghost-norm clipping (Linear, Conv2d, Embedding, LayerNorm; a
``torch.func`` fallback for the rest), Poisson sampling, noise from the OS CSPRNG on a grid,
and dpkit's PLD accountant. ``make_private(..., units=ids)``: user-level DP-SGD (units sampled
whole, each unit's summed gradient clipped; :mod:`dpkit.learn.torch.units`).
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("dpkit.learn.torch needs PyTorch: pip install 'dpkit[torch]'") from exc

from .layers import UnsupportedLayer
from .loader import PoissonLoader
from .optimizer import DPOptimizer
from .private import PrivateTraining, TrainingSummary, make_private
from .units import UnitPlan

__all__ = ["DPOptimizer", "PoissonLoader", "PrivateTraining", "TrainingSummary", "UnitPlan",
           "UnsupportedLayer", "make_private"]
