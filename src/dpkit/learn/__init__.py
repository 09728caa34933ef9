"""dpkit.learn: private learning on floors F1-F4 (never the engine).

``MLPClassifier`` (DP-SGD, needs the ``[torch]`` extra at ``fit``); ``dpkit.learn.torch``:
``make_private`` for your own PyTorch module, optimizer and data loader.
"""

from .mlp import MLPClassifier

__all__ = ["MLPClassifier"]
