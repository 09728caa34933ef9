"""A fast vectorised float Gaussian for high-dimensional releases (DP-SGD), and its grid form.

:func:`discrete_gaussian` is exact but costs about 0.5 µs per draw; DP-SGD needs one draw per
model parameter per step (1.8 M for a 784-1000-1000-10 MLP), so it offers
:func:`gaussian_float` instead: **precise, not exact**.

* Box-Muller on a pair of uniforms ``(u, v)``: ``z = sqrt(-2 ln u) (cos 2πv, sin 2πv)``.
* ``u`` is resolved to 106 bits where that matters: ``u = (k1 + 1/2) 2^-53`` from one 53-bit
  word, except on the lanes with ``k1 < 2^41`` (probability 2^-12) where a second word refines
  it to ``u = (k1 + (k2 + 1/2) 2^-53) 2^-53``. So ``u >= 2^-107`` and the tails reach
  ``sqrt(2 · 107 ln 2) = 12.2`` standard deviations: the truncated mass is
  ``P(|Z| > 12.2) < 4e-34`` per draw, far below any δ in use. (A single 53-bit word stops at
  8.6σ, a truncation with mass 1e-17 per coordinate that DP-SGD's millions of coordinates per
  step would make visible.) Where ``u >= 2^-12`` the second word would move ``ln u`` by less
  than 2^-41, so it is not drawn: 1.0002 words per sample instead of 1.5.
* ``v`` is one 53-bit word; the transform is float64 (relative error a few ulps).

Mironov (2012) and Jin et al. (2022) showed that the *low bits* of a floating-point noisy value
can reveal the input. :func:`gaussian_on_grid` closes that channel the way dpkit's integer
mechanisms do: the caller rounds its value to the grid ``2^-k`` (and adds the rounding to the
sensitivity), the noise is rounded to the same grid, and the sum of two grid values is exact in
float64 while ``|value| < 2^(52-k)``. ``round(x + Z) = x + round(Z)`` for ``x`` on the grid, so
the output is post-processing of the continuous Gaussian mechanism on ``x``: the float
artefacts of Box-Muller (relative 1e-16, far below the grid) are rounded away except on a
fraction ~1e-16·σ/2^-k of draws that land within an ulp of a cell boundary.

For an exact alternative use :func:`dpkit.noise.discrete_gaussian` on the same grid (about
5x slower at DP-SGD sizes).
"""

from __future__ import annotations

import math

import numpy as np

from .samplers import Size, as_shape, resolve_source
from .sources import Source

__all__ = ["gaussian_float", "gaussian_float32", "gaussian_on_grid"]

_TWO_PI = 2.0 * math.pi
_U53 = 2.0**-53
_U32 = 2.0**-32
_CHUNK = 1 << 18


def _check_sigma(sigma: float) -> float:
    s = float(sigma)
    if not math.isfinite(s) or s < 0.0:
        raise ValueError(f"sigma must be a finite number >= 0 (got {sigma!r})")
    return s


def gaussian_float(sigma: float, size: Size, *, source: Source | None = None) -> np.ndarray:
    """Float64 samples of ``N(0, sigma²)``, precise (module docstring), not exact.

    Uses about one random 64-bit word per sample. For privacy, release through
    :func:`gaussian_on_grid`, not by adding these floats to a float value.

    >>> import dpkit.noise as noise
    >>> z = noise.gaussian_float(2.0, 100_000, source=noise.seeded(3))
    >>> bool(abs(z.std() / 2.0 - 1.0) < 0.02)
    True
    """
    s = _check_sigma(sigma)
    shape = as_shape(size)
    n = math.prod(shape)
    src = resolve_source(source)
    pairs = (n + 1) // 2
    words = src.uint64(2 * pairs) >> np.uint64(11)  # 53-bit integers, exact in float64
    w = words.astype(np.float64)
    u = w[:pairs] + 0.5
    u *= _U53
    small = np.flatnonzero(words[:pairs] < np.uint64(1 << 41))
    if small.size:  # the far tail: resolve u to 106 bits (module docstring)
        extra = (src.uint64(small.size) >> np.uint64(11)).astype(np.float64) + 0.5
        u[small] = (w[small] + extra * _U53) * _U53  # u >= 2^-107: ln u is finite
    r = np.log(u)
    r *= -2.0
    np.sqrt(r, out=r)
    r *= s
    theta = w[pairs:]
    theta *= _TWO_PI * _U53
    out = np.empty(2 * pairs, dtype=np.float64)
    np.multiply(r, np.cos(theta), out=out[:pairs])
    np.multiply(r, np.sin(theta), out=out[pairs:])
    return out[:n].reshape(shape)


