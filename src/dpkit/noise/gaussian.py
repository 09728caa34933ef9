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
* ``v`` is one 53-bit word ``k``, the angle ``θ = 2π k 2^-53``. ``cos θ``, ``sin θ`` come from
  a table of the 2^11 angles ``2π i 2^-11`` (the top 11 bits of ``k``) and short series for the
  residual ``φ < 2π 2^-11`` (terms to ``φ^5`` and ``φ^4``; the first omitted ones are below
  2^-59), combined by the addition theorems. The absolute error on ``cos θ``, ``sin θ`` is a
  few ulps of 1, as with libm's ``cos(2π k 2^-53)`` (both carry the rounding of the angle
  itself; the test bounds the difference by 16 · 2^-53). The radius is float64 ``log`` and
  ``sqrt`` (relative error a few ulps). numpy's float64 ``sin``/``cos`` are scalar libm calls,
  ~9 ns each; the table-and-series form is four times cheaper, and all passes work on
  2^14 pairs at a time so the scratch arrays stay in the L2 cache.

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

from .constant import ConstantWork
from .samplers import Size, as_shape, resolve_source
from .sources import Source
from .trace import traced

__all__ = ["gaussian_float", "gaussian_float32", "gaussian_on_grid"]

_TWO_PI = 2.0 * math.pi
_U53 = 2.0**-53
_U32 = 2.0**-32
_CHUNK = 1 << 18
# pairs per pass of gaussian_float: its ~10 float64 scratch arrays (128 KiB each) stay in the
# L2 cache, where numpy's elementwise passes run ~2x faster than on arrays streamed from RAM
_PAIRS = 1 << 14
# the angle 2π k 2^-53 splits into a table angle 2π i 2^-_T (the top _T bits of k) plus a
# residual φ < 2π 2^-_T = 0.0031; sin and cos of φ by short series, combined with the table's
# by the addition theorems: ~4x cheaper than numpy's (scalar libm) float64 sin and cos
_T = 11
_TABLE_ANGLE = np.arange(1 << _T, dtype=np.float64) * (_TWO_PI * 2.0**-_T)
_COS, _SIN = np.cos(_TABLE_ANGLE), np.sin(_TABLE_ANGLE)
_RESIDUAL_BITS = np.uint64((1 << (53 - _T)) - 1)


def _check_sigma(sigma: float) -> float:
    s = float(sigma)
    if not math.isfinite(s) or s < 0.0:
        raise ValueError(f"sigma must be a finite number >= 0 (got {sigma!r})")
    return s


def _float_out(out: np.ndarray | None, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype=dtype)
    if out.dtype != dtype or out.shape != shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {np.dtype(dtype).name} array of shape "
                         f"{shape} (got {out.dtype} {out.shape})")
    return out


