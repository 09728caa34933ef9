"""Data-independent image features: a fixed, public, row-wise transform (free in privacy).

Why: DP-SGD pays for every parameter it learns with noise, so a private model learns more from
features that cost nothing. Tramèr & Boneh (ICLR 2021, "Differentially private learning needs
better features") showed that handcrafted ScatterNet features in front of a small private model
beat end-to-end DP training on MNIST/CIFAR. :class:`ScatterFeatures` is the first-order part of
ScatterNet: Morlet filters applied by FFT (kymatio's widths and frequencies), the modulus
low-passed by a Gaussian of width ``0.8·2^J`` before sampling every ``2^J`` pixels (Mallat
2012). Every filter is fixed before any data is seen and each example's features are a function
of that example alone (the per-example normalisation included), so a DP learner fed these
features keeps its guarantee and its neighbouring relation unchanged. Written here in numpy
rather than taken from kymatio: the first-order transform is short, and the core install stays
free of torch. Chosen on MNIST-5k by a validation-split sweep (``benchmarks/mnist_sweep.py``,
docs/learn_torch.md).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["ScatterFeatures", "morlet_bank"]


def morlet_bank(size: int, J: int, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Fourier transforms of ``J·L`` zero-mean Morlet filters and the low-pass Gaussian.

    Scale ``j``: width ``σ = 0.8·2^j``, centre frequency ``ξ = (3π/4)/2^j``, ``L`` orientations
    ``θ = πl/L``, aspect ``4/L`` (kymatio's choices). Shapes ``(J·L, size, size)`` and
    ``(size, size)``, real (the filters are centred at the origin of a periodic grid).
    """
    f = np.fft.fftfreq(size) * 2 * np.pi
    wy, wx = np.meshgrid(f, f, indexing="ij")
    slant = 4.0 / L
    psis = []
    for j in range(J):
        s, xi = 0.8 * 2**j, 0.75 * math.pi / 2**j
        for th in np.pi * np.arange(L) / L:
            u = wx * np.cos(th) + wy * np.sin(th)
            v = -wx * np.sin(th) + wy * np.cos(th)
            band = np.exp(-0.5 * s**2 * ((u - xi) ** 2 + (slant * v) ** 2))
            # subtract a scaled envelope so that the filter has zero mean (ψ̂(0) = 0)
            env = np.exp(-0.5 * s**2 * (u**2 + (slant * v) ** 2)) * math.exp(-0.5 * s**2 * xi**2)
            psis.append(band - env)
    s_j = 0.8 * 2**J
    phi = np.exp(-0.5 * s_j**2 * (wx**2 + wy**2))
    return np.asarray(psis), phi


class ScatterFeatures:
    """First-order scattering of square images: a fixed, public, row-wise transform.

    ``X`` has one flattened ``shape`` image per row (e.g. 784 pixels for 28 x 28). Output:
    ``(1 + J·L) · (side/2^J)²`` features per row (833 for MNIST with J = 2, L = 8).
    ``normalize``: ``None``, or ``"example"`` (each row minus its own mean, over its own
    standard deviation). ``fit`` learns nothing (scikit-learn transformer API, so it can sit in a
    ``Pipeline`` before :class:`dpkit.learn.MLPClassifier` or ``LogisticRegression``).

    >>> import numpy as np
    >>> F = ScatterFeatures((28, 28)).fit_transform(np.zeros((2, 784)))
    >>> F.shape
    (2, 833)
    """

    def __init__(self, shape: tuple[int, int] = (28, 28), *, J: int = 2, L: int = 8,
                 normalize: str | None = None, pad: int = 4) -> None:
        self.shape = shape
        self.J = J
        self.L = L
        self.normalize = normalize
        self.pad = pad

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("shape", "J", "L", "normalize", "pad")}

    def set_params(self, **params: Any) -> ScatterFeatures:
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r} for ScatterFeatures")
            setattr(self, k, v)
        return self

    def fit(self, X: Any, y: Any = None) -> ScatterFeatures:
        """Check the parameters; nothing is learnt from ``X`` (the transform is fixed)."""
        self._check()
        return self

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X, y).transform(X)

    def _check(self) -> None:
        h, w = (int(v) for v in self.shape)
        if h != w or h < 2**self.J:
            raise ValueError(f"shape must be a square image of side >= 2^J (got {self.shape})")
        if not (isinstance(self.J, int) and isinstance(self.L, int) and self.J >= 1
                and self.L >= 1):
            raise ValueError(f"J and L must be ints >= 1 (got J={self.J!r}, L={self.L!r})")
        if self.normalize not in (None, "example"):
            raise ValueError(f"normalize must be None or 'example' (got {self.normalize!r})")

    def transform(self, X: Any) -> np.ndarray:
        """The features of each row of ``X`` (float32), computed 256 rows at a time."""
        self._check()
        side, J, p = int(self.shape[0]), int(self.J), int(self.pad)
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != side * side:
            raise ValueError(f"X must have one {side}x{side} image per row, flattened "
                             f"(got shape {X.shape}); set shape=")
        if not np.isfinite(X).all():
            raise ValueError("X holds NaN or infinite values; clean or impute them first")
        psis, phi = morlet_bank(side + 2 * p, J, int(self.L))
        psis, phi = psis.astype(np.complex64), phi.astype(np.complex64)
        out = []
        for lo in range(0, len(X), 256):
            x = np.pad(X[lo : lo + 256].reshape(-1, side, side), ((0, 0), (p, p), (p, p)))
            xf = np.fft.fft2(x.astype(np.complex64))
            u1 = np.abs(np.fft.ifft2(xf[:, None] * psis[None]))
            spec = np.concatenate([xf[:, None], np.fft.fft2(u1)], 1) * phi
            low = np.fft.ifft2(spec).real[..., p : p + side : 2**J, p : p + side : 2**J]
            out.append(low.reshape(len(x), -1).astype(np.float32))
        width = (1 + J * int(self.L)) * len(range(0, side, 2**J)) ** 2
        F = np.concatenate(out) if out else np.zeros((0, width), np.float32)
        if self.normalize == "example":
            F = (F - F.mean(1, keepdims=True)) / (F.std(1, keepdims=True) + 1e-6)
        return F
