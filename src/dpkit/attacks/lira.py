"""LiRA, the likelihood-ratio membership attack with shadow models (Carlini et al. 2022), on any
classifier with ``predict_proba``, beside the one-run audit and the DP bound of the same models.

**The experiment.** A population of ``N`` labelled examples; ``K`` models of one kind, model
``k`` trained on the examples ``i`` with ``membership[k, i]`` (independent fair coins from
:mod:`dpkit.noise`, so about ``N/2`` each). Every model in turn is the *target*, the other
``K - 1`` its *shadows* (leave-one-model-out, as in the paper's evaluation). The attacker sees
the target's probabilities on example ``i`` and turns them into the logit-scaled confidence

    phi = log p_y - log(1 - p_y)        (p_y: probability of the true label)

which is close to Gaussian over training runs (paper, Sec. 4.3). From the shadows:

- **online** LiRA: Gaussians ``N(mu_in, s_in^2)`` and ``N(mu_out, s_out^2)`` of ``phi_i`` over
  the shadows that did / did not train on ``i``; score ``log N(phi; in) - log N(phi; out)``.
- **offline** LiRA: only the "out" shadows (no model trained on the target example is
  needed); score ``(phi - mu_out) / s_out`` (the one-sided test: members have high confidence).
- the **global threshold** baseline (Yeom et al. 2018): score ``phi`` itself.

With fewer than 32 shadows per-example variances are noisy: ``fixed_variance`` (default then)
replaces them by their mean over examples, as the paper recommends for small ``K``.

**What DP promises.** If each model is (ε, δ)-DP for add/remove-one neighbours, then for every
example and every fixed rest of the training set, every test has
``TPR <= min(e^ε FPR + δ, 1 - e^-ε (1 - δ - FPR))`` (:func:`dpkit.attacks.membership.
dp_tpr_bound`); by joint convexity of the hockey-stick divergence the bound also holds for the
ROC pooled over examples, random training sets and target models, which is what is drawn here.

**The one-run audit on the same run.** Each model's training set *is* the one-run game of
Steinke, Nasr and Jagielski (2023): ``N`` canaries, each in with probability 1/2, one training
run. The attacker's scores for model ``k`` (computed from the other models, independent of
``k``'s coins) guess the ``audit_guesses`` highest-scoring examples "in" and as many lowest "out";
:func:`dpkit.attacks.one_run.one_run_audit` turns the correct guesses into a lower bound on the
ε of that single training run (95% confidence). The number of guesses is fixed before the
scores are seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpkit import noise
from dpkit.attacks.membership import DEFAULT_FPRS, ROC, dp_tpr_bound, roc_curve
from dpkit.attacks.one_run import OneRunResult, one_run_audit
from dpkit.noise import Source

__all__ = ["LiraReport", "ShadowRun", "check_estimator", "clone", "lira_report",
           "lira_scores", "logit_confidence", "train_shadows"]

_TINY = 1e-300


def check_estimator(estimator: Any) -> None:
    """Refuse, before any training, a model the attack cannot read: it needs ``fit`` and
    ``predict_proba`` (probabilities per class), and ``get_params`` to be cloned."""
    for name in ("fit", "predict_proba", "get_params"):
        if not callable(getattr(estimator, name, None)):
            what = ("probabilities (predict_proba); a model that only returns labels cannot "
                    "be attacked by LiRA: give a classifier with predict_proba"
                    if name == "predict_proba" else f"a {name}() method")
            raise TypeError(f"membership inference on {type(estimator).__name__} needs {what}")


def clone(estimator: Any, **overrides: Any) -> Any:
    """A fresh, unfitted copy of a scikit-learn-style estimator (its class called with its
    ``get_params()``), with ``overrides`` applied.

    A model trained through the curator (``cur.fit(...).model``) had its domain declared by
    ``privacy_event(n_features, contributions)`` (``domain_``: the encoding's [-1, 1]^n and
    the rows one unit may hold), which sets its defaults (``feature_norm`` sqrt(n)) and scales
    its sensitivities; its parameters alone do not. The copy is declared the same domain, so
    shadows train as that fit did and cost the same event (before, they were refused for a
    missing ``feature_norm``: the researcher could not audit their own model)."""
    params = dict(estimator.get_params())
    params.update({k: v for k, v in overrides.items() if k in params})
    copy = type(estimator)(**params)
    domain = getattr(estimator, "domain_", None)
    if domain is not None and callable(getattr(copy, "privacy_event", None)):
        copy.privacy_event(*domain)
    return copy


def logit_confidence(proba: Any, labels: Any) -> np.ndarray:
    """``log p_y - log(sum of the other probabilities)`` per row: the logit of the probability
    of the true label, computed without forming ``1 - p_y`` (which rounds to 0 for confident
    models)."""
    p = np.asarray(proba, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64).ravel()
    if p.ndim != 2 or p.shape[0] != y.size:
        raise ValueError(f"probabilities must be (n, classes) for n labels (got {p.shape})")
    rows = np.arange(y.size)
    py = p[rows, y]
    mask = np.ones_like(p, dtype=bool)
    mask[rows, y] = False
    others = np.where(mask, p, 0.0).sum(1)
    return np.asarray(np.log(np.maximum(py, _TINY)) - np.log(np.maximum(others, _TINY)))


@dataclass(frozen=True)
class ShadowRun:
    """``K`` models trained on random halves of a population: who was in (``membership``), the
    logit-scaled confidence of every model on every example (``confidence``), the models'
    accuracy on their own training rows and on held-out rows, and their privacy (``epsilon``,
    ``delta`` read from the fitted models' ``epsilon_`` and ``delta``; None when not private)."""

    membership: np.ndarray
    confidence: np.ndarray
    train_accuracy: float
    test_accuracy: float
    epsilon: float | None
    delta: float | None
    label: str = ""
    units: np.ndarray | None = None  # each example's unit id: membership was drawn per unit


def _unit_coins(units: Any, n: int, K: int, source: Source | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-unit membership coins expanded to rows (user level: a unit's rows are in or out
    together, the neighbouring relation of a model fitted with ``units``), and the ids."""
    ids = np.asarray(units).ravel()
    if ids.size != n:
        raise ValueError(f"units must give one id per row (got {ids.size} for {n} rows)")
    _, index = np.unique(ids, return_inverse=True)
    coins = noise.bernoulli(0.5, (K, int(index.max()) + 1), source=source).astype(bool)
    return coins[:, index], ids


def _check_data(X: Any, y: Any, classes: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    Xa = np.asarray(X)
    ya = np.asarray(y).ravel()
    if Xa.ndim != 2 or Xa.shape[0] != ya.size or ya.size < 8:
        raise ValueError(f"X must be (n, d) with one label per row, n >= 8 (got {Xa.shape}, "
                         f"{ya.shape})")
    cls = np.unique(ya) if classes is None else np.asarray(classes)
    codes = np.searchsorted(cls, ya)
    if np.any(codes >= cls.size) or np.any(cls[np.minimum(codes, cls.size - 1)] != ya):
        raise ValueError("y holds a label that is not in classes")
    return Xa, ya, codes


def train_shadows(
    estimator: Any,
    X: Any,
    y: Any,
    *,
    shadow_models: int = 16,
    classes: Any = None,
    X_test: Any = None,
    y_test: Any = None,
    seed: int | None = None,
    source: Source | None = None,
    label: str = "",
    progress: Callable[[int], None] | None = None,
    units: Any = None,
) -> ShadowRun:
    """Train ``shadow_models`` clones of ``estimator`` on random halves of ``(X, y)``.

    ``units``: one id per row for a model trained at user level (``fit(X, y, units=...)``,
    as ``cur.fit`` does on a table with a privacy unit): each unit's rows are drawn in or out
    together and the clones are fitted with their ids, so the game is the model's own
    neighbouring relation (add/remove one unit).

    Checked before any training: ``estimator`` has ``fit`` / ``predict_proba`` /
    ``get_params``, the data's shapes, ``shadow_models >= 4``. ``seed`` (an int) gives clone
    ``k`` ``random_state = seed + k`` when it takes one (reproducible and INSECURE noise for a
    private estimator: experiments only; an int ``random_state`` already on ``estimator``
    serves as ``seed``, so no two models share their noise); ``source`` draws the membership
    coins.
    ``classes``: the label set, in the order of ``predict_proba``'s columns (default: the
    sorted labels of ``y``).
    """
    check_estimator(estimator)
    Xa, ya, codes = _check_data(X, y, classes)
    K = shadow_models
    if isinstance(K, bool) or not isinstance(K, int) or K < 4:
        raise ValueError(f"shadow_models must be an int >= 4 (got {shadow_models!r})")
    test = X_test is not None and y_test is not None
    if units is None:
        member, ids = noise.bernoulli(0.5, (K, ya.size), source=source).astype(bool), None
    else:
        member, ids = _unit_coins(units, ya.size, K, source)
    conf = np.empty((K, ya.size))
    acc_in, acc_test = [], []
    eps: float | None = None
    dlt: float | None = None
    own = estimator.get_params().get("random_state")
    if seed is None and isinstance(own, int) and not isinstance(own, bool):
        seed = own  # a fixed random_state on the prototype: vary it per model, never share it
    for k in range(K):
        over = {} if seed is None else {"random_state": int(seed) + k}
        extra = {} if ids is None else {"units": ids[member[k]]}
        model = clone(estimator, **over).fit(Xa[member[k]], ya[member[k]], **extra)
        proba = np.asarray(model.predict_proba(Xa), dtype=np.float64)
        if proba.ndim != 2 or proba.shape[0] != ya.size or proba.shape[1] <= int(codes.max()):
            raise ValueError("predict_proba must return (n, classes) with a column per label "
                             f"(got {proba.shape})")
        conf[k] = logit_confidence(proba, codes)
        pred = proba.argmax(1)
        acc_in.append(float(np.mean(pred[member[k]] == codes[member[k]])))
        if test:
            acc_test.append(float(np.mean(model.predict(X_test) == np.asarray(y_test))))
        if getattr(model, "epsilon_", None) is not None:
            eps = max(eps or 0.0, float(model.epsilon_))
            dlt = float(getattr(model, "delta", 0.0) or 0.0)
        if progress is not None:
            progress(k)
    return ShadowRun(membership=member, confidence=conf, train_accuracy=float(np.mean(acc_in)),
                     test_accuracy=float(np.mean(acc_test)) if test else math.nan,
                     epsilon=eps, delta=dlt, label=label, units=ids)


def lira_scores(
    run: ShadowRun, *, variant: str = "online", fixed_variance: bool | None = None,
    min_variance: float = 1e-4,
) -> np.ndarray:
    """``(K, N)`` attack scores (higher = member), leave-one-model-out (module docstring).
    ``variant``: "online", "offline" or "threshold"."""
    if variant not in ("online", "offline", "threshold"):
        raise ValueError(f"variant must be 'online', 'offline' or 'threshold' (got {variant!r})")
    c = run.confidence
    if variant == "threshold":
        return c.copy()
    M = run.membership.astype(np.float64)
    K = M.shape[0]
    fixed = K - 1 < 32 if fixed_variance is None else bool(fixed_variance)

    def leave_out(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = weight.sum(0, keepdims=True) - weight
        s = (weight * c).sum(0, keepdims=True) - weight * c
        q = (weight * c * c).sum(0, keepdims=True) - weight * c * c
        mu = s / np.maximum(n, 1.0)
        var = np.where(n >= 2, q / np.maximum(n, 1.0) - mu**2, np.nan)
        return mu, var

    mu_in, var_in = leave_out(M)
    mu_out, var_out = leave_out(1.0 - M)
    if fixed:
        var_in = np.full_like(var_in, np.nanmean(var_in))
        var_out = np.full_like(var_out, np.nanmean(var_out))
    # an example with too few shadows on one side gets the average variance
    var_in = np.maximum(np.where(np.isnan(var_in), np.nanmean(var_in), var_in), min_variance)
    var_out = np.maximum(np.where(np.isnan(var_out), np.nanmean(var_out), var_out), min_variance)
    if variant == "offline":
        return np.asarray((c - mu_out) / np.sqrt(var_out))
    return np.asarray(-0.5 * (c - mu_in) ** 2 / var_in - 0.5 * np.log(var_in)
                      + 0.5 * (c - mu_out) ** 2 / var_out + 0.5 * np.log(var_out))


@dataclass(frozen=True)
class LiraReport:
    """One model kind attacked: ROC per attack variant (pooled over targets and examples), the
    one-run audit of the first target model, and the DP bound of the models' (ε, δ)."""

    run: ShadowRun
    rocs: dict[str, ROC]
    audit: OneRunResult
    audit_guesses: int
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def dp_bound(self, fpr: float) -> float:
        """``min(e^ε FPR + δ, …)`` for the models' (ε, δ); 1 for a non-private model."""
        if self.run.epsilon is None:
            return 1.0
        return float(dp_tpr_bound(fpr, epsilon=self.run.epsilon, delta=self.run.delta or 0.0))

    def summary(self, fprs: Sequence[float] = DEFAULT_FPRS[:2]) -> dict[str, float]:
        """Flat numbers: per variant AUC and TPR at each FPR; the DP bound there; the audit."""
        out: dict[str, float] = {
            "epsilon": math.inf if self.run.epsilon is None else self.run.epsilon,
            "train_accuracy": self.run.train_accuracy, "test_accuracy": self.run.test_accuracy,
        }
        for name, roc in self.rocs.items():
            out[f"{name}_auc"] = roc.auc
            for f in fprs:
                out[f"{name}_tpr@{f:g}"] = roc.tpr_at(f)
        for f in fprs:
            out[f"dp_bound@{f:g}"] = self.dp_bound(f)
        out["one_run_epsilon_lower"] = self.audit.epsilon_lower
        return out


def _canaries(run: ShadowRun) -> tuple[np.ndarray, np.ndarray]:
    """The one-run audit's canaries: a row of each (the first), and each row's canary."""
    n = run.membership.shape[1]
    if run.units is None:
        return np.arange(n), np.arange(n)
    _, first, index = np.unique(run.units, return_index=True, return_inverse=True)
    return first, index


def lira_report(run: ShadowRun, *, audit_guesses: int | None = None,
                fixed_variance: bool | None = None, confidence: float = 0.95) -> LiraReport:
    """Score ``run`` with the three attacks and audit its first model (module docstring).

    ``audit_guesses``: examples guessed "in" and as many "out" for the one-run audit (default
    ``N // 20``: a fixed 10% of the canaries guessed, 90% abstaining). With ``run.units`` the
    canaries are the units (one coin each: rows of a unit are not independent canaries),
    each scored by the mean of its rows' scores.
    """
    first, canary = _canaries(run)
    N = first.size
    g = max(1, N // 20) if audit_guesses is None else int(audit_guesses)
    if not 1 <= 2 * g <= N:
        raise ValueError(f"audit_guesses must lie in 1..{N // 2} (got {audit_guesses!r})")
    inside = run.membership
    rocs: dict[str, ROC] = {}
    scores: dict[str, np.ndarray] = {}
    for variant in ("online", "offline", "threshold"):
        s = lira_scores(run, variant=variant, fixed_variance=fixed_variance)
        scores[variant] = s
        rocs[variant] = roc_curve(s[inside], s[~inside])
    per_unit = np.bincount(canary, weights=scores["online"][0]) / np.bincount(canary)
    audit = one_run_audit(per_unit, inside[0][first], guess_in=g, guess_out=g,
                          delta=run.delta or 0.0, confidence=confidence)
    return LiraReport(run=run, rocs=rocs, audit=audit, audit_guesses=g,
                      details={"scores": scores})
