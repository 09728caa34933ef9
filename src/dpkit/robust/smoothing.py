"""Randomized smoothing (Cohen, Rosenfeld & Kolter 2019): CERTIFY and PREDICT for any classifier.

The base classifier ``f`` maps a batch of inputs ``(b, *shape)`` to labels ``(b,)`` in
``[0, num_classes)`` or to scores/logits ``(b, num_classes)`` (the argmax is taken). It may be a
numpy callable or a ``torch.nn.Module`` (torch is imported only when one is given; it runs
under ``inference_mode`` on the module's device and dtype, as it is: call ``.eval()`` first).
The smoothed classifier is ``g(x) = argmax_c P(f(x + eps) = c)`` with ``eps ~ N(0, sigma² I)``.

What a certificate promises: with probability at least ``1 - alpha`` over the Monte Carlo noise
drawn here, the *smoothed* classifier ``g`` (the ideal argmax over the noise distribution, not
``f`` and not one noisy call) returns the certified class at every input within L2 distance
``radius`` of ``x``. It says nothing about ``f`` itself, about other norms beyond what L2
implies, about inputs farther than ``radius``, or about whether the class is the right one.
Across many certified inputs, about an ``alpha`` fraction of certificates may be wrong.

Noise comes only from :func:`dpkit.noise.gaussian_float` (or, with ``float32=True``, the
cheaper :func:`dpkit.noise.gaussian_float32`; pass ``source=dpkit.noise.seeded(s)`` for
reproducible runs). The certificate needs statistically good noise, not secret noise: a
seeded source is acceptable for certification, unlike for privacy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from dpkit.noise import Source, gaussian_float, gaussian_float32
from dpkit.robust.bounds import binomial_pvalue, check_alpha, clopper_pearson_lower, cohen_radius

ABSTAIN = -1


class Certificate(NamedTuple):
    """CERTIFY's answer: a class (or ``ABSTAIN``) and the certified L2 radius (0 if abstaining)."""

    label: int
    radius: float


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, a sample count (got {value!r})")
    return int(value)


def _is_torch_module(obj: object) -> bool:
    # only a caller who already imported torch can hand us a module: no import here otherwise
    for klass in type(obj).__mro__:
        if klass.__module__.startswith("torch.nn") and klass.__name__ == "Module":
            return True
    return False


