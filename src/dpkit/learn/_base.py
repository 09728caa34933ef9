"""What every dpkit estimator shares: scikit-learn's parameter protocol and the input checks.

scikit-learn is never imported here. ``get_params`` / ``set_params`` read the ``__init__``
signature as ``sklearn.base.BaseEstimator`` does, so ``clone``, ``Pipeline`` and
``cross_val_score`` work; ``__init__`` only stores its arguments (``clone`` checks that).
Every check runs in ``fit`` before any noise is drawn: a refused fit spends nothing.
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any

import numpy as np

from dpkit import accounting, noise
from dpkit.events import Event
from dpkit.mechanisms import validate
from dpkit.mechanisms.gaussian import check_gaussian
from dpkit.noise import Source

__all__ = [
    "PrivateEstimator",
    "check_bounds",
    "check_classes",
    "check_count",
    "check_delta",
    "check_delta_alone",
    "check_epsilon",
    "check_features",
    "check_labels",
    "check_laplace_epsilon",
    "check_non_negative",
    "check_positive",
    "check_release_sensitivity",
    "clip_rows",
    "half_widths",
    "resolve_source",
]


class PrivateEstimator:
    """Base of the dpkit estimators: the scikit-learn parameter protocol, and the privacy bill.

    After ``fit``: ``event_`` (a :mod:`dpkit.events` Event, the whole fit) and ``epsilon_``
    (``dpkit.accounting.epsilon(event_, delta)``, at the estimator's ``delta`` or 0).
    """

    _estimator_type = "estimator"
    event_: Event
    epsilon_: float

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind == p.KEYWORD_ONLY)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters by name (scikit-learn's protocol)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> PrivateEstimator:
        """Set constructor parameters by name; unknown names are refused."""
        valid = set(self._param_names())
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"{type(self).__name__} has no parameter {name!r}; "
                                 f"valid parameters: {sorted(valid)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def __sklearn_tags__(self) -> Any:
        # Only scikit-learn calls this, so importing it here adds no dependency to dpkit.
        from sklearn.utils import ClassifierTags, RegressorTags, Tags, TargetTags

        kind = self._estimator_type
        tags = Tags(estimator_type=None if kind == "estimator" else kind,
                    target_tags=TargetTags(required=kind != "clusterer"))
        if kind == "classifier":
            tags.classifier_tags = ClassifierTags()
        elif kind == "regressor":
            tags.regressor_tags = RegressorTags()
        return tags

    def privacy_event(self, n_features: int, contributions: int = 1) -> Event:
        """The curator's hook (``cur.fit``, ``dpkit fit``): an event that bounds what ``fit``
        will realise on features in [-1, 1]^n_features when one privacy unit holds up to
        ``contributions`` rows, from public parameters only (no data).

        Calling it also *declares* that domain to the estimator (``domain_``): a missing feature
        bound becomes the one [-1, 1]^n implies, and every sensitivity of the next fits is
        scaled by ``contributions`` (a unit's rows add up). Labels then arrive as indices of
        the declared classes, so pass ``classes=list(range(K))`` for a K-class label.
        """
        n = check_count(n_features, "n_features")
        c = check_count(contributions, "contributions")
        event = self._planned_event(n, c)
        self.domain_ = (n, c)
        return event

    def _planned_event(self, n_features: int, contributions: int) -> Event:
        raise ValueError(f"{type(self).__name__} is not trained through the curator: it has no "
                         "public event for a table's encoded features")

    def _rows_private(self) -> bool:
        """True once the curator declared the domain (:meth:`privacy_event`): the rows then come
        from a private read, so their number is private too. An empty read is fitted like any
        other (noise only), and δ is not checked against the row count (the curator's project
        δ bounds it instead): both would otherwise be refusals that depend on the data."""
        return getattr(self, "domain_", None) is not None

    def _checked_rows(self, X: Any) -> np.ndarray:
        return check_features(X, allow_empty=self._rows_private())

    def _checked_delta(self, n: int) -> float:
        delta = getattr(self, "delta", None)
        return check_delta_alone(delta) if self._rows_private() else check_delta(delta, n)

    def _contributions(self) -> int:
        """Rows one privacy unit may hold (1: record level, unless the curator declared more)."""
        domain = getattr(self, "domain_", None)
        return 1 if domain is None else int(domain[1])

    def _declared_norm(self, norm: Any) -> Any:
        """The declared row norm, or sqrt(n) when the curator declared [-1, 1]^n."""
        domain = getattr(self, "domain_", None)
        return norm if norm is not None or domain is None else math.sqrt(domain[0])

    def _declared_bounds(self, bounds: Any) -> Any:
        """The declared feature bounds, or (-1, 1) when the curator declared [-1, 1]^n."""
        return bounds if bounds is not None or getattr(self, "domain_", None) is None \
            else (-1.0, 1.0)

    def _bill(self, event: Event, delta: float) -> None:
        self.event_ = event
        self.epsilon_ = float(accounting.epsilon(event, delta=delta))


def _number(value: Any, name: str, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number {hint} (got {value!r})")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be a finite number {hint} (got {value!r})")
    return out


def check_epsilon(epsilon: Any) -> float:
    """A finite ε > 0 (the mechanisms' own check: one wording everywhere)."""
    return validate.check_epsilon(epsilon)


def check_delta_alone(delta: Any) -> float:
    """0 < δ < 1 (the 1/n check needs n: fit makes it)."""
    return validate.check_delta(delta)


def check_delta(delta: Any, n: int) -> float:
    """0 < δ < 1/n: a δ of 1/n or more allows releasing a random row in the clear."""
    dlt = _number(delta, "delta", "in (0, 1/n), e.g. delta=1e-6")
    if not 0 < dlt < 1.0 / n:
        raise ValueError(f"delta must lie in (0, 1/n) = (0, {1.0 / n:.3g}) for n = {n} rows "
                         f"(got {delta!r}): a delta >= 1/n permits publishing a row; "
                         f"pass e.g. delta={10 ** math.floor(math.log10(0.1 / n)):.0e}")
    return dlt


def check_positive(value: Any, name: str, example: str) -> float:
    """A finite number > 0, or an error naming the parameter and an example."""
    if value is None:
        raise ValueError(f"{name} is required: the data bound must be declared, never read from "
                         f"the data; pass e.g. {name}={example}")
    out = _number(value, name, f"> 0, e.g. {name}={example}")
    if out <= 0:
        raise ValueError(f"{name} must be > 0 (got {value!r}); pass e.g. {name}={example}")
    return out


def check_laplace_epsilon(epsilon: float, coordinates: int) -> float:
    """An ε that a discrete Laplace release of ``coordinates`` values can realise: the scale,
    at least ``coordinates / ε`` grid units on any grid (:mod:`dpkit.mechanisms`), must stay
    within the samplers' limit ``noise.MAX_DLAP_SCALE``. Checked by ``privacy_event``, so a
    too small ε is refused before a curator's charge, not inside ``fit`` (FINDINGS.md G7)."""
    eps = check_epsilon(epsilon)
    if coordinates / eps > float(noise.MAX_DLAP_SCALE) * (1 - 1e-9):
        raise ValueError(f"epsilon {epsilon!r} is too small for a discrete Laplace release of "
                         f"{coordinates} value(s): the noise scale would exceed the samplers' "
                         f"limit 2**40 grid units; raise epsilon")
    return eps


#: the sensitivities the exact samplers calibrate at any ε the estimators accept: a grid
#: 2**k must fit a float's exponent on both sides of the sensitivity and of its noise scale
MIN_SENSITIVITY, MAX_SENSITIVITY = 2.0**-800, 2.0**900


def check_release_sensitivity(sensitivity: float, what: str) -> float:
    """A sensitivity that ``fit``'s releases can be calibrated for: finite and within
    [2**-800, 2**900]. ``privacy_event`` computes each release's sensitivity from the options
    (``what`` names them) and checks it, so extreme bounds or norms are refused before a
    curator's charge, not by the mechanism inside ``fit`` after it."""
    if not (math.isfinite(sensitivity) and MIN_SENSITIVITY <= sensitivity <= MAX_SENSITIVITY):
        raise ValueError(f"{what} give(s) a release a sensitivity of {sensitivity:.3g}, outside "
                         f"what the exact samplers calibrate ([2**-800, 2**900]): declare a "
                         f"range (or norm) nearer the data's")
    return sensitivity


def check_gaussian_release(sensitivity: float, rho: float, coordinates: int,
                           what: str) -> None:
    """A Gaussian release of ``coordinates`` values at ``rho`` that ``fit`` can sample: ρ > 0
    after the fit's split (a tiny ε underflows it to 0) and a variance within the sampler's
    limit on some grid. Checked by ``privacy_event``, so that an ε too small for the split is
    refused before a curator's charge, not inside ``fit`` after it (FINDINGS.md J2)."""
    try:
        check_gaussian(sensitivity=sensitivity, rho=rho, size=coordinates)
    except ValueError:
        raise ValueError(f"epsilon (with delta) is too small for {what}: its share, rho "
                         f"{rho:.3g}, is below what the exact Gaussian sampler can realise "
                         f"for {coordinates} value(s); raise epsilon") from None


def half_widths(bounds: Any, n_features: int, name: str = "bounds") -> np.ndarray:
    """The half-widths ``(high - low) / 2`` of checked ``bounds`` (inf where they overflow:
    :func:`check_release_sensitivity` refuses what they give)."""
    lo, hi = check_bounds(bounds, n_features, name)
    with np.errstate(over="ignore"):
        return np.asarray((hi - lo) / 2.0)


def check_count(value: Any, name: str) -> int:
    """An int >= 1 (bool refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an int >= 1 (got {value!r})")
    return int(value)


def check_non_negative(value: Any, name: str) -> float:
    """A finite number >= 0."""
    out = _number(value, name, ">= 0")
    if out < 0:
        raise ValueError(f"{name} must be >= 0 (got {value!r})")
    return out


def check_bounds(bounds: Any, n_features: int, name: str = "bounds") -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """Declared per-feature bounds: a pair (low, high) for all features or one pair per feature."""
    if bounds is None:
        raise ValueError(f"{name} is required: declare the public range of every feature, "
                         f"e.g. {name}=(0.0, 1.0) or {name}=[(lo_1, hi_1), ..., (lo_d, hi_d)]; "
                         "it is never read from the data")
    b = np.asarray(bounds, dtype=np.float64)
    if b.shape == (2,):
        b = np.tile(b, (n_features, 1))
    if b.shape != (n_features, 2):
        raise ValueError(f"{name} must be one (low, high) pair or {n_features} of them "
                         f"(got shape {b.shape})")
    if not np.all(np.isfinite(b)) or np.any(b[:, 0] >= b[:, 1]):
        raise ValueError(f"{name} must be finite with low < high for every feature")
    return b[:, 0].copy(), b[:, 1].copy()


def check_features(X: Any, n_features: int | None = None, *,
                   allow_empty: bool = False) -> np.ndarray:
    """A 2-d finite float64 array (NaN / inf refused: impute or drop them first).
    ``allow_empty``: zero rows are a dataset like any other (the curator's reads, whose row
    count is private: refusing them after the charge would tell whether a WHERE matched)."""
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"X must be a 2-d array of numbers ({exc})") from None
    if arr.ndim != 2 or (arr.shape[0] == 0 and not allow_empty) or arr.shape[1] == 0:
        raise ValueError(f"X must be a non-empty 2-d array (n_samples, n_features); got shape "
                         f"{arr.shape}; reshape a single feature with X.reshape(-1, 1)")
    if not np.all(np.isfinite(arr)):
        raise ValueError("X contains NaN or infinite values: impute or drop them before fit")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(f"X has {arr.shape[1]} features but the model was fitted with "
                         f"{n_features}")
    return arr


def check_classes(classes: Any) -> np.ndarray:
    """The declared, public label set (at least two distinct labels)."""
    if classes is None:
        raise ValueError("classes is required: declare the public label set, e.g. "
                         "classes=[0, 1]; it is never read from the data")
    arr = np.asarray(classes)
    if arr.ndim != 1 or len(arr) < 2 or len(np.unique(arr)) != len(arr):
        raise ValueError(f"classes must list at least two distinct labels (got {classes!r})")
    return arr


def check_labels(y: Any, classes: np.ndarray, n: int) -> np.ndarray:
    """Indices of ``y`` in the declared ``classes``; a label outside them is refused."""
    arr = np.asarray(y)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"y must be 1-d with one label per row of X ({n}); got shape {arr.shape}")
    try:
        order = np.argsort(classes)
        pos = np.clip(np.searchsorted(classes[order], arr), 0, len(classes) - 1)
        idx = order[pos]
        bad = classes[idx] != arr
    except TypeError:  # labels not comparable with the classes (e.g. None, mixed types)
        raise ValueError(f"y has labels that cannot be compared with the declared classes "
                         f"{classes.tolist()}: declare every possible label in classes=") from None
    if np.any(bad):
        example = np.asarray(arr[bad][0]).tolist()
        raise ValueError(f"y has labels outside the declared classes {classes.tolist()} "
                         f"(e.g. {example!r}): declare every possible label in classes=")
    return idx.astype(np.int64)


def clip_rows(X: np.ndarray, norm: float) -> np.ndarray:
    """Scale every row whose L2 norm exceeds ``norm`` back onto the ball (1-Lipschitz)."""
    lengths = np.sqrt(np.einsum("ij,ij->i", X, X))
    factor = np.minimum(1.0, norm / np.maximum(lengths, 1e-300))
    return X * factor[:, None]


def resolve_source(random_state: Any, source: Source | None = None) -> Source:
    """The source of one fit's draws: ``source`` when given (``fit(..., source=)``, how the
    curator passes its project's source), else from ``random_state``: None, the secure
    default; an int, ``dpkit.noise.seeded`` (INSECURE, tests only); a dpkit.noise source."""
    if source is not None:
        if not isinstance(source, Source):
            raise TypeError(f"source must be a dpkit.noise source (got {source!r})")
        return source
    if random_state is None:
        return noise.default_source()
    if isinstance(random_state, Source):
        return random_state
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return noise.seeded(int(random_state))
    raise TypeError("random_state must be None (secure noise), an int seed or a "
                    f"dpkit.noise source (got {random_state!r})")
