"""Data-independent image features: a fixed Gabor filter bank, its moduli, pooled.

Why: DP-SGD pays for every parameter it learns with noise, so a private model learns more from
features that cost nothing. Tramèr & Boneh (ICLR 2021, "Differentially private learning needs
better features") showed that handcrafted ScatterNet features in front of a small private model
beat end-to-end DP training on MNIST/CIFAR. :class:`GaborFeatures` is the first-order part of that
idea: every filter is fixed before any data is seen, and each example's features are a function
of that example alone (including the per-example normalisation), so the transform is free in
privacy: a DP learner fed these features keeps its guarantee and its neighbouring relation
unchanged (post-processing of nothing private; pre-processing applied row by row).

Written here in numpy rather than taken from kymatio (the ScatterNet reference): the first-order
bank is ~40 lines, and the core install must stay free of torch.

:class:`ScatterFeatures` is a second such front end, closer to ScatterNet: Morlet filters
applied by FFT (kymatio's widths and frequencies), the modulus low-passed by a Gaussian of width
``0.8·2^J`` before sampling every ``2^J`` pixels (Mallat 2012). It was chosen on MNIST-5k by a
validation-split sweep (``benchmarks/mnist_sweep.py``, docs/learn_torch.md). Both are
row-wise fixed maps, so both are free in privacy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["GaborFeatures", "ScatterFeatures", "gabor_bank", "morlet_bank"]


def gabor_bank(size: int, wavelengths: tuple[float, ...], orientations: int) -> np.ndarray:
    """(2 * len(wavelengths) * orientations, size, size): even and odd (cos, sin) filters,
    zero-mean, unit norm, Gaussian envelope of width half a wavelength."""
    r = np.arange(size) - size // 2
    yy, xx = np.meshgrid(r, r, indexing="ij")
    bank = []
    for lam in wavelengths:
        for k in range(orientations):
            th = math.pi * k / orientations
            xr = xx * math.cos(th) + yy * math.sin(th)
            yr = -xx * math.sin(th) + yy * math.cos(th)
            env = np.exp(-(xr**2 + yr**2) / (2 * (0.5 * lam) ** 2))
            for phase in (0.0, math.pi / 2):
                g = env * np.cos(2 * math.pi * xr / lam + phase)
                g = g - g.mean()
                bank.append(g / np.linalg.norm(g))
    return np.stack(bank)


def _pool(maps: np.ndarray, p: int) -> np.ndarray:
    n, c, h, w = maps.shape
    return maps[:, :, : h - h % p, : w - w % p].reshape(n, c, h // p, p, w // p, p).mean((3, 5))


class GaborFeatures:
    """Fixed Gabor moduli of square grey images, average-pooled: a transformer with the
    scikit-learn API (``fit`` learns nothing, so it reads no data and costs no privacy).

    Input: ``X`` of shape (n, side * side), pixel values in any fixed range. Output: for each
    image the ``pool`` x ``pool`` average of the image itself and of the modulus
    ``sqrt(even² + odd²)`` of each of ``len(wavelengths) * orientations`` complex Gabor filters
    (``size`` x ``size``, zero padding), flattened: (1 + len(wavelengths) * orientations) maps.
    ``normalize="per_map"`` standardises each map of each image by its own mean and spread (a
    per-example group norm, free in privacy); ``"none"`` leaves them.
    On MNIST-5k, these features in front of :class:`dpkit.learn.MLPClassifier` reach 94% at
    ε = 3 where raw pixels reach 85% (docs/learn.md, ``benchmarks/mnist_features_bench.py``).

    >>> import numpy as np
    >>> GaborFeatures().fit_transform(np.zeros((2, 784))).shape
    (2, 833)
    """

    def __init__(self, side: int = 28, *, size: int = 7,
                 wavelengths: tuple[float, ...] = (4.0, 7.0), orientations: int = 8,
                 pool: int = 4, normalize: str = "per_map",
                 chunk: int = 512) -> None:
        self.side = side
        self.size = size
        self.wavelengths = wavelengths
        self.orientations = orientations
        self.pool = pool
        self.normalize = normalize
        self.chunk = chunk

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "side", "size", "wavelengths", "orientations", "pool", "normalize", "chunk")}

    def set_params(self, **params: Any) -> GaborFeatures:
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r} for GaborFeatures")
            setattr(self, k, v)
        return self

    def _check(self) -> None:
        if self.normalize not in ("per_map", "none"):
            raise ValueError(f"normalize must be 'per_map' or 'none' (got {self.normalize!r})")
        if not (isinstance(self.size, int) and self.size >= 3 and self.size % 2 == 1):
            raise ValueError(f"size must be an odd integer >= 3 (got {self.size!r})")
        if not (isinstance(self.pool, int) and 1 <= self.pool <= self.side):
            raise ValueError(f"pool must be an integer in [1, side] (got {self.pool!r})")
        if not self.wavelengths or min(self.wavelengths) <= 0 or self.orientations < 1:
            raise ValueError("wavelengths must be positive and orientations >= 1")

    def fit(self, X: Any = None, y: Any = None) -> GaborFeatures:
        """Nothing to learn: the filters are fixed (data-independent by construction)."""
        self._check()
        return self

    def transform(self, X: Any) -> np.ndarray:
        self._check()
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.side * self.side:
            raise ValueError(f"X must have shape (n, {self.side * self.side}) for side="
                             f"{self.side} images (got {X.shape})")
        if not np.all(np.isfinite(X)):
            raise ValueError("X holds NaN or infinite values")
        bank = gabor_bank(self.size, tuple(self.wavelengths), int(self.orientations))
        flat = bank.reshape(len(bank), -1).T  # (size², filters)
        half = self.size // 2
        out = []
        for start in range(0, len(X), int(self.chunk)):
            img = X[start:start + int(self.chunk)].reshape(-1, self.side, self.side)
            padded = np.pad(img, ((0, 0), (half, half), (half, half)))
            win = np.lib.stride_tricks.sliding_window_view(padded, (self.size, self.size), (1, 2))
            resp = win.reshape(-1, self.size * self.size) @ flat  # (n*side², filters)
            resp = resp.reshape(len(img), self.side, self.side, -1).transpose(0, 3, 1, 2)
            mod = np.sqrt(resp[:, 0::2] ** 2 + resp[:, 1::2] ** 2 + 1e-8)
            maps = np.concatenate([_pool(img[:, None], self.pool), _pool(mod, self.pool)], 1)
            if self.normalize == "per_map":
                mu = maps.mean((2, 3), keepdims=True)
                sd = maps.std((2, 3), keepdims=True)
                maps = (maps - mu) / (sd + 1e-5)
            out.append(maps.reshape(len(img), -1))
        if not out:
            maps_per_image = 1 + len(self.wavelengths) * int(self.orientations)
            return np.zeros((0, maps_per_image * (self.side // self.pool) ** 2), np.float32)
        return np.concatenate(out).astype(np.float32)

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X, y).transform(X)


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
