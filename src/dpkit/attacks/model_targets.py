"""Models to attack and the data they are trained on: MNIST-5k, and non-private baselines.

The attacks on models (:mod:`~dpkit.attacks.inversion`, :mod:`~dpkit.attacks.lira`) compare a
model trained *without* privacy against dpkit's private estimators trained on the same rows:

- :class:`PlainMLP`: the same multi-layer perceptron as :class:`dpkit.learn.MLPClassifier`
  (same layers, same initialisation), trained by ordinary minibatch SGD with no clipping and
  no noise, long enough to fit its training set: the overfit model real deployments ship.
  Needs the ``[torch]`` extra. **No privacy guarantee.**
- :class:`PlainLogistic`: L2-regularised logistic regression by Newton's method
  (:func:`dpkit.attacks.membership.fit_logistic`), with ``predict_proba`` over two columns.
  **No privacy guarantee.**

Both follow the scikit-learn estimator API dpkit's estimators follow (``get_params`` /
``set_params`` / ``fit`` / ``predict_proba``), so an attack clones either kind the same way.
All their randomness (initial weights, minibatch order) comes from :mod:`dpkit.noise`.

:func:`load_mnist_5k` reads ``mnist_5k.csv.gz`` (sorted by label) and splits it 4,000 / 1,000
after a fixed shuffle (``dpkit.noise.permutation`` with ``seeded(0)``: a public, reproducible
split, not a secret).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.attacks.membership import fit_logistic
from dpkit.learn.mlp import mlp_network

__all__ = ["PlainLogistic", "PlainMLP", "load_mnist_5k", "mnist_dir", "torch_or_error"]


def torch_or_error(what: str) -> Any:
    """``import torch``, or an ImportError naming the extra (``what`` needs it)."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"{what} needs PyTorch: pip install 'dpkit[torch]'") from exc
    return torch


# --------------------------------------------------------------------------- data
def mnist_dir() -> Path | None:
    """``$DPKIT_DATA``, or the project's ``../shared/data`` (from a checkout or a worktree);
    None when ``mnist_5k.csv.gz`` is in none of them."""
    here = Path(__file__).resolve().parents[3]
    roots = [Path(os.environ["DPKIT_DATA"])] if "DPKIT_DATA" in os.environ else []
    roots += [here / ".." / "shared" / "data", here / ".." / ".." / "shared" / "data"]
    return next((r for r in roots if (r / "mnist_5k.csv.gz").exists()), None)


def load_mnist_5k(
    directory: str | Path | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)``: 4,000 / 1,000 digits, pixels / 255 in [0, 1]
    (float32, 784 columns), labels 0-9. Raises ``FileNotFoundError`` saying where to put it."""
    d = Path(directory) if directory is not None else mnist_dir()
    if d is None or not (d / "mnist_5k.csv.gz").exists():
        raise FileNotFoundError(
            "mnist_5k.csv.gz not found: pass its folder, or set DPKIT_DATA to the folder "
            "holding it (the project keeps it in ../shared/data)")
    raw = np.loadtxt(d / "mnist_5k.csv.gz", delimiter=",", dtype=np.float32)
    if raw.ndim != 2 or raw.shape[1] != 785:
        raise ValueError(f"mnist_5k.csv.gz must have 785 columns (got shape {raw.shape})")
    # the file is sorted by label: a fixed public shuffle before the split
    raw = raw[noise.permutation(len(raw), source=noise.seeded(0))]
    X, y = raw[:, :-1] / np.float32(255.0), raw[:, -1].astype(np.int64)
    return X[:4000], y[:4000], X[4000:], y[4000:]


# --------------------------------------------------------------------------- baselines
class _Estimator:
    """get_params / set_params over the constructor's keyword arguments."""

    _params: tuple[str, ...] = ()
    classes_: np.ndarray

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._params}

    def set_params(self, **params: Any) -> Any:
        for k, v in params.items():
            if k not in self._params:
                raise ValueError(f"unknown parameter {k!r} for {type(self).__name__}")
            setattr(self, k, v)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def predict(self, X: Any) -> np.ndarray:
        return np.asarray(self.classes_)[self.predict_proba(X).argmax(1)]

    def score(self, X: Any, y: Any) -> float:
        """Accuracy on ``(X, y)``."""
        return float(np.mean(self.predict(X) == np.asarray(y)))


