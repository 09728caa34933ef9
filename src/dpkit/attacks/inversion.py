"""Model inversion: recover a class-representative input from a trained classifier.

Fredrikson, Jha and Ristenpart (2015) recovered recognisable faces from a face classifier by
gradient descent on the *input*: find ``x`` in the pixel box that the model scores as class
``c`` with the highest confidence, with a prior that keeps ``x`` image-like. What comes out is
what the model *remembers* of class ``c``. For a model that generalises, that is the class's
population appearance (inference from population statistics, which DP does not claim to stop);
for an overfit model it can sit close to individual training examples, which DP does bound.

Two attackers, both maximising ``F_c(x) - tv * TV(x)`` over ``x`` in ``[lo, hi]^d``, where
``TV`` is the (smoothed, anisotropic) total variation of ``x`` as an image of ``input_shape``
and ``F_c`` the ``objective``: ``"log-p"``, ``log p_c`` (Fredrikson et al.'s; bounded, so once
the model is sure the prior shapes the image), or ``"logit"``, the logit-scaled confidence
``log p_c - log(1 - p_c)`` (it does not flatten out as ``p_c -> 1``, so a zeroth-order
estimate of its gradient stays above its noise; the black-box default):

- :func:`invert_white_box`: the attacker holds the weights (a ``torch.nn.Module`` returning
  logits, or a fitted :class:`dpkit.learn.MLPClassifier` / :class:`~dpkit.attacks.model_targets.
  PlainMLP`): projected Adam on the exact gradient (the ``[torch]`` extra).
- :func:`invert_black_box`: the attacker can only query probabilities (any callable, or any
  object with ``predict_proba``): the gradient of ``log p_c`` is estimated from antithetic
  Gaussian perturbations (natural-evolution-strategies / zeroth-order optimisation, Ilyas et
  al. 2018) of ``F_c``, the known prior's gradient is exact; projected Adam on it. The
  perturbations come from :mod:`dpkit.noise`.

:func:`similarity` measures what was recovered against the *private* training rows: SSIM and
correlation with the class mean, distance and correlation to the nearest training example of
the class, and whether the class mean the reconstruction resembles most is its own.

The attacks make no privacy claim; they show what a model gives away. DP-SGD bounds what any
such reconstruction can reveal about one training example (its influence on the weights is
bounded), not what it reveals about the class as a whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import ndimage

from dpkit import noise
from dpkit.attacks.lira import logit_confidence
from dpkit.attacks.model_targets import torch_or_error
from dpkit.noise import Source

__all__ = ["Inversion", "Similarity", "invert_black_box", "invert_white_box", "similarity",
           "ssim", "total_variation"]

_TV_SMOOTH = 1e-4  # sqrt(d^2 + s): a differentiable |d| (error <= 0.01 per pixel pair)


@dataclass(frozen=True)
class Inversion:
    """Reconstructions ``images[j]`` (flat, in the box) for ``classes[j]``, the model's
    probability of that class at each, and what the attacker spent (``queries``: model
    evaluations per class; equal to ``steps`` for the white-box attack)."""

    images: np.ndarray
    classes: np.ndarray
    confidence: np.ndarray
    input_shape: tuple[int, ...]
    method: str
    steps: int
    queries: int


# --------------------------------------------------------------------------- checks
def _check_shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(s) for s in input_shape)
    if not 1 <= len(shape) <= 2 or min(shape) < 1:
        raise ValueError(f"input_shape must be (d,) or (height, width) (got {input_shape!r})")
    return shape


def _check_classes(classes: Any) -> np.ndarray:
    c = np.atleast_1d(np.asarray(classes))
    if c.ndim != 1 or c.size == 0 or not np.issubdtype(c.dtype, np.integer) or c.min() < 0:
        raise ValueError(f"classes must be output column indices >= 0 (got {classes!r})")
    return c.astype(np.int64)


def _check_box(box: tuple[float, float]) -> tuple[float, float]:
    lo, hi = float(box[0]), float(box[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"box must be (low, high) with low < high (got {box!r})")
    return lo, hi


def _start(start: Any, count: int, d: int, box: tuple[float, float]) -> np.ndarray:
    if start is None:  # the box's low corner: a blank MNIST page
        return np.full((count, d), box[0], dtype=np.float64)
    s = np.asarray(start, dtype=np.float64).reshape(-1, d) if np.size(start) % d == 0 else None
    if s is None or s.shape[0] not in (1, count):
        raise ValueError(f"start must hold one input of {d} values, or one per class")
    return np.clip(np.broadcast_to(s, (count, d)).copy(), *box)


def _check_run(steps: int, learning_rate: float, tv: float) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1 (got {steps!r})")
    if not (math.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate must be > 0 (got {learning_rate!r})")
    if not (math.isfinite(tv) and tv >= 0):
        raise ValueError(f"tv must be >= 0 (got {tv!r})")


def _check_objective(objective: str) -> None:
    if objective not in ("log-p", "logit"):
        raise ValueError(f"objective must be 'log-p' or 'logit' (got {objective!r})")


def _torch_module(model: Any) -> Any:
    torch = torch_or_error("white-box inversion")
    net = model if isinstance(model, torch.nn.Module) else getattr(model, "network_", None)
    if not isinstance(net, torch.nn.Module):
        raise TypeError(
            "white-box inversion needs a torch.nn.Module that returns logits, or a fitted "
            f"dpkit MLPClassifier / PlainMLP (got {type(model).__name__}); for any other model "
            "use invert_black_box with its predict_proba")
    return net


def _probe_logits(net: Any, d: int, classes: np.ndarray) -> int:
    """Run the network once on a blank input: it must map (1, d) to (1, k) logits."""
    torch = torch_or_error("white-box inversion")
    param = next(iter(net.parameters()), None)
    dtype = param.dtype if param is not None else torch.float32
    try:
        with torch.no_grad():
            out = net(torch.zeros((1, d), dtype=dtype))
    except RuntimeError as exc:
        raise ValueError(f"the model does not accept inputs of {d} features (input_shape): "
                         f"{exc}") from exc
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != 1:
        raise ValueError("the model must return logits of shape (n, classes) for n inputs "
                         f"(got {getattr(out, 'shape', type(out).__name__)})")
    k = int(out.shape[1])
    if k < 2 or int(classes.max()) >= k:
        raise ValueError(f"the model has {k} outputs: classes must lie in 0..{k - 1}")
    return k


def _probability_fn(model: Any) -> Callable[[np.ndarray], np.ndarray]:
    f = getattr(model, "predict_proba", model)
    if not callable(f):
        raise TypeError("black-box inversion needs probabilities: a callable X -> (n, classes) "
                        f"or an object with predict_proba (got {type(model).__name__})")
    return f  # type: ignore[no-any-return]


def check_probabilities(p: Any, n: int) -> np.ndarray:
    """``p`` as an (n, k) float array of probabilities, or a ValueError saying what is wrong
    (logits, one column, wrong row count)."""
    a = np.asarray(p, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != n or a.shape[1] < 2:
        raise ValueError(f"the model must return probabilities of shape ({n}, classes) for {n} "
                         f"inputs (got {a.shape})")
    if not np.isfinite(a).all() or a.min() < -1e-6 or a.max() > 1 + 1e-6 or \
            np.abs(a.sum(1) - 1.0).max() > 1e-3:
        raise ValueError("the model's outputs are not probabilities (each row in [0, 1], "
                         "summing to 1): if it returns logits, apply a softmax first")
    return a


# --------------------------------------------------------------------------- the prior
def total_variation(images: np.ndarray, input_shape: Sequence[int]) -> tuple[np.ndarray,
                                                                             np.ndarray]:
    """Smoothed anisotropic total variation of each flat image, ``sum sqrt(d^2 + s)`` over
    neighbouring pixel differences ``d`` along each axis, and its gradient (same shape)."""
    shape = _check_shape(input_shape)
    x = np.asarray(images, dtype=np.float64).reshape((-1, *shape))
    value = np.zeros(x.shape[0])
    grad = np.zeros_like(x)
    for axis in range(1, x.ndim):
        n = x.shape[axis]
        hi = [slice(None)] * x.ndim
        lo = [slice(None)] * x.ndim
        hi[axis], lo[axis] = slice(1, n), slice(0, n - 1)
        diff = x[tuple(hi)] - x[tuple(lo)]
        root = np.sqrt(diff * diff + _TV_SMOOTH)
        value += root.reshape(x.shape[0], -1).sum(1)
        t = diff / root
        grad[tuple(hi)] += t
        grad[tuple(lo)] -= t
    return value, grad.reshape(x.shape[0], -1)


def _tv_torch(x: Any, shape: tuple[int, ...]) -> Any:
    img = x.reshape((-1, *shape))
    total = 0.0
    for axis in range(1, img.ndim):
        diff = img.diff(dim=axis)
        total = total + (diff * diff + _TV_SMOOTH).sqrt().flatten(1).sum(1)
    return total


# --------------------------------------------------------------------------- white box
def invert_white_box(
    model: Any,
    classes: Any,
    *,
    input_shape: Sequence[int] = (28, 28),
    steps: int = 300,
    learning_rate: float = 0.05,
    tv: float = 0.02,
    box: tuple[float, float] = (0.0, 1.0),
    start: Any = None,
    objective: str = "log-p",
) -> Inversion:
    """Gradient ascent on the input of a torch model: projected Adam on
    ``F_c(x) - tv * TV(x)``, ``x`` clipped to ``box`` after every step; ``F_c`` is
    ``log softmax(z)_c`` (``objective="log-p"``) or ``z_c - logsumexp_{j != c} z_j``
    (``"logit"``, i.e. ``log p_c - log(1 - p_c)``), ``z = f(x)`` the logits.

    ``classes``: output column indices to invert (one reconstruction each, optimised as one
    batch). ``start``: the initial input (default: the box's low corner). Deterministic: no
    randomness is drawn.
    """
    torch = torch_or_error("white-box inversion")
    shape, cls, lo_hi = _check_shape(input_shape), _check_classes(classes), _check_box(box)
    _check_run(steps, learning_rate, tv)
    _check_objective(objective)
    net = _torch_module(model)
    d = math.prod(shape)
    k = _probe_logits(net, d, cls)
    dtype = next(iter(net.parameters())).dtype if any(True for _ in net.parameters()) \
        else torch.float32
    x = torch.tensor(_start(start, len(cls), d, lo_hi), dtype=dtype, requires_grad=True)
    opt = torch.optim.Adam([x], lr=learning_rate)
    rows = torch.arange(len(cls))
    target = torch.from_numpy(cls)
    others = torch.ones((len(cls), k), dtype=torch.bool)
    others[rows, target] = False
    for _ in range(steps):
        z = net(x)
        if objective == "log-p":
            phi = torch.log_softmax(z, 1)[rows, target]
        else:
            phi = z[rows, target] - torch.logsumexp(z.masked_fill(~others, -torch.inf), 1)
        loss = -phi.sum() + tv * _tv_torch(x, shape).sum()
        (grad,) = torch.autograd.grad(loss, x)
        x.grad = grad
        opt.step()
        with torch.no_grad():
            x.clamp_(*lo_hi)
    with torch.no_grad():
        conf = torch.softmax(net(x).double(), 1)[rows, target].numpy()
        images = x.detach().double().numpy()
    return Inversion(images=images, classes=cls, confidence=conf, input_shape=shape,
                     method="white-box", steps=steps, queries=steps)


# --------------------------------------------------------------------------- black box
def invert_black_box(
    model: Any,
    classes: Any,
    *,
    input_shape: Sequence[int] = (28, 28),
    steps: int = 300,
    samples: int = 20,
    sigma: float = 0.05,
    learning_rate: float = 0.05,
    tv: float = 0.02,
    box: tuple[float, float] = (0.0, 1.0),
    start: Any = None,
    source: Source | None = None,
    objective: str = "logit",
) -> Inversion:
    """Zeroth-order inversion from probabilities only (NES with antithetic pairs).

    Each step queries ``samples`` points ``x ± sigma u_j`` per class (``u_j`` standard normal
    from :mod:`dpkit.noise`), estimates ``grad phi_c(x) ~ sum_j (F(x + sigma u_j) -
    F(x - sigma u_j)) u_j / (sigma samples)`` (``F``: ``log p_c - log`` of the other
    probabilities' sum, or ``log p_c`` with ``objective="log-p"``), adds the exact gradient of
    ``-tv * TV`` and takes
    a projected Adam step. ``model``: a callable ``X (n, d) -> probabilities (n, k)``, or an
    object with ``predict_proba``; checked on ``start`` before the first step.
    """
    shape, cls, lo_hi = _check_shape(input_shape), _check_classes(classes), _check_box(box)
    _check_run(steps, learning_rate, tv)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2 or samples % 2:
        raise ValueError(f"samples must be an even int >= 2 (got {samples!r})")
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be > 0 (got {sigma!r})")
    _check_objective(objective)
    f = _probability_fn(model)
    d, c, half = math.prod(shape), len(cls), samples // 2
    x = _start(start, c, d, lo_hi)
    k = check_probabilities(f(x), c).shape[1]
    if int(cls.max()) >= k:
        raise ValueError(f"the model has {k} outputs: classes must lie in 0..{k - 1}")
    m, v = np.zeros_like(x), np.zeros_like(x)
    for t in range(1, steps + 1):
        u = noise.gaussian_float(1.0, (c, half, d), source=source)
        pts = np.concatenate([x[:, None] + sigma * u, x[:, None] - sigma * u], axis=1)
        p = check_probabilities(f(pts.reshape(-1, d)), c * samples).reshape(c, samples, k)
        if objective == "log-p":
            phi = np.log(np.maximum(p[np.arange(c), :, cls], 1e-300))
        else:
            phi = logit_confidence(p.reshape(-1, k), np.repeat(cls, samples)).reshape(c, samples)
        diff = phi[:, :half] - phi[:, half:]
        g = -np.einsum("cs,csd->cd", diff, u) / (sigma * samples)
        g += tv * total_variation(x, shape)[1]
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        step = (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        x = np.clip(x - learning_rate * step, *lo_hi)
    conf = check_probabilities(f(x), c)[np.arange(c), cls]
    return Inversion(images=x, classes=cls, confidence=conf, input_shape=shape,
                     method="black-box", steps=steps, queries=steps * samples + 2)


# --------------------------------------------------------------------------- what was recovered
def ssim(a: Any, b: Any, *, input_shape: Sequence[int], data_range: float = 1.0,
         window: int = 7) -> np.ndarray:
    """Structural similarity (Wang et al. 2004) of each pair of flat images ``a[j], b[j]``:
    local means, variances and covariance over ``window``-wide uniform windows,
    ``C1 = (0.01 L)^2``, ``C2 = (0.03 L)^2``, averaged over the image (1 = identical)."""
    shape = _check_shape(input_shape)
    x = np.asarray(a, dtype=np.float64).reshape((-1, *shape))
    y = np.asarray(b, dtype=np.float64).reshape((-1, *shape))
    if x.shape != y.shape:
        raise ValueError(f"ssim needs images of one shape (got {x.shape} and {y.shape})")
    size = (1,) + (min(window, min(shape)),) * len(shape)
    mu_x, mu_y = ndimage.uniform_filter(x, size), ndimage.uniform_filter(y, size)
    var_x = ndimage.uniform_filter(x * x, size) - mu_x**2
    var_y = ndimage.uniform_filter(y * y, size) - mu_y**2
    cov = ndimage.uniform_filter(x * y, size) - mu_x * mu_y
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    s = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / (
        (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    return np.asarray(s.reshape(x.shape[0], -1).mean(1))


def _corr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of every row of ``a`` with every row of ``b``."""
    az = a - a.mean(1, keepdims=True)
    bz = b - b.mean(1, keepdims=True)
    na = np.linalg.norm(az, axis=1, keepdims=True)
    nb = np.linalg.norm(bz, axis=1, keepdims=True)
    return np.asarray((az @ bz.T) / np.maximum(na * nb.T, 1e-12))


@dataclass(frozen=True)
class Similarity:
    """Per reconstruction (one per class): SSIM and correlation with the training class mean;
    L2 distance to the nearest training example of the class and the largest correlation with
    one (``nearest_index``: that example's row); ``mean_match``: the class mean it correlates
    with most is its own class's; ``holdout_corr``: the largest correlation with a *held-out*
    example of the class, over as many held-out rows as the class has training rows (NaN
    without held-out rows). ``nearest_corr - holdout_corr`` is the
    memorisation gap: a reconstruction that resembles the training rows more than fresh rows
    of the same class reveals something about the training rows themselves."""

    classes: np.ndarray
    ssim_mean: np.ndarray
    corr_mean: np.ndarray
    nearest_distance: np.ndarray
    nearest_corr: np.ndarray
    nearest_index: np.ndarray
    mean_match: np.ndarray
    holdout_corr: np.ndarray

    def summary(self) -> dict[str, float]:
        """Averages over the classes."""
        return {"ssim_mean": float(self.ssim_mean.mean()),
                "corr_mean": float(self.corr_mean.mean()),
                "nearest_distance": float(self.nearest_distance.mean()),
                "nearest_corr": float(self.nearest_corr.mean()),
                "holdout_corr": float(self.holdout_corr.mean()),
                "mean_match": float(self.mean_match.mean())}


def similarity(inv: Inversion, X_train: Any, y_train: Any, *, X_holdout: Any = None,
               y_holdout: Any = None, data_range: float = 1.0) -> Similarity:
    """Compare reconstructions with the private training rows (labels = the inverted classes'
    column indices, e.g. digits 0-9) and, when given, with held-out rows of the same classes."""
    X = np.asarray(X_train, dtype=np.float64)
    y = np.asarray(y_train).ravel()
    d = inv.images.shape[1]
    if X.ndim != 2 or X.shape[1] != d or len(y) != len(X):
        raise ValueError(f"X_train must be (n, {d}) with one label per row (got {X.shape}, "
                         f"{y.shape})")
    labels = np.unique(y)
    means = np.stack([X[y == c].mean(0) for c in labels])
    missing = [int(c) for c in inv.classes if c not in labels]
    if missing:
        raise ValueError(f"no training rows of class {missing}")
    own = np.searchsorted(labels, inv.classes)
    corr_means = _corr(inv.images, means)
    near_d, near_c, near_i = [], [], []
    for j, c in enumerate(inv.classes):
        rows = np.flatnonzero(y == c)
        dist = np.linalg.norm(X[rows] - inv.images[j], axis=1)
        cor = _corr(inv.images[j:j + 1], X[rows])[0]
        near_d.append(dist.min())
        near_c.append(cor.max())
        near_i.append(rows[int(np.argmax(cor))])
    hold = np.full(len(inv.classes), np.nan)
    if X_holdout is not None and y_holdout is not None:
        Xh, yh = np.asarray(X_holdout, dtype=np.float64), np.asarray(y_holdout).ravel()
        for j, c in enumerate(inv.classes):
            # as many held-out rows as training rows: a max over more rows is larger by itself
            rows = np.flatnonzero(yh == c)[:int((y == c).sum())]
            if rows.size:
                hold[j] = _corr(inv.images[j:j + 1], Xh[rows])[0].max()
    return Similarity(
        classes=inv.classes,
        holdout_corr=hold,
        ssim_mean=ssim(inv.images, means[own], input_shape=inv.input_shape,
                       data_range=data_range),
        corr_mean=corr_means[np.arange(len(own)), own],
        nearest_distance=np.asarray(near_d),
        nearest_corr=np.asarray(near_c),
        nearest_index=np.asarray(near_i, dtype=np.int64),
        mean_match=corr_means.argmax(1) == own,
    )