def _torch_caller(module: Any) -> Callable[[np.ndarray], np.ndarray]:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - a torch module implies torch
        raise ImportError("a torch classifier needs the torch extra: "
                          "pip install 'dpkit[torch]'") from exc
    param = next(module.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    device = param.device if param is not None else torch.device("cpu")

    def call(batch: np.ndarray) -> np.ndarray:
        with torch.inference_mode():  # cheaper than no_grad: no version counters
            out = module(torch.as_tensor(batch, dtype=dtype, device=device))
        return np.asarray(out.detach().cpu().numpy())

    return call


def as_batch_function(classifier: Callable[[np.ndarray], Any] | Any
                      ) -> Callable[[np.ndarray], Any]:
    """A classifier as a function of a numpy batch: a torch module is wrapped (run under
    ``inference_mode`` on its own device and dtype), any other callable is returned as it is."""
    if not callable(classifier):
        raise TypeError("classifier must be callable on a batch "
                        f"(got {type(classifier).__name__})")
    return _torch_caller(classifier) if _is_torch_module(classifier) else classifier


class Smoothed:
    """The Gaussian-smoothed version of a classifier, with Cohen et al.'s CERTIFY and PREDICT.

    Guarantee (Cohen et al. 2019, Theorem 1 and Propositions 1-2): ``certify`` returns a class
    and radius such that, with probability >= ``1 - alpha`` over the noise, the smoothed
    classifier is constant (that class) on the L2 ball of that radius around ``x``; ``predict``
    returns a class other than the smoothed classifier's with probability <= ``alpha``. The
    neighbouring relation, read as DP (PixelDP, :func:`dpkit.robust.pixeldp_radius`): inputs at
    L2 distance ``<= radius``; no privacy is claimed for any data.

    >>> import numpy as np, dpkit.noise as noise
    >>> f = lambda b: (b[:, 0] > 0).astype(int)          # a half-space: exact radius = x[0]
    >>> g = Smoothed(f, sigma=1.0, num_classes=2, source=noise.seeded(0))
    >>> label, radius = g.certify(np.array([2.0, 0.0]), n0=100, n=10_000, alpha=0.001)
    >>> label, 1.8 < radius < 2.0
    (1, True)
    """

    ABSTAIN = ABSTAIN

    def __init__(self, classifier: Callable[[np.ndarray], Any] | Any, sigma: float,
                 num_classes: int, *, source: Source | None = None,
                 float32: bool = False) -> None:
        if not (isinstance(sigma, (int, float, np.floating)) and np.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a finite number > 0, the noise level (got {sigma!r})")
        if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 2:
            raise ValueError(f"num_classes must be an integer >= 2 (got {num_classes!r})")
        self._call = as_batch_function(classifier)
        self.sigma = float(sigma)
        self.num_classes = int(num_classes)
        self._source = source
        # float32 noise (dpkit.noise.gaussian_float32): 3-4x cheaper, tails cut at 6.76 sigma
        # (mass < 2e-11 per coordinate); for a float32 model the float64 draw is rounded anyway
        self.float32 = bool(float32)

    def __repr__(self) -> str:
        return f"Smoothed(sigma={self.sigma}, num_classes={self.num_classes})"

    def labels(self, batch: np.ndarray) -> np.ndarray:
        """The base classifier's labels on a batch, checked: shape ``(b,)``, values in range."""
        out = np.asarray(self._call(batch))
        b = batch.shape[0]
        if out.shape == (b, self.num_classes):
            return np.argmax(out, axis=1)
        if out.shape != (b,):
            raise ValueError(
                f"the classifier returned shape {out.shape} for a batch of {b}: it must return "
                f"labels ({b},) or scores ({b}, {self.num_classes}) "
                f"(num_classes={self.num_classes})")
        if not (np.issubdtype(out.dtype, np.integer) or np.all(np.mod(out, 1) == 0)):
            raise ValueError("the classifier returned non-integer labels: return class indices or "
                             f"scores of shape ({b}, {self.num_classes})")
        if out.size and (out.min() < 0 or out.max() >= self.num_classes):
            raise ValueError(f"the classifier returned labels outside [0, {self.num_classes}) "
                             f"(min {out.min()}, max {out.max()}): check num_classes")
        return out.astype(np.int64)

    def _prepare(self, x: Any, batch_size: int) -> np.ndarray:
        """Check ``x`` and the classifier on ``x`` itself, before any noise is drawn."""
        _positive_int("batch_size", batch_size)
        arr = np.asarray(x, dtype=np.float64)
        if arr.size == 0 or not np.all(np.isfinite(arr)):
            raise ValueError("x must be a non-empty array of finite numbers "
                             "(one input, no batch axis)")
        self.labels(arr[None])  # a wrong shape or label fails here, noise-free
        return arr

    def counts(self, x: np.ndarray, num: int, batch_size: int = 1000) -> np.ndarray:
        """How often the base classifier returns each class on ``num`` noisy copies of ``x``."""
        counts = np.zeros(self.num_classes, dtype=np.int64)
        remaining = num
        buf = np.empty((min(batch_size, num), *x.shape), np.float32) if self.float32 else None
        x32 = x.astype(np.float32)
        while remaining > 0:
            b = min(batch_size, remaining)
            if buf is not None:  # one reused buffer: no allocation per batch
                batch = gaussian_float32(self.sigma, (b, *x.shape), source=self._source,
                                         out=buf[:b])
                batch += x32
            else:
                batch = gaussian_float(self.sigma, (b, *x.shape), source=self._source)
                batch += x
            counts += np.bincount(self.labels(batch), minlength=self.num_classes)
            remaining -= b
        return counts

    def certify(self, x: Any, n0: int, n: int, alpha: float, *,
                batch_size: int = 1000) -> Certificate:
        """CERTIFY: guess the class from ``n0`` samples, bound its probability with ``n`` new ones.

        Returns ``(label, radius)`` with ``radius = sigma * Phi^-1(pA_lower)`` where ``pA_lower``
        is the one-sided ``1 - alpha`` Clopper-Pearson bound, or ``(ABSTAIN, 0.0)`` when
        ``pA_lower <= 1/2``. Sample counts and alpha are checked before any noise is drawn.
        """
        n0, n = _positive_int("n0", n0), _positive_int("n", n)
        a = check_alpha(alpha)
        arr = self._prepare(x, batch_size)
        guess = int(np.argmax(self.counts(arr, n0, batch_size)))
        n_a = int(self.counts(arr, n, batch_size)[guess])  # fresh samples: the guess is fixed
        radius = cohen_radius(self.sigma, clopper_pearson_lower(n_a, n, a))
        return Certificate(guess, radius) if radius > 0.0 else Certificate(ABSTAIN, 0.0)

    def predict(self, x: Any, n: int, alpha: float, *, batch_size: int = 1000) -> int:
        """PREDICT: the top class if the binomial test beats the runner-up at level ``alpha``.

        Returns ``ABSTAIN`` otherwise; a returned class differs from the smoothed classifier's
        with probability at most ``alpha`` (Cohen et al. 2019, Proposition 1).
        """
        n = _positive_int("n", n)
        a = check_alpha(alpha)
        arr = self._prepare(x, batch_size)
        counts = self.counts(arr, n, batch_size)
        top2 = np.argsort(counts, kind="stable")[::-1][:2]
        n_a, n_b = int(counts[top2[0]]), int(counts[top2[1]])
        return int(top2[0]) if binomial_pvalue(n_a, n_b) <= a else ABSTAIN