class PlainLogistic(_Estimator):
    """Non-private binary logistic regression (labels 0/1), L2 penalty ``l2``: NO privacy.

    >>> import numpy as np
    >>> X = np.r_[np.full((50, 1), 0.5), np.full((50, 1), -0.5)]; y = np.r_[[1] * 50, [0] * 50]
    >>> PlainLogistic(l2=1e-3).fit(X, y).score(X, y)
    1.0
    """

    _params = ("l2",)

    def __init__(self, *, l2: float = 1e-3) -> None:
        self.l2 = l2

    def fit(self, X: Any, y: Any) -> PlainLogistic:
        self.model_ = fit_logistic(X, y, l2=self.l2)
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        p = self.model_.predict_proba(X)
        return np.column_stack([1.0 - p, p])


class PlainMLP(_Estimator):
    """Non-private MLP (tanh hidden layers, softmax output), minibatch SGD with momentum on the
    cross-entropy, no clipping, no noise: NO privacy. ``random_state`` (an int) makes the
    initial weights and the minibatch order reproducible; None draws them from the OS CSPRNG.
    """

    _params = ("hidden_layer_sizes", "epochs", "batch_size", "learning_rate", "momentum",
               "classes", "random_state")

    def __init__(self, hidden_layer_sizes: tuple[int, ...] = (64,), *, epochs: int = 60,
                 batch_size: int = 50, learning_rate: float = 0.1, momentum: float = 0.9,
                 classes: Any = None, random_state: int | None = None) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.classes = classes
        self.random_state = random_state

    def _network(self, d: int, k: int, source: noise.Source | None) -> Any:
        torch_or_error("PlainMLP")
        return mlp_network(d, k, self.hidden_layer_sizes, "tanh", source)

    def fit(self, X: Any, y: Any) -> PlainMLP:
        torch = torch_or_error("PlainMLP")
        Xa = np.asarray(X, dtype=np.float32)
        ya = np.asarray(y)
        if Xa.ndim != 2 or len(Xa) != len(ya) or len(Xa) == 0:
            raise ValueError(f"X must be 2-D with one row per label (got {Xa.shape}, {ya.shape})")
        self.classes_ = np.unique(ya) if self.classes is None else np.asarray(self.classes)
        codes = np.searchsorted(self.classes_, ya)
        if np.any(codes >= len(self.classes_)) or np.any(
                self.classes_[np.minimum(codes, len(self.classes_) - 1)] != ya):
            raise ValueError("y holds a label that is not in classes")
        source = None if self.random_state is None else noise.seeded(int(self.random_state))
        net = self._network(Xa.shape[1], len(self.classes_), source)
        opt = torch.optim.SGD(net.parameters(), lr=self.learning_rate, momentum=self.momentum)
        Xt, yt = torch.from_numpy(Xa), torch.from_numpy(codes)
        bs = max(1, int(self.batch_size))
        for _ in range(int(self.epochs)):
            order = torch.from_numpy(noise.permutation(len(Xa), source=source))
            for start in range(0, len(Xa), bs):
                idx = order[start:start + bs]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(Xt[idx]), yt[idx]).backward()
                opt.step()
        self.network_ = net
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        torch = torch_or_error("PlainMLP")
        with torch.no_grad():
            logits = self.network_(torch.from_numpy(np.asarray(X, dtype=np.float32)))
            return torch.softmax(logits.double(), 1).numpy()