def gaussian_float32(sigma: float, size: Size, *, source: Source | None = None,
                     out: np.ndarray | None = None) -> np.ndarray:
    """Float32 samples of ``N(0, sigma²)`` from 32 random bits each: **statistical use only**.

    For Monte Carlo (randomized smoothing's certificates), never for privacy: one 64-bit word
    per pair, ``u = (k + 1/2) 2^-32`` from its low half (so the tails stop at
    ``sqrt(2 · 33 ln 2) = 6.76`` standard deviations, a truncated mass below 2e-11 per draw),
    the angle from the top 24 bits of the high half, the radius in float64 and the rotation
    in float32 (relative error ~1e-7). About 4x faster than :func:`gaussian_float` (half the
    random bytes, float32 trigonometry). ``out`` (float32, C-contiguous, of ``size``) is
    filled and returned instead of a new array, so a caller can reuse one buffer.

    >>> import dpkit.noise as noise
    >>> z = noise.gaussian_float32(2.0, 100_000, source=noise.seeded(3))
    >>> z.dtype.name, bool(abs(z.std() / 2.0 - 1.0) < 0.02)
    ('float32', True)
    """
    s = _check_sigma(sigma)
    shape = as_shape(size)
    n = math.prod(shape)
    if out is None:
        out = np.empty(shape, dtype=np.float32)
    elif out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of shape {shape} "
                         f"(got {out.dtype} {out.shape})")
    pairs = (n + 1) // 2
    halves = resolve_source(source).uint64(pairs).view(np.uint32)
    u = halves[0::2].astype(np.float64)
    u += 0.5
    u *= _U32
    r = np.log(u)
    r *= -2.0
    np.sqrt(r, out=r)
    r *= s
    r32 = r.astype(np.float32)
    theta = (halves[1::2] >> np.uint32(8)).astype(np.float32)
    theta *= np.float32(_TWO_PI * 2.0**-24)
    flat = out.reshape(-1)
    half = n // 2
    np.multiply(r32[:half], np.cos(theta[:half]), out=flat[:half])
    np.multiply(r32[: n - half], np.sin(theta[: n - half]), out=flat[half:])
    return out


def gaussian_on_grid(values: np.ndarray, sigma: float, k: int, *,
                     source: Source | None = None) -> np.ndarray:
    """``round_k(values) + round_k(N(0, sigma²))`` in float64, with ``round_k`` to the grid 2^-k.

    The Gaussian mechanism on ``values`` released on a grid (module docstring): the caller
    accounts for an L2 sensitivity of ``Δ + sqrt(d) 2^-k``, ``Δ`` that of ``values`` and ``d``
    its number of coordinates. Raises if a value is too large for the grid to be exact.

    >>> import numpy as np, dpkit.noise as noise
    >>> y = noise.gaussian_on_grid(np.zeros(4), 1.0, 20, source=noise.seeded(0))
    >>> bool(np.all(y * 2**20 == np.rint(y * 2**20)))
    True
    """
    s = _check_sigma(sigma)
    scale = math.ldexp(1.0, int(k))
    x = np.asarray(values, dtype=np.float64)
    limit = math.ldexp(1.0, 51 - int(k))
    if x.size and not float(np.max(np.abs(x))) + 13.0 * s < limit:
        raise ValueError(f"values up to {float(np.max(np.abs(x))):.3g} do not fit the grid "
                         f"2^-{k} exactly in float64; use a coarser grid (smaller k)")
    out = np.rint(x * scale).reshape(-1)
    # in chunks, so the transient words and floats stay small next to a model's gradients
    for lo in range(0, out.size, _CHUNK):
        z = gaussian_float(s, min(_CHUNK, out.size - lo), source=source)
        z *= scale
        out[lo : lo + z.size] += np.rint(z, out=z)
    out /= scale
    return out.reshape(x.shape)