@traced
def gaussian_float(sigma: float, size: Size, *, source: Source | None = None,
                   out: np.ndarray | None = None) -> np.ndarray:
    """Float64 samples of ``N(0, sigma²)``, precise (module docstring), not exact.

    Uses about one random 64-bit word per sample; on a :class:`ConstantWork` source exactly
    three per pair (the far tail's refinement word is drawn for every pair and used where
    needed, so the words and the arithmetic do not follow the noise's size; same law). For
    privacy, release through
    :func:`gaussian_on_grid`, not by adding these floats to a float value. ``out`` (float64,
    C-contiguous, of ``size``) is filled and returned instead of a new array.

    >>> import dpkit.noise as noise
    >>> z = noise.gaussian_float(2.0, 100_000, source=noise.seeded(3))
    >>> bool(abs(z.std() / 2.0 - 1.0) < 0.02)
    True
    """
    s = _check_sigma(sigma)
    shape = as_shape(size)
    n = math.prod(shape)
    src = resolve_source(source)
    res = _float_out(out, shape, np.float64)
    flat = res.reshape(-1)
    scratch = _Scratch(min(_PAIRS, (n + 1) // 2))
    fixed = isinstance(src, ConstantWork)
    for lo in range(0, n - n % 2, 2 * _PAIRS):  # whole pairs straight into the output
        m = min(2 * _PAIRS, n - n % 2 - lo)
        _box_muller(src, s, flat[lo : lo + m], scratch, fixed)
    if n % 2:  # the last sample: one pair, its sine dropped
        last = np.empty(2, dtype=np.float64)
        _box_muller(src, s, last, _Scratch(1), fixed)
        flat[n - 1] = last[0]
    return res


class _Scratch:
    """The float64 / integer work arrays of one :func:`_box_muller` pass, reused across passes."""

    def __init__(self, pairs: int) -> None:
        self.f = np.empty((4, pairs), dtype=np.float64)
        self.k = np.empty(pairs, dtype=np.uint64)
        self.i = np.empty(pairs, dtype=np.intp)

    def views(self, p: int) -> tuple[np.ndarray, ...]:
        return (*self.f[:, :p], self.k[:p], self.i[:p])


def _box_muller(src: Source, s: float, dst: np.ndarray, scratch: _Scratch,
                fixed: bool = False) -> None:
    """Fill ``dst`` (even length ``2p``) with ``r cos θ`` then ``r sin θ`` of ``p`` pairs;
    ``fixed``: the tail's refinement word for every pair, applied by a mask (constant work)."""
    p = dst.size // 2
    a, b, c, d, k, i = scratch.views(p)
    words = src.uint64(2 * p)
    words >>= np.uint64(11)  # 53-bit integers, exact in float64
    ku, kv = words[:p], words[p:]
    # radius: u = (k1 + 1/2) 2^-53, refined to 106 bits on the lanes with k1 < 2^41
    a[:] = ku
    a += 0.5
    a *= _U53
    if fixed:  # the same refinement, its word and arithmetic on every lane
        extra_all = (src.uint64(p) >> np.uint64(11)).astype(np.float64) + 0.5
        extra_all *= _U53
        extra_all += ku
        extra_all *= _U53
        np.copyto(a, extra_all, where=ku < np.uint64(1 << 41))
    small = np.flatnonzero(ku < np.uint64(1 << 41)) if not fixed else ku[:0]
    if small.size:  # the far tail: resolve u to 106 bits (module docstring)
        extra = (src.uint64(small.size) >> np.uint64(11)).astype(np.float64) + 0.5
        a[small] = (ku[small].astype(np.float64) + extra * _U53) * _U53  # u >= 2^-107
    np.log(a, out=a)
    a *= -2.0 * s * s
    np.sqrt(a, out=a)  # r = σ sqrt(-2 ln u)
    # angle θ = 2π kv 2^-53 = table angle (top _T bits) + residual φ (the other 53 - _T bits)
    np.right_shift(kv, np.uint64(53 - _T), out=k)
    i[:] = k
    np.bitwise_and(kv, _RESIDUAL_BITS, out=k)
    b[:] = k
    b *= _TWO_PI * _U53  # φ < 0.0031, exact to an ulp
    np.multiply(b, b, out=c)  # φ²
    # sin φ = φ (1 - φ²/6 (1 - φ²/20)); the first omitted term, φ^7/5040, is < 2^-60 φ
    np.multiply(c, -1.0 / 120.0, out=d)
    d += 1.0 / 6.0
    d *= c
    np.subtract(1.0, d, out=d)
    d *= b
    # cos φ = 1 - φ²/2 (1 - φ²/12); the first omitted term, φ^6/720, is < 2^-59
    np.multiply(c, 1.0 / 24.0, out=b)
    b -= 0.5
    b *= c
    b += 1.0
    cos_t, sin_t = dst[:p], dst[p:]
    np.take(_COS, i, out=c, mode="clip")  # i < 2^_T always: no check
    np.multiply(c, b, out=cos_t)  # cos θ = cos a cos φ - sin a sin φ
    np.multiply(c, d, out=sin_t)  # sin θ = sin a cos φ + cos a sin φ
    np.take(_SIN, i, out=c, mode="clip")
    b *= c
    sin_t += b
    d *= c
    cos_t -= d
    cos_t *= a
    sin_t *= a


@traced
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
    out = _float_out(out, shape, np.float32)
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


@traced
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
    # in chunks through one buffer, so the transient floats stay small next to a model's
    # gradients
    buf = np.empty(min(_CHUNK, out.size), dtype=np.float64)
    for lo in range(0, out.size, _CHUNK):
        m = min(_CHUNK, out.size - lo)
        z = gaussian_float(s, m, source=source, out=buf[:m])
        z *= scale
        out[lo : lo + z.size] += np.rint(z, out=z)
    out /= scale
    return out.reshape(x.shape)
